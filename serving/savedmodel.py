"""Writing SavedModels without ever destroying what a user keeps at the export path.

Every export goes through `save_atomically`:
* The export path must be new, an empty folder, or a previous export of this project;
  replacing a previous export needs `overwrite=True` (`--overwrite`). Anything else (a
  file, a symbolic link, a folder holding other files) is refused before any work, with
  a message naming the path, and left untouched.
* A previous export is recognised by its marker: `saved_model.pb` beside
  `assets.extra/bert_export.json`, a small JSON file that every export of this project
  writes (format name, format version, export kind). `assets.extra/` is the SavedModel
  folder for files that TensorFlow does not load, so the marker changes nothing for
  `tf.saved_model.load`, `hub.load` or TF Serving.
* The SavedModel is written to a hidden temporary folder beside the destination,
  `.NAME.tmp-<pid>-<random>` (`common.file_io.atomic_directory`: no output glob
  matches it, and the next export to the same path clears what a killed run left), and
  renamed onto it once complete. Folders get the permissions TensorFlow's file system
  gives the SavedModel's own subfolders (0755 less the umask), not a private 0700.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Sequence

import keras
import tensorflow as tf
from absl import logging

from common.errors import OutputExistsError, UserError
from common import file_io
from modeling import layers as bert_layers

MARKER_FILE = os.path.join("assets.extra", "bert_export.json")
MARKER_FORMAT = "bert-tf2-export"
MARKER_VERSION = 1


def _check_local(export_path: str) -> None:
    if "://" in export_path:
        raise UserError(
            f"export path {export_path!r}: only local paths can be exported "
            f"atomically; export locally, then copy the folder"
        )


def read_marker(export_path: str) -> dict | None:
    """The marker of a previous export at `export_path`, None if there is none."""
    marker = os.path.join(export_path, MARKER_FILE)
    if not (os.path.isfile(os.path.join(export_path, "saved_model.pb")) and os.path.isfile(marker)):
        return None
    try:
        with open(marker, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) and value.get("format") == MARKER_FORMAT else None


def check_export_path(export_path: str, overwrite: bool = False) -> None:
    """Fails where an export must not be written to `export_path`.

    Allowed: a new path, an empty folder, and (with `overwrite`) a previous export of
    this project (see the module docstring).

    Raises:
      ValueError: a remote path.
      FileExistsError: anything else that exists at the path.
    """
    _check_local(export_path)
    if not os.path.lexists(export_path):
        return
    if os.path.islink(export_path):
        raise OutputExistsError(
            f"export path {export_path} is a symbolic link; export to a "
            f"new path (or to the folder it points to)"
        )
    if not os.path.isdir(export_path):
        raise OutputExistsError(f"export path {export_path} exists and is not a folder")
    if not os.listdir(export_path):
        return
    marker = read_marker(export_path)
    if marker is None:
        raise OutputExistsError(
            f"export path {export_path} is a folder holding files that are not an export "
            f"of this project (no saved_model.pb with {MARKER_FILE}); refusing to replace "
            f"them. Choose a new or empty folder."
        )
    if not overwrite:
        raise OutputExistsError(
            f"export path {export_path} holds a previous export ({marker.get('kind')}); "
            f"pass --overwrite (overwrite=True) to replace it"
        )


def write_marker(export_dir: str, kind: str) -> None:
    """Writes the marker that makes `export_dir` a previous export of `kind`."""
    file_io.write_json(
        os.path.join(export_dir, MARKER_FILE),
        {"format": MARKER_FORMAT, "format_version": MARKER_VERSION, "kind": kind},
    )


def standard_ops(export):
    """Decorates an export function: the Keras models it is given trace as standard
    TensorFlow ops (`modeling.layers.standard_ops`; training fuses element-wise chains
    with XLA)."""

    @functools.wraps(export)
    def wrapped(*args, **kwargs):
        models = [a for a in (*args, *kwargs.values()) if isinstance(a, keras.layers.Layer)]
        with bert_layers.standard_ops(*models):
            return export(*args, **kwargs)

    return wrapped


def save_atomically(
    module: tf.Module,
    export_path: str,
    signatures: dict | None = None,
    kind: str = "savedmodel",
    overwrite: bool = False,
) -> str:
    """`tf.saved_model.save(module, export_path, signatures)` with the rules above.

    Args:
      module: the object to save.
      export_path: a local folder (see `check_export_path`).
      signatures: signature name -> tf.function, or None.
      kind: the export kind recorded in the marker (e.g. "encoder", "squad").
      overwrite: whether a previous export at `export_path` may be replaced.

    Returns:
      the absolute export path.
    """
    check_export_path(export_path, overwrite)
    export_path = os.path.abspath(export_path)
    with file_io.atomic_directory(export_path) as temp:
        tf.saved_model.save(module, temp, signatures=signatures)
        write_marker(temp, kind)
    logging.info("Exported SavedModel (%s) to %s", kind, export_path)
    return export_path


def tf_variable(variable) -> tf.Variable:
    """The tf.Variable behind a Keras 3 variable (what traced functions capture)."""
    return getattr(variable, "value", variable) if hasattr(variable, "path") else variable


def collect_variables(keras_layers: Sequence) -> tuple[list, list]:
    """(all variables, trainable variables) of the layers, as tf.Variables, deduplicated."""
    everything, trainable, seen = [], [], set()
    for layer in keras_layers:
        for variable in layer.variables:
            variable_tf = tf_variable(variable)
            if id(variable_tf) in seen:
                continue
            seen.add(id(variable_tf))
            everything.append(variable_tf)
            if variable.trainable:
                trainable.append(variable_tf)
    return everything, trainable
