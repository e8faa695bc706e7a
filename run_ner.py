"""Named-entity recognition on CoNLL files: fine-tuned or feature-based, scored as conlleval.

  python run_ner.py --data_dir=conll2003 --tag_scheme=auto \
      --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \
      --do_train --do_eval --do_predict --max_seq_length=128 \
      --train_batch_size=32 --learning_rate=5e-5 --num_train_epochs=3 \
      --output_dir=out/ner

--data_dir holds train.txt, dev.txt and test.txt (or give --train_file, --eval_file,
--predict_file). Files are CoNLL columns (`token ... TAG`, blank line between
sentences, -DOCSTART- lines skipped) in IOB1, IOB2 or IOBES (--tag_scheme=auto guesses
each file's scheme). A Hugging Face directory or the original release's checkpoint as
--init_checkpoint brings its config and vocab.txt.

Words are split into word pieces; the first piece of each word carries its label
(`data_prep.ner_features`). Sentences longer than --max_seq_length are cut into overlapping
windows every --doc_stride pieces and each word is predicted from the window that
gives it the most context, so every word of every sentence gets exactly one tag.

The label list ("O", then B-/I- of every entity type of the training file) is stored
with the training features (`train.tf_record.meta.json` in output_dir); later
runs on the same output_dir read it, and a tag outside it in an evaluation file is an
error naming the file and the line.

Outputs in output_dir:
  eval_results.txt      entity-level precision, recall and F1 overall and per type,
                        counted as the conlleval script does, plus eval_loss and
                        global_step (`key = value` lines);
  eval_report.txt       the conlleval report of the dev set, byte for byte;
  eval_predictions.txt  `token gold predicted` lines in the dev file's tag scheme,
                        a blank line between sentences: conlleval reads it;
  test_predictions.txt  the same for --predict_file.

Fine-tuning trains the encoder and a token-classification layer on its last layer.
--feature_based is the paper's feature-based approach (Section 5.3): the encoder is
frozen and a combination of its layers (--feature_layers, --feature_combination)
feeds a two-layer BiLSTM (--lstm_units each way) and a tag classifier; only those
are trained (a higher --learning_rate suits them, e.g. 1e-3).

--hub_module_url takes the encoder from a TF Hub BERT encoder SavedModel (e.g. one
written by export_tfhub.py; `modeling.hub`) instead of a checkpoint, with its own
config, vocabulary and do_lower_case. --export_dir exports the trained model as a
SavedModel that tags raw whitespace-separated text with the IOB2 tags --do_predict
gives (serving/ner.py). A run restarted with the same output_dir resumes where it
stopped.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from data_prep import conll, ner_features, records, tag_schemes, tokenization  # noqa: E402
from evaluation import conlleval  # noqa: E402
from modeling import checkpoints, feature_based, training  # noqa: E402
from modeling.config import BertConfig  # noqa: E402
from modeling.encoder import BertEncoder  # noqa: E402
from modeling.models import BertTokenClassifier  # noqa: E402
from modeling.tasks import TokenClassificationTask  # noqa: E402
import runner_flags  # noqa: E402
from runner_flags import initialize_from, train_schedule  # noqa: E402
from serving import tasks as export_lib  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("data_dir", None, "Folder with train.txt, dev.txt and test.txt.")
flags.DEFINE_string("train_file", None, "Training file (default: data_dir/train.txt).")
flags.DEFINE_string("eval_file", None, "Evaluation file (default: data_dir/dev.txt).")
flags.DEFINE_string("predict_file", None, "Prediction file (default: data_dir/test.txt).")
flags.DEFINE_enum("tag_scheme", "auto", ["auto", *tag_schemes.TAG_SCHEMES],
                  "Tag scheme of the files; auto guesses it for each file. Predictions "
                  "are written in the scheme of the file they are made for.")
flags.DEFINE_integer("doc_stride", 64, "Word pieces between the starts of the windows of "
                     "a sentence longer than max_seq_length - 2.")
flags.DEFINE_bool("do_train", False, "Run training.")
flags.DEFINE_bool("do_eval", False, "Evaluate on the eval file.")
flags.DEFINE_bool("do_predict", False, "Tag the predict file.")
flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.")
flags.DEFINE_integer("eval_batch_size", 8, "Global evaluation batch size.")
flags.DEFINE_integer("predict_batch_size", 8, "Global prediction batch size.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
flags.DEFINE_float("num_train_epochs", 3.0, "Training epochs (may be fractional).")
flags.DEFINE_float("warmup_proportion", 0.1, "Fraction of training with a linear "
                   "learning-rate warmup.")
flags.DEFINE_bool("feature_based", False, "Freeze the encoder and train a BiLSTM tagger "
                  "on its layers (the paper's feature-based approach).")
flags.DEFINE_string("feature_layers", "-1,-2,-3,-4", "--feature_based: encoder layers "
                    "used as features, comma-separated (-1 is the last), or 'all'.")
flags.DEFINE_enum("feature_combination", None, list(feature_based.COMBINATIONS),
                  "--feature_based: how the layers are combined (default: concat, or "
                  "weighted_sum for --feature_layers=all).")
flags.DEFINE_integer("lstm_units", 256, "--feature_based: units of each LSTM direction "
                     "(the paper uses 768).")
flags.DEFINE_integer("shuffle_buffer_size", 10000, "Training windows in the shuffle buffer "
                     "(at most the training set).")
flags.DEFINE_string("hub_module_url", None, "A TF Hub BERT encoder (SavedModel "
                    "directory) to use instead of --init_checkpoint.")
flags.DEFINE_string("export_dir", None, "Export the trained model here.")
runner_flags.define_common_flags(max_seq_length=128)
runner_flags.define_training_flags()

EVAL_RESULTS = "eval_results.txt"
EVAL_REPORT = "eval_report.txt"
PREDICTION_FILES = {"eval": "eval_predictions.txt", "predict": "test_predictions.txt"}
DEFAULT_FILES = {"train": "train.txt", "eval": "dev.txt", "predict": "test.txt"}
TRAIN_RECORD = "train.tf_record"


# ----------------------------------------------------------------------------
# Data.
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class Split:
    """One input file, read and converted to features.

    Attributes:
        name: "train", "eval" or "predict".
        path: the CoNLL file.
        tag_scheme: its tag scheme (predictions are written in it).
        sentences: its sentences (IOB2 tags).
        features: their windows, in sentence order.
    """
    name: str
    path: str
    tag_scheme: str
    sentences: list[conll.Sentence]
    features: list[ner_features.InputFeatures]


def input_file(split: str, explicit: str | None, data_dir: str | None) -> str:
    """The file of a split: the explicit flag, else data_dir/<train|dev|test>.txt."""
    path = explicit or (os.path.join(data_dir, DEFAULT_FILES[split]) if data_dir else None)
    if path is None:
        raise app.UsageError(f"--do_{split} needs --{split}_file or --data_dir")
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{split} file {path} does not exist")
    return path


def read_split(name: str, path: str, tag_scheme: str) -> tuple[str, list]:
    """(scheme, sentences) of a file; tag_scheme "auto" guesses the file's scheme."""
    if tag_scheme == "auto":
        tag_scheme = conll.detect_file_tag_scheme(path)
        logging.info("%s file %s: tag scheme %s", name, path, tag_scheme)
    return tag_scheme, conll.read_conll(path, tag_scheme=tag_scheme)


def prepare_split(name: str, path: str, tag_scheme: str, labels: list[str] | None,
                  tokenizer: tokenization.FullTokenizer, max_seq_length: int,
                  doc_stride: int) -> Split:
    """Reads a file and converts it to features; labels=None takes the file's own
    (training)."""
    scheme, sentences = read_split(name, path, tag_scheme)
    if labels is None:
        labels = conll.label_list(sentences)
    features = ner_features.convert_sentences_to_features(sentences, labels, tokenizer,
                                                          max_seq_length, doc_stride)
    logging.info("%s: %d sentences, %d words, %d windows", path, len(sentences),
                 sum(len(s.words) for s in sentences), len(features))
    return Split(name, path, scheme, sentences, features)


def write_training_features(split: Split, labels: list[str], output_dir: str,
                            tokenizer: tokenization.FullTokenizer, max_seq_length: int,
                            doc_stride: int) -> ner_features.NerMetadata:
    """Writes train.tf_record and its metadata JSON (with the label list)."""
    record = os.path.join(output_dir, TRAIN_RECORD)
    ner_features.write_tfrecord(split.features, record)
    metadata = ner_features.NerMetadata.describe(
        split.sentences, split.features, labels, split.tag_scheme, max_seq_length,
        doc_stride, tokenizer.do_lower_case, len(tokenizer.vocab))
    metadata.write(record)
    return metadata


def read_training_labels(output_dir: str) -> list[str]:
    """The label list of an earlier training run in output_dir."""
    record = os.path.join(output_dir, TRAIN_RECORD)
    if not tf.io.gfile.exists(records.metadata_path(record)):
        raise FileNotFoundError(
            f"{records.metadata_path(record)} does not exist: the label list comes from "
            "the training file. Run with --do_train first (or together), in the same "
            "--output_dir.")
    return list(ner_features.NerMetadata.read(record).labels)


# ----------------------------------------------------------------------------
# Model.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelFiles:
    """The model's config and the tokenizer settings that go with it."""
    config: BertConfig
    vocab_file: str
    do_lower_case: bool


def resolve_model_files() -> ModelFiles:
    """--bert_config_file / --vocab_file, or those beside --init_checkpoint."""
    config, vocab_file = checkpoints.resolve_config_and_vocab(
        FLAGS.bert_config_file, FLAGS.vocab_file, FLAGS.init_checkpoint)
    if vocab_file is None:
        raise ValueError("--vocab_file is required: the checkpoint directory has no "
                         "vocab.txt")
    return ModelFiles(config, vocab_file, FLAGS.do_lower_case)


def hub_model_files(encoder, hub_module_url: str) -> ModelFiles:
    """The TF Hub encoder's config; its vocabulary and do_lower_case unless given."""
    if FLAGS.bert_config_file:
        logging.warning("--bert_config_file is ignored: the TF Hub encoder %s brings its "
                        "own config.", hub_module_url)
    vocab_file = FLAGS.vocab_file or encoder.vocab_file
    if vocab_file is None:
        raise ValueError(f"--vocab_file is required: the TF Hub encoder {hub_module_url} "
                         "has no vocab_file asset")
    do_lower_case = FLAGS.do_lower_case
    if not FLAGS["do_lower_case"].present and encoder.do_lower_case is not None:
        do_lower_case = encoder.do_lower_case
    return ModelFiles(encoder.config, vocab_file, do_lower_case)


def build_encoder(strategy: tf.distribute.Strategy, dtype: str,
                  hub_module_url: str | None) -> tuple[keras.Layer, ModelFiles]:
    """Our BertEncoder, or a TF Hub encoder (`modeling.hub`) with the same dict
    contract, whose config, vocabulary and do_lower_case then make the ModelFiles."""
    files = None if hub_module_url else resolve_model_files()
    with strategy.scope():
        if hub_module_url:
            from modeling import hub  # pylint: disable=g-import-not-at-top
            encoder = hub.HubEncoder(hub_module_url)
            files = hub_model_files(encoder, hub_module_url)
        else:
            encoder = BertEncoder(files.config, dtype=dtype)
    runner_flags.check_max_seq_length(FLAGS.max_seq_length, files.config)
    return encoder, files


@dataclasses.dataclass(frozen=True)
class FeatureBasedOptions:
    """--feature_based settings: layer spec ("all" or "-1,-2,..."), combination
    (None: the default of the spec) and LSTM units per direction."""
    layers: str
    combination: str | None
    lstm_units: int

    def resolved_combination(self) -> str:
        if self.combination:
            return self.combination
        return "weighted_sum" if self.layers.strip() == "all" else "concat"


def build_model(strategy: tf.distribute.Strategy, encoder, config: BertConfig,
                num_labels: int, feature_options: FeatureBasedOptions | None = None
                ) -> keras.Model:
    """BertTokenClassifier (fine-tuning) or, with feature_options, the frozen-encoder
    BiLSTM tagger of `modeling.feature_based`."""
    with strategy.scope():
        if feature_options is None:
            return BertTokenClassifier(encoder, config, num_labels)
        layers = feature_based.parse_feature_layers(feature_options.layers,
                                                    config.num_hidden_layers)
        return feature_based.BertFeatureBasedTagger(
            encoder, config, num_labels, layers, feature_options.resolved_combination(),
            lstm_units=feature_options.lstm_units)


# ----------------------------------------------------------------------------
# Train, evaluate, predict.
# ----------------------------------------------------------------------------


def train(trainer: training.Trainer, record: str, metadata: ner_features.NerMetadata,
          batch_size: int, seed: int, shuffle_buffer_size: int) -> bool:
    """Trains to num_train_steps; returns whether training is complete (False: stopped
    early by SIGTERM, checkpointed)."""
    def dataset_fn(context=None):
        return ner_features.build_dataset(record, metadata, batch_size, True, seed=seed,
                                          shuffle_buffer_size=shuffle_buffer_size,
                                          input_context=context)
    summary = trainer.train(dataset_fn, batch_size)
    return summary["global_step"] >= trainer.num_train_steps


def predict_tags(trainer: training.Trainer, split: Split, labels: list[str],
                 batch_size: int) -> list[list[str]]:
    """One predicted IOB2 tag per word of every sentence of the split."""
    outputs = trainer.predict(
        ner_features.inference_dataset(split.features, batch_size),
        lambda features, outputs: {
            "label_ids": tf.argmax(outputs["logits"], axis=-1, output_type=tf.int32),
            "unique_ids": features["unique_ids"]})
    order = np.argsort(outputs["unique_ids"], kind="stable")
    if not np.array_equal(outputs["unique_ids"][order], np.arange(len(split.features))):
        raise RuntimeError(f"{split.path}: predictions do not cover every window once")
    return ner_features.predictions_to_tags(outputs["label_ids"][order], split.features,
                                            split.sentences, labels)


def write_predictions(split: Split, tags: list[list[str]], output_dir: str) -> str:
    """Writes `<eval|test>_predictions.txt` in the split's tag scheme; returns its path."""
    path = os.path.join(output_dir, PREDICTION_FILES[split.name])
    conll.write_predictions(path, split.sentences, tags, tag_scheme=split.tag_scheme)
    logging.info("Wrote the predictions of %s to %s", split.path, path)
    return path


def evaluate(trainer: training.Trainer, split: Split, labels: list[str],
             batch_size: int, output_dir: str) -> dict:
    """Tags the eval file, writes its predictions, and scores that file as conlleval.

    Writes eval_predictions.txt, eval_report.txt (the conlleval report) and
    eval_results.txt (`conlleval.eval_results` keys, eval_loss, global_step).
    """
    path = write_predictions(split, predict_tags(trainer, split, labels, batch_size),
                             output_dir)
    counts = conlleval.evaluate_file(path)
    report = counts.report()
    records.write_text(os.path.join(output_dir, EVAL_REPORT), report)
    loss = trainer.evaluate(ner_features.inference_dataset(split.features, batch_size))
    extra = {"eval_loss": loss["eval_loss"], "global_step": loss["global_step"]}
    conlleval.write_eval_results(os.path.join(output_dir, EVAL_RESULTS), counts, extra)
    logging.info("conlleval on %s:\n%s", path, report)
    return {**conlleval.eval_results(counts), **extra}


def predict(trainer: training.Trainer, split: Split, labels: list[str], batch_size: int,
            output_dir: str) -> None:
    """Tags the predict file and writes test_predictions.txt (its gold tags beside)."""
    path = write_predictions(split, predict_tags(trainer, split, labels, batch_size),
                             output_dir)
    logging.info("conlleval on %s:\n%s", path, conlleval.evaluate_file(path).report())


EXPORT_KIND = "ner"


def check_export(export_dir: str) -> None:
    """Fails before training if the model cannot be exported to export_dir."""
    if EXPORT_KIND not in export_lib.TASK_SIGNATURE_BUILDERS:
        raise NotImplementedError(
            f"--export_dir={export_dir}: serving/tasks.py has no {EXPORT_KIND} (token "
            f"classification) export; only "
            f"{sorted(export_lib.TASK_SIGNATURE_BUILDERS)} task exports exist.")
    try:
        export_lib.check_export_path(export_dir)
    except (ValueError, FileExistsError) as e:
        raise type(e)(f"--export_dir={export_dir}: {e}") from None


def export(model, export_dir: str, files: ModelFiles, max_seq_length: int,
           labels: list[str]) -> None:
    """A SavedModel that tags raw text as --do_predict does: `serving_default(text)`
    -> `words`, `tags` (IOB2), with this run's --doc_stride windows
    (serving/ner.py `ner_signatures`)."""
    check_export(export_dir)
    path = export_lib.export_task_model(model, export_dir, files.vocab_file,
                                        files.do_lower_case, max_seq_length,
                                        kind=EXPORT_KIND, labels=labels,
                                        doc_stride=FLAGS.doc_stride)
    logging.info("Exported the model to %s", path)


# ----------------------------------------------------------------------------
# main.
# ----------------------------------------------------------------------------


def check_flags() -> FeatureBasedOptions | None:
    """Fails early on flags that cannot work; returns the feature-based options."""
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
        raise app.UsageError("At least one of --do_train, --do_eval or --do_predict must "
                             "be set.")
    if FLAGS.export_dir:
        check_export(FLAGS.export_dir)
    if not FLAGS.feature_based:
        return None
    return FeatureBasedOptions(FLAGS.feature_layers, FLAGS.feature_combination,
                               FLAGS.lstm_units)


def main(_):
    feature_options = check_flags()
    strategy = runner_flags.setup(FLAGS)
    encoder, files = build_encoder(strategy, FLAGS.dtype, FLAGS.hub_module_url)
    tokenizer = tokenization.FullTokenizer(files.vocab_file, files.do_lower_case)

    def prepare(name, explicit, labels):
        return prepare_split(name, input_file(name, explicit, FLAGS.data_dir),
                             FLAGS.tag_scheme, labels, tokenizer, FLAGS.max_seq_length,
                             FLAGS.doc_stride)

    train_split = prepare("train", FLAGS.train_file, None) if FLAGS.do_train else None
    labels = (conll.label_list(train_split.sentences) if train_split
              else read_training_labels(FLAGS.output_dir))
    eval_split = prepare("eval", FLAGS.eval_file, labels) if FLAGS.do_eval else None
    predict_split = (prepare("predict", FLAGS.predict_file, labels) if FLAGS.do_predict
                     else None)
    num_train_steps, num_warmup_steps, train_metadata = 0, 0, None
    if train_split:
        train_metadata = write_training_features(train_split, labels, FLAGS.output_dir,
                                                 tokenizer, FLAGS.max_seq_length,
                                                 FLAGS.doc_stride)
        num_train_steps, num_warmup_steps = train_schedule(
            len(train_split.features), FLAGS.train_batch_size, FLAGS.num_train_epochs,
            FLAGS.warmup_proportion)

    # The head's initial weights depend on --seed alone, not on the random draws of
    # building the encoder: a TF Hub encoder and a checkpoint of the same weights
    # fine-tune to the same model.
    keras.utils.set_random_seed(FLAGS.seed)
    model = build_model(strategy, encoder, files.config, len(labels), feature_options)
    trainer = runner_flags.make_trainer(FLAGS, strategy, model, TokenClassificationTask(),
                                        FLAGS.learning_rate, num_train_steps,
                                        num_warmup_steps)
    runner_flags.write_resolved_config(FLAGS, files.config, extra=dict(
        resolved_vocab_file=files.vocab_file, resolved_do_lower_case=files.do_lower_case,
        labels=labels, num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps))
    trainer.restore_or_initialize(
        lambda: initialize_from(model, FLAGS.init_checkpoint, FLAGS.hub_module_url))

    if FLAGS.do_train and not train(
            trainer, os.path.join(FLAGS.output_dir, TRAIN_RECORD), train_metadata,
            FLAGS.train_batch_size, FLAGS.seed, FLAGS.shuffle_buffer_size):
        logging.warning("Training stopped early; run again to resume it.")
        return
    if FLAGS.do_eval:
        evaluate(trainer, eval_split, labels, FLAGS.eval_batch_size, FLAGS.output_dir)
    if FLAGS.do_predict:
        predict(trainer, predict_split, labels, FLAGS.predict_batch_size, FLAGS.output_dir)
    if FLAGS.export_dir:
        export(model, FLAGS.export_dir, files, FLAGS.max_seq_length, labels)


if __name__ == "__main__":
    flags.mark_flags_as_required(["output_dir"])
    app.run(main)
