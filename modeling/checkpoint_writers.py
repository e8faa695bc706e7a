"""Writing a model in the three checkpoint formats, task heads included.

  write_original_checkpoint(prefix, model)   the original release's TF1 names;
  write_original_directory(directory, ...)   that, with bert_config.json, vocab.txt;
  write_hf_directory(directory, ...)         a Hugging Face BERT directory: config.json,
                                             model.safetensors, vocab.txt,
                                             tokenizer_config.json;
  write_tf2_directory(directory, ...)        our TF2 layout (what the Trainer writes:
                                             `tf.train.Checkpoint(model=...)`), with
                                             bert_config.json and vocab.txt.

Every directory also gets a `model_info.json` (`model_kind`, `labels`,
`do_lower_case`, `written_by`; `causal_attention` for a left-to-right model and
`bilstm_units` for a task model with a BiLSTM), which tells the readers which head it
holds and how to build the model. A folder
appears only complete (common.file_io.atomic_directory). A writer never replaces a
folder of the user's: an existing non-empty destination is refused unless it is an
earlier output of the same writer (its model_info.json says so and it holds nothing
else) and `overwrite` is set.
"""

from __future__ import annotations

import os
import re

import numpy as np
import tensorflow as tf
from absl import logging

from common.errors import MissingFileError, OutputExistsError, UserError
from common import file_io
from modeling import checkpoint_names as names
from modeling import model_files, model_kinds
from modeling.checkpoint_readers import MODEL_INFO

_CHECKPOINT_FILES = r"(index|data-\d{5}-of-\d{5})"
# What each directory writer puts in its folder.
_WRITTEN_FILES = {
    "write_original_directory": re.compile(
        rf"^(bert_model\.ckpt\.{_CHECKPOINT_FILES}|bert_config\.json|vocab\.txt|"
        rf"model_info\.json)$"
    ),
    "write_hf_directory": re.compile(
        r"^(config\.json|model\.safetensors|vocab\.txt|tokenizer_config\.json|"
        r"model_info\.json)$"
    ),
    "write_tf2_directory": re.compile(
        rf"^(checkpoint|ckpt-\d+\.{_CHECKPOINT_FILES}|bert_config\.json|vocab\.txt|"
        rf"model_info\.json)$"
    ),
}
TF1_CHECKPOINT_NAME = "bert_model.ckpt"
# What each directory writer's folder is, in messages.
_FORMAT_NAMES = {
    "write_original_directory": "the TF1 format",
    "write_hf_directory": "the Hugging Face format",
    "write_tf2_directory": "the TF2 format",
}


def _head_table(model) -> list:
    kind = names.model_kind(model)
    if kind == names.FEATURE_BASED:
        raise UserError(
            "the feature-based tagger's BiLSTM head has no TF1 or Hugging Face "
            "names; write its encoder (model.encoder) or keep the TF2 format"
        )
    if names.has_bilstm_head(model):
        raise UserError(
            f"the {kind} model's BiLSTM head (--bilstm_units) has no TF1 or Hugging "
            f"Face names; write its encoder (model_kind encoder) or keep the TF2 format"
        )
    return [entry for table in names.head_tables(model).values() for entry in table]


def write_original_checkpoint(prefix: str, model, pretrainer=None) -> str:
    """Writes the weights under the original release's TF1 names (a `bert_model.ckpt`).

    Args:
      prefix: the checkpoint prefix; its `.index` and `.data-*` files appear only
        complete (written in a hidden folder beside, the index moved in last).
      model: a BertEncoder or a task model (its head is written under the names of
        `checkpoint_names.head_tables`).
      pretrainer: the older way to add pre-training heads to an encoder's checkpoint.

    Returns the prefix.
    """
    source = pretrainer if pretrainer is not None else model
    table = names.original_variable_table(names.encoder_of(source)) + _head_table(source)
    values = [var.numpy().T if transposed else var.numpy() for _, var, transposed in table]
    directory, base = os.path.split(prefix)
    tf.io.gfile.makedirs(directory or ".")
    file_io.clear_stale_temps(prefix)
    temp = file_io.temp_path(prefix)
    tf.io.gfile.makedirs(temp)
    try:
        # A name-based (TF1) checkpoint bundle with exactly these names.
        tf.raw_ops.SaveV2(
            prefix=os.path.join(temp, base),
            tensor_names=[name for name, _, _ in table],
            shape_and_slices=[""] * len(table),
            tensors=values,
        )
        files = sorted(tf.io.gfile.listdir(temp), key=lambda f: f.endswith(".index"))
        for name in files:
            tf.io.gfile.rename(
                os.path.join(temp, name), os.path.join(directory, name), overwrite=True
            )
    finally:
        tf.io.gfile.rmtree(temp)
    return prefix


def _write_tf2_checkpoint(directory: str, model) -> str:
    """`tf.train.Checkpoint(model=model)` as the Trainer saves it (ckpt-0 and a
    `checkpoint` state file); a bare encoder is saved as a task model's `encoder`."""
    if names.model_kind(model) == names.ENCODER:
        model = tf.train.Checkpoint(encoder=model)
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model), directory, max_to_keep=1, checkpoint_name="ckpt"
    )
    return manager.save(checkpoint_number=0)


# ---------------------------------------------------------------------------------
# Hugging Face.


def hf_tensors(model) -> dict:
    """{Hugging Face name: float32 array} of the model, as its Hugging Face class
    (`checkpoint_names.HF_ARCHITECTURE_OF`) names them. A pre-trainer also gets
    `cls.predictions.decoder.weight`, the word embeddings it is tied to."""
    kind = names.model_kind(model)
    encoder = names.encoder_of(model)
    prefix = "" if kind == names.ENCODER else "bert."
    tensors = {}
    for original, variable, transposed in names.original_variable_table(encoder) + _head_table(
        model
    ):
        name, hf_transpose = names.hf_name(original, prefix)
        value = variable.numpy()
        tensors[name] = np.ascontiguousarray(
            value.T if transposed or hf_transpose else value, dtype=np.float32
        )
    if kind == names.PRETRAINER:
        tensors[names.HF_TIED_DECODER] = tensors[prefix + "embeddings.word_embeddings.weight"]
    return tensors


def causal_attention(model) -> bool:
    """Whether the model's encoder is a left-to-right one."""
    return bool(getattr(names.encoder_of(model), "causal_attention", False))


def _check_tf1_attention(model) -> None:
    """The TF1 bert_config.json cannot say that attention is left-only (model_info.json
    says it to this project's programs only). A left-to-right model whose head reads the
    pooled output (the last real token; the original release's code reads [CLS], as
    Hugging Face's does) is refused, as for Hugging Face; any other is written with a
    warning."""
    if not causal_attention(model):
        return
    kind = names.model_kind(model)
    if model_kinds.get(kind).hf_causal_architecture is None:
        raise UserError(
            f"a left-to-right {kind} has no TF1 form: the original release's "
            f"bert_config.json cannot say that its attention is left-only, and the original "
            f"code classifies from [CLS] where this model reads the last real token. Keep "
            f"the TF2 format, or convert its encoder alone (--model_kind=encoder)"
        )
    logging.warning(
        "The %s is left-to-right: model_info.json says so to this project's programs, but "
        "the TF1 bert_config.json cannot; the original release's code would attend both ways.",
        kind,
    )


def num_labels(model) -> int | None:
    """The label count of a classifier or token classifier, else None."""
    return model.num_labels if model_kinds.of_model(model).labelled else None


def hf_config(
    config,
    kind: str,
    labels: list | None = None,
    label_count: int | None = None,
    causal_attention: bool = False,
    multi_label: bool = False,
) -> dict:
    """A Hugging Face `config.json` for `config` that `BertConfig.from_hf_dict` reads
    back unchanged: the activation in Hugging Face's naming, the architecture of
    `kind`, and id2label / label2id for a classifier or token classifier.

    A left-to-right model (`causal_attention`) gets `is_decoder: true`, which makes
    transformers' BERT attend left only (a pre-trainer is then a `BertLMHeadModel`,
    Hugging Face's causal BERT). A left-to-right classifier has no Hugging Face class:
    ours reads the last real token, Hugging Face's the first.
    """
    declared = model_kinds.get(kind)
    if not declared.hf_architectures:
        raise UserError(f"the {kind} model has no Hugging Face class")
    architecture = declared.hf_architectures[0]
    if causal_attention:
        # Ours pools the last real token under causal attention, Hugging Face's BERT
        # classes always [CLS]: a kind that reads the pooled output has no causal class.
        architecture = declared.hf_causal_architecture
        if architecture is None:
            raise UserError(
                f"a left-to-right {kind} has no Hugging Face class: it classifies from the "
                f"last real token, transformers' BERT classifiers from [CLS]. Keep the TF2 "
                f"format, or convert its encoder alone (--model_kind=encoder)"
            )
    values = config.to_dict()
    values.update(
        model_type="bert",
        architectures=[architecture],
        hidden_act=names.HF_ACTIVATION_OF[config.hidden_act],
        layer_norm_eps=1e-12,
        pad_token_id=0,
        position_embedding_type="absolute",
        tie_word_embeddings=True,
    )
    if causal_attention:
        values.update(is_decoder=True, add_cross_attention=False)
    if label_count is not None:
        label_names = labels or [f"LABEL_{i}" for i in range(label_count)]
        values["id2label"] = {str(i): label for i, label in enumerate(label_names)}
        values["label2id"] = {label: i for i, label in enumerate(label_names)}
    if multi_label:  # transformers then applies a sigmoid per label (and BCE).
        values["problem_type"] = "multi_label_classification"
    return values


def _hf_tokenizer_config(config, do_lower_case: bool) -> dict:
    return {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": bool(do_lower_case),
        "model_max_length": config.max_position_embeddings,
    }


# ---------------------------------------------------------------------------------
# Directories.


def check_destination(directory: str, writer: str, overwrite: bool) -> None:
    """Raises FileExistsError unless `directory` may be (re)written by `writer`: it
    does not exist, is empty, or is an earlier output of `writer` and `overwrite`."""
    if not tf.io.gfile.exists(directory):
        return
    if not tf.io.gfile.isdir(directory):
        raise OutputExistsError(f"output {directory} exists and is not a folder")
    entries = [e.rstrip("/") for e in tf.io.gfile.listdir(directory)]
    if not entries:
        return
    info_path = os.path.join(directory, MODEL_INFO)
    info = file_io.read_json(info_path) if tf.io.gfile.exists(info_path) else {}
    previous = (
        isinstance(info, dict)
        and info.get("written_by") == writer
        and all(_WRITTEN_FILES[writer].match(e) for e in entries)
    )
    if not previous:
        raise OutputExistsError(
            f"output folder {directory} is not empty and is not an earlier conversion to "
            f"{_FORMAT_NAMES[writer]}: refusing to replace it (choose a new or empty folder)"
        )
    if not overwrite:
        raise OutputExistsError(
            f"output folder {directory} holds an earlier conversion to "
            f"{_FORMAT_NAMES[writer]}; pass --overwrite (overwrite=True) to replace it"
        )


def _check_labels(model, labels) -> int | None:
    count = num_labels(model)
    if labels is not None and (count is None or len(labels) != count):
        raise UserError(
            f"{len(labels)} labels given for a {names.model_kind(model)} "
            f"model with {count or 'no'} label outputs"
        )
    return count


def _write_directory(
    directory: str,
    writer: str,
    model,
    vocab_file: str,
    do_lower_case: bool,
    labels,
    overwrite: bool,
    write_content,
    preserve_unused_tokens: bool = False,
) -> None:
    """Checks the destination, then writes `write_content(temp)`, vocab.txt and
    model_info.json into a folder that replaces `directory` once complete."""
    _check_labels(model, labels)
    if not vocab_file or not tf.io.gfile.exists(vocab_file):
        raise MissingFileError(f"vocab file not found: {vocab_file}")
    check_destination(directory, writer, overwrite)
    with file_io.atomic_directory(directory) as temp:
        write_content(temp)
        tf.io.gfile.copy(vocab_file, os.path.join(temp, "vocab.txt"))
        info = {
            "model_kind": names.model_kind(model),
            "labels": labels,
            "do_lower_case": bool(do_lower_case),
            "preserve_unused_tokens": bool(preserve_unused_tokens),
            "written_by": writer,
            "vocab_sha256": model_files.vocab_fingerprint(vocab_file),
            "vocab_size": len(model_files.vocab_entries(vocab_file)),
        }
        if causal_attention(model):
            info["causal_attention"] = True
        bilstm_units = getattr(model, "bilstm_units", 0)
        if bilstm_units:
            info["bilstm_units"] = bilstm_units
        if getattr(model, "multi_label", False):
            info["multi_label"] = True
        file_io.write_json(os.path.join(temp, MODEL_INFO), info)


def write_hf_directory(
    directory: str,
    model,
    vocab_file: str,
    do_lower_case: bool,
    labels: list | None = None,
    *,
    overwrite: bool = False,
    preserve_unused_tokens: bool = False,
) -> str:
    """Writes `model` as a Hugging Face BERT directory that `transformers` loads with
    AutoModel and the class of the model's kind (BertForPreTraining,
    BertForSequenceClassification, BertForMultipleChoice, BertForQuestionAnswering,
    BertForTokenClassification; BertModel for an encoder). A left-to-right model gets
    `is_decoder` (transformers' causal BERT; a pre-trainer as BertLMHeadModel, which
    AutoModelForCausalLM loads).

    Args:
      directory: the destination folder (see the module docstring for when an existing
        one is replaced).
      model: a BertEncoder or a task model of modeling/models.py.
      vocab_file: the WordPiece vocabulary, copied as vocab.txt.
      do_lower_case: the case setting, written to tokenizer_config.json.
      labels: label names of a classifier / token classifier (id2label), if known.
      overwrite: replace an earlier output of this writer.
      preserve_unused_tokens: the tokenizer setting, written to model_info.json.

    Returns the directory.
    """
    from safetensors.numpy import save as safetensors_bytes

    config = names.encoder_of(model).config
    kind = names.model_kind(model)
    config_json = hf_config(
        config,
        kind,
        labels,
        num_labels(model),
        causal_attention(model),
        getattr(model, "multi_label", False),
    )

    def content(temp):
        with tf.io.gfile.GFile(os.path.join(temp, "model.safetensors"), "wb") as f:
            f.write(safetensors_bytes(hf_tensors(model), metadata={"format": "pt"}))
        file_io.write_json(os.path.join(temp, "config.json"), config_json)
        file_io.write_json(
            os.path.join(temp, "tokenizer_config.json"), _hf_tokenizer_config(config, do_lower_case)
        )

    _write_directory(
        directory,
        "write_hf_directory",
        model,
        vocab_file,
        do_lower_case,
        labels,
        overwrite,
        content,
        preserve_unused_tokens,
    )
    return directory


def write_original_directory(
    directory: str,
    model,
    vocab_file: str,
    do_lower_case: bool,
    labels: list | None = None,
    *,
    overwrite: bool = False,
    preserve_unused_tokens: bool = False,
) -> str:
    """Writes `model` as the original release ships a model: `bert_model.ckpt` (TF1
    names, the head's included), `bert_config.json`, `vocab.txt`. Arguments as
    `write_hf_directory`; returns the checkpoint prefix."""
    config = names.encoder_of(model).config
    _head_table(model)  # Refuse a model without TF1 names before writing anything.
    _check_tf1_attention(model)

    def content(temp):
        write_original_checkpoint(os.path.join(temp, TF1_CHECKPOINT_NAME), model)
        file_io.write_text(os.path.join(temp, "bert_config.json"), config.to_json_string())

    _write_directory(
        directory,
        "write_original_directory",
        model,
        vocab_file,
        do_lower_case,
        labels,
        overwrite,
        content,
        preserve_unused_tokens,
    )
    return os.path.join(directory, TF1_CHECKPOINT_NAME)


def write_tf2_directory(
    directory: str,
    model,
    vocab_file: str,
    do_lower_case: bool,
    labels: list | None = None,
    *,
    overwrite: bool = False,
    preserve_unused_tokens: bool = False,
) -> str:
    """Writes `model` in this project's TF2 layout (`ckpt-0` and a `checkpoint` file,
    as a run's output_dir holds them), with `bert_config.json` and `vocab.txt`.
    Arguments as `write_hf_directory`; returns the checkpoint prefix."""
    config = names.encoder_of(model).config

    def content(temp):
        _write_tf2_checkpoint(temp, model)
        file_io.write_text(os.path.join(temp, "bert_config.json"), config.to_json_string())

    _write_directory(
        directory,
        "write_tf2_directory",
        model,
        vocab_file,
        do_lower_case,
        labels,
        overwrite,
        content,
        preserve_unused_tokens,
    )
    return tf.train.latest_checkpoint(directory)
