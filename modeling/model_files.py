"""The files that go with a model: its config, its vocabulary and its case, and the
self-contained output directories that carry them.

A run's output_dir holds what a later run needs to use the model it trained with no
other flag (`--init_checkpoint=<output_dir>`):

  bert_config.json   the config the model was really built with
  vocab.txt          a copy of the vocabulary
  model_info.json    {"model_kind", "do_lower_case", "preserve_unused_tokens", "labels",
                     "vocab_sha256", "vocab_size", ...}; for a left-to-right model
                     also "causal_attention": true

`resolve` finds a model's files from the flags and what sits beside the checkpoint,
reading each once (model_info.json, the vocabulary; the checkpoint's format and path)
into the one `ModelFiles` value a run passes on, and checks them against each other
before any work: the case (`--do_lower_case`) against every statement of it the
checkpoint makes, and the vocabulary against the config's vocab_size.
`--preserve_unused_tokens` (the original's flag: `[unusedN]` words stay whole) defaults
to the model's own record, so a model trained with it is fine-tuned, evaluated and
served with it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import Mapping

import tensorflow as tf
from absl import logging

from common.errors import MissingFileError, UserError
from common import file_io
from data_prep.text import tokenization
from modeling import checkpoint_readers, model_kinds
from modeling.config import BertConfig

MODEL_INFO = checkpoint_readers.MODEL_INFO
CONFIG_FILE = "bert_config.json"
VOCAB_FILE = "vocab.txt"
_HF_TOKENIZER_CONFIG = "tokenizer_config.json"
# Special entries such as [UNK] or [unused0] do not tell the case of a vocabulary.
_SPECIAL = re.compile(r"^\[[^\]]*\]$")


# A vocabulary file, read once (`tokenization.VocabFile`: the tokenizers take it too).
VocabFile = tokenization.VocabFile


def read_vocab(vocab_file: str) -> VocabFile:
    """The vocabulary file at `vocab_file` (local or remote), read."""
    return VocabFile.read(vocab_file)


def _vocab(vocab: str | VocabFile) -> VocabFile:
    return vocab if isinstance(vocab, VocabFile) else read_vocab(vocab)


@dataclasses.dataclass(frozen=True)
class ModelFiles:
    """A model as a run resolved it, once: its config, the tokenizer settings that go
    with it, and what was read to find them, for later code to take instead of
    reading the files again.

    Attributes:
      config: the BertConfig the model is built with.
      vocab_file: path of its WordPiece vocabulary (None for pre-training from shards
        when no vocabulary is given: the shards hold ids).
      do_lower_case: whether its tokenizer lower-cases the input.
      config_is_complete: False when some config values were not read from the model
        (e.g. a TF Hub encoder without bert_config.json); such a config is not written
        to an output_dir as the model's.
      preserve_unused_tokens: whether its tokenizer keeps `[unusedN]` words whole.
      causal_attention: the model is a left-to-right one (`BertEncoder`'s left-only
        constraint), which every later use of it keeps. `bert_config.json` keeps the
        original keys, so this is written to model_info.json (`causal_attention`);
        a Hugging Face config.json says it with `is_decoder`.
      checkpoint: (format, path) of --init_checkpoint as
        `checkpoint_readers.resolve_checkpoint` found it; None without one.
      info_file, info: the model_info.json beside the checkpoint and its contents
        (None and {} when there is none).
      vocab: the vocabulary file as read (None without one).
    """

    config: BertConfig
    vocab_file: str | None
    do_lower_case: bool
    config_is_complete: bool = True
    preserve_unused_tokens: bool = False
    causal_attention: bool = False
    checkpoint: tuple[str, str] | None = dataclasses.field(default=None, compare=False)
    info_file: str | None = dataclasses.field(default=None, compare=False)
    info: Mapping = dataclasses.field(default_factory=dict, compare=False)
    vocab: VocabFile | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def kind(self) -> model_kinds.ModelKind | None:
        """The kind of model the checkpoint holds, as its model_info.json says (None:
        it does not say, or names a kind this version does not know)."""
        return model_kinds.BY_NAME.get(self.info.get("model_kind"))

    def fine_tuned(self, kind: model_kinds.ModelKind) -> Mapping:
        """model_info.json when the checkpoint is a fine-tuned model of `kind` (its
        labels and settings), else {}."""
        return self.info if self.kind is kind else {}

    def open_checkpoint(self):
        """A reader of the checkpoint (`checkpoint_readers.open_checkpoint`), from what
        was resolved and read already."""
        return checkpoint_readers.open_checkpoint(
            self.checkpoint[1], resolved=self.checkpoint, model_info=(self.info_file, self.info)
        )

    def tokenizer(self) -> tokenization.FullTokenizer:
        """The model's Python tokenizer (vocabulary, case, preserve_unused_tokens), built
        once from the vocabulary as read: the one value the feature builders and the
        export take (its `vocab_read` is the file read)."""
        return self._tokenizer

    @functools.cached_property
    def _tokenizer(self) -> tokenization.FullTokenizer:
        return tokenization.FullTokenizer(
            self.vocab if self.vocab is not None else self.vocab_file,
            self.do_lower_case,
            self.preserve_unused_tokens,
        )


@dataclasses.dataclass(frozen=True)
class CaseStatement:
    """What a checkpoint says about its case, and where it says it."""

    do_lower_case: bool
    source: str


def side_dirs(init_checkpoint: str | None) -> list[str]:
    """The folders that describe a checkpoint (`checkpoint_readers.checkpoint_side_dirs`)."""
    return checkpoint_readers.checkpoint_side_dirs(init_checkpoint) if init_checkpoint else []


def model_info_file(init_checkpoint: str | None) -> str | None:
    """The model_info.json beside the checkpoint (or in its run folder), None if none."""
    return checkpoint_readers.find_side_file(side_dirs(init_checkpoint), MODEL_INFO)


def read_model_info(init_checkpoint: str | None) -> dict:
    """model_info.json beside the checkpoint (or in its run folder); {} if none."""
    return checkpoint_readers.read_model_info(side_dirs(init_checkpoint))


def _info(init_checkpoint: str | None, info: Mapping | None) -> Mapping:
    """`info` when the caller read it already, else the checkpoint's model_info.json."""
    return read_model_info(init_checkpoint) if info is None else info


def resolve_causal_attention(init_checkpoint: str | None, info: Mapping | None = None) -> bool:
    """Whether the model at `init_checkpoint` is a left-to-right one: its
    model_info.json's `causal_attention` (`info`, when read already), else a Hugging
    Face config.json's `is_decoder` (a decoder with cross-attention is not a BERT this
    project runs)."""
    info = _info(init_checkpoint, info)
    if "causal_attention" in info:
        return bool(info["causal_attention"])
    path = checkpoint_readers.find_side_file(side_dirs(init_checkpoint), "config.json")
    if path is None:
        return False
    config = file_io.read_json(path)
    if config.get("add_cross_attention"):
        raise UserError(
            f"{path}: add_cross_attention is set (an encoder-decoder's decoder); only "
            f"BERT encoders, bidirectional or left-to-right (is_decoder), are supported"
        )
    return bool(config.get("is_decoder", False))


def vocab_case(vocab: str | VocabFile) -> CaseStatement | None:
    """An uncased vocabulary has no upper-case entry; a cased one has many."""
    vocab = _vocab(vocab)
    vocab_file = vocab.path
    words = [t for t in vocab.tokens if not _SPECIAL.match(t)]
    upper = sum(1 for t in words if t != t.lower())
    if words and upper == 0:
        return CaseStatement(True, f"{vocab_file} has no upper-case entry (an uncased vocabulary)")
    if upper > 0.01 * len(words):
        return CaseStatement(
            False, f"{vocab_file} has {upper} entries with upper-case letters (a cased vocabulary)"
        )
    return None


def checkpoint_case_statements(
    init_checkpoint: str | None, vocab_file: str | VocabFile | None, info: Mapping | None = None
) -> list[CaseStatement]:
    """Every statement of the model's case: our model_info.json (`info`, when read
    already), a Hugging Face tokenizer_config.json, the original release's checkpoint
    names; when none of them says, the vocabulary (no upper-case entry: uncased; many:
    cased)."""
    statements = []
    info = _info(init_checkpoint, info)
    if info.get("do_lower_case") is not None:
        statements.append(
            CaseStatement(bool(info["do_lower_case"]), f"{MODEL_INFO} of {init_checkpoint}")
        )
    path = checkpoint_readers.find_side_file(side_dirs(init_checkpoint), _HF_TOKENIZER_CONFIG)
    if path:
        value = file_io.read_json(path).get("do_lower_case")
        if value is not None:
            statements.append(CaseStatement(bool(value), path))
    if init_checkpoint:
        for lower in (True, False):
            try:
                tokenization.validate_case_matches_checkpoint(lower, init_checkpoint)
            except ValueError:
                statements.append(
                    CaseStatement(
                        not lower, f"the original release's checkpoint name {init_checkpoint}"
                    )
                )
    if vocab_file and not statements:  # The vocabulary's evidence is the weakest.
        statement = vocab_case(vocab_file)
        if statement is not None:
            statements.append(statement)
    return statements


def resolve_case(
    do_lower_case: bool | None,
    init_checkpoint: str | None,
    vocab_file: str | VocabFile | None,
    stated: CaseStatement | None = None,
    info: Mapping | None = None,
) -> bool:
    """`--do_lower_case` checked against the checkpoint.

    Args:
      do_lower_case: the flag's value when the user gave it, else None.
      init_checkpoint, vocab_file: what the case is read from (see
        `checkpoint_case_statements`).
      stated: one more statement, e.g. a TF Hub encoder's own do_lower_case.
      info: the checkpoint's model_info.json, when read already.

    Returns:
      The flag's value; when not given, what the checkpoint states (else True, the
      original default).

    Raises:
      ValueError naming both sides when the flag contradicts the checkpoint, or when
      the checkpoint contradicts itself.
    """
    statements = checkpoint_case_statements(
        init_checkpoint, None if stated is not None else vocab_file, info
    )
    if stated is not None:
        statements.insert(0, stated)
    if do_lower_case is not None:
        for statement in statements:
            if statement.do_lower_case != do_lower_case:
                raise UserError(
                    f"--do_lower_case={do_lower_case} does not match the model: "
                    f"{statement.source} says do_lower_case={statement.do_lower_case}. "
                    f"Pass --do_lower_case={statement.do_lower_case} (an uncased model "
                    f"turns every capitalised word it was not trained on into [UNK] or "
                    f"other pieces)."
                )
        return do_lower_case
    values = {s.do_lower_case for s in statements}
    if len(values) > 1:
        raise UserError(
            "the model's files disagree on its case: "
            + "; ".join(f"{s.source}: do_lower_case={s.do_lower_case}" for s in statements)
            + ". Pass --do_lower_case explicitly."
        )
    if statements:
        logging.info("do_lower_case=%s, from %s", statements[0].do_lower_case, statements[0].source)
        return statements[0].do_lower_case
    return True


def resolve_preserve_unused_tokens(
    preserve_unused_tokens: bool | None, init_checkpoint: str | None, info: Mapping | None = None
) -> bool:
    """`--preserve_unused_tokens` when given, else the model's record of it
    (model_info.json; `info`, when read already), else False (the original default). A
    flag that differs from the record is used, with a warning: fine-tuning a model on
    text whose `[unusedN]` words are new tokens is what the flag is for."""
    recorded = _info(init_checkpoint, info).get("preserve_unused_tokens")
    if preserve_unused_tokens is None:
        if recorded:
            logging.info("preserve_unused_tokens=True, from %s of %s", MODEL_INFO, init_checkpoint)
        return bool(recorded)
    if recorded is not None and bool(recorded) != preserve_unused_tokens:
        logging.warning(
            "--preserve_unused_tokens=%s, but %s of %s says the model was trained with %s.",
            preserve_unused_tokens,
            MODEL_INFO,
            init_checkpoint,
            bool(recorded),
        )
    return preserve_unused_tokens


def check_vocab_fits_config(vocab: str | VocabFile, config: BertConfig) -> int:
    """Fails when the vocabulary (a path, or the file read) has ids the model's
    embedding table cannot hold.

    Returns the vocabulary's size. Fewer entries than vocab_size only warns: the
    released multilingual and Chinese models pad their tables.
    """
    vocab = _vocab(vocab)
    vocab_file, size = vocab.path, vocab.size
    if size > config.vocab_size:
        raise UserError(
            f"the vocabulary {vocab_file} has {size} entries but the model's "
            f"config has vocab_size={config.vocab_size}: ids from "
            f"{config.vocab_size} up would index past the embedding table. "
            f"Use the vocabulary the model was trained with."
        )
    if size < config.vocab_size:
        logging.warning(
            "The vocabulary %s has %d entries, fewer than vocab_size=%d of "
            "the config: %d embedding rows are never used.",
            vocab_file,
            size,
            config.vocab_size,
            config.vocab_size - size,
        )
    return size


def vocab_entries(vocab_file: str) -> list[str]:
    """The entries of a vocabulary, one per line, stripped as `load_vocab` strips them."""
    return read_vocab(vocab_file).entries


def vocab_fingerprint(vocab_file: str) -> str:
    """SHA-256 of a vocabulary's entries (`VocabFile.sha256`)."""
    return read_vocab(vocab_file).sha256


def check_vocab_matches_model(
    vocab_file: str,
    init_checkpoint: str | None,
    allow_mismatch: bool = False,
    own_vocab: str | None = None,
    *,
    info: Mapping | None = None,
    given: VocabFile | None = None,
) -> None:
    """A --vocab_file must be the vocabulary the model was trained with, when the
    checkpoint says which: the vocab.txt beside it (a Hugging Face folder, an
    output_dir of ours), else the fingerprint in its model_info.json.

    A vocabulary with one line dropped or added gives every later token the id of
    its neighbour: the model runs and its features are silently wrong.

    `own_vocab` is the model's vocabulary where it is known otherwise (a TF Hub
    encoder's asset; `init_checkpoint` then names that model). `info` (the checkpoint's
    model_info.json) and `given` (`vocab_file` read) are passed when read already.

    Raises:
      UserError naming both files and the first line that differs (or the
      fingerprints), unless `allow_mismatch` (then a warning).
    """
    own = own_vocab or checkpoint_readers.find_side_file(side_dirs(init_checkpoint), VOCAB_FILE)
    if own and os.path.abspath(own) == os.path.abspath(vocab_file):
        return
    info = {} if own_vocab else _info(init_checkpoint, info)
    problem = None
    if own or info.get("vocab_sha256"):
        vocab = given if given is not None else read_vocab(vocab_file)
    if own:
        given, theirs = vocab.entries, vocab_entries(own)
        if given != theirs:
            line = next(
                (i for i, (a, b) in enumerate(zip(given, theirs)) if a != b),
                min(len(given), len(theirs)),
            )
            shown = [
                repr(entries[line]) if line < len(entries) else "the end of the file"
                for entries in (given, theirs)
            ]
            problem = (
                f"--vocab_file={vocab_file} is not the vocabulary of the model "
                f"{init_checkpoint} ({own}): they first differ at line {line + 1}, "
                f"{shown[0]} against {shown[1]} ({len(given)} and {len(theirs)} lines)"
            )
    elif info.get("vocab_sha256") and info["vocab_sha256"] != vocab.sha256:
        problem = (
            f"--vocab_file={vocab_file} is not the vocabulary of the model "
            f"{init_checkpoint}: its fingerprint is not the one in {MODEL_INFO} "
            f"({len(vocab.entries)} lines against {info.get('vocab_size')})"
        )
    if problem is None:
        return
    if allow_mismatch:
        logging.warning("%s; used anyway (--allow_vocab_mismatch).", problem)
        return
    raise UserError(
        f"{problem}. Every token after that line would get another word's id. Leave "
        f"--vocab_file out to use the model's own, or pass --allow_vocab_mismatch if "
        f"this vocabulary is meant."
    )


def _where(dirs: list[str]) -> str:
    return (
        f"the checkpoint folder {' or '.join(dirs)} has no"
        if dirs
        else "there is no --init_checkpoint folder with a"
    )


def resolve_config(
    bert_config_file: str | None, init_checkpoint: str | None, required: bool = True
) -> BertConfig | None:
    """--bert_config_file, else bert_config.json or a Hugging Face config.json beside
    the checkpoint; with `required=False` None when there is neither."""
    if bert_config_file:
        return BertConfig.from_json_file(bert_config_file)
    dirs = side_dirs(init_checkpoint)
    path = checkpoint_readers.find_side_file(
        dirs, CONFIG_FILE
    ) or checkpoint_readers.find_side_file(dirs, "config.json")
    if path is None and not required:
        return None
    if path is None:
        raise UserError(
            f"--bert_config_file is required: {_where(dirs)} {CONFIG_FILE} or config.json"
        )
    return BertConfig.from_json_file(path)


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """A model's vocabulary file (None when there is none to be had) and the
    tokenizer settings that go with it; `vocab`: the file as read."""

    vocab_file: str | None
    do_lower_case: bool
    preserve_unused_tokens: bool
    vocab: VocabFile | None = dataclasses.field(default=None, compare=False, repr=False)


def resolve_vocabulary(
    vocab_file: str | None,
    init_checkpoint: str | None,
    do_lower_case: bool | None,
    *,
    preserve_unused_tokens: bool | None = None,
    allow_vocab_mismatch: bool = False,
    required: bool = True,
    info: Mapping | None = None,
) -> Vocabulary:
    """`--vocab_file`, else vocab.txt beside the checkpoint, with its case and
    preserve_unused_tokens: a `--vocab_file` other than the model's own is refused
    unless `allow_vocab_mismatch` (`check_vocab_matches_model`), the case is checked
    against every statement the model makes (`resolve_case`). With `required=False`
    no vocabulary is an answer (pre-training from shards, which hold ids). The file is
    read once; `info` is the checkpoint's model_info.json when read already."""
    info = _info(init_checkpoint, info)
    dirs = side_dirs(init_checkpoint)
    given = vocab_file
    vocab_file = vocab_file or checkpoint_readers.find_side_file(dirs, VOCAB_FILE)
    if vocab_file is None and required:
        raise UserError(f"--vocab_file is required: {_where(dirs)} {VOCAB_FILE}")
    if vocab_file is not None and not tf.io.gfile.exists(vocab_file):
        raise MissingFileError(f"--vocab_file not found: {vocab_file}")
    vocab = read_vocab(vocab_file) if vocab_file is not None else None
    if given and init_checkpoint:
        check_vocab_matches_model(
            vocab_file, init_checkpoint, allow_vocab_mismatch, info=info, given=vocab
        )
    return Vocabulary(
        vocab_file,
        resolve_case(do_lower_case, init_checkpoint, vocab, info=info),
        resolve_preserve_unused_tokens(preserve_unused_tokens, init_checkpoint, info),
        vocab,
    )


def resolve(
    bert_config_file: str | None,
    vocab_file: str | None,
    init_checkpoint: str | None,
    do_lower_case: bool | None,
    *,
    preserve_unused_tokens: bool | None = None,
    allow_vocab_mismatch: bool = False,
    vocab_required: bool = True,
    checkpoint: tuple[str, str] | None = None,
) -> ModelFiles:
    """The model's files from the flags, else from beside the checkpoint, checked: the
    one resolver every runner, export and the converter use. model_info.json and the
    vocabulary are read once, into the value returned; `checkpoint` is
    `checkpoint_readers.resolve_checkpoint(init_checkpoint)` when the caller has it.

    `--bert_config_file` and `--vocab_file` win; when omitted, they are taken from the
    checkpoint's folder (bert_config.json or a Hugging Face config.json, and vocab.txt;
    for a run's output_dir, the files it wrote). See `resolve_vocabulary` for the
    vocabulary, its case and preserve_unused_tokens; the vocabulary must fit the
    config's vocab_size.
    """
    config = resolve_config(bert_config_file, init_checkpoint)
    info_file = model_info_file(init_checkpoint)
    info = checkpoint_readers.read_model_info_file(info_file)
    vocabulary = resolve_vocabulary(
        vocab_file,
        init_checkpoint,
        do_lower_case,
        preserve_unused_tokens=preserve_unused_tokens,
        allow_vocab_mismatch=allow_vocab_mismatch,
        required=vocab_required,
        info=info,
    )
    if vocabulary.vocab is not None:
        check_vocab_fits_config(vocabulary.vocab, config)
    return ModelFiles(
        config,
        vocabulary.vocab_file,
        vocabulary.do_lower_case,
        preserve_unused_tokens=vocabulary.preserve_unused_tokens,
        causal_attention=resolve_causal_attention(init_checkpoint, info),
        checkpoint=checkpoint,
        info_file=info_file,
        info=info,
        vocab=vocabulary.vocab,
    )


def write_model_files(output_dir: str, files: ModelFiles, model_kind: str, **info) -> None:
    """Makes output_dir self-contained: bert_config.json (when the config was read,
    not inferred), vocab.txt and model_info.json with the kind, the case,
    preserve_unused_tokens, `info` (labels, max_seq_length, task settings...) and,
    for a left-to-right model, `causal_attention`."""
    tf.io.gfile.makedirs(output_dir)
    if files.config_is_complete:
        file_io.write_text(os.path.join(output_dir, CONFIG_FILE), files.config.to_json_string())
    else:
        logging.warning(
            "Not writing %s to %s: the TF Hub encoder's config was partly "
            "inferred, not read. Load the fine-tuned model with the same "
            "--hub_module_url.",
            CONFIG_FILE,
            output_dir,
        )
    vocab_copy = os.path.join(output_dir, VOCAB_FILE)
    vocab = None
    if files.vocab_file:  # As read when the model was resolved.
        vocab = files.vocab if files.vocab is not None else read_vocab(files.vocab_file)
    if vocab and os.path.abspath(vocab.path) != os.path.abspath(vocab_copy):
        with file_io.atomic_open(vocab_copy, "wb") as f:
            f.write(vocab.data)
    if vocab:  # The fingerprint checks a --vocab_file given with the model.
        info = dict(info, vocab_sha256=vocab.sha256, vocab_size=len(vocab.entries))
    if files.causal_attention:
        info = dict(info, causal_attention=True)
    file_io.write_json(
        os.path.join(output_dir, MODEL_INFO),
        dict(
            info,
            model_kind=model_kind,
            do_lower_case=files.do_lower_case,
            preserve_unused_tokens=files.preserve_unused_tokens,
        ),
    )
