"""A classifier run's splits: each split's features, written (or reused) as TFRecords
in output_dir before any model is built, and what run_classifier.py's settings of
them mean (long inputs as windows, multi-label, class weights from the training
counts).

  <split>.tf_record           one record per example (`classifier_features`)
  <split>.windows.tf_record   --long_input=windows: one record per window of a text
                              (`classifier_windows`)
"""

from __future__ import annotations

import dataclasses
import os

import tensorflow as tf

from common.errors import UserError
from common.progress import Progress
from data_prep.classifier import classifier_features, classifier_reader, classifier_windows
from data_prep.input_pipeline import RecordMetadata
from data_prep.text import tokenization


@dataclasses.dataclass(frozen=True)
class Features:
    """One split's TFRecord file and its metadata (see classifier_features)."""

    split: str
    file: str
    metadata: RecordMetadata

    @property
    def num_examples(self) -> int:
        return self.metadata.num_records

    def dataset(self, batch_size: int, pad_to_max_seq_length: bool) -> tf.data.Dataset:
        """The split once, in order, for evaluation and prediction."""
        return classifier_features.build_dataset(
            self.file,
            self.metadata,
            batch_size,
            is_training=False,
            pad_to_max_seq_length=pad_to_max_seq_length,
        )


@dataclasses.dataclass(frozen=True)
class LongInput:
    """What happens to a text longer than max_seq_length (--long_input and its flags)."""

    mode: str = "truncate"
    doc_stride: int = 0
    window_pooling: str = "mean"
    max_windows_per_text: int = 16

    @property
    def windows(self) -> bool:
        return self.mode == "windows"

    def model_info(self) -> dict:
        """Kept in model_info.json (windows only): prediction from the fine-tuned model
        and its export read windows as training did."""
        if not self.windows:
            return {}
        return {"long_input": dataclasses.asdict(self)}

    def export_options(self) -> dict:
        return dict(
            long_input=self.mode,
            doc_stride=self.doc_stride,
            window_pooling=self.window_pooling,
            max_windows_per_text=self.max_windows_per_text,
        )


@dataclasses.dataclass(frozen=True)
class WindowFeatures(Features):
    """One split's windows (--long_input=windows): a record per window, `num_texts` texts."""

    pooling: str = "mean"

    @property
    def num_texts(self) -> int:
        return int(self.metadata["num_texts"])

    def dataset(self, batch_size: int, pad_to_max_seq_length: bool) -> tf.data.Dataset:
        """Every window once, in order, with its text's `example_index`."""
        return classifier_windows.build_window_dataset(
            self.file, self.metadata, batch_size, pad_to_max_seq_length
        )


@dataclasses.dataclass(frozen=True)
class TaskFeatures:
    """The features a run needs: train (with --do_train), dev splits (--do_eval) and
    test splits (--do_predict), by canonical split name."""

    train: Features | None
    eval: dict[str, Features]
    test: dict[str, Features]

    @property
    def metadata(self) -> RecordMetadata:
        """Labels, is_regression and num_choices are the same in every split's."""
        return next(
            f.metadata
            for f in (self.train, *self.eval.values(), *self.test.values())
            if f is not None
        )


@dataclasses.dataclass(frozen=True)
class MultiLabel:
    """How a multi-label run reads and decides its labels (None: one label each)."""

    separator: str
    threshold: float


def resolve_class_weights(
    spec: str | list[float] | None, data: TaskFeatures, multi_label: bool
) -> list[float] | None:
    """The weight of each label: the list given (checked against the labels), or
    "balanced" from the training counts: single-label N / (K n_k), as scikit-learn's
    `class_weight="balanced"`; multi-label (N - n_k) / n_k, each label's negatives over
    its positives (a positive weight that makes the label's positives weigh as its
    negatives)."""
    if spec is None:
        return None
    metadata = data.metadata
    if metadata["is_regression"] or metadata.get("num_choices"):
        raise UserError("--class_weights: the task is not a classification")
    labels = list(metadata["labels"])
    if spec != "balanced":
        if len(spec) != len(labels):
            raise UserError(
                f"--class_weights: {len(spec)} weights for {len(labels)} labels {labels}; "
                f"give one per label, in this order"
            )
        return list(spec)
    if data.train is None:
        raise UserError(
            "--class_weights=balanced weighs by the training counts: it needs --do_train "
            "(or give the weights as a list)"
        )
    counts = classifier_features.label_counts(data.train.file, data.train.metadata)
    absent = [label for label, count in zip(labels, counts) if count == 0]
    if absent:
        raise UserError(
            f"--class_weights=balanced: label {absent[0]!r} has no training example; "
            f"give the weights as a list"
        )
    n = data.train.num_examples
    if multi_label:
        return [(n - count) / count for count in counts]
    return [n / (len(labels) * count) for count in counts]


def check_multi_label_training(processor, data_dir: str, data: TaskFeatures) -> None:
    """A multi-label training file where no example has a label teaches nothing."""
    if data.train is None or not data.train.metadata.get("multi_label"):
        return
    if not any(classifier_features.label_counts(data.train.file, data.train.metadata)):
        source = processor.input_files(data_dir, "train") or [f"{processor.name} train"]
        raise UserError(
            f"{source[0]}: no training example has a label (--multi_label, separator "
            f"{processor.label_separator!r}); check the label column and --label_separator"
        )


def build_features(
    processor: classifier_reader.DataProcessor,
    data_dir: str,
    split: str,
    output_dir: str,
    tokenizer: tokenization.FullTokenizer,
    max_seq_length: int,
    long_input: LongInput = LongInput(),
    progress: Progress | None = None,
) -> Features:
    """Writes (or reuses) `output_dir/<split>.tf_record` (`<split>.windows.tf_record`,
    a record per window, with --long_input=windows); `tokenizer` is the model's (its
    vocabulary as read once, its case and preserve_unused_tokens)."""
    split = processor.split_name(split)
    if long_input.windows:
        file = os.path.join(output_dir, f"{split}.windows.tf_record")
        metadata = classifier_windows.get_or_create_window_features(
            processor,
            data_dir,
            split,
            file,
            tokenizer,
            max_seq_length,
            long_input.doc_stride,
            long_input.max_windows_per_text,
            progress,
        )
        features = WindowFeatures(split, file, metadata, long_input.window_pooling)
    else:
        file = os.path.join(output_dir, f"{split}.tf_record")
        metadata = classifier_features.get_or_create_features(
            processor, data_dir, split, file, tokenizer, max_seq_length, progress
        )
        features = Features(split, file, metadata)
    if metadata.num_records == 0:
        source = processor.input_files(data_dir, split) or [f"{data_dir} (its reader's files)"]
        raise UserError(f"{processor.name} {split}: no examples in {source[0]}")
    return features


def build_task_features(
    processor,
    data_dir: str,
    output_dir: str,
    tokenizer: tokenization.FullTokenizer,
    max_seq_length: int,
    settings,
    long_input: LongInput = LongInput(),
    progress: Progress | None = None,
) -> TaskFeatures:
    """Reads and checks every split the run needs before any model is built: train
    with `settings.do_train`, the dev splits with `do_eval`, the test splits with
    `do_predict` (a `modeling.finetuning.Settings`), with the model's `tokenizer`
    built once."""

    def of(splits, wanted):
        features = [
            build_features(
                processor,
                data_dir,
                split,
                output_dir,
                tokenizer,
                max_seq_length,
                long_input,
                progress,
            )
            for split in (splits if wanted else ())
        ]
        return {f.split: f for f in features}

    data = TaskFeatures(
        train=of(["train"], settings.do_train).get("train"),
        eval=of(processor.eval_splits, settings.do_eval),
        test=of(processor.test_splits, settings.do_predict),
    )
    if settings.do_eval and not data.eval:
        raise UserError(f"Task {processor.name!r} has no labelled dev split to evaluate")
    return data
