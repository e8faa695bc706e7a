"""Fine-tuning on sentence (pair) classification, regression and multiple choice.

Every GLUE task (CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI, AX), XNLI,
SWAG (multiple choice) and a user's own TSV/CSV files ("generic"):

  python run_classifier.py --task_name=MRPC --data_dir=glue/MRPC \
      --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \
      --bert_config_file=uncased_L-12_H-768_A-12/bert_config.json \
      --vocab_file=uncased_L-12_H-768_A-12/vocab.txt \
      --do_train --do_eval --do_predict --max_seq_length=128 \
      --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3 \
      --output_dir=out/mrpc

A Hugging Face directory as --init_checkpoint brings its config.json and vocab.txt.
Features are cached as TFRecords in output_dir (`<split>.tf_record` with a metadata
JSON, rebuilt only when the inputs or flags change). With --do_eval, the model is
evaluated at the end of every epoch with the task's GLUE metrics and the best one (by
the task's GLUE score) is kept in output_dir/best/; eval_results.txt and the
predictions (test_results.tsv, the GLUE submission file `<Task>.tsv`) come from it.
A run restarted with the same output_dir resumes where it stopped.

--hub_module_url fine-tunes a TF Hub BERT encoder (a SavedModel folder, e.g. one
written by export_tfhub.py) instead of a checkpoint; --export_dir exports the
fine-tuned model as a SavedModel that classifies raw text (serving/tasks.py).

A user's task: --task_name=generic with {train,dev,test}.tsv or .csv in --data_dir and
--text_a_column, --label_column (--text_b_column, --has_header, --delimiter,
--label_list, --is_regression as needed).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Iterable

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from data_prep import classifier_features, classifier_reader  # noqa: E402
from data_prep import classifier_tasks, records  # noqa: E402
from evaluation import glue_metrics  # noqa: E402
from modeling import checkpoints, training  # noqa: E402
from modeling.config import BertConfig  # noqa: E402
from modeling.encoder import BertEncoder  # noqa: E402
from modeling.models import BertClassifier, BertMultipleChoice  # noqa: E402
from modeling.tasks import ClassificationTask  # noqa: E402
import runner_flags  # noqa: E402
from runner_flags import initialize_from, train_schedule  # noqa: E402
from serving import tasks as export_lib  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("task_name", None, "The task: " + ", ".join(classifier_tasks.PROCESSORS)
                    + " (any case).")
flags.DEFINE_string("data_dir", None, "The task's files, in the layout of its download.")
flags.DEFINE_bool("do_train", False, "Run training.")
flags.DEFINE_bool("do_eval", False, "Evaluate on the dev set(s).")
flags.DEFINE_bool("do_predict", False, "Predict the test set(s).")
flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.")
flags.DEFINE_integer("eval_batch_size", 8, "Global evaluation batch size.")
flags.DEFINE_integer("predict_batch_size", 8, "Global prediction batch size.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate of AdamW.")
flags.DEFINE_float("num_train_epochs", 3.0, "Training epochs (may be fractional).")
flags.DEFINE_float("warmup_proportion", 0.1, "Fraction of training with a linear "
                   "learning-rate warmup.")
flags.DEFINE_bool("evaluate_every_epoch", True, "With --do_train --do_eval: evaluate at "
                  "the end of every epoch and keep the best model in output_dir/best.")
flags.DEFINE_integer("shuffle_buffer_size", 10000, "Training examples in the shuffle "
                     "buffer (at most the training set). The original uses 100, which "
                     "mixes a file sorted by label or length poorly.")
flags.DEFINE_string("xnli_language", None, "XNLI: the language to train and evaluate "
                    "on (default zh, as the original).")
flags.DEFINE_string("text_a_column", None, "generic: column of the first text (a header "
                    "name, or a 0-based position with --nohas_header).")
flags.DEFINE_string("text_b_column", None, "generic: column of the second text, if any.")
flags.DEFINE_string("label_column", None, "generic: column of the label.")
flags.DEFINE_bool("has_header", None, "generic: the files start with a header row "
                  "(default true).")
flags.DEFINE_string("delimiter", None, "generic: field delimiter (default: tab for .tsv, "
                    "comma for .csv; 'tab' or '\\t' for a tab).")
flags.DEFINE_list("label_list", None, "generic: the labels in id order (default: the "
                  "sorted distinct labels of the training file).")
flags.DEFINE_bool("is_regression", None, "generic: the label is a float score.")
flags.DEFINE_string("hub_module_url", None, "A TF Hub BERT encoder (SavedModel directory) "
                    "to fine-tune instead of --init_checkpoint; its vocabulary, "
                    "do_lower_case and config are used unless given.")
flags.DEFINE_string("export_dir", None, "Export the fine-tuned model (the best one with "
                    "--do_eval) as a SavedModel that answers raw text.")
runner_flags.define_common_flags(max_seq_length=128)
runner_flags.define_training_flags()

BEST_DIR = "best"
EVAL_RESULTS = "eval_results.txt"
EVAL_HISTORY = "eval_history.json"


# ----------------------------------------------------------------------------
# Data.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelFiles:
    """The model's config and the tokenizer settings that go with it."""
    config: BertConfig
    vocab_file: str
    do_lower_case: bool


@dataclasses.dataclass(frozen=True)
class Features:
    """One split's TFRecord file and its metadata (see classifier_features)."""
    split: str
    file: str
    metadata: dict

    @property
    def num_examples(self) -> int:
        return self.metadata["num_examples"]


@dataclasses.dataclass(frozen=True)
class TaskFeatures:
    """The features a run needs: train (with --do_train), dev splits (--do_eval) and
    test splits (--do_predict), by canonical split name."""
    train: Features | None
    eval: dict[str, Features]
    test: dict[str, Features]

    @property
    def metadata(self) -> dict:
        """Labels, is_regression and num_choices are the same in every split's."""
        return next(f.metadata for f in (self.train, *self.eval.values(),
                                         *self.test.values()) if f is not None)


def processor_options() -> dict:
    """The task options given on the command line (None: not given)."""
    delimiter = FLAGS.delimiter
    if delimiter in ("tab", "\\t"):
        delimiter = "\t"
    return dict(xnli_language=FLAGS.xnli_language, text_a_column=FLAGS.text_a_column,
                text_b_column=FLAGS.text_b_column, label_column=FLAGS.label_column,
                has_header=FLAGS.has_header, delimiter=delimiter,
                labels=FLAGS.label_list, is_regression=FLAGS.is_regression)


def build_features(processor: classifier_reader.DataProcessor, data_dir: str,
                   splits: Iterable[str], output_dir: str, files: ModelFiles,
                   max_seq_length: int) -> dict[str, Features]:
    """Writes (or reuses) `output_dir/<split>.tf_record` for each split."""
    features = {}
    for split in splits:
        split = processor.split_name(split)
        file = os.path.join(output_dir, f"{split}.tf_record")
        metadata = classifier_features.get_or_create_features(
            processor, data_dir, split, file, files.vocab_file, files.do_lower_case,
            max_seq_length)
        if metadata["num_examples"] == 0:
            raise ValueError(f"{processor.name} {split}: no examples in "
                             f"{processor.input_files(data_dir, split)[0]}")
        features[split] = Features(split, file, metadata)
    return features


def build_task_features(processor, data_dir: str, output_dir: str, files: ModelFiles,
                        max_seq_length: int, do_train: bool, do_eval: bool,
                        do_predict: bool) -> TaskFeatures:
    """Reads and checks every split the run needs before any training starts."""
    def of(splits, wanted):
        return build_features(processor, data_dir, splits if wanted else (), output_dir,
                              files, max_seq_length)

    task = TaskFeatures(train=of(["train"], do_train).get("train"),
                        eval=of(processor.eval_splits, do_eval),
                        test=of(processor.test_splits, do_predict))
    if do_eval and not task.eval:
        raise ValueError(f"Task {processor.name!r} has no labelled dev split to evaluate")
    return task


# ----------------------------------------------------------------------------
# Model.
# ----------------------------------------------------------------------------


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
    runner_flags.check_max_seq_length(FLAGS.max_seq_length, encoder.config)
    return ModelFiles(encoder.config, vocab_file, do_lower_case)


def build_encoder(strategy: tf.distribute.Strategy, files: ModelFiles | None, dtype: str,
                  hub_module_url: str | None = None) -> tuple[keras.Layer, ModelFiles]:
    """Our BertEncoder (from `files.config`), or a TF Hub encoder, whose config,
    vocabulary and do_lower_case then make `files`."""
    with strategy.scope():
        if hub_module_url:
            from modeling import hub  # pylint: disable=g-import-not-at-top
            encoder = hub.HubEncoder(hub_module_url)
            return encoder, hub_model_files(encoder, hub_module_url)
        return BertEncoder(files.config, dtype=dtype), files


def build_model(strategy: tf.distribute.Strategy, encoder, config: BertConfig,
                metadata: dict) -> keras.Model:
    """BertMultipleChoice, or BertClassifier with one output per label (one output,
    the score, for regression)."""
    with strategy.scope():
        if metadata.get("num_choices"):
            return BertMultipleChoice(encoder, config)
        num_labels = 1 if metadata["is_regression"] else len(metadata["labels"])
        return BertClassifier(encoder, config, num_labels)


def epoch_end_steps(num_examples: int, batch_size: int, num_train_steps: int
                    ) -> list[int]:
    """The global step at which each epoch ends; the last is always num_train_steps."""
    ends, epoch = [], 1
    while (step := int(num_examples * epoch / batch_size)) < num_train_steps:
        if not ends or step > ends[-1]:
            ends.append(step)
        epoch += 1
    return ends + [num_train_steps]


# ----------------------------------------------------------------------------
# Metrics.
# ----------------------------------------------------------------------------


def predict_logits(trainer: training.Trainer, dataset: tf.data.Dataset
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(logits float [N, K] ([N, 1] regression, [N, C] choices), labels [N])."""
    outputs = trainer.predict(dataset, lambda features, outputs: {
        "logits": outputs["logits"], "label_ids": features["label_ids"]})
    return outputs["logits"].astype(np.float64), outputs["label_ids"]


def log_probabilities(logits: np.ndarray) -> np.ndarray:
    """Log-softmax over the last axis. float [N, K]."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def probabilities(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis. float [N, K]."""
    return np.exp(log_probabilities(logits))


def mean_loss(logits: np.ndarray, labels: np.ndarray, is_regression: bool) -> float:
    """The training loss on these examples: cross-entropy, or squared error.

    Args:
      logits: float [N, K] ([N, 1] for regression).
      labels: int [N] class ids, or float [N] scores.
    """
    if is_regression:
        return float(np.mean(np.square(logits[:, 0] - labels)))
    picked = log_probabilities(logits)[np.arange(len(labels)), labels.astype(np.int64)]
    return float(-np.mean(picked))


def split_prefix(split: str, eval_splits: tuple[str, ...]) -> str:
    """Metric key prefix: "eval_" for the first dev split (MNLI's matched), then
    e.g. "eval_mismatched_"."""
    if split == eval_splits[0]:
        return "eval_"
    return f"eval_{split.removeprefix('dev_')}_"


def score_split(task_name: str, logits: np.ndarray, labels: np.ndarray,
                is_regression: bool, prefix: str) -> dict[str, float]:
    """The loss and the task's GLUE metrics of one dev split."""
    metrics = glue_metrics.compute_metrics(task_name, logits, labels,
                                           is_regression=is_regression, prefix=prefix)
    metrics[prefix + "loss"] = mean_loss(logits, labels, is_regression)
    return metrics


# Metrics of the GLUE score, where it is not the mean of all the task's metrics.
_SCORE_METRICS = {"cola": ("eval_mcc",), "ax": ("eval_mcc",)}
_SCORED = ("eval_accuracy", "eval_f1", "eval_pearson", "eval_spearman")


def glue_score(task_name: str, metrics: dict) -> float:
    """The number the best model is chosen by: the task's GLUE score on the first dev
    split (MRPC, QQP: mean of accuracy and F1; STS-B: mean of Pearson and Spearman;
    CoLA: MCC; MNLI: matched accuracy; others: accuracy)."""
    keys = _SCORE_METRICS.get(glue_metrics.normalize_task_name(task_name),
                              [key for key in _SCORED if key in metrics])
    return float(np.mean([metrics[key] for key in keys]))


def evaluate(trainer: training.Trainer, processor, eval_features: dict[str, Features],
             batch_size: int) -> dict:
    """Loss and GLUE metrics of every dev split, and global_step.

    Keys: eval_loss, eval_accuracy, eval_f1, eval_mcc, eval_pearson,
    eval_spearman as the task has them (MNLI adds eval_mismatched_*), `loss` (=
    eval_loss, a key of the original's file) and global_step.
    """
    metrics = {}
    for split, features in eval_features.items():
        logits, labels = predict_logits(
            trainer, classifier_features.build_dataset(features.file, features.metadata,
                                                       batch_size, is_training=False))
        metrics.update(score_split(
            processor.name, logits, labels, features.metadata["is_regression"],
            split_prefix(split, tuple(eval_features))))
    metrics["loss"] = metrics["eval_loss"]
    metrics["global_step"] = int(trainer.global_step.numpy())
    return metrics


def write_eval_summaries(output_dir: str, metrics: dict) -> None:
    writer = tf.summary.create_file_writer(os.path.join(output_dir, "eval"))
    with writer.as_default(step=metrics["global_step"]):
        for key, value in metrics.items():
            if key != "global_step":
                tf.summary.scalar(key, value)
    writer.close()


# ----------------------------------------------------------------------------
# The best model.
# ----------------------------------------------------------------------------


class BestCheckpoint:
    """The best model so far, with its step and score, in `directory`.

    One TF checkpoint holds the model and two scalars (step, score), so the score
    always describes the weights saved with it; the CheckpointManager writes it under
    temporary names and then updates its `checkpoint` state file.
    """

    def __init__(self, directory: str, model):
        self.directory = directory
        self.step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="step")
        self.score = tf.Variable(-np.inf, dtype=tf.float64, trainable=False, name="score")
        self.checkpoint = tf.train.Checkpoint(model=model, step=self.step,
                                              score=self.score)
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory,
                                                  max_to_keep=1, checkpoint_name="best")
        if self.manager.latest_checkpoint:
            scalars = tf.train.Checkpoint(step=self.step, score=self.score)
            scalars.read(self.manager.latest_checkpoint).expect_partial()

    @property
    def exists(self) -> bool:
        return self.manager.latest_checkpoint is not None

    def update(self, step: int, score: float, metrics: dict) -> bool:
        """Saves the model if `score` beats the best so far; returns whether it did."""
        if self.exists and score <= float(self.score.numpy()):
            return False
        self.step.assign(step)
        self.score.assign(score)
        self.manager.save(checkpoint_number=step)
        records.write_results(os.path.join(self.directory, EVAL_RESULTS), metrics)
        logging.info("New best model at step %d (score %.4f) in %s", step, score,
                     self.directory)
        return True

    def restore(self) -> int:
        """Loads the best weights into the model; returns their step."""
        self.checkpoint.read(self.manager.latest_checkpoint).assert_existing_objects_matched()
        logging.info("Using the best model: step %d, score %.4f",
                     int(self.step.numpy()), float(self.score.numpy()))
        return int(self.step.numpy())


# ----------------------------------------------------------------------------
# Train, evaluate, predict, export.
# ----------------------------------------------------------------------------


def train(trainer: training.Trainer, train_features: Features, batch_size: int,
          seed: int, shuffle_buffer_size: int, on_epoch_end=None) -> bool:
    """Trains to num_train_steps, calling on_epoch_end(step) at each epoch's end.

    The Trainer runs --steps_per_loop steps per compiled loop; loops are shortened so
    that one ends exactly at every epoch's end.

    Returns:
      Whether training is complete (False: stopped early by SIGTERM, checkpointed).
    """
    def dataset_fn(context=None):
        return classifier_features.build_dataset(
            train_features.file, train_features.metadata, batch_size, is_training=True,
            seed=seed, shuffle_buffer_size=shuffle_buffer_size, input_context=context)

    ends = epoch_end_steps(train_features.num_examples, batch_size,
                           trainer.num_train_steps)
    steps_per_loop = trainer.steps_per_loop
    pending = [end for end in ends if end > int(trainer.global_step.numpy())]

    def limit_loop(step: int) -> None:
        while pending and pending[0] <= step:
            pending.pop(0)
        if pending:
            trainer.steps_per_loop = min(steps_per_loop, pending[0] - step)

    def after_loop(step: int) -> None:
        if on_epoch_end is not None and step in ends:
            on_epoch_end(step)
        limit_loop(step)

    limit_loop(int(trainer.global_step.numpy()))
    try:
        summary = trainer.train(dataset_fn, batch_size, after_loop=after_loop)
    finally:
        trainer.steps_per_loop = steps_per_loop
    return summary["global_step"] >= trainer.num_train_steps


def epoch_evaluator(trainer, processor, eval_features, batch_size, best, output_dir):
    """on_epoch_end for `train`: evaluates, logs the history, keeps the best model."""
    history_path = os.path.join(output_dir, EVAL_HISTORY)
    history = []
    if os.path.isfile(history_path):
        with open(history_path, encoding="utf-8") as f:
            history = json.load(f)

    def on_epoch_end(step: int) -> None:
        metrics = evaluate(trainer, processor, eval_features, batch_size)
        score = glue_score(processor.name, metrics)
        logging.info("Evaluation at step %d: %s (score %.4f)", step, metrics, score)
        write_eval_summaries(output_dir, metrics)
        history.append(dict(metrics, score=score))
        records.write_json(history_path, history)
        best.update(step, score, metrics)

    return on_epoch_end


def write_eval_results(output_dir: str, metrics: dict) -> None:
    path = os.path.join(output_dir, EVAL_RESULTS)
    records.write_results(path, metrics)
    logging.info("Eval results (%s):\n%s", path, records.format_results(metrics))


def results_file_name(split: str, test_splits: tuple[str, ...]) -> str:
    """test_results.tsv for the (first) test split, e.g. test_mismatched_results.tsv
    for MNLI's second."""
    return "test_results.tsv" if split == test_splits[0] else f"{split}_results.tsv"


def predict(trainer: training.Trainer, processor, test_features: dict[str, Features],
            data_dir: str, batch_size: int, output_dir: str) -> None:
    """Writes test_results.tsv (class probabilities, or the score of a regression, one
    row per example) and the GLUE submission file of every test split."""
    for split, features in test_features.items():
        logits, _ = predict_logits(
            trainer, classifier_features.build_dataset(features.file, features.metadata,
                                                       batch_size, is_training=False))
        regression = features.metadata["is_regression"]
        values = logits[:, 0] if regression else probabilities(logits)
        path = os.path.join(output_dir, results_file_name(split, tuple(test_features)))
        glue_metrics.write_test_results(path, values)
        logging.info("Wrote %d predictions to %s", len(values), path)
        try:
            glue_metrics.submission_file_name(processor.name, split)
        except ValueError:
            continue  # Not a GLUE task: no submission file.
        indices = [example.index for example in processor.get_examples(data_dir, split)]
        path = glue_metrics.write_glue_submission(
            output_dir, processor.name, indices, values, features.metadata["labels"],
            split)
        logging.info("Wrote the GLUE submission file %s", path)


def export_kind(num_choices: int | None) -> str:
    """The serving/tasks.py task kind of a task's model."""
    return "multiple_choice" if num_choices else "classifier"


def check_export(kind: str, export_dir: str) -> None:
    """Fails before training if the model cannot be exported to export_dir."""
    if kind not in export_lib.TASK_SIGNATURE_BUILDERS:
        raise NotImplementedError(
            f"--export_dir={export_dir}: serving/tasks.py has no {kind} export yet; "
            f"only {sorted(export_lib.TASK_SIGNATURE_BUILDERS)} task exports exist.")
    try:
        export_lib.check_export_path(export_dir)
    except (ValueError, FileExistsError) as e:
        raise type(e)(f"--export_dir={export_dir}: {e}") from None


def export(model, export_dir: str, files: ModelFiles, max_seq_length: int,
           metadata: dict) -> None:
    """A SavedModel that answers raw text (see export_lib.export_task_model)."""
    kind = export_kind(metadata.get("num_choices"))
    check_export(kind, export_dir)
    labels = None if metadata["is_regression"] else metadata["labels"]
    path = export_lib.export_task_model(model, export_dir, files.vocab_file,
                                        files.do_lower_case, max_seq_length, kind=kind,
                                        labels=labels)
    logging.info("Exported the model to %s", path)


# ----------------------------------------------------------------------------
# main.
# ----------------------------------------------------------------------------


def check_flags() -> None:
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
        raise app.UsageError("At least one of --do_train, --do_eval or --do_predict must "
                             "be set.")


def main(_):
    check_flags()
    strategy = runner_flags.setup(FLAGS)
    processor = classifier_tasks.get_processor(FLAGS.task_name, **processor_options())
    if FLAGS.export_dir:
        check_export(export_kind(processor.num_choices), FLAGS.export_dir)
    files = None if FLAGS.hub_module_url else resolve_model_files()
    encoder, files = build_encoder(strategy, files, FLAGS.dtype, FLAGS.hub_module_url)
    data = build_task_features(processor, FLAGS.data_dir, FLAGS.output_dir, files,
                               FLAGS.max_seq_length, FLAGS.do_train, FLAGS.do_eval,
                               FLAGS.do_predict)
    # The head's initial weights and dropout seeds depend on --seed alone, not on how
    # many random draws building the encoder took: a TF Hub encoder and a checkpoint of
    # the same weights fine-tune to the same model.
    keras.utils.set_random_seed(FLAGS.seed)
    model = build_model(strategy, encoder, files.config, data.metadata)
    num_train_steps, num_warmup_steps = (train_schedule(
        data.train.num_examples, FLAGS.train_batch_size, FLAGS.num_train_epochs,
        FLAGS.warmup_proportion) if data.train else (0, 0))
    trainer = runner_flags.make_trainer(
        FLAGS, strategy, model, ClassificationTask(data.metadata["is_regression"]),
        FLAGS.learning_rate, num_train_steps, num_warmup_steps)
    runner_flags.write_resolved_config(FLAGS, files.config, extra=dict(
        resolved_vocab_file=files.vocab_file, resolved_do_lower_case=files.do_lower_case,
        labels=data.metadata["labels"], num_train_steps=num_train_steps,
        num_warmup_steps=num_warmup_steps))
    trainer.restore_or_initialize(
        lambda: initialize_from(model, FLAGS.init_checkpoint, FLAGS.hub_module_url))
    best = BestCheckpoint(os.path.join(FLAGS.output_dir, BEST_DIR), model)

    if FLAGS.do_train:
        on_epoch_end = None
        if FLAGS.do_eval and FLAGS.evaluate_every_epoch:
            on_epoch_end = epoch_evaluator(trainer, processor, data.eval,
                                           FLAGS.eval_batch_size, best, FLAGS.output_dir)
        if not train(trainer, data.train, FLAGS.train_batch_size, FLAGS.seed,
                     FLAGS.shuffle_buffer_size, on_epoch_end):
            logging.warning("Training stopped early; run again to resume it.")
            return
    best_step = best.restore() if best.exists else None
    if FLAGS.do_eval:
        metrics = evaluate(trainer, processor, data.eval, FLAGS.eval_batch_size)
        if best_step is not None:
            metrics["global_step"] = best_step
        write_eval_results(FLAGS.output_dir, metrics)
    if FLAGS.do_predict:
        predict(trainer, processor, data.test, FLAGS.data_dir, FLAGS.predict_batch_size,
                FLAGS.output_dir)
    if FLAGS.export_dir:
        export(model, FLAGS.export_dir, files, FLAGS.max_seq_length, data.metadata)


if __name__ == "__main__":
    flags.mark_flags_as_required(["task_name", "data_dir", "output_dir"])
    app.run(main)
