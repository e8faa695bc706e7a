"""SQuAD features as TFRecords: writing, metadata and the training-record cache, tf.data.

TFRecord features (the original release's names): int64 `unique_ids` [1],
`input_ids`, `input_mask`, `segment_ids` [S]; for training also `start_positions`,
`end_positions`, `is_impossible` [1]. Beside each file, `<file>.meta.json`
(`records.write_metadata`, format `RECORD_FORMAT`) holds the settings and counts.

`build_train_features` writes the training records once and reuses them while the
training file, the vocabulary, the settings and the shuffle seed are the same;
`build_predict_features` keeps the examples and features that post-processing needs.

Typical use:
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  data = build_train_features(train_file, record_file, tokenizer,
                              FeatureSettings(384, 128, 64, True, False), seed=12345)
  dataset = build_dataset(data.file, data.metadata, batch_size=32, is_training=True)

Shape legend: B batch, S sequence (max_seq_length).
"""

from __future__ import annotations

import collections
import dataclasses
import random
from typing import Any, Iterable, Mapping, Sequence

from absl import logging
import tensorflow as tf

from common.progress import Progress
from common.errors import UserError
from data_prep import input_pipeline, records
from data_prep.squad import squad_features, squad_reader
from data_prep.input_pipeline import RecordMetadata
from data_prep.squad.squad_features import InputFeatures
from data_prep.text import tokenization

# Raise the version when the records written for the same inputs change.
RECORD_FORMAT = "bert_squad_tfrecord/2"
# The metadata entry that counts the records (windows).
COUNT_KEY = "num_features"


@dataclasses.dataclass(frozen=True)
class FeatureSettings:
    """What, besides the input file, determines the features."""

    max_seq_length: int
    doc_stride: int
    max_query_length: int
    do_lower_case: bool
    version_2_with_negative: bool
    preserve_unused_tokens: bool = False


@dataclasses.dataclass(frozen=True)
class TrainData:
    """The training TFRecord file and its metadata."""

    file: str
    metadata: RecordMetadata

    @property
    def num_features(self) -> int:
        return self.metadata.num_records


@dataclasses.dataclass(frozen=True)
class PredictData:
    """What prediction needs: the record file and its metadata, and the examples and
    features that post-processing maps the logits back onto."""

    file: str
    metadata: RecordMetadata
    examples: list
    features: list


# ----------------------------------------------------------------------------
# Writing.
# ----------------------------------------------------------------------------


def feature_to_tf_example(feature: InputFeatures, is_training: bool) -> tf.train.Example:
    """The `tf.train.Example` of a feature, with the original release's keys.

    int64 `unique_ids` [1], `input_ids`, `input_mask`, `segment_ids` [S]; for
    training also `start_positions`, `end_positions`, `is_impossible` [1].
    """
    ints = records.int64_feature
    fields = collections.OrderedDict()
    fields["unique_ids"] = ints([feature.unique_id])
    fields["input_ids"] = ints(feature.input_ids)
    fields["input_mask"] = ints(feature.input_mask)
    fields["segment_ids"] = ints(feature.segment_ids)
    if is_training:
        fields["start_positions"] = ints([feature.start_position])
        fields["end_positions"] = ints([feature.end_position])
        fields["is_impossible"] = ints([int(feature.is_impossible)])
    return tf.train.Example(features=tf.train.Features(feature=fields))


def write_features(features: Iterable[InputFeatures], output_file: str, is_training: bool) -> int:
    """Writes features to a TFRecord file, atomically (`records.write_tfrecord`).

    Args:
        features: e.g. the iterator from `convert_examples_to_features`.
        output_file: path of the TFRecord file.
        is_training: also write the labels.

    Returns:
        The number of features written.
    """
    count = records.write_tfrecord(
        output_file,
        (
            feature_to_tf_example(feature, is_training).SerializeToString(deterministic=True)
            for feature in features
        ),
    )
    logging.info("Wrote %d features to %s.", count, output_file)
    return count


def write_metadata(
    record_file: str,
    *,
    max_seq_length: int,
    doc_stride: int,
    max_query_length: int,
    do_lower_case: bool,
    is_training: bool,
    version_2_with_negative: bool,
    num_questions: int,
    num_examples: int,
    num_features: int,
    num_skipped: int = 0,
    vocab_file: str | None = None,
    extra: Mapping[str, Any] | None = None,
    input_files: Sequence[str] = (),
    preserve_unused_tokens: bool = False,
) -> RecordMetadata:
    """Writes the metadata of a SQuAD TFRecord file (`records.write_metadata`).

    Args:
        record_file: the TFRecord file described.
        max_seq_length, doc_stride, max_query_length, do_lower_case: the
            settings the features were made with.
        is_training: the records hold labels.
        version_2_with_negative: impossible questions were read.
        num_questions: questions in the SQuAD file.
        num_examples: examples read (questions less skipped ones).
        num_features: records written.
        num_skipped: questions skipped (answer text not in the context).
        vocab_file: the vocabulary the ids come from.
        extra: more JSON-serializable entries (e.g. what decides whether the file
            can be reused).
        input_files: the SQuAD files read, fingerprinted for reuse checks.
        preserve_unused_tokens: the tokenizer kept `[unusedN]` words whole.

    Returns:
        The metadata written.
    """
    values = dict(
        task="squad",
        is_training=is_training,
        version_2_with_negative=version_2_with_negative,
        max_seq_length=max_seq_length,
        doc_stride=doc_stride,
        max_query_length=max_query_length,
        do_lower_case=do_lower_case,
        preserve_unused_tokens=preserve_unused_tokens,
        num_questions=num_questions,
        num_examples=num_examples,
        num_features=num_features,
        num_skipped=num_skipped,
        vocab_file=vocab_file,
    )
    values.update(extra or {})
    return RecordMetadata.from_entries(
        records.write_metadata(record_file, RECORD_FORMAT, values, input_files), COUNT_KEY
    )


def read_metadata(record_file: str) -> RecordMetadata:
    """The metadata of a record file written here."""
    return RecordMetadata.read(record_file, RECORD_FORMAT, COUNT_KEY)


def _read_usable(
    input_file: str, is_training: bool, version_2_with_negative: bool
) -> squad_reader.SquadReadResult:
    """The examples of a SQuAD file; a ValueError if there are none."""
    result = squad_reader.read_squad_file(input_file, is_training, version_2_with_negative)
    if not result.examples:
        raise UserError(
            f"{input_file}: no usable question ({result.num_questions} "
            f"questions, {len(result.skipped_qas_ids)} skipped)"
        )
    if result.skipped_qas_ids:
        logging.warning(
            "Skipped %d of %d training questions of %s (answer text not found "
            "at its offset); see num_skipped in the metadata.",
            len(result.skipped_qas_ids),
            result.num_questions,
            input_file,
        )
    return result


def build_train_features(
    train_file: str,
    record_file: str,
    tokenizer: tokenization.FullTokenizer,
    settings: FeatureSettings,
    seed: int,
    progress: Progress | None = None,
) -> TrainData:
    """Writes (or reuses) the training records; features are streamed to the file.

    The questions are shuffled (random.Random(seed)) before windowing, as the original
    does, so the windows of one context do not all sit in one shuffle buffer. The
    file is reused while the training file, the vocabulary (by content), `settings`
    and `seed` are those it was written with (`records.reusable_metadata`).
    `tokenizer` is the model's, its vocabulary read once.
    """
    source = dict(
        dataclasses.asdict(settings),
        is_training=True,
        shuffle_seed=seed,
        vocab_sha256=tokenizer.vocab_read.file_sha256,
    )
    metadata = records.reusable_metadata(
        record_file, RECORD_FORMAT, source, [train_file], counts=("num_features",)
    )
    if metadata is not None:
        logging.info("Reusing %s (%d features).", record_file, metadata[COUNT_KEY])
        return TrainData(record_file, RecordMetadata.from_entries(metadata, COUNT_KEY))
    read = _read_usable(train_file, True, settings.version_2_with_negative)
    examples = list(read.examples)
    random.Random(seed).shuffle(examples)
    progress = progress if progress is not None else Progress()
    with progress.task("features train", len(examples), "question") as bar:
        features = squad_features.convert_examples_to_features(
            examples,
            tokenizer,
            settings.max_seq_length,
            settings.doc_stride,
            settings.max_query_length,
            is_training=True,
            bar=bar,
        )
        num_features = write_features(features, record_file, is_training=True)
    metadata = write_metadata(
        record_file,
        **dataclasses.asdict(settings),
        is_training=True,
        num_questions=read.num_questions,
        num_examples=len(examples),
        num_features=num_features,
        num_skipped=len(read.skipped_qas_ids),
        vocab_file=tokenizer.vocab_file,
        extra=dict(shuffle_seed=seed, vocab_sha256=source["vocab_sha256"]),
        input_files=[train_file],
    )
    return TrainData(record_file, metadata)


def build_predict_features(
    predict_file: str,
    record_file: str,
    tokenizer: tokenization.FullTokenizer,
    settings: FeatureSettings,
    progress: Progress | None = None,
) -> PredictData:
    """Reads `predict_file`, keeps its examples and features, writes their records;
    `progress` (`common.progress`) is shown the questions done."""
    read = _read_usable(predict_file, False, settings.version_2_with_negative)
    progress = progress if progress is not None else Progress()
    with progress.task("features predict", len(read.examples), "question") as bar:
        features = list(
            squad_features.convert_examples_to_features(
                read.examples,
                tokenizer,
                settings.max_seq_length,
                settings.doc_stride,
                settings.max_query_length,
                is_training=False,
                bar=bar,
            )
        )
    write_features(features, record_file, is_training=False)
    metadata = write_metadata(
        record_file,
        **dataclasses.asdict(settings),
        is_training=False,
        num_questions=read.num_questions,
        num_examples=len(read.examples),
        num_features=len(features),
        vocab_file=tokenizer.vocab_file,
        input_files=[predict_file],
    )
    return PredictData(record_file, metadata, read.examples, features)


# ----------------------------------------------------------------------------
# Reading.
# ----------------------------------------------------------------------------


def feature_spec(max_seq_length: int, is_training: bool) -> dict:
    """The parsing spec of SQuAD records: `unique_ids` [], the three id fields [S] and,
    for training, `start_positions`, `end_positions`, `is_impossible` []."""
    spec = {"unique_ids": tf.io.FixedLenFeature([], tf.int64)}
    for name in records.ENCODER_INPUT_NAMES:
        spec[name] = tf.io.FixedLenFeature([max_seq_length], tf.int64)
    if is_training:
        for name in ("start_positions", "end_positions", "is_impossible"):
            spec[name] = tf.io.FixedLenFeature([], tf.int64)
    return spec


def decode_records(
    serialized: tf.Tensor, max_seq_length: int, is_training: bool
) -> dict[str, tf.Tensor]:
    """Parses a batch of serialized SQuAD records into int32 tensors.

    Args:
        serialized: string [B].
        max_seq_length: S, as written in the records.
        is_training: the records hold labels.

    Returns:
        `unique_ids` [B], `input_word_ids`, `input_mask`, `input_type_ids` [B, S],
        and for training `start_positions`, `end_positions`, `is_impossible` [B].
    """
    return records.parse_features(serialized, feature_spec(max_seq_length, is_training))


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
    """Batches of flat feature dicts, as the Trainer takes them
    (`input_pipeline.batched_records`).

    Each element: int32 `unique_ids` [B], `input_word_ids`, `input_mask`,
    `input_type_ids` [B, <= S] (cut to the batch's longest window unless
    `pad_to_max_seq_length`; answer positions lie inside the real tokens) and, for
    training, `start_positions`, `end_positions`, `is_impossible` [B]. Training
    shuffles each epoch, repeats and drops the last partial batch; prediction reads
    the file once, in order.

    Args:
        record_file: a file written here.
        metadata: its metadata (`TrainData.metadata`, `PredictData.metadata` or
            `read_metadata`), for S and the number of features.
        batch_size: the global batch size; under `input_context` the per-replica
            size is used and each input pipeline reads its share of the records.
        seed, input_context, shuffle_buffer_size, pad_to_max_seq_length,
            group_by_length: as `input_pipeline.batched_records` takes them.
    """
    return input_pipeline.batched_records(
        input_pipeline.tfrecord_dataset(record_file, input_context),
        metadata,
        lambda serialized: decode_records(serialized, metadata.max_seq_length, is_training),
        batch_size,
        is_training,
        seed,
        input_context,
        shuffle_buffer_size=shuffle_buffer_size,
        pad_to_max_seq_length=pad_to_max_seq_length,
        group_by_length=group_by_length,
    )
