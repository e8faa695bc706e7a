"""Files that never look complete before they are: atomic writes, TFRecord writing and
input globs, shared by every writer and reader of the project.

A file (or folder) is written under a hidden temporary name beside its destination,
`.NAME.tmp-<pid>-<random>`, and renamed onto it once complete: a killed or failed run
leaves no file with the destination's name, and no output glob (`shards/*`,
`*.tfrecord`) matches the leftover, because `expand_globs` skips hidden names. The next
run that writes the same destination removes the leftovers of earlier runs.

Paths go through `tf.io.gfile`, so `gs://` and the other file systems TensorFlow reads
work too (rename is a copy there, but the destination still appears only when complete).
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import uuid
from typing import Iterable, Iterator

import tensorflow as tf

_TEMP_MARK = ".tmp-"


def _split(path: str) -> tuple[str, str]:
    directory, name = posixpath.split(path) if "://" in path else os.path.split(path)
    return directory, name


def _join(directory: str, name: str) -> str:
    if not directory:
        return name
    return posixpath.join(directory, name) if "://" in directory else os.path.join(
        directory, name)


def temp_path(path: str) -> str:
    """A fresh hidden temporary name beside `path`: `.NAME.tmp-<pid>-<random>`."""
    directory, name = _split(path)
    return _join(directory, f".{name}{_TEMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")


def is_temp_name(name: str) -> bool:
    return name.startswith(".") and _TEMP_MARK in name


def clear_stale_temps(path: str) -> list[str]:
    """Removes the temporary files and folders earlier runs left for `path`."""
    directory, name = _split(path)
    if directory and not tf.io.gfile.isdir(directory):
        return []
    removed = []
    for leftover in tf.io.gfile.glob(_join(directory, f".{glob_escape(name)}{_TEMP_MARK}*")):
        if tf.io.gfile.isdir(leftover):
            tf.io.gfile.rmtree(leftover)
        else:
            tf.io.gfile.remove(leftover)
        removed.append(leftover)
    return removed


def glob_escape(name: str) -> str:
    """`name` with glob metacharacters escaped (for tf.io.gfile.glob)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _make_parent(path: str) -> None:
    directory, _ = _split(path)
    if directory:
        tf.io.gfile.makedirs(directory)


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yields a temporary path to write `path`'s content to (a file, or a folder the
    caller creates); renames it onto `path` when the block ends without an exception,
    removes it otherwise.

    An existing file at `path` is replaced. For folders, see `atomic_directory`.
    """
    _make_parent(path)
    clear_stale_temps(path)
    temp = temp_path(path)
    try:
        yield temp
        tf.io.gfile.rename(temp, path, overwrite=True)
    except BaseException:
        _remove(temp)
        raise


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w") -> Iterator:
    """`open(path, mode)` whose content appears at `path` only once the block ends
    without an exception. Text modes read and write UTF-8."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode {mode!r} is not 'w' or 'wb'")
    with atomic_path(path) as temp:
        with tf.io.gfile.GFile(temp, mode) as f:
            yield f


def write_text(path: str, text: str) -> None:
    with atomic_open(path) as f:
        f.write(text)


def write_json(path: str, value, **kwargs) -> None:
    """JSON (indent 2, sorted keys unless given) written atomically."""
    kwargs.setdefault("indent", 2)
    kwargs.setdefault("sort_keys", True)
    write_text(path, json.dumps(value, **kwargs) + "\n")


def read_json(path: str):
    """The JSON value of `path`; a ValueError naming the file for malformed JSON."""
    with tf.io.gfile.GFile(path, "r") as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e


@contextlib.contextmanager
def atomic_tfrecord_writer(path: str, options: str | None = None) -> Iterator:
    """A `tf.io.TFRecordWriter` whose file appears at `path` only when complete."""
    with atomic_path(path) as temp:
        writer = tf.io.TFRecordWriter(temp, options)
        try:
            yield writer
        finally:
            writer.close()


@contextlib.contextmanager
def atomic_directory(path: str) -> Iterator[str]:
    """Yields a new empty temporary folder; it replaces `path` when the block ends
    without an exception (an existing `path` is moved aside first and removed after),
    and is removed otherwise. The caller decides whether replacing `path` is allowed."""
    _make_parent(path)
    clear_stale_temps(path)
    temp = temp_path(path)
    tf.io.gfile.makedirs(temp)
    try:
        yield temp
    except BaseException:
        _remove(temp)
        raise
    if not tf.io.gfile.exists(path):
        tf.io.gfile.rename(temp, path)
        return
    backup = temp_path(path)
    tf.io.gfile.rename(path, backup)
    try:
        tf.io.gfile.rename(temp, path)
    except BaseException:
        tf.io.gfile.rename(backup, path)
        _remove(temp)
        raise
    _remove(backup)


def _remove(path: str) -> None:
    try:
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        elif tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)
    except tf.errors.OpError:
        pass


def expand_globs(patterns: str | Iterable[str], what: str = "--input_file",
                 original_order: bool = False) -> list[str]:
    """Comma-separated (or listed) file names and globs -> files.

    Each pattern's matches are sorted; patterns keep their order; a file named twice is
    read once. With `original_order`, matches keep `tf.io.gfile.glob`'s order and
    repeats, as the original release's scripts read them (their output depends on it).
    Hidden names (temporary files of unfinished writes among them) and folders are
    skipped. A pattern that matches no file is an error naming it and `what`.
    """
    if isinstance(patterns, str):
        patterns = patterns.split(",")
    files, seen = [], set()
    for pattern in patterns:
        pattern = pattern.strip()
        if not pattern:
            continue
        matches = [m for m in tf.io.gfile.glob(pattern)
                   if not _split(m)[1].startswith(".") and not tf.io.gfile.isdir(m)]
        if not matches:
            raise FileNotFoundError(f"{what} pattern {pattern!r} matches no file")
        if original_order:
            files.extend(matches)
            continue
        for match in sorted(matches):
            if match not in seen:
                seen.add(match)
                files.append(match)
    if not files:
        raise ValueError(f"{what} is empty")
    return files
