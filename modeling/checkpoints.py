"""Restoring a model from the checkpoints BERT users have, and writing them back.

`--init_checkpoint` accepts:
  1. the original release's TF1 checkpoint (`.../bert_model.ckpt`, variable names
     `bert/...` and `cls/...`, and a fine-tuned model's head); Adam slots and
     `global_step` are ignored;
  2. a Hugging Face BERT directory (`config.json` + `model.safetensors`, or a sharded
     `model.safetensors.index.json`), read without PyTorch;
  3. a TF2 checkpoint of this project (a file prefix, or a directory: a run's
     output_dir resolves to its `best/` model when it kept one, else to its latest
     checkpoint; see `checkpoint_readers.resolve_checkpoint`).

`restore_model` restores the encoder always, and the model's head when the checkpoint
holds one for this kind of model. The names of every format are declarative tables
(`checkpoint_names`); the readers of every format live in `checkpoint_readers`, the
writers (`write_original_checkpoint`, `write_hf_directory`, ...) in
`checkpoint_writers`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from absl import logging

from common import file_io
from modeling import checkpoint_names as names
from modeling import model_kinds
from modeling.checkpoint_names import original_variable_table
from modeling.checkpoint_readers import (
    MODEL_INFO,
    CheckpointMismatchError,
    find_side_file,
    open_checkpoint,
    read_model_info,
)

_SHOWN_UNUSED = 6


@dataclasses.dataclass
class _Group:
    """Variables restored together or not at all: the encoder, or one head."""

    parts: list  # model attribute names, e.g. ["classifier"]
    entries: list  # (checkpoint name, variable, transposed)


def _groups(reader, model) -> tuple[_Group, list, list]:
    """(encoder group, head groups the checkpoint format can hold, every head part of
    the model)."""
    tf2 = names.tf2_entries(model)
    head_parts = [part for part in tf2 if part != "encoder"]
    if reader.kind == "tf2":
        heads = [_Group(head_parts, [e for p in head_parts for e in tf2[p]])]
        return _Group(["encoder"], tf2["encoder"]), heads if head_parts else [], head_parts
    encoder = _Group(
        ["encoder"], _in_format(reader, original_variable_table(names.encoder_of(model)))
    )
    heads = [
        _Group([part], _in_format(reader, table))
        for part, table in names.head_tables(model).items()
    ]
    return encoder, heads, head_parts


def _in_format(reader, table: list) -> list:
    """A table of original names -> (the reader's name, variable, transposed)."""
    entries = []
    for original, variable, transposed in table:
        name, format_transpose = reader.name_of(original)
        entries.append((name, variable, transposed or format_transpose))
    return entries


def _stored_shape(variable, transposed: bool) -> tuple:
    shape = tuple(variable.shape)
    return shape[::-1] if transposed else shape


def _shape_problem(reader, group: _Group) -> str | None:
    for name, variable, transposed in group.entries:
        want, have = _stored_shape(variable, transposed), reader.shapes[name]
        if have != want:
            return (
                f"checkpoint {reader.path}: variable {name!r} has shape {list(have)}, "
                f"the model's {variable.path} needs {list(want)}"
            )
    return None


def _check_encoder(reader, group: _Group) -> None:
    for name, variable, transposed in group.entries:
        if name not in reader.shapes:
            raise CheckpointMismatchError(
                f"checkpoint {reader.path} has no variable {name!r} (needed for encoder "
                f"variable {variable.path}, shape {list(variable.shape)})"
            )
    problem = _shape_problem(reader, group)
    if problem:
        raise CheckpointMismatchError(
            f"{problem} (check --bert_config_file: vocab_size, hidden_size, layers and "
            f"max_position_embeddings must match)"
        )


def _drop_missing_pooler(reader, group: _Group, kind: str) -> bool:
    """Hugging Face's token-classification and question-answering models have no
    pooler. A model that does not use the pooled output keeps its pooler's
    initializer then (a bare encoder with a warning: its `pooled_output` is
    untrained); returns whether the pooler was left out of `group`."""
    if reader.kind == "tf2" or model_kinds.get(kind).uses_pooler:
        return False
    pooler = {reader.name_of(f"bert/pooler/dense/{v}")[0] for v in ("kernel", "bias")}
    if any(name in reader.shapes for name in pooler):
        return False
    group.entries = [e for e in group.entries if e[0] not in pooler]
    if kind == names.ENCODER:
        logging.warning(
            "Checkpoint %s has no pooler: the encoder's pooled_output comes "
            "from an untrained pooler.",
            reader.path,
        )
    return True


def _head_problem(reader, group: _Group, kind: str) -> str | None:
    """Why the checkpoint's head cannot be restored into this model, or None."""
    missing = [name for name, _, _ in group.entries if name not in reader.shapes]
    parts = ", ".join(group.parts)
    if missing:
        return f"checkpoint {reader.path} has only part of the {parts} head: no {missing[0]!r}"
    if reader.kind == "tf2":
        # A head with more parts than this model's (e.g. a BiLSTM under the classifier)
        # would otherwise be restored without them.
        stored = {name.split("/")[1] for name in reader.shapes} - {"encoder"}
        extra = sorted(stored - set(group.parts))
        if extra:
            return (
                f"checkpoint {reader.path} has head parts this model lacks: "
                f"{', '.join(extra)} (a BiLSTM head needs the same --bilstm_units)"
            )
    if reader.stored_kind not in (None, kind):
        source = (
            f"config.json architectures {reader.architecture}"
            if reader.kind == "hf"
            else MODEL_INFO
        )
        return (
            f"checkpoint {reader.path} holds a {reader.stored_kind} model ({source}), "
            f"not a {kind}: its {parts} head is another model's"
        )
    return _shape_problem(reader, group)


def _plan_head(reader, group: _Group, kind: str, reinit_head: bool) -> bool:
    """Whether to restore a head group; raises when it cannot be and was not asked
    to be re-initialised."""
    if not any(name in reader.shapes for name, _, _ in group.entries):
        return False
    problem = _head_problem(reader, group, kind)
    parts = ", ".join(group.parts)
    if reinit_head:
        logging.warning(
            "The %s head starts from its initializer (reinit_head), not from checkpoint %s%s",
            parts,
            reader.path,
            f": {problem}" if problem else "",
        )
        return False
    if problem:
        raise CheckpointMismatchError(
            f"{problem}. To train this head from its initializer instead, ask for a "
            f"re-initialised head (reinit_head)."
        )
    return True


def _warn_untied_decoder(reader, restored: list) -> None:
    if reader.kind != "hf" or "masked_lm" not in restored:
        return
    if names.HF_TIED_DECODER not in reader.shapes:
        return
    embeddings = reader.name_of("bert/embeddings/word_embeddings")[0]
    if not np.array_equal(reader.get(names.HF_TIED_DECODER), reader.get(embeddings)):
        logging.warning(
            "Checkpoint %s has a masked-LM decoder that differs from the word "
            "embeddings; this model ties them and uses the embeddings.",
            reader.path,
        )


def _unused(reader, used: set) -> list:
    return sorted(
        name
        for name in reader.shapes
        if name not in used and not (reader.kind == "hf" and names.HF_NOT_READ.search(name))
    )


def _summary_line(reader, restored: list, fresh: list, unused: list) -> str:
    line = (
        f"Restored {', '.join(restored)} from {reader.kind} checkpoint {reader.path}; "
        f"starting fresh: {', '.join(fresh) or 'nothing'}"
    )
    if unused:
        shown = ", ".join(name.replace(names.TF2_SUFFIX, "") for name in unused[:_SHOWN_UNUSED])
        more = f" and {len(unused) - _SHOWN_UNUSED} more" if len(unused) > _SHOWN_UNUSED else ""
        line += f"; not used: {shown}{more}"
    return line


def restore_model(path: str, model, *, reinit_head: bool = False, reader=None) -> dict:
    """Restores what the checkpoint at `path` holds for `model`.

    The encoder is always restored. A head (task head, or the masked-LM and
    next-sentence heads) is restored when the checkpoint has it; a checkpoint without
    it leaves it at its initializer. Nothing is assigned unless everything to restore
    fits. One INFO line says what was restored, what starts fresh and which checkpoint
    variables were not used.

    Args:
      path: a TF1 checkpoint prefix, a Hugging Face directory, or a TF2 checkpoint
        prefix or directory (see `checkpoint_readers.resolve_checkpoint`).
      model: a BertEncoder, or a task model of modeling/models.py or
        modeling/feature_based.py (its `MODEL_KIND` says which head it has).
      reinit_head: start every head from its initializer, whatever the checkpoint
        holds (a warning says what was left out).
      reader: the checkpoint at `path` opened already (`open_checkpoint`), if it is.

    Returns:
      {"kind": 'tf1' | 'hf' | 'tf2', "path": the resolved checkpoint,
       "restored": parts restored, "fresh": parts left at their initializers}; parts are
      the model's attribute names ("encoder", "classifier", "masked_lm", ...), and
      "pooler" when a Hugging Face token-classification or question-answering
      directory (which has none) fills a model that does not use it.

    Raises:
      CheckpointMismatchError naming the variable and both shapes when the encoder or a
      head does not fit, or when the head is another kind of model's (a sequence
      classifier's head into a token classifier, as the checkpoint's model_info.json or
      Hugging Face architecture says), unless `reinit_head`.
    """
    reader = reader or open_checkpoint(path)
    kind = names.model_kind(model)
    encoder, heads, optional_parts = _groups(reader, model)
    if _drop_missing_pooler(reader, encoder, kind):
        optional_parts = ["pooler"] + optional_parts
    _check_encoder(reader, encoder)
    chosen = [encoder] + [g for g in heads if _plan_head(reader, g, kind, reinit_head)]
    for group in chosen:
        for name, variable, transposed in group.entries:
            value = reader.get(name)
            variable.assign(np.asarray(value.T if transposed else value, np.float32))
    restored = [part for group in chosen for part in group.parts]
    fresh = [part for part in optional_parts if part not in restored]
    _warn_untied_decoder(reader, restored)
    unused = _unused(reader, {name for g in chosen for name, _, _ in g.entries})
    logging.info("%s", _summary_line(reader, restored, fresh, unused))
    return {"kind": reader.kind, "path": reader.path, "restored": restored, "fresh": fresh}


# ---------------------------------------------------------------------------------
# What a checkpoint holds, for converters: model kind, labels, case, config, vocab.


def _markers(attribute: str) -> tuple:
    """((name, kinds whose `attribute` holds it), ...): names whose presence tells
    which kinds of model a checkpoint can hold (`model_kinds`), a name of one kind before
    one that several share (a feature-based tagger's `classifier` is no classifier's)."""
    kinds_of = {}
    for kind in model_kinds.KINDS:
        for name in getattr(kind, attribute):
            kinds_of.setdefault(name, []).append(kind.name)
    return tuple(sorted(((n, tuple(k)) for n, k in kinds_of.items()), key=lambda e: len(e[1]) > 1))


_TF2_MARKERS = _markers("tf2_markers")
_ORIGINAL_MARKERS = _markers("original_markers")
# Where the number of labels is read: (name, axis).
_LABEL_COUNT = {
    "tf1": ("output_weights", 0),
    "hf": ("classifier.weight", 0),
    "tf2": ("model/classifier/dense/_kernel" + names.TF2_SUFFIX, 1),
}


def _candidate_kinds(reader) -> list[str]:
    if reader.kind == "tf2":
        parts = {name.split("/")[1] for name in reader.shapes}
        found = [kinds for part, kinds in _TF2_MARKERS if part in parts]
    else:
        found = []
        for original, kinds in _ORIGINAL_MARKERS:
            name = reader.name_of(original)[0]
            if name in reader.shapes:
                one_output = reader.shapes[name][0] == 1
                found.append([k for k in kinds if one_output or not model_kinds.get(k).one_output])
    return list(found[0]) if found else [names.ENCODER]


def _labels(reader, info: dict) -> list | None:
    if info.get("labels") is not None:
        return list(info["labels"])
    id2label = getattr(reader, "config", {}).get("id2label")
    if not id2label:
        return None
    labels = [id2label[key] for key in sorted(id2label, key=int)]
    # Hugging Face's default names say nothing.
    return None if labels == [f"LABEL_{i}" for i in range(len(labels))] else labels


def _do_lower_case(side_dirs, info: dict) -> bool | None:
    if info.get("do_lower_case") is not None:
        return bool(info["do_lower_case"])
    tokenizer_config = find_side_file(side_dirs, "tokenizer_config.json")
    if tokenizer_config:
        value = file_io.read_json(tokenizer_config).get("do_lower_case")
        return None if value is None else bool(value)
    return None


def inspect_checkpoint(path: str) -> dict:
    """What the checkpoint at `path` holds, as far as it and the files beside it say.

    Returns:
      {"kind": 'tf1' | 'hf' | 'tf2', "path": resolved,
       "model_kind": the model kind, or None when the names fit several ("candidates"),
       "candidates": the kinds the variable names fit,
       "num_labels": outputs of a head on `output_weights` / `classifier.weight` /
         `model/classifier/dense` (classifier, token classifier, or the one score of
         multiple choice in TF1 and Hugging Face), else None,
       "labels": label names (model_info.json, Hugging Face id2label) or None,
       "do_lower_case": from model_info.json or tokenizer_config.json, or None,
       "config_file", "vocab_file": bert_config.json / config.json and vocab.txt
         beside it, or None}.
    """
    reader = open_checkpoint(path)
    info = read_model_info(reader.side_dirs)
    candidates = _candidate_kinds(reader)
    if reader.stored_kind in candidates:
        kind = reader.stored_kind
    else:
        kind = candidates[0] if len(candidates) == 1 else None
    name, axis = _LABEL_COUNT[reader.kind]
    num_labels = reader.shapes[name][axis] if name in reader.shapes else None
    return {
        "kind": reader.kind,
        "path": reader.path,
        "model_kind": kind,
        "candidates": candidates,
        "stored_kind": reader.stored_kind,
        "num_labels": num_labels,
        "labels": _labels(reader, info),
        "do_lower_case": _do_lower_case(reader.side_dirs, info),
        "config_file": (
            find_side_file(reader.side_dirs, "bert_config.json")
            or find_side_file(reader.side_dirs, "config.json")
        ),
        "vocab_file": find_side_file(reader.side_dirs, "vocab.txt"),
    }
