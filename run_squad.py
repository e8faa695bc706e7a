"""Fine-tuning and prediction on SQuAD v1.1 and v2.0, scored by the official rules.

  python run_squad.py --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \
      --bert_config_file=uncased_L-12_H-768_A-12/bert_config.json \
      --vocab_file=uncased_L-12_H-768_A-12/vocab.txt \
      --do_train --train_file=train-v2.0.json \
      --do_predict --predict_file=dev-v2.0.json --do_eval \
      --version_2_with_negative --max_seq_length=384 --doc_stride=128 \
      --train_batch_size=32 --learning_rate=3e-5 --num_train_epochs=2 \
      --output_dir=out/squad2

A Hugging Face directory as --init_checkpoint brings its config.json and vocab.txt.

Training: the questions are read (a training answer whose text cannot be found at
its offset is skipped and counted, as in the original), shuffled, cut into windows
of the context and written to output_dir/train.tf_record (with a metadata JSON; a
rerun with the same inputs and settings reuses it). The number of training steps
is features / batch size x epochs: a long context gives several windows, each a
training example. A run restarted with the same output_dir resumes where it stopped.

Prediction writes the original release's predictions.json, nbest_predictions.json
and (v2.0) null_odds.json. --do_eval scores predictions.json (and null_odds.json)
against --predict_file as the official evaluate-v1.1.py / evaluate-v2.0.py (with
--na-prob-file null_odds.json) do and writes eval_results.txt; on its own (without
--do_predict) it scores the prediction files already in output_dir.
For v2.0, rerun --do_predict with --null_score_diff_threshold=<best_f1_thresh>
to predict with the best threshold, as the original README advises.

--export_dir exports the fine-tuned model as a SavedModel that answers raw questions
on raw contexts with the answers --do_predict gives (serving/squad.py).
"""

from __future__ import annotations

import dataclasses
import os
import sys

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from data_prep import records, squad_features, squad_postprocess, squad_reader  # noqa: E402
from data_prep import squad_records, tokenization  # noqa: E402
from evaluation import squad_eval  # noqa: E402
from modeling import checkpoints, training  # noqa: E402
from modeling.config import BertConfig  # noqa: E402
from modeling.encoder import BertEncoder  # noqa: E402
from modeling.models import BertSpanLabeler  # noqa: E402
from modeling.tasks import SpanTask  # noqa: E402
import runner_flags  # noqa: E402
from runner_flags import initialize_from, train_schedule  # noqa: E402
from serving import tasks as export_lib  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("train_file", None, "SQuAD JSON for training, e.g. train-v1.1.json.")
flags.DEFINE_string("predict_file", None, "SQuAD JSON to predict (and, with --do_eval, the "
                    "gold answers), e.g. dev-v1.1.json.")
flags.DEFINE_bool("version_2_with_negative", False, "SQuAD 2.0: questions may have no "
                  "answer.")
flags.DEFINE_integer("doc_stride", 128, "Word pieces between the starts of consecutive "
                     "windows of a long context.")
flags.DEFINE_integer("max_query_length", 64, "Questions are cut to this many word pieces.")
flags.DEFINE_integer("n_best_size", 20, "Start and end positions considered per window, "
                     "and answers kept per question in nbest_predictions.json.")
flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in word pieces.")
flags.DEFINE_float("null_score_diff_threshold", 0.0, "v2.0: predict no answer when the "
                   "null score exceeds the best span's score by more than this.")
flags.DEFINE_bool("do_train", False, "Fine-tune on --train_file.")
flags.DEFINE_bool("do_predict", False, "Predict --predict_file.")
flags.DEFINE_bool("do_eval", False, "Score the predictions against --predict_file by the "
                  "official rules; writes eval_results.txt.")
flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.")
flags.DEFINE_integer("predict_batch_size", 8, "Global prediction batch size.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
flags.DEFINE_float("num_train_epochs", 3.0, "Training epochs over the features (may be "
                   "fractional).")
flags.DEFINE_float("warmup_proportion", 0.1, "Fraction of training with a linear "
                   "learning-rate warmup.")
flags.DEFINE_integer("shuffle_buffer_size", 10000, "Training features in the shuffle "
                     "buffer (the questions are also shuffled before windowing).")
flags.DEFINE_string("hub_module_url", None, "A TF Hub BERT encoder (SavedModel directory) "
                    "to fine-tune instead of --init_checkpoint; its vocabulary, "
                    "do_lower_case and config are used unless given.")
flags.DEFINE_string("export_dir", None, "Export the fine-tuned model here.")
runner_flags.define_common_flags(max_seq_length=384)
runner_flags.define_training_flags()

TRAIN_RECORD = "train.tf_record"
PREDICT_RECORD = "eval.tf_record"
PREDICTIONS = "predictions.json"
NBEST_PREDICTIONS = "nbest_predictions.json"
NULL_ODDS = "null_odds.json"
EVAL_RESULTS = "eval_results.txt"


# ----------------------------------------------------------------------------
# Model.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelFiles:
    """The model's config and the tokenizer settings that go with it."""
    config: BertConfig
    vocab_file: str
    do_lower_case: bool


def build_model(strategy: tf.distribute.Strategy, files: ModelFiles | None,
                dtype: str, hub_module_url: str | None = None, seed: int | None = None
                ) -> tuple[BertSpanLabeler, ModelFiles]:
    """BertSpanLabeler on our encoder (from `files.config`) or on a TF Hub encoder.

    With a TF Hub encoder, `files` is None and comes from the encoder: its config,
    and its vocabulary and do_lower_case where --vocab_file and --do_lower_case are
    not given.
    """
    with strategy.scope():
        if hub_module_url:
            from modeling import hub  # pylint: disable=g-import-not-at-top
            encoder = hub.HubEncoder(hub_module_url)
            files = hub_model_files(encoder, hub_module_url)
        else:
            encoder = BertEncoder(files.config, dtype=dtype)
        if seed is not None:
            # The head's initial weights depend on the seed alone, not on the random
            # draws of building the encoder: a TF Hub encoder and a checkpoint of the same
            # weights fine-tune to the same model.
            keras.utils.set_random_seed(seed)
        return BertSpanLabeler(encoder, files.config), files


def resolve_model_files() -> ModelFiles:
    """--bert_config_file / --vocab_file, or those beside --init_checkpoint."""
    config, vocab_file = checkpoints.resolve_config_and_vocab(
        FLAGS.bert_config_file, FLAGS.vocab_file, FLAGS.init_checkpoint)
    if vocab_file is None:
        raise ValueError("--vocab_file is required: the checkpoint directory has no "
                         "vocab.txt")
    runner_flags.check_max_seq_length(FLAGS.max_seq_length, config)
    return ModelFiles(config, vocab_file, FLAGS.do_lower_case)


def hub_model_files(encoder, hub_module_url: str) -> ModelFiles:
    """The TF Hub encoder's config; its vocabulary and do_lower_case unless given."""
    config = encoder.config
    if FLAGS.bert_config_file:
        logging.warning("--bert_config_file is ignored: the TF Hub encoder %s brings its "
                        "own config.", hub_module_url)
    vocab_file = FLAGS.vocab_file or encoder.vocab_file
    if vocab_file is None:
        raise ValueError(f"--vocab_file is required: the TF Hub encoder {hub_module_url} "
                         f"has no vocab_file asset")
    do_lower_case = FLAGS.do_lower_case
    if not FLAGS["do_lower_case"].present and encoder.do_lower_case is not None:
        do_lower_case = encoder.do_lower_case
    runner_flags.check_max_seq_length(FLAGS.max_seq_length, config)
    return ModelFiles(config, vocab_file, do_lower_case)


# ----------------------------------------------------------------------------
# Train, predict, evaluate, export.
# ----------------------------------------------------------------------------


def train(trainer: training.Trainer, data: squad_records.TrainData, batch_size: int,
          seed: int, shuffle_buffer_size: int) -> dict:
    def dataset_fn(context=None):
        return squad_records.build_dataset(data.file, data.metadata, batch_size, True,
                                           seed=seed, shuffle_buffer_size=shuffle_buffer_size,
                                           input_context=context)
    return trainer.train(dataset_fn, batch_size)


def _span_outputs(features: dict, outputs: dict) -> dict:
    """Trainer.predict output_fn: unique_ids int [B], start/end_logits float32 [B, S]."""
    return {"unique_ids": features["unique_ids"],
            "start_logits": tf.cast(outputs["start_logits"], tf.float32),
            "end_logits": tf.cast(outputs["end_logits"], tf.float32)}


def predict_logits(trainer: training.Trainer, data: squad_records.PredictData,
                   batch_size: int) -> list[squad_postprocess.RawResult]:
    """The model's start and end logits of every feature."""
    dataset = squad_records.build_dataset(data.file, data.metadata, batch_size,
                                          is_training=False)
    outputs = trainer.predict(dataset, _span_outputs)
    if len(outputs.get("unique_ids", [])) != len(data.features):
        raise RuntimeError(f"predicted {len(outputs.get('unique_ids', []))} of "
                           f"{len(data.features)} features of {data.file}")
    return [squad_postprocess.RawResult(int(uid), start, end) for uid, start, end in zip(
        outputs["unique_ids"], outputs["start_logits"], outputs["end_logits"])]


def write_predictions(data: squad_records.PredictData,
                      results: list[squad_postprocess.RawResult], output_dir: str,
                      do_lower_case: bool) -> squad_postprocess.SquadPredictions:
    """predictions.json, nbest_predictions.json and, for v2.0, null_odds.json."""
    predictions = squad_postprocess.compute_predictions(
        data.examples, data.features, results, n_best_size=FLAGS.n_best_size,
        max_answer_length=FLAGS.max_answer_length, do_lower_case=do_lower_case,
        version_2_with_negative=FLAGS.version_2_with_negative,
        null_score_diff_threshold=FLAGS.null_score_diff_threshold)
    squad_postprocess.write_predictions(
        predictions, os.path.join(output_dir, PREDICTIONS),
        os.path.join(output_dir, NBEST_PREDICTIONS),
        os.path.join(output_dir, NULL_ODDS) if FLAGS.version_2_with_negative else None)
    return predictions


def evaluate(gold_file: str, output_dir: str, version_2_with_negative: bool) -> dict:
    """Scores output_dir's predictions.json (+ null_odds.json) by the official rules.

    As `evaluate-v1.1.py` (exact_match, f1) or `evaluate-v2.0.py --na-prob-file
    null_odds.json` (exact, f1, HasAns_*, NoAns_*, best_exact, best_f1 and their
    thresholds); written to output_dir/eval_results.txt.
    """
    predictions = records.read_json(os.path.join(output_dir, PREDICTIONS))
    null_odds = None
    null_odds_file = os.path.join(output_dir, NULL_ODDS)
    if version_2_with_negative and os.path.isfile(null_odds_file):
        null_odds = records.read_json(null_odds_file)
    results = squad_eval.evaluate_file(gold_file, predictions, null_odds,
                                       version_2_with_negative)
    path = os.path.join(output_dir, EVAL_RESULTS)
    records.write_results(path, results)
    logging.info("Eval results (%s):\n%s", path, "".join(
        f"  {key} = {results[key]}\n" for key in sorted(results)))
    return results


def check_gold_file(gold_file: str, version_2_with_negative: bool) -> None:
    """Fails early (not after training) if the gold file cannot be scored as asked."""
    dataset = squad_reader.read_squad_json(gold_file)
    if not version_2_with_negative and squad_eval.is_version_2(dataset):
        raise ValueError(f"{gold_file} is SQuAD 2.0 (it has unanswerable questions or "
                         f"says version 2): set --version_2_with_negative")


def check_export(export_dir: str) -> None:
    """Fails before training where --export_dir cannot be written."""
    try:
        export_lib.check_export_path(export_dir)
    except (ValueError, FileExistsError) as e:
        raise type(e)(f"--export_dir={export_dir}: {e}") from None


def export(model, export_dir: str, files: ModelFiles, max_seq_length: int) -> None:
    """A SavedModel that answers raw questions on raw contexts as --do_predict does.

    `serving_default(question, context)` -> answer, score, null_score, start_logits,
    end_logits (serving/squad.py `squad_signatures`), with this run's
    --max_query_length, --doc_stride, --max_answer_length and --n_best_size. For
    v2.0, the answer is "" where null_score - score > --null_score_diff_threshold.
    """
    check_export(export_dir)
    path = export_lib.export_task_model(
        model, export_dir, files.vocab_file, files.do_lower_case, max_seq_length,
        kind="squad", max_query_length=FLAGS.max_query_length,
        max_answer_length=FLAGS.max_answer_length, n_best_size=FLAGS.n_best_size,
        doc_stride=FLAGS.doc_stride)
    logging.info("Exported the model to %s", path)


# ----------------------------------------------------------------------------
# main.
# ----------------------------------------------------------------------------


def _require_file(path: str | None, flag: str, needed_by: str) -> None:
    if not path:
        raise app.UsageError(f"{needed_by} needs --{flag}.")
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"--{flag}={path} does not exist")


def check_flags() -> None:
    """Everything that can be checked before reading data or building a model."""
    if not (FLAGS.do_train or FLAGS.do_predict or FLAGS.do_eval):
        raise app.UsageError("At least one of --do_train, --do_predict or --do_eval must "
                             "be set.")
    if FLAGS.do_train:
        _require_file(FLAGS.train_file, "train_file", "--do_train")
    if FLAGS.do_predict or FLAGS.do_eval:
        _require_file(FLAGS.predict_file, "predict_file", "--do_predict / --do_eval")
    if FLAGS.do_eval and not FLAGS.do_predict:
        predictions = os.path.join(FLAGS.output_dir, PREDICTIONS)
        if not os.path.isfile(predictions):
            raise FileNotFoundError(f"--do_eval without --do_predict scores {predictions}, "
                                    f"which does not exist")
    squad_features.check_lengths(FLAGS.max_seq_length, FLAGS.doc_stride,
                                 FLAGS.max_query_length)
    if FLAGS.hub_module_url and FLAGS.init_checkpoint:
        raise app.UsageError("Give --hub_module_url or --init_checkpoint, not both.")
    if FLAGS.export_dir:
        check_export(FLAGS.export_dir)


def run_model(strategy: tf.distribute.Strategy) -> bool:
    """Features, model, training and prediction (--do_train / --do_predict).

    Returns False if training stopped early (SIGTERM): nothing is predicted from the
    unfinished model; a rerun resumes.
    """
    files = None if FLAGS.hub_module_url else resolve_model_files()
    model, files = build_model(strategy, files, FLAGS.dtype, FLAGS.hub_module_url,
                               FLAGS.seed)
    tokenizer = tokenization.FullTokenizer(files.vocab_file, files.do_lower_case)
    settings = squad_records.FeatureSettings(
        FLAGS.max_seq_length, FLAGS.doc_stride, FLAGS.max_query_length,
        files.do_lower_case, FLAGS.version_2_with_negative)
    # Both files are read before training, so bad input fails early.
    predict_data = (squad_records.build_predict_features(
        FLAGS.predict_file, os.path.join(FLAGS.output_dir, PREDICT_RECORD), tokenizer,
        files.vocab_file, settings) if FLAGS.do_predict else None)
    train_data = (squad_records.build_train_features(
        FLAGS.train_file, os.path.join(FLAGS.output_dir, TRAIN_RECORD), tokenizer,
        files.vocab_file, settings, FLAGS.seed) if FLAGS.do_train else None)

    num_train_steps, num_warmup_steps = (train_schedule(
        train_data.num_features, FLAGS.train_batch_size, FLAGS.num_train_epochs,
        FLAGS.warmup_proportion) if train_data else (0, 0))
    trainer = runner_flags.make_trainer(FLAGS, strategy, model, SpanTask(),
                                        FLAGS.learning_rate, num_train_steps,
                                        num_warmup_steps)
    runner_flags.write_resolved_config(FLAGS, files.config, extra=dict(
        resolved_vocab_file=files.vocab_file, resolved_do_lower_case=files.do_lower_case,
        num_train_features=train_data.num_features if train_data else None,
        num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps))
    trainer.restore_or_initialize(
        lambda: initialize_from(model, FLAGS.init_checkpoint, FLAGS.hub_module_url))

    if FLAGS.do_train:
        summary = train(trainer, train_data, FLAGS.train_batch_size, FLAGS.seed,
                        FLAGS.shuffle_buffer_size)
        if summary["global_step"] < num_train_steps:
            logging.warning("Training stopped at step %d of %d; rerun with the same "
                            "--output_dir to resume. Nothing predicted or scored.",
                            summary["global_step"], num_train_steps)
            return False
    if FLAGS.do_predict:
        results = predict_logits(trainer, predict_data, FLAGS.predict_batch_size)
        write_predictions(predict_data, results, FLAGS.output_dir, files.do_lower_case)
    if FLAGS.export_dir:
        export(model, FLAGS.export_dir, files, FLAGS.max_seq_length)
    return True


def main(_):
    check_flags()
    strategy = runner_flags.setup(FLAGS)
    if FLAGS.do_eval:
        check_gold_file(FLAGS.predict_file, FLAGS.version_2_with_negative)
    if (FLAGS.do_train or FLAGS.do_predict) and not run_model(strategy):
        return
    if FLAGS.do_eval:
        evaluate(FLAGS.predict_file, FLAGS.output_dir, FLAGS.version_2_with_negative)


if __name__ == "__main__":
    flags.mark_flags_as_required(["output_dir"])
    app.run(main)
