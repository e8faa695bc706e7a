"""Exports BERT as TF Hub SavedModels: the encoder (optionally with its masked-LM head)
or the text preprocessing model.

  python export_tfhub.py --export_type=encoder --init_checkpoint=path/to/model \
      --export_path=out/bert_encoder
  python export_tfhub.py --export_type=encoder_with_mlm --init_checkpoint=... \
      --export_path=out/bert_encoder_mlm
  python export_tfhub.py --export_type=preprocessing --vocab_file=vocab.txt \
      --do_lower_case --seq_length=128 --export_path=out/bert_preprocess

--init_checkpoint is an original TF1 checkpoint, a Hugging Face directory or a TF2
checkpoint of this project; --bert_config_file and --vocab_file default to the files
beside it. The SavedModel is written to a hidden temporary folder beside --export_path
and renamed onto it when complete. An existing --export_path must be an empty folder or
a previous export (which --overwrite replaces); anything else is refused and left as it
is (serving/savedmodel.py).

Use the encoder with `hub.KerasLayer(path, trainable=True)` (tf_keras), `hub.load`, or
`modeling.hub.HubEncoder` in this project's Keras 3 models; the preprocessing model
after `import tensorflow_text`.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from data_prep import tokenization  # noqa: E402
from modeling import checkpoints  # noqa: E402
from modeling.config import BertConfig  # noqa: E402
from modeling.encoder import BertEncoder  # noqa: E402
from modeling.models import BertPretrainer  # noqa: E402
from serving import encoder as encoder_export  # noqa: E402
from serving import preprocessing, savedmodel  # noqa: E402

FLAGS = flags.FLAGS

EXPORT_TYPES = ("encoder", "encoder_with_mlm", "preprocessing")

flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model (default: "
                    "the one beside --init_checkpoint).")
flags.DEFINE_string("init_checkpoint", None, "Original TF1 checkpoint, Hugging Face "
                    "directory, or TF2 checkpoint of this project.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocabulary (default: vocab.txt beside "
                    "--init_checkpoint).")
flags.DEFINE_bool("do_lower_case", True, "Whether the model is uncased (lower-cases the "
                  "input).")
flags.DEFINE_string("export_path", None, "Destination folder of the SavedModel: new, "
                    "empty, or a previous export (with --overwrite).")
flags.DEFINE_bool("overwrite", False, "Replace a previous export at --export_path.")
flags.DEFINE_enum("export_type", "encoder", list(EXPORT_TYPES), "What to export.")
flags.DEFINE_integer("seq_length", 128, "Sequence length of the preprocessing model's "
                     "default call (bert_pack_inputs takes any).")


def build_encoder(config: BertConfig, init_checkpoint: str, with_mlm: bool):
    """A float32 encoder (and pre-trainer, for the MLM head) loaded from the checkpoint."""
    encoder = BertEncoder(config, dtype="float32")
    pretrainer = BertPretrainer(encoder, config) if with_mlm else None
    restored = checkpoints.restore_model(init_checkpoint,
                                         pretrainer if with_mlm else encoder)["restored"]
    if with_mlm and "masked_lm" not in restored:
        raise ValueError(f"--export_type=encoder_with_mlm: checkpoint {init_checkpoint} has "
                         f"no masked-LM head (cls/predictions); export --export_type=encoder")
    return encoder, pretrainer


def export_encoder(with_mlm: bool) -> str:
    if not FLAGS.init_checkpoint:
        raise app.UsageError("--init_checkpoint is required to export an encoder")
    config, vocab_file = checkpoints.resolve_config_and_vocab(
        FLAGS.bert_config_file, FLAGS.vocab_file, FLAGS.init_checkpoint)
    if vocab_file is None:
        raise app.UsageError("--vocab_file is required: the checkpoint directory has no "
                             "vocab.txt")
    tokenization.validate_case_matches_checkpoint(FLAGS.do_lower_case, FLAGS.init_checkpoint)
    encoder, pretrainer = build_encoder(config, FLAGS.init_checkpoint, with_mlm)
    masked_lm = pretrainer.masked_lm if pretrainer is not None else None
    return encoder_export.export_encoder(encoder, FLAGS.export_path, vocab_file,
                                         FLAGS.do_lower_case, masked_lm=masked_lm,
                                         overwrite=FLAGS.overwrite)


def export_preprocessing() -> str:
    vocab_file = FLAGS.vocab_file
    if vocab_file is None and FLAGS.init_checkpoint:
        directory = (FLAGS.init_checkpoint if os.path.isdir(FLAGS.init_checkpoint)
                     else os.path.dirname(FLAGS.init_checkpoint))
        candidate = os.path.join(directory, "vocab.txt")
        vocab_file = candidate if os.path.isfile(candidate) else None
    tokenization.validate_case_matches_checkpoint(FLAGS.do_lower_case, FLAGS.init_checkpoint)
    if vocab_file is None:
        raise app.UsageError("--vocab_file (or an --init_checkpoint folder with vocab.txt) "
                             "is required for --export_type=preprocessing")
    return preprocessing.export_preprocessing(FLAGS.export_path, vocab_file,
                                              FLAGS.do_lower_case, FLAGS.seq_length,
                                              overwrite=FLAGS.overwrite)


def main(_):
    try:  # Before any work: refuse a path holding the user's files.
        savedmodel.check_export_path(FLAGS.export_path, FLAGS.overwrite)
    except (ValueError, FileExistsError) as e:
        raise app.UsageError(f"--export_path={FLAGS.export_path}: {e}") from None
    if FLAGS.export_type == "preprocessing":
        path = export_preprocessing()
    else:
        path = export_encoder(with_mlm=FLAGS.export_type == "encoder_with_mlm")
    logging.info("Exported %s to %s", FLAGS.export_type, path)


if __name__ == "__main__":
    flags.mark_flags_as_required(["export_path"])
    app.run(main)
