"""Features, TFRecords and tf.data of sentence (pair) classification.

Features: `[CLS] A [SEP] B [SEP]`, segment 0 up to and including the first `[SEP]`,
segment 1 after it, zero padding; a pair longer than `max_seq_length` loses tokens
from the end of its longer segment. A multiple-choice example gives one such sequence
per choice: `[CLS] context [SEP] choice [SEP]`.

TFRecord features (the original release's names): int64 `input_ids`,
`input_mask`, `segment_ids` `[S]` (`[C * S]` for multiple choice, choice-major),
`label_ids` `[1]` (int64, or float for a regression task; multi-label: int64 `[L]`,
1 for each label the example has), int64
`is_real_example` `[1]` (always 1: TF2 keeps partial batches, so no padding
examples are written). Beside each file, `<file>.meta.json` (`records.write_metadata`,
format `RECORD_FORMAT`) records what built it; `get_or_create_features` rebuilds the
file only when that changes.

Typical use:
  processor = classifier_tasks.get_processor("mrpc")
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  metadata = get_or_create_features(processor, data_dir, "train", output_file,
                                    tokenizer, max_seq_length=128)
  dataset = build_dataset(output_file, metadata, batch_size=32, is_training=True)

Shape legend: B batch, S sequence (max_seq_length), C choices.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Sequence

from absl import logging
import tensorflow as tf

from common.progress import Progress
from common.errors import UserError
from data_prep import input_pipeline, records
from data_prep.text import tokenization
from data_prep.input_pipeline import RecordMetadata
from data_prep.classifier.classifier_reader import (
    DataProcessor,
    InputExample,
    MultipleChoiceExample,
)

# Raise the version when the records written for the same inputs change.
RECORD_FORMAT = "bert_classifier_tfrecord/2"
# The metadata entry that counts the records.
COUNT_KEY = "num_examples"


# ----------------------------------------------------------------------------
# Features.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class InputFeatures:
    """Model inputs of one example.

    Attributes:
      input_ids: int [S] word-piece ids (`[C][S]` for multiple choice).
      input_mask: int [S], 1 for real tokens, 0 for padding (`[C][S]`).
      segment_ids: int [S], 0 for `[CLS] A [SEP]`, 1 for `B [SEP]` (`[C][S]`).
      label_id: class id, or the float score of a regression task; 0 for an
        unlabelled example. Multi-label: int [L], 1 for each label the example has
        (all 0 unlabelled).
      is_real_example: always True here (kept in the records for compatibility).
      truncated: whether tokens were cut to fit `max_seq_length`.
    """

    input_ids: list
    input_mask: list
    segment_ids: list
    label_id: int | float | list
    is_real_example: bool = True
    truncated: bool = False


def _encode(
    tokenizer, ids_a: list[int], ids_b: list[int] | None, max_seq_length: int
) -> tuple[dict[str, list[int]], bool]:
    """Packs ids as `[CLS] A [SEP] (B [SEP])`; returns the lists and truncation."""
    packed = tokenization.pack_inputs(
        ids_a,
        ids_b,
        max_seq_length,
        tokenizer.vocab[tokenization.CLS_TOKEN],
        tokenizer.vocab[tokenization.SEP_TOKEN],
    )
    length = len(ids_a) + 2 + (len(ids_b) + 1 if ids_b is not None else 0)
    return packed, length > max_seq_length


def _label_id(label, label_map: dict[str, int], is_regression: bool, guid: str) -> int | float:
    if isinstance(label, tuple):
        return multi_hot(label, label_map, guid)
    if label is None:
        return 0.0 if is_regression else 0
    if is_regression:
        return float(label)
    if label not in label_map:
        raise UserError(f"Example {guid}: label {label!r} is not one of {list(label_map)}")
    return label_map[label]


def multi_hot(labels: Sequence[str], label_map: dict[str, int], guid: str) -> list[int]:
    """int [L]: 1 at the id of each of `labels` (a multi-label example's), else 0."""
    unknown = [label for label in labels if label not in label_map]
    if unknown:
        raise UserError(f"Example {guid}: label {unknown[0]!r} is not one of {list(label_map)}")
    ids = {label_map[label] for label in labels}
    return [int(i in ids) for i in range(len(label_map))]


def convert_example(
    example: InputExample | MultipleChoiceExample,
    label_list: Sequence[str],
    max_seq_length: int,
    tokenizer,
    is_regression: bool = False,
    multi_label: bool = False,
) -> InputFeatures:
    """Tokenizes and packs one example.

    Args:
      example: an InputExample, or a MultipleChoiceExample (one sequence per
        choice, the context as segment A).
      label_list: labels in id order (ignored for regression).
      max_seq_length: S, the length of every sequence.
      tokenizer: a `tokenization.FullTokenizer`.
      is_regression: labels are float scores.
      multi_label: the label is a tuple of labels (`label_id` a multi-hot list [L]).
    """
    label_map = {label: i for i, label in enumerate(label_list)}
    label_id = _label_id(example.label, label_map, is_regression, example.guid)
    if multi_label and example.label is None:  # Unlabelled (test): no label.
        label_id = [0] * len(label_list)
    if isinstance(example, MultipleChoiceExample):
        ids_a = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(example.context))
        encoded = [
            _encode(
                tokenizer,
                ids_a,
                tokenizer.convert_tokens_to_ids(tokenizer.tokenize(choice)),
                max_seq_length,
            )
            for choice in example.choices
        ]
        return InputFeatures(
            input_ids=[packed["input_word_ids"] for packed, _ in encoded],
            input_mask=[packed["input_mask"] for packed, _ in encoded],
            segment_ids=[packed["input_type_ids"] for packed, _ in encoded],
            label_id=label_id,
            truncated=any(truncated for _, truncated in encoded),
        )
    ids_a = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(example.text_a))
    ids_b = None
    if example.text_b is not None:
        ids_b = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(example.text_b))
    packed, truncated = _encode(tokenizer, ids_a, ids_b, max_seq_length)
    return InputFeatures(
        input_ids=packed["input_word_ids"],
        input_mask=packed["input_mask"],
        segment_ids=packed["input_type_ids"],
        label_id=label_id,
        truncated=truncated,
    )


def _flat(values: list) -> list[int]:
    """[S] -> [S]; [C][S] -> [C * S], choice-major."""
    if values and isinstance(values[0], list):
        return [value for row in values for value in row]
    return values


def serialize_features(features: InputFeatures, is_regression: bool) -> bytes:
    """One `tf.train.Example` with the original release's feature names."""
    if is_regression:
        label = tf.train.Feature(float_list=tf.train.FloatList(value=[features.label_id]))
    elif isinstance(features.label_id, list):
        label = records.int64_feature(features.label_id)
    else:
        label = records.int64_feature([features.label_id])
    example = tf.train.Example(
        features=tf.train.Features(
            feature={
                "input_ids": records.int64_feature(_flat(features.input_ids)),
                "input_mask": records.int64_feature(_flat(features.input_mask)),
                "segment_ids": records.int64_feature(_flat(features.segment_ids)),
                "label_ids": label,
                "is_real_example": records.int64_feature([int(features.is_real_example)]),
            }
        )
    )
    return example.SerializeToString(deterministic=True)


# ----------------------------------------------------------------------------
# Records and the feature cache.
# ----------------------------------------------------------------------------


def _settings(
    processor: DataProcessor,
    data_dir: str,
    split: str,
    tokenizer: tokenization.FullTokenizer,
    max_seq_length: int,
) -> dict:
    """Everything besides the input files that determines the records (and what the
    records are read with)."""
    return {
        "task_name": processor.name,
        "split": split,
        "processor_options": processor.options(),
        **processor.examples_key(data_dir, split),
        "labels": processor.get_labels(data_dir),
        "is_regression": processor.is_regression,
        "num_choices": processor.num_choices,
        "max_seq_length": max_seq_length,
        "do_lower_case": tokenizer.do_lower_case,
        "preserve_unused_tokens": tokenizer.preserve_unused_tokens,
        "vocab_sha256": tokenizer.vocab_read.file_sha256,
        **multi_label_settings(processor),
    }


def multi_label_settings(processor: DataProcessor) -> dict:
    """The metadata entries of a multi-label task's records (`multi_label` and the
    `label_separator` its files were read with); none for any other task, whose
    records and metadata stay as they were."""
    if processor.label_separator is None:
        return {}
    return {"multi_label": True, "label_separator": processor.label_separator}


def reused_records(
    output_file: str,
    record_format: str,
    settings: dict,
    input_files: list[str],
    unit: str = "examples",
    counts: tuple[str, ...] = (COUNT_KEY,),
) -> RecordMetadata | None:
    """The metadata of `output_file` when it can be reused as it is
    (`records.reusable_metadata`: written from the same `settings` and input files;
    `counts` are the entries that count records, `unit` what a record is), else None."""
    metadata = records.reusable_metadata(
        output_file, record_format, settings, input_files, counts=counts
    )
    if metadata is None:
        return None
    logging.info("Reusing %s (%d %s)", output_file, metadata[COUNT_KEY], unit)
    return RecordMetadata.from_entries(metadata, COUNT_KEY)


def write_records(
    output_file: str,
    record_format: str,
    settings: dict,
    tokenizer: tokenization.FullTokenizer,
    input_files: list[str],
    serialized,
    counted,
) -> RecordMetadata:
    """Writes the records `serialized` yields to `output_file` and their metadata:
    `settings`, the vocabulary's file name, `num_examples` (the records written),
    `counted()` (counts taken while writing) and the file's name."""
    count = records.write_tfrecord(output_file, serialized)
    metadata = records.write_metadata(
        output_file,
        record_format,
        dict(
            settings,
            vocab_file=os.path.basename(tokenizer.vocab_file),
            num_examples=count,
            **counted(),
            tfrecord_file=os.path.basename(output_file),
        ),
        input_files=input_files,
    )
    return RecordMetadata.from_entries(metadata, COUNT_KEY)


def create_features(
    processor: DataProcessor,
    data_dir: str,
    split: str,
    output_file: str,
    tokenizer: tokenization.FullTokenizer,
    max_seq_length: int,
    progress: Progress | None = None,
) -> RecordMetadata:
    """Reads `split`, writes its TFRecord file and metadata; returns the metadata;
    `progress` (`common.progress`) is shown the examples done. `tokenizer` is the
    model's (its vocabulary as read once, its case and preserve_unused_tokens).

    Metadata entries: task_name, split, labels, is_regression, num_choices,
    max_seq_length, num_examples, num_truncated, do_lower_case,
    preserve_unused_tokens, vocab_file (base name), vocab_sha256, processor_options
    (and the reader's `examples_key`), tfrecord_file, and those of
    `records.write_metadata` (format, record_bytes, input_files).
    """
    _check_max_seq_length(max_seq_length)
    split = processor.split_name(split)
    settings = _settings(processor, data_dir, split, tokenizer, max_seq_length)
    return _create_features(processor, data_dir, split, output_file, tokenizer, settings, progress)


def _check_max_seq_length(max_seq_length: int) -> None:
    if max_seq_length < 3:
        raise UserError(
            f"max_seq_length={max_seq_length} is below 3, the room for [CLS] and two [SEP]"
        )


def _create_features(
    processor: DataProcessor,
    data_dir: str,
    split: str,
    output_file: str,
    tokenizer: tokenization.FullTokenizer,
    settings: dict,
    progress: Progress | None,
) -> RecordMetadata:
    max_seq_length = settings["max_seq_length"]
    labels = settings["labels"]
    examples = processor.get_examples(data_dir, split)
    num_truncated = 0
    progress = progress if progress is not None else Progress()

    def serialized():
        nonlocal num_truncated
        for example in progress.iterate(examples, f"features {split}", len(examples), "example"):
            features = convert_example(
                example,
                labels,
                max_seq_length,
                tokenizer,
                processor.is_regression,
                processor.label_separator is not None,
            )
            num_truncated += features.truncated
            yield serialize_features(features, processor.is_regression)

    metadata = write_records(
        output_file,
        RECORD_FORMAT,
        settings,
        tokenizer,
        processor.input_files(data_dir, split),
        serialized(),
        lambda: {"num_truncated": num_truncated},
    )
    logging.info(
        "Wrote %d %s %s examples (%d truncated to %d tokens) to %s",
        metadata.num_records,
        processor.name,
        split,
        num_truncated,
        max_seq_length,
        output_file,
    )
    return metadata


def get_or_create_features(
    processor: DataProcessor,
    data_dir: str,
    split: str,
    output_file: str,
    tokenizer: tokenization.FullTokenizer,
    max_seq_length: int,
    progress: Progress | None = None,
) -> RecordMetadata:
    """Returns the metadata of `output_file`, (re)building it when stale.

    The existing file is reused when its metadata records the same task, split,
    processor options (and `examples_key`), max_seq_length, the tokenizer's
    do_lower_case, preserve_unused_tokens and vocabulary (by content hash), the same
    input files and the file's byte size (`records.reusable_metadata`). Otherwise it
    is rebuilt by `create_features`.
    """
    _check_max_seq_length(max_seq_length)
    split = processor.split_name(split)
    settings = _settings(processor, data_dir, split, tokenizer, max_seq_length)
    metadata = reused_records(
        output_file, RECORD_FORMAT, settings, processor.input_files(data_dir, split)
    )
    if metadata is not None:
        return metadata
    return _create_features(processor, data_dir, split, output_file, tokenizer, settings, progress)


def read_metadata(record_file: str) -> RecordMetadata:
    """The metadata of a record file written here."""
    return RecordMetadata.read(record_file, RECORD_FORMAT, COUNT_KEY)


# ----------------------------------------------------------------------------
# tf.data.
# ----------------------------------------------------------------------------


def decode_records(
    serialized: tf.Tensor,
    max_seq_length: int,
    num_choices: int | None = None,
    is_regression: bool = False,
    num_multi_labels: int | None = None,
) -> dict[str, tf.Tensor]:
    """Parses a batch of serialized records.

    Args:
      serialized: string [B].
      max_seq_length: S.
      num_choices: C for multiple choice, else None.
      is_regression: labels are floats.
      num_multi_labels: L of a multi-label task's records, else None.

    Returns:
      int32 `input_word_ids`, `input_mask`, `input_type_ids`, each [B, S] (or
      [B, C, S]), and `label_ids`: int32 [B] class ids (float32 [B] scores for
      regression; int32 [B, L] 0/1 for multi-label).
    """
    length = max_seq_length * (num_choices or 1)
    label_dtype = tf.float32 if is_regression else tf.int64
    spec = {name: tf.io.FixedLenFeature([length], tf.int64) for name in records.ENCODER_INPUT_NAMES}
    spec["label_ids"] = tf.io.FixedLenFeature(
        [num_multi_labels] if num_multi_labels else [], label_dtype
    )
    parsed = records.parse_features(serialized, spec)
    shape = [-1, max_seq_length] if num_choices is None else [-1, num_choices, max_seq_length]
    features = {
        name: tf.reshape(parsed[name], shape) for name in records.ENCODER_INPUT_NAMES.values()
    }
    features["label_ids"] = parsed["label_ids"]
    return features


def build_dataset(
    input_file: str,
    metadata: RecordMetadata,
    batch_size: int,
    is_training: bool,
    seed: int | None = None,
    input_context: tf.distribute.InputContext | None = None,
    *,
    shuffle_buffer_size: int = input_pipeline.DEFAULT_SHUFFLE_BUFFER_SIZE,
    pad_to_max_seq_length: bool = False,
    group_by_length: bool = False,
    drop_remainder: bool | None = None,
) -> tf.data.Dataset:
    """Batches of flat feature dicts from a file written here, as the Trainer takes them
    (`input_pipeline.batched_records`: training shuffles each epoch and repeats;
    evaluation and prediction read the file once, in order; each batch is cut to its
    longest example unless `pad_to_max_seq_length`).

    Args:
      input_file: the TFRecord file.
      metadata: its metadata (`get_or_create_features`, `read_metadata`).
      batch_size: the global batch size.
      is_training: shuffle each epoch and repeat.
      seed: the training order's seed.
      input_context: under a distribution strategy, shards the file's records by
        input pipeline and turns `batch_size` into the per-replica size.
      shuffle_buffer_size, pad_to_max_seq_length, group_by_length, drop_remainder:
        as `input_pipeline.batched_records` takes them.

    Returns:
      Dataset of dicts as `decode_records` returns them, [B, <= S] ([B, C, <= S]).
    """
    return input_pipeline.batched_records(
        input_pipeline.tfrecord_dataset(input_file, input_context),
        metadata,
        lambda serialized: decode_records(
            serialized,
            metadata.max_seq_length,
            metadata.get("num_choices"),
            metadata["is_regression"],
            len(metadata["labels"]) if metadata.get("multi_label") else None,
        ),
        batch_size,
        is_training,
        seed,
        input_context,
        shuffle_buffer_size=shuffle_buffer_size,
        pad_to_max_seq_length=pad_to_max_seq_length,
        group_by_length=group_by_length,
        drop_remainder=drop_remainder,
    )


def label_counts(input_file: str, metadata: RecordMetadata) -> list[int]:
    """How many records of a classification file have each label, in label order
    (multi-label: how many hold it among their labels): what --class_weights=balanced
    weighs by."""
    dataset = tf.data.TFRecordDataset(input_file).batch(1024)
    num_labels = len(metadata["labels"])
    multi = num_labels if metadata.get("multi_label") else None
    counts = [0] * num_labels
    for serialized in dataset:
        labels = decode_records(serialized, metadata.max_seq_length, None, False, multi)
        labels = labels["label_ids"].numpy()
        if multi:
            column_sums = labels.sum(axis=0)
        else:
            column_sums = [int((labels == i).sum()) for i in range(num_labels)]
        counts = [c + int(n) for c, n in zip(counts, column_sums)]
    return counts
