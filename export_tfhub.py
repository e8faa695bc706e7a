"""Exports BERT as TF Hub SavedModels: the encoder (optionally with its masked-LM head)
or the text preprocessing model.

  python export_tfhub.py --export_type=encoder --init_checkpoint=path/to/model \
      --export_path=out/bert_encoder
  python export_tfhub.py --export_type=encoder_with_mlm --init_checkpoint=... \
      --export_path=out/bert_encoder_mlm
  python export_tfhub.py --export_type=preprocessing --vocab_file=vocab.txt \
      --do_lower_case --seq_length=128 --export_path=out/bert_preprocess

The preprocessing model of a model trained with --preserve_unused_tokens keeps its
[unusedN] words whole too (the setting comes from the model's model_info.json, or the
flag).

--init_checkpoint is an original TF1 checkpoint, a Hugging Face directory or a TF2
checkpoint of this project; --bert_config_file and --vocab_file default to the files
beside it. The SavedModel is written to a hidden temporary folder beside --export_path
and renamed onto it when complete. An existing --export_path must be an empty folder or
a previous export (which --overwrite replaces); anything else is refused and left as it
is (serving/savedmodel.py).

A left-to-right model (run_pretraining.py --objective=ltr) exports with its left-only
attention (the SavedModel's `causal_attention` variable says so); its `mlm` logits at a
position are the prediction of the next token.

Use the encoder with `hub.KerasLayer(path, trainable=True)` (tf_keras), `hub.load`, or
`modeling.hub.HubEncoder` in this project's Keras 3 models; the preprocessing model
after `import tensorflow_text`.
"""

from __future__ import annotations

import time

import common.quiet_tensorflow  # noqa: F401  (first: TensorFlow's start-up lines hidden)

import keras
from absl import app, flags

from common import cli as command_line
from common.errors import UserError
import model_flags
import runner_flags
import runner_settings
from common import run_control
from modeling import checkpoints
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.models import BertPretrainer
from serving import encoder as encoder_export
from serving import preprocessing, savedmodel

FLAGS = flags.FLAGS

EXPORT_TYPES = ("encoder", "encoder_with_mlm", "preprocessing")

runner_flags.define_model_flags(max_seq_length=None)
flags.DEFINE_string(
    "export_path",
    None,
    "Destination folder of the SavedModel: new, empty, or a previous export (with --overwrite).",
)
runner_flags.define_overwrite_flag("Replace a previous export at --export_path.")
flags.DEFINE_enum("export_type", "encoder", list(EXPORT_TYPES), "What to export.")
flags.DEFINE_integer(
    "seq_length",
    128,
    "Sequence length of the preprocessing model's default call (bert_pack_inputs takes any).",
)


def build_encoder(
    config: BertConfig, init_checkpoint: str, with_mlm: bool, causal_attention: bool = False
):
    """A float32 encoder (and pre-trainer, for the MLM head) loaded from the checkpoint;
    left-to-right (`causal_attention`) when the model's files say so."""
    encoder = BertEncoder(config, dtype="float32", causal_attention=causal_attention)
    objective = "ltr" if causal_attention else "mlm"
    pretrainer = BertPretrainer(encoder, config, objective) if with_mlm else None
    restored = checkpoints.restore_model(init_checkpoint, pretrainer if with_mlm else encoder)[
        "restored"
    ]
    if with_mlm and "masked_lm" not in restored:
        raise UserError(
            f"--export_type=encoder_with_mlm: checkpoint {init_checkpoint} has "
            f"no masked-LM head (cls/predictions); export --export_type=encoder"
        )
    return encoder, pretrainer


def export_encoder(with_mlm: bool) -> str:
    if not FLAGS.init_checkpoint:
        raise app.UsageError("--init_checkpoint is required to export an encoder")
    files = model_flags.resolve_model_files(FLAGS)
    encoder, pretrainer = build_encoder(
        files.config, FLAGS.init_checkpoint, with_mlm, files.causal_attention
    )
    masked_lm = pretrainer.masked_lm if pretrainer is not None else None
    return encoder_export.export_encoder(
        encoder,
        FLAGS.export_path,
        files.vocab_file,
        files.do_lower_case,
        masked_lm=masked_lm,
        overwrite=FLAGS.overwrite,
    )


def export_preprocessing() -> str:
    vocabulary = model_flags.resolve_vocabulary(FLAGS)
    return preprocessing.export_preprocessing(
        FLAGS.export_path,
        vocabulary.vocab if vocabulary.vocab is not None else vocabulary.vocab_file,
        vocabulary.do_lower_case,
        FLAGS.seq_length,
        overwrite=FLAGS.overwrite,
        preserve_unused_tokens=vocabulary.preserve_unused_tokens,
    )


def main(_):
    try:  # Before any work: refuse a path holding the user's files.
        savedmodel.check_export_path(FLAGS.export_path, FLAGS.overwrite)
    except (ValueError, FileExistsError) as e:
        raise app.UsageError(f"--export_path={FLAGS.export_path}: {e}") from None
    run_control.hold_file(FLAGS.export_path, f"--export_path={FLAGS.export_path}")
    run_control.exit_on_sigterm("export_tfhub")
    # The dropout layers' seed state is saved with the model: a fixed seed makes the
    # same command write the same export, byte for byte (saved_model.pb aside).
    keras.utils.set_random_seed(0)
    terminal, start = runner_settings.terminal(), time.monotonic()
    terminal.say(f"Exporting {FLAGS.export_type}: building, tracing and writing the SavedModel")
    if FLAGS.export_type == "preprocessing":
        path = export_preprocessing()
    else:
        path = export_encoder(with_mlm=FLAGS.export_type == "encoder_with_mlm")
    terminal.say(f"Exported {FLAGS.export_type} to {path} in {time.monotonic() - start:.0f} s")


def cli():
    flags.mark_flags_as_required(["export_path"])
    command_line.run(main)


if __name__ == "__main__":
    cli()
