"""The model a program starts from, from its flags: the model's files (config,
vocabulary, case, preserve_unused_tokens, the left-only constraint) from
--bert_config_file, --vocab_file, --do_lower_case, --preserve_unused_tokens or what sits
beside --init_checkpoint, checked against each other and --max_seq_length, and the
encoder they make (ours, or the TF Hub encoder of --hub_module_url).

The flags themselves are defined once in `runner_flags` (`define_model_flags`).
"""

from __future__ import annotations

import keras
import tensorflow as tf
from absl import logging

from common.errors import UserError
from modeling import checkpoint_readers, finetuning, kernels, model_files, model_kinds
from modeling.encoder import BertEncoder
import runner_settings
from runner_settings import given


def check_max_seq_length(max_seq_length: int, config) -> None:
    if max_seq_length > config.max_position_embeddings:
        raise UserError(
            f"--max_seq_length={max_seq_length} is larger than the model's "
            f"max_position_embeddings={config.max_position_embeddings}"
        )


def check_init_checkpoint(FLAGS) -> tuple[str, str] | None:
    """Fails before any work when --init_checkpoint cannot be read, or when it and
    --hub_module_url are both given. Returns the checkpoint's (format, path)
    (`checkpoint_readers.resolve_checkpoint`), None without one."""
    if given(FLAGS, "hub_module_url") and FLAGS.hub_module_url and FLAGS.init_checkpoint:
        raise UserError("Give --hub_module_url or --init_checkpoint, not both.")
    if not FLAGS.init_checkpoint:
        return None
    try:
        return checkpoint_readers.resolve_checkpoint(FLAGS.init_checkpoint)
    except (FileNotFoundError, ValueError) as e:
        raise type(e)(f"--init_checkpoint={FLAGS.init_checkpoint}: {e}") from None


def do_lower_case_flag(FLAGS) -> bool | None:
    """--do_lower_case when given, else None (the model's own setting)."""
    return FLAGS.do_lower_case if FLAGS["do_lower_case"].present else None


def preserve_unused_tokens_flag(FLAGS) -> bool | None:
    """--preserve_unused_tokens when given, else None (the model's own setting)."""
    return FLAGS.preserve_unused_tokens if given(FLAGS, "preserve_unused_tokens") else None


def resolve_model_files(
    FLAGS, vocab_required: bool = True, max_seq_length: int | None = None
) -> model_files.ModelFiles:
    """--bert_config_file, --vocab_file, --do_lower_case and --preserve_unused_tokens,
    or what sits beside --init_checkpoint, checked against each other and against
    `max_seq_length` (the command's --max_seq_length; None for a command without
    one): the model resolved once, the value the run passes on (its model_info.json
    and vocabulary read). The command says which length to check: whether the
    process's flags hold a --max_seq_length depends on which other commands' modules
    it imported."""
    checkpoint = check_init_checkpoint(FLAGS)
    files = model_files.resolve(
        FLAGS.bert_config_file,
        FLAGS.vocab_file,
        FLAGS.init_checkpoint,
        do_lower_case_flag(FLAGS),
        preserve_unused_tokens=preserve_unused_tokens_flag(FLAGS),
        allow_vocab_mismatch=FLAGS.allow_vocab_mismatch,
        vocab_required=vocab_required,
        checkpoint=checkpoint,
    )
    if max_seq_length is not None:
        check_max_seq_length(max_seq_length, files.config)
    return files


def resolve_vocabulary(FLAGS) -> model_files.Vocabulary:
    """--vocab_file (else the vocab.txt beside --init_checkpoint), its case and
    preserve_unused_tokens, for a command that builds no model (the preprocessing
    export), checked against the model's config where there is one (--bert_config_file
    or beside --init_checkpoint): a vocabulary larger than its vocab_size is refused."""
    vocabulary = model_files.resolve_vocabulary(
        FLAGS.vocab_file,
        FLAGS.init_checkpoint,
        do_lower_case_flag(FLAGS),
        preserve_unused_tokens=preserve_unused_tokens_flag(FLAGS),
        allow_vocab_mismatch=FLAGS.allow_vocab_mismatch,
    )
    config = model_files.resolve_config(FLAGS.bert_config_file, FLAGS.init_checkpoint, False)
    if config is not None:
        model_files.check_vocab_fits_config(vocabulary.vocab or vocabulary.vocab_file, config)
    return vocabulary


def hub_model_files(FLAGS, encoder) -> model_files.ModelFiles:
    """A TF Hub encoder's config, and its vocabulary and case unless given."""
    if FLAGS.bert_config_file:
        logging.warning(
            "--bert_config_file is ignored: the TF Hub encoder %s brings its own config.",
            FLAGS.hub_module_url,
        )
    vocab_file = FLAGS.vocab_file or encoder.vocab_file
    if FLAGS.vocab_file and encoder.vocab_file:
        model_files.check_vocab_matches_model(
            FLAGS.vocab_file,
            FLAGS.hub_module_url,
            FLAGS.allow_vocab_mismatch,
            own_vocab=encoder.vocab_file,
        )
    if vocab_file is None:
        raise UserError(
            f"--vocab_file is required: the TF Hub encoder "
            f"{FLAGS.hub_module_url} has no vocab_file asset"
        )
    stated = (
        None
        if encoder.do_lower_case is None
        else model_files.CaseStatement(
            encoder.do_lower_case, f"the TF Hub encoder {FLAGS.hub_module_url}"
        )
    )
    vocab = model_files.read_vocab(vocab_file)
    do_lower_case = model_files.resolve_case(do_lower_case_flag(FLAGS), None, vocab, stated)
    model_files.check_vocab_fits_config(vocab, encoder.config)
    check_max_seq_length(FLAGS.max_seq_length, encoder.config)
    return model_files.ModelFiles(
        encoder.config,
        vocab_file,
        do_lower_case,
        config_is_complete=encoder.config_is_complete,
        preserve_unused_tokens=bool(FLAGS.preserve_unused_tokens),
        causal_attention=encoder.causal_attention,
        vocab=vocab,
    )


def build_encoder(
    FLAGS, strategy: tf.distribute.Strategy
) -> tuple[keras.layers.Layer, model_files.ModelFiles]:
    """Our BertEncoder from the model's files (left-to-right when they say so), or the
    TF Hub encoder of --hub_module_url (whose config, vocabulary and case then make the
    files)."""
    if FLAGS.hub_module_url:
        check_init_checkpoint(FLAGS)
        from modeling import hub  # pylint: disable=g-import-not-at-top

        # With tensorflow_text's ops known, a task export or preprocessing model given
        # here loads and is named for what it is (`hub.load_module`).
        import tensorflow_text  # noqa: F401  pylint: disable=g-import-not-at-top

        with strategy.scope():
            encoder = hub.HubEncoder(FLAGS.hub_module_url)
        files = hub_model_files(FLAGS, encoder)
    else:
        files = resolve_model_files(FLAGS, max_seq_length=FLAGS.max_seq_length)
        dtype = FLAGS.dtype  # "auto" only where the runner's set-up did not resolve it
        if dtype == "auto":
            dtype = runner_settings.auto_dtype(strategy, kernels.resolve(FLAGS.kernels))
        with strategy.scope():
            encoder = BertEncoder(
                files.config,
                dtype=dtype,
                kernels=FLAGS.kernels,
                causal_attention=files.causal_attention,
            )
    if files.causal_attention:
        logging.info(
            "%s is a left-to-right model: the encoder keeps its left-only attention "
            "and pools the last real token.",
            FLAGS.hub_module_url or FLAGS.init_checkpoint,
        )
    return encoder, files


def bilstm_units(FLAGS, files: model_files.ModelFiles, kind: model_kinds.ModelKind) -> int:
    """--bilstm_units when given, else that of a fine-tuned --init_checkpoint of `kind`
    (from the model_info.json `files` read)."""
    if FLAGS["bilstm_units"].present or FLAGS.reinit_head or not FLAGS.init_checkpoint:
        return FLAGS.bilstm_units
    return finetuning.fine_tuned_bilstm_units(FLAGS.init_checkpoint, kind.name, files.info)
