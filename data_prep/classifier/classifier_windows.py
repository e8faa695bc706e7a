"""Texts longer than a window (--long_input=windows): every window of a text as one
classifier record with the text's label, and the windows' logits joined back into one
prediction per text.

A text's word pieces are cut into windows as SQuAD cuts its contexts
(`data_prep.context_windows`: windows of at most `room` pieces starting every
`doc_stride` pieces until one reaches the end). A single text has room for
max_seq_length - 2 pieces (`[CLS] window [SEP]`). Of a pair, the longer text is
windowed and the shorter one comes whole with every window, in its place (A or B;
ties window A), cut at (max_seq_length - 3) // 2 pieces if it is longer than that, so
that every window keeps at least half the sequence for the longer text. A text that
fits is one window packed exactly as `classifier_features.convert_example` packs it.

At most `max_windows` windows per text are kept (its first ones): one huge text
cannot fill memory; the metadata counts the texts cut (`num_texts_cut`).

Records: those of `classifier_features` plus int64 `example_index` [1], the text's
position in its split, so that evaluation and prediction join each text's windows
(`pool_windows`: the mean of their logits, or the maximum). `serving.classifier` does
the same in-graph.
"""

from __future__ import annotations


import numpy as np
import tensorflow as tf
from absl import logging

from common.errors import UserError
from common.progress import Progress
from data_prep import context_windows, input_pipeline, records
from data_prep.classifier import classifier_features
from data_prep.classifier.classifier_reader import DataProcessor, MultipleChoiceExample
from data_prep.input_pipeline import RecordMetadata
from data_prep.text import tokenization

RECORD_FORMAT = "bert_classifier_windows_tfrecord/1"
COUNT_KEY = "num_examples"  # Records: windows.
POOLINGS = ("mean", "max")


def check_window_settings(max_seq_length: int, doc_stride: int, max_windows: int) -> None:
    """A usage error (ValueError naming the flag) for windows that cannot work."""
    room = max_seq_length - 2
    if doc_stride < 1 or doc_stride >= room:
        raise ValueError(
            f"--doc_stride={doc_stride}: windows of --max_seq_length={max_seq_length} hold "
            f"{room} pieces of a text; give a stride from 1 to {room - 1} (they overlap by "
            f"the rest)"
        )
    if max_windows < 1:
        raise ValueError(f"--max_windows_per_text={max_windows}: give at least 1")


def window_pieces(
    ids_a: list[int], ids_b: list[int] | None, max_seq_length: int, doc_stride: int
) -> list[tuple[list[int], list[int] | None]]:
    """The (segment A, segment B) of every window of one text (pair), in order."""
    if ids_b is None:
        spans = context_windows.windows(len(ids_a), max_seq_length - 2, doc_stride)
        return [(ids_a[start : start + length], None) for start, length in spans]
    a_is_long = len(ids_a) >= len(ids_b)
    long, short = (ids_a, ids_b) if a_is_long else (ids_b, ids_a)
    short = short[: (max_seq_length - 3) // 2]
    spans = context_windows.windows(len(long), max_seq_length - 3 - len(short), doc_stride)
    pieces = [long[start : start + length] for start, length in spans]
    return [(piece, short) if a_is_long else (short, piece) for piece in pieces]


def convert_example_windows(
    example,
    label_list,
    max_seq_length: int,
    tokenizer,
    doc_stride: int,
    max_windows: int,
    is_regression: bool = False,
) -> tuple[list[classifier_features.InputFeatures], int]:
    """The features of an example's windows (at most `max_windows`) and how many
    windows the whole text has."""
    if isinstance(example, MultipleChoiceExample):
        raise UserError("--long_input=windows is for classification and regression tasks")
    label_map = {label: i for i, label in enumerate(label_list)}
    label_id = classifier_features._label_id(example.label, label_map, is_regression, example.guid)
    ids_a = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(example.text_a))
    ids_b = None
    if example.text_b is not None:
        ids_b = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(example.text_b))
    windows = window_pieces(ids_a, ids_b, max_seq_length, doc_stride)
    features = []
    for a, b in windows[:max_windows]:
        packed, _ = classifier_features._encode(tokenizer, a, b, max_seq_length)
        features.append(
            classifier_features.InputFeatures(
                input_ids=packed["input_word_ids"],
                input_mask=packed["input_mask"],
                segment_ids=packed["input_type_ids"],
                label_id=label_id,
                truncated=len(windows) > max_windows,
            )
        )
    return features, len(windows)


def serialize_window(features, example_index: int, is_regression: bool) -> bytes:
    """A classifier record with the text's `example_index`."""
    example = tf.train.Example.FromString(
        classifier_features.serialize_features(features, is_regression)
    )
    example.features.feature["example_index"].CopyFrom(records.int64_feature([example_index]))
    return example.SerializeToString(deterministic=True)


def _settings(processor, data_dir, split, tokenizer, max_seq_length, doc_stride, max_windows):
    """What determines the records: `classifier_features`' settings and the windows'."""
    return dict(
        classifier_features._settings(processor, data_dir, split, tokenizer, max_seq_length),
        long_input="windows",
        doc_stride=doc_stride,
        max_windows_per_text=max_windows,
    )


def get_or_create_window_features(
    processor: DataProcessor,
    data_dir: str,
    split: str,
    output_file: str,
    tokenizer: tokenization.FullTokenizer,
    max_seq_length: int,
    doc_stride: int,
    max_windows: int,
    progress: Progress | None = None,
) -> RecordMetadata:
    """The metadata of `output_file` (one record per window), rebuilt when its inputs or
    settings changed (as `classifier_features.get_or_create_features`, with the model's
    `tokenizer`).

    Metadata entries: those of `classifier_features.create_features` (num_examples
    counts the windows), and long_input, doc_stride, max_windows_per_text, num_texts,
    num_texts_cut (texts with more windows than max_windows_per_text)."""
    split = processor.split_name(split)
    check_window_settings(max_seq_length, doc_stride, max_windows)
    settings = _settings(
        processor, data_dir, split, tokenizer, max_seq_length, doc_stride, max_windows
    )
    input_files = processor.input_files(data_dir, split)
    metadata = classifier_features.reused_records(
        output_file, RECORD_FORMAT, settings, input_files, "windows", (COUNT_KEY, "num_texts")
    )
    if metadata is not None:
        return metadata
    examples = processor.get_examples(data_dir, split)
    progress = progress if progress is not None else Progress()
    cut = []

    def serialized():
        for index, example in enumerate(
            progress.iterate(examples, f"windows {split}", len(examples), "example")
        ):
            features, total = convert_example_windows(
                example,
                settings["labels"],
                max_seq_length,
                tokenizer,
                doc_stride,
                max_windows,
                processor.is_regression,
            )
            if total > max_windows:
                cut.append((example.guid, total))
            for window in features:
                yield serialize_window(window, index, processor.is_regression)

    metadata = classifier_features.write_records(
        output_file,
        RECORD_FORMAT,
        settings,
        tokenizer,
        input_files,
        serialized(),
        lambda: {"num_texts": len(examples), "num_texts_cut": len(cut)},
    )
    if cut:
        logging.warning(
            "%s %s: %d of %d texts have more than --max_windows_per_text=%d windows (up to "
            "%d, e.g. %s): only their first %d are read",
            processor.name,
            split,
            len(cut),
            len(examples),
            max_windows,
            max(total for _, total in cut),
            cut[0][0],
            max_windows,
        )
    logging.info(
        "Wrote %d windows of %d %s texts to %s",
        metadata.num_records,
        len(examples),
        split,
        output_file,
    )
    return metadata


def build_window_dataset(
    input_file: str, metadata: RecordMetadata, batch_size: int, pad_to_max_seq_length: bool
) -> tf.data.Dataset:
    """Every window once, in order, for evaluation and prediction: the features of
    `classifier_features.decode_records` and `example_index` int32 [B]."""
    spec = {"example_index": tf.io.FixedLenFeature([], tf.int64)}

    def decode(serialized):
        features = classifier_features.decode_records(
            serialized, metadata.max_seq_length, None, metadata["is_regression"]
        )
        index = tf.io.parse_example(serialized, spec)["example_index"]
        return dict(features, example_index=tf.cast(index, tf.int32))

    return input_pipeline.batched_records(
        input_pipeline.tfrecord_dataset(input_file, None),
        metadata,
        decode,
        batch_size,
        False,
        pad_to_max_seq_length=pad_to_max_seq_length,
    )


def pool_windows(
    values: np.ndarray, example_index: np.ndarray, num_texts: int, pooling: str
) -> np.ndarray:
    """One row per text from its windows' rows: their mean or their maximum.

    Args:
      values: float [N, K], a row per window.
      example_index: int [N], each window's text, every text present.
      num_texts: T.
      pooling: "mean" or "max".

    Returns:
      float64 [T, K].
    """
    values = np.asarray(values, np.float64)
    counts = np.bincount(example_index, minlength=num_texts)
    if len(counts) != num_texts or np.any(counts == 0):
        raise ValueError(f"windows of {np.count_nonzero(counts)} texts, expected {num_texts}")
    if pooling == "mean":
        sums = np.zeros((num_texts,) + values.shape[1:])
        np.add.at(sums, example_index, values)
        return sums / counts.reshape((-1,) + (1,) * (values.ndim - 1))
    if pooling == "max":
        pooled = np.full((num_texts,) + values.shape[1:], -np.inf)
        np.maximum.at(pooled, example_index, values)
        return pooled
    raise ValueError(f"window pooling {pooling!r} is not one of {POOLINGS}")


def first_of_each_text(values: np.ndarray, example_index: np.ndarray, num_texts: int):
    """values [N, ...] -> [T, ...]: each text's first window's row (its label)."""
    texts, first = np.unique(example_index, return_index=True)
    if len(texts) != num_texts:
        raise ValueError(f"windows of {len(texts)} texts, expected {num_texts}")
    return np.asarray(values)[first]
