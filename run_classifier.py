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
A run restarted with the same output_dir resumes where it stopped; output_dir carries
the config, vocabulary, case and labels, so `--do_predict --init_checkpoint=<it>` in a
new output_dir predicts with the fine-tuned model, head included.

A left-to-right model (run_pretraining.py --objective=ltr) is fine-tuned with its
left-only attention and classifies from its last real token, the one position that has
seen the whole input. --bilstm_units adds a randomly initialised BiLSTM between the
encoder and the classifier (the paper's Table 5 "+ BiLSTM").

--hub_module_url fine-tunes a TF Hub BERT encoder instead of a checkpoint;
--export_dir exports the fine-tuned model as a SavedModel that classifies raw text.

A user's task: --task_name=generic with {train,dev,test}.tsv or .csv in --data_dir and
--text_a_column, --label_column (--text_b_column, --has_header, --delimiter,
--label_list, --is_regression as needed); or a reader class written for the original
release, in a module of one's own on the Python path:

  from run_classifier import DataProcessor, InputExample
  from data_prep.text import tokenization

  class MyProcessor(DataProcessor):  # get_train_examples(data_dir), ..., get_labels()
      ...

  python run_classifier.py --task_name=my_module:MyProcessor ...

(docs/own_task.md). Its metrics are accuracy and the loss, as the original's.

--multi_label: zero or more labels per example (separated by --label_separator in the
label field), a sigmoid per label, scored by micro F1; --class_weights=balanced (or a
list) weighs rare classes. Every classification task's eval_results.txt also has
eval_macro_f1 and each class's precision, recall and F1.
"""

from __future__ import annotations

import common.quiet_tensorflow  # noqa: F401  (first: TensorFlow's start-up lines hidden)

import os
import sys

import keras
import numpy as np
from absl import app, flags, logging

from common import cli as command_line
from common.errors import UserError
from common.progress import format_fields
import hparam_search
import model_flags
import runner_flags
import runner_settings
from common import file_io
from data_prep.classifier import (
    classifier_features,
    classifier_reader,
    classifier_tasks,
    classifier_windows,
)
from data_prep.classifier.classifier_splits import (
    LongInput,
    MultiLabel,
    TaskFeatures,
    WindowFeatures,
    build_task_features,
    check_multi_label_training,
    resolve_class_weights,
)
from evaluation import glue_metrics
from evaluation.classifier_scores import (
    is_label_metric,
    probabilities,
    results_file_name,
    score_multi_label_split,
    score_split,
    sigmoid,
    split_prefix,
)
from modeling import finetuning, model_files, model_kinds
from modeling.classifier_predictions import (
    evaluation_outputs,
    predict_for_evaluation,
    predict_logits,
    predict_text_logits,
)
from modeling.config import BertConfig
from modeling.objectives import ClassificationObjective

FLAGS = flags.FLAGS

# What a reader module of the user's imports from here, as from the original's
# run_classifier.py (`from run_classifier import DataProcessor, InputExample`).
DataProcessor = classifier_reader.DataProcessor
InputExample = classifier_reader.InputExample

flags.DEFINE_string(
    "task_name",
    None,
    "The task: "
    + ", ".join(classifier_tasks.PROCESSORS)
    + " (any case), or module:Class, a reader class of one's own in a module on the "
    "Python path (e.g. a DataProcessor written for the original release).",
)
runner_flags.define_data_dir_flag("The task's files, in the layout of its download.")
flags.DEFINE_string(
    "xnli_language",
    None,
    "XNLI: the language to train and evaluate on (default zh, as the original).",
)
flags.DEFINE_string(
    "text_a_column",
    None,
    "generic: column of the first text (a header name, or a 0-based position with --nohas_header).",
)
flags.DEFINE_string("text_b_column", None, "generic: column of the second text, if any.")
flags.DEFINE_string("label_column", None, "generic: column of the label.")
flags.DEFINE_bool("has_header", None, "generic: the files start with a header row (default true).")
flags.DEFINE_string(
    "delimiter",
    None,
    "generic: field delimiter (default: tab for .tsv, comma for .csv; 'tab' or '\\t' for a tab).",
)
flags.DEFINE_list(
    "label_list",
    None,
    "generic: the labels in id order (default: those of "
    "--init_checkpoint's fine-tuned model, else the sorted distinct labels "
    "of the training file).",
)
flags.DEFINE_bool("is_regression", None, "generic: the label is a float score.")
flags.DEFINE_enum(
    "long_input",
    None,
    ["truncate", "windows"],
    "A text longer than --max_seq_length: truncate it (the original's), or cut it into "
    "windows of --max_seq_length every --doc_stride pieces, train on every window with "
    "its text's label and join a text's windows into one prediction (--window_pooling). "
    "Default: that of a fine-tuned --init_checkpoint, else truncate.",
)
flags.DEFINE_enum(
    "window_pooling",
    None,
    list(classifier_windows.POOLINGS),
    "--long_input=windows: a text's logits are the mean (default) or the maximum of "
    "its windows' logits.",
)
flags.DEFINE_integer(
    "max_windows_per_text",
    None,
    "--long_input=windows: read at most this many windows of a text (its first ones; "
    "a warning counts the texts cut). Default 16.",
)
runner_flags.define_doc_stride_flag(
    None,
    "--long_input=windows: a window starts this many word pieces after the one before "
    "(default: half a window, max_seq_length // 2 - 1).",
)
flags.DEFINE_bool(
    "multi_label",
    False,
    "Each example has zero or more labels, separated by --label_separator in its label "
    "field: one sigmoid per label and binary cross-entropy; scored by micro F1 (default: "
    "as --init_checkpoint's fine-tuned classifier was trained, else one label).",
)
flags.DEFINE_string(
    "label_separator",
    model_kinds.CLASSIFIER.export_options["label_separator"],
    "--multi_label: what separates the labels of a label field.",
)
flags.DEFINE_float(
    "multi_label_threshold",
    model_kinds.CLASSIFIER.export_options["multi_label_threshold"],
    "--multi_label: a label is predicted when its probability is above this.",
)
flags.DEFINE_string(
    "class_weights",
    None,
    "Rare classes: 'balanced' (weights inversely proportional to the training counts; "
    "multi-label: each label's negatives over its positives) or one positive weight per "
    "label, comma-separated in label order. Single-label: weighted cross-entropy; "
    "multi-label: the weight of each label's positive term.",
)
runner_flags.define_common_flags(max_seq_length=128)
runner_flags.define_training_flags(value_lists=True)
runner_flags.define_finetuning_flags()
runner_flags.define_bilstm_flag()


def multi_label_option(files: model_files.ModelFiles, reinit_head: bool) -> MultiLabel | None:
    """--multi_label with its separator and threshold; not given, those of
    --init_checkpoint's fine-tuned classifier (its model_info.json, read in `files`),
    so that predicting with it reads and decides labels as it was trained. A fine-tuned
    head of the other kind (single- against multi-label) is refused unless --reinit_head."""
    init_checkpoint = FLAGS.init_checkpoint
    info = files.fine_tuned(model_kinds.CLASSIFIER)
    stored = None
    if info and not reinit_head:
        stored = bool(info.get("multi_label"))
    multi_label = FLAGS.multi_label if FLAGS["multi_label"].present else bool(stored)
    if stored is not None and stored != multi_label:
        trained = "multi-label" if stored else "single-label"
        raise UserError(
            f"--multi_label={multi_label}: --init_checkpoint={init_checkpoint} is a "
            f"{trained} classifier, whose head's outputs mean other things; leave "
            f"--multi_label out to use it as trained, or --reinit_head to train a new head"
        )
    if not multi_label:
        return None
    from_info = stored is not None

    def value(name, key):
        if FLAGS[name].present or not from_info or key not in info:
            return FLAGS[name].value
        return info[key]

    threshold = float(value("multi_label_threshold", "multi_label_threshold"))
    if not 0.0 < threshold < 1.0:
        raise UserError(f"--multi_label_threshold={threshold}: give a probability in (0, 1)")
    return MultiLabel(value("label_separator", "label_separator"), threshold)


def parse_class_weights(spec: str | None) -> str | list[float] | None:
    """--class_weights: None, "balanced", or the list of weights (checked positive)."""
    if spec is None or spec.strip().lower() == "balanced":
        return spec and "balanced"
    weights = []
    for part in spec.split(","):
        try:
            weight = float(part)
        except ValueError:
            raise UserError(
                f"--class_weights={spec}: {part.strip()!r} is not a number; give 'balanced' "
                f"or one weight per label, comma-separated in label order"
            ) from None
        if not np.isfinite(weight) or weight <= 0:
            raise UserError(
                f"--class_weights={spec}: weight {part.strip()} is not positive; every "
                f"label's weight must be a positive number"
            )
        weights.append(weight)
    return weights


def processor_options(files: model_files.ModelFiles) -> dict:
    """The task options given on the command line (None: not given); the labels of a
    fine-tuned --init_checkpoint (`files`) when --label_list is not given."""
    delimiter = FLAGS.delimiter
    if delimiter in ("tab", "\\t"):
        delimiter = "\t"
    labels = FLAGS.label_list
    if labels is None and FLAGS.task_name.lower() == "generic":
        labels = files.fine_tuned(model_kinds.CLASSIFIER).get("labels")
    return dict(
        xnli_language=FLAGS.xnli_language,
        text_a_column=FLAGS.text_a_column,
        text_b_column=FLAGS.text_b_column,
        label_column=FLAGS.label_column,
        has_header=FLAGS.has_header,
        delimiter=delimiter,
        labels=labels,
        is_regression=FLAGS.is_regression,
    )


# ----------------------------------------------------------------------------
# The task.
# ----------------------------------------------------------------------------


class ClassifierTask:
    """run_classifier's part of a fine-tuning run (`finetuning.FineTuningTask`)."""

    def __init__(
        self,
        processor,
        data: TaskFeatures,
        data_dir: str,
        max_seq_length: int,
        settings: finetuning.Settings,
        bilstm_units: int = 0,
        long_input: LongInput = LongInput(),
        multi_label: MultiLabel | None = None,
        class_weights: list[float] | None = None,
    ):
        self.processor, self.data, self.data_dir = processor, data, data_dir
        self.multi_label, self.class_weights = multi_label, class_weights
        self.max_seq_length, self.settings = max_seq_length, settings
        self.bilstm_units = bilstm_units
        self.long_input = long_input
        metadata = data.metadata
        self.is_regression = metadata["is_regression"]
        self.num_choices = metadata.get("num_choices")
        if self.num_choices and long_input.windows:
            raise UserError(
                f"--long_input=windows is for classification and regression; "
                f"{processor.name} is multiple choice"
            )
        if self.num_choices and bilstm_units:
            raise UserError(
                f"--bilstm_units={bilstm_units}: the BiLSTM is for classification and "
                f"regression; {processor.name} is multiple choice"
            )
        self.kind = model_kinds.MULTIPLE_CHOICE if self.num_choices else model_kinds.CLASSIFIER
        self.model_kind = self.kind.name
        self.objective = ClassificationObjective(
            self.is_regression, multi_label is not None, class_weights
        )
        self._evaluation_outputs = evaluation_outputs(self.objective)
        self.num_train_examples = data.train.num_examples if data.train else 0

    def build_model(self, encoder, config: BertConfig) -> keras.Model:
        """BertMultipleChoice, or BertClassifier with one output per label (one output,
        the score, for regression), with the BiLSTM of --bilstm_units."""
        num_labels = 1 if self.is_regression else len(self.data.metadata["labels"])
        return self.kind.build(
            encoder,
            config,
            num_labels,
            head_initializer=self.settings.head_initializer,
            bilstm_units=self.bilstm_units,
            multi_label=self.multi_label is not None,
        )

    def train_dataset(self, batch_size, seed, input_context):
        train = self.data.train
        return classifier_features.build_dataset(
            train.file,
            train.metadata,
            batch_size,
            True,
            seed,
            input_context,
            **self.settings.training_input_options(self.objective),
        )

    def evaluate(self, trainer, output_dir: str, global_step: int) -> dict:
        """Loss and GLUE metrics of every dev split, written to eval_results.txt.

        Keys: eval_loss, eval_accuracy, eval_f1, eval_mcc, eval_pearson,
        eval_spearman as the task has them (MNLI adds eval_mismatched_*), `loss` (=
        eval_loss, a key of the original's file) and global_step; a classification
        task's eval_macro_f1 and eval_{precision,recall,f1}_<label>
        (`glue_metrics.per_class_metrics`). Multi-label: eval_micro_f1, eval_macro_f1,
        eval_subset_accuracy, eval_loss and each label's (`score_multi_label_split`).
        """
        metrics, per_class = {}, {}
        for split, features in self.data.eval.items():
            if isinstance(features, WindowFeatures):
                # The metrics of the texts; eval_loss that of the windows (training's).
                logits, labels, sums = predict_text_logits(
                    trainer,
                    features,
                    self.settings.eval_batch_size,
                    self.settings.pads_inference,
                    self._evaluation_outputs,
                    "evaluate",
                )
                in_graph = trainer.objective.finalize_eval(sums)
            else:
                logits, labels, in_graph = predict_for_evaluation(
                    trainer,
                    features.dataset(self.settings.eval_batch_size, self.settings.pads_inference),
                    self._evaluation_outputs,
                )
            prefix = split_prefix(split, tuple(self.data.eval))
            if self.multi_label is not None:
                scored = score_multi_label_split(
                    logits, labels, self.labels, in_graph["eval_loss"], self.multi_label, prefix
                )
                metrics.update(scored)
                continue
            metrics.update(
                score_split(self.processor, logits, labels, in_graph["eval_loss"], prefix)
            )
            if not (self.is_regression or self.num_choices):
                per_class.update(
                    glue_metrics.per_class_metrics(logits, labels, self.labels, prefix)
                )
        metrics["loss"] = metrics["eval_loss"]
        metrics["global_step"] = global_step
        metrics.update(per_class)  # After the task's own keys, which keep their places.
        path = os.path.join(output_dir, file_io.EVAL_RESULTS)
        file_io.write_results(path, metrics)
        shown = {k: v for k, v in metrics.items() if not is_label_metric(k, self.labels)}
        trainer.progress.say(f"Evaluation at step {global_step}: {format_fields(shown)} ({path})")
        return metrics

    @property
    def labels(self) -> list[str]:
        return list(self.data.metadata["labels"])

    def score(self, metrics: dict) -> float:
        """The task's GLUE score; multi-label: micro F1."""
        if self.multi_label is not None:
            return metrics["eval_micro_f1"]
        return glue_metrics.glue_score(self.processor, metrics)

    @property
    def score_name(self) -> str:
        if self.multi_label is not None:
            return "eval_micro_f1"
        return glue_metrics.score_name(glue_metrics.glue_score_keys(self.processor))

    def predict(self, trainer, output_dir: str, global_step: int) -> None:
        """Writes test_results.tsv (class probabilities, or the score of a regression,
        one row per example) and the GLUE submission file of every test split."""
        for split, features in self.data.test.items():
            if isinstance(features, WindowFeatures):  # One row per text.
                logits, _, _ = predict_text_logits(
                    trainer,
                    features,
                    self.settings.predict_batch_size,
                    self.settings.pads_inference,
                    self._evaluation_outputs,  # The evaluation's compiled step.
                )
            else:
                logits, _ = predict_logits(
                    trainer,
                    features.dataset(
                        self.settings.predict_batch_size, self.settings.pads_inference
                    ),
                    output_fn=self._evaluation_outputs,
                )
            path = os.path.join(output_dir, results_file_name(split, tuple(self.data.test)))
            if self.multi_label is not None:
                glue_metrics.write_multi_label_results(
                    path,
                    sigmoid(logits),
                    self.labels,
                    self.multi_label.threshold,
                    self.multi_label.separator,
                )
                trainer.progress.say(f"Wrote {len(logits)} predictions to {path}")
                continue
            values = logits[:, 0] if self.is_regression else probabilities(logits)
            glue_metrics.write_test_results(path, values)
            trainer.progress.say(f"Wrote {len(values)} predictions to {path}")
            try:
                glue_metrics.submission_file_name(self.processor, split)
            except ValueError:
                continue  # Not a GLUE task: no submission file.
            indices = [
                example.index for example in self.processor.get_examples(self.data_dir, split)
            ]
            path = glue_metrics.write_glue_submission(
                output_dir, self.processor, indices, values, features.metadata["labels"], split
            )
            logging.info("Wrote the GLUE submission file %s", path)

    @property
    def export_labels(self) -> list[str] | None:
        return None if self.is_regression else self.data.metadata["labels"]

    def export_options(self) -> dict:
        """The export reads windows and decides labels as this run does."""
        return {
            **(self.long_input.export_options() if self.long_input.windows else {}),
            **self.multi_label_export_options(),
        }

    def multi_label_export_options(self) -> dict:
        if self.multi_label is None:
            return {}
        return {
            "multi_label_threshold": self.multi_label.threshold,
            "label_separator": self.multi_label.separator,
        }

    def model_info(self) -> dict:
        info = {
            "labels": self.data.metadata["labels"],
            "task_name": self.processor.name,
            "is_regression": self.is_regression,
            "num_choices": self.num_choices,
            "max_seq_length": self.max_seq_length,
            "bilstm_units": self.bilstm_units,
            **self.long_input.model_info(),
        }
        if self.multi_label is not None:
            info.update(multi_label=True, **self.multi_label_export_options())
        if self.class_weights is not None:
            info["class_weights"] = self.class_weights
        return info


def long_input_settings(FLAGS, files: model_files.ModelFiles) -> LongInput:
    """--long_input and its flags as given, else as a fine-tuned --init_checkpoint
    (its model_info.json, read in `files`) was trained, else the defaults; a usage
    error for windows that cannot work or a window flag without windows."""
    info = {}
    if FLAGS.init_checkpoint and not FLAGS.reinit_head:
        info = files.fine_tuned(model_kinds.CLASSIFIER).get("long_input") or {}
    default = LongInput()
    mode = FLAGS.long_input or info.get("mode") or default.mode
    window_flags = ("doc_stride", "window_pooling", "max_windows_per_text")
    if mode != "windows":
        for name in window_flags:
            if FLAGS[name].value is not None:
                raise app.UsageError(f"--{name} is for --long_input=windows")
        return default
    values = {
        name: FLAGS[name].value if FLAGS[name].value is not None else info.get(name)
        for name in window_flags
    }
    defaults = dict(
        doc_stride=FLAGS.max_seq_length // 2 - 1,
        window_pooling=default.window_pooling,
        max_windows_per_text=default.max_windows_per_text,
    )
    long_input = LongInput(
        mode="windows",
        **{name: defaults[name] if value is None else value for name, value in values.items()},
    )
    try:
        classifier_windows.check_window_settings(
            FLAGS.max_seq_length, long_input.doc_stride, long_input.max_windows_per_text
        )
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    logging.info("Long inputs: %s", long_input)
    return long_input


def main(_):
    runner_settings.check_finetuning_flags(FLAGS)
    grid = hparam_search.check(FLAGS)
    strategy = runner_settings.setup(FLAGS)
    settings = runner_settings.finetuning_settings(FLAGS)
    class_weights = parse_class_weights(FLAGS.class_weights)
    # The model once: its files (and model_info.json, which the task's settings default to).
    encoder, files = model_flags.build_encoder(FLAGS, strategy)
    processor = classifier_tasks.get_processor(FLAGS.task_name, **processor_options(files))
    long_input = long_input_settings(FLAGS, files)
    multi_label = multi_label_option(files, settings.reinit_head)
    if multi_label is not None:
        if long_input.windows:
            raise app.UsageError(
                "--multi_label takes no --long_input=windows (a text's windows are joined "
                "for single-label classification only); use --long_input=truncate"
            )
        classifier_tasks.set_multi_label(processor, multi_label.separator)
    data = build_task_features(
        processor,
        FLAGS.data_dir,
        FLAGS.output_dir,
        files.tokenizer(),
        FLAGS.max_seq_length,
        settings,
        long_input,
        runner_settings.terminal(),
    )
    check_multi_label_training(processor, FLAGS.data_dir, data)
    task = ClassifierTask(
        processor,
        data,
        FLAGS.data_dir,
        FLAGS.max_seq_length,
        settings,
        model_flags.bilstm_units(FLAGS, files, model_kinds.CLASSIFIER),
        long_input,
        multi_label,
        resolve_class_weights(class_weights, data, multi_label is not None),
    )
    hparam_search.run(FLAGS, grid, task, settings, strategy, encoder, files)


def cli():
    # A reader module of the user's imports `run_classifier`: while this file runs as
    # the program (__main__), that import must find this module, not load a second
    # copy that would define every flag again.
    sys.modules.setdefault("run_classifier", sys.modules[__name__])
    flags.mark_flags_as_required(["task_name", "data_dir", "output_dir"])
    command_line.run(main)


if __name__ == "__main__":
    cli()
