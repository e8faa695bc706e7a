"""NER features (`ner_features.InputFeatures`) as TFRecords, their metadata, and
tf.data: the records read back as the Trainer takes them, and features held in memory.

Records. `write_tfrecord`: int64 input_ids, input_mask, segment_ids, label_ids
[max_seq_length] and unique_ids [1], written atomically; beside them
`<file>.meta.json` (`describe`, `write_metadata`, `read_metadata`: a
`RecordMetadata`, format `RECORD_FORMAT`) with the label list and its scheme.
`build_dataset` reads them back as the Trainer takes them; `inference_dataset`
batches features held in memory; both cut each batch to its longest window
(`input_pipeline`).

Shape legend: B batch, S max_seq_length.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf

from common.errors import UserError
from data_prep import input_pipeline, records
from data_prep.input_pipeline import RecordMetadata
from data_prep.ner.conll import Sentence

# The label id of positions without a label ([CLS], [SEP], a word's later pieces,
# padding): the loss and the metrics mask them out.
LABEL_IGNORE_ID = -1
# Raise the version when the records written for the same inputs change.
RECORD_FORMAT = "bert_ner_tfrecord/4"


# ----------------------------------------------------------------------------
# Records.
# ----------------------------------------------------------------------------


def write_tfrecord(features: Sequence, path: str) -> None:
    """Writes the features (`ner_features.InputFeatures`) as tf.train.Examples (fields
    in the module docstring)."""
    ints = records.int64_feature
    records.write_tfrecord(
        path,
        (
            tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "input_ids": ints(feature.input_ids),
                        "input_mask": ints(feature.input_mask),
                        "segment_ids": ints(feature.segment_ids),
                        "label_ids": ints(feature.label_ids),
                        "unique_ids": ints([feature.unique_id]),
                    }
                )
            ).SerializeToString(deterministic=True)
            for feature in features
        ),
    )


# The entries of the metadata beside NER records (`RecordMetadata.entries`): the label
# list (label id i is labels[i]) and its tag scheme (the one the model learns in), the
# source file's tag scheme, how the features were made (document_context: windows over
# whole documents), the vocabulary's size, counts,
# and the label id of positions without a label.
METADATA_ENTRIES = (
    "labels",
    "label_scheme",
    "tag_scheme",
    "max_seq_length",
    "doc_stride",
    "document_context",
    "do_lower_case",
    "vocab_size",
    "num_sentences",
    "num_words",
    "num_features",
    "label_ignore_id",
)
# The metadata entry that counts the records (windows).
COUNT_KEY = "num_features"


def describe(
    sentences: Sequence[Sentence],
    features: Sequence,
    labels: Sequence[str],
    label_scheme: str,
    tag_scheme: str,
    max_seq_length: int,
    doc_stride: int,
    do_lower_case: bool,
    vocab_size: int,
    document_context: bool = False,
) -> RecordMetadata:
    """The metadata of `features`, made from `sentences` (entries: METADATA_ENTRIES)."""
    return RecordMetadata.from_entries(
        dict(
            labels=list(labels),
            label_scheme=label_scheme,
            tag_scheme=tag_scheme,
            max_seq_length=max_seq_length,
            doc_stride=doc_stride,
            document_context=document_context,
            do_lower_case=do_lower_case,
            vocab_size=vocab_size,
            num_sentences=len(sentences),
            num_words=sum(len(s.words) for s in sentences),
            num_features=len(features),
            label_ignore_id=LABEL_IGNORE_ID,
        ),
        COUNT_KEY,
    )


def write_metadata(record_file: str, metadata: RecordMetadata) -> None:
    """Writes `<record_file>.meta.json` (`records.write_metadata`)."""
    records.write_metadata(record_file, RECORD_FORMAT, dict(metadata.entries))


def read_metadata(record_file: str) -> RecordMetadata:
    """The metadata of `record_file`.

    Raises:
        FileNotFoundError: there is none.
        ValueError: naming the file, for another format, or a missing or unknown
            entry.
    """
    entries = records.read_metadata(record_file, RECORD_FORMAT)
    for key in records.METADATA_KEYS:
        entries.pop(key, None)
    unknown = sorted(set(entries) - set(METADATA_ENTRIES))
    missing = sorted(set(METADATA_ENTRIES) - set(entries))
    if unknown or missing:
        raise UserError(
            f"{records.metadata_path(record_file)}: bad NER metadata: "
            f"unknown keys {unknown}, missing keys {missing}"
        )
    return RecordMetadata.from_entries(entries, COUNT_KEY)


# ----------------------------------------------------------------------------
# tf.data.
# ----------------------------------------------------------------------------


def decode_records(serialized: tf.Tensor, max_seq_length: int) -> dict[str, tf.Tensor]:
    """Parses a batch of serialized examples written by `write_tfrecord`.

    Args:
        serialized: string [B].
        max_seq_length: S.

    Returns:
        int32 `input_word_ids`, `input_mask`, `input_type_ids` and `label_ids`
        [B, S] (LABEL_IGNORE_ID where a position carries no label).
    """
    spec = {
        name: tf.io.FixedLenFeature([max_seq_length], tf.int64)
        for name in (*records.ENCODER_INPUT_NAMES, "label_ids")
    }
    return records.parse_features(serialized, spec)


# The features of a batch with a sequence axis (cut with the batch).
SEQUENCE_FEATURES = (*input_pipeline.SEQUENCE_FEATURES, "label_ids")


def build_dataset(
    record_file: str,
    metadata: RecordMetadata,
    batch_size: int,
    is_training: bool,
    seed: int | None = None,
    input_context: tf.distribute.InputContext | None = None,
    *,
    shuffle_buffer_size: int = input_pipeline.DEFAULT_SHUFFLE_BUFFER_SIZE,
    pad_to_max_seq_length: bool = False,
    group_by_length: bool = False,
) -> tf.data.Dataset:
    """Batches of a file's windows, as the Trainer takes them
    (`input_pipeline.batched_records`).

    Each element: int32 `input_word_ids`, `input_mask`, `input_type_ids` and
    `label_ids` [B, <= S] (LABEL_IGNORE_ID where a position carries no label), cut to
    the batch's longest window unless `pad_to_max_seq_length`. Training shuffles
    each epoch, repeats and drops the last partial batch; otherwise the file is read
    once, in order.

    Args:
        record_file: a file written by `write_tfrecord`.
        metadata: its metadata (`read_metadata`), for S and the number of windows.
        batch_size: the global batch size; under `input_context` the per-replica
            size is used and each input pipeline reads its share of the records.
        seed, input_context, shuffle_buffer_size, pad_to_max_seq_length,
            group_by_length: as `input_pipeline.batched_records` takes them.
    """
    return input_pipeline.batched_records(
        input_pipeline.tfrecord_dataset(record_file, input_context),
        metadata,
        lambda serialized: decode_records(serialized, metadata.max_seq_length),
        batch_size,
        is_training,
        seed,
        input_context,
        shuffle_buffer_size=shuffle_buffer_size,
        pad_to_max_seq_length=pad_to_max_seq_length,
        group_by_length=group_by_length,
        sequence_features=SEQUENCE_FEATURES,
    )


def inference_dataset(
    features: Sequence, batch_size: int, pad_to_max_seq_length: bool = False
) -> tf.data.Dataset:
    """Features held in memory, once, in order, the last batch partial.

    Each element: int32 `input_word_ids`, `input_mask`, `input_type_ids`,
    `label_ids` [B, <= S] (cut to the batch's longest window unless
    `pad_to_max_seq_length`) and `unique_ids` [B].
    """
    columns = {
        "input_word_ids": [f.input_ids for f in features],
        "input_mask": [f.input_mask for f in features],
        "input_type_ids": [f.segment_ids for f in features],
        "label_ids": [f.label_ids for f in features],
        "unique_ids": [f.unique_id for f in features],
    }
    tensors = {k: np.asarray(v, dtype=np.int32) for k, v in columns.items()}
    max_seq_length = tensors["input_mask"].shape[-1] if features else 1
    dataset = tf.data.Dataset.from_tensor_slices(tensors).batch(batch_size)
    return input_pipeline.cut_batches(
        dataset, max_seq_length, pad_to_max_seq_length, SEQUENCE_FEATURES
    ).prefetch(tf.data.AUTOTUNE)
