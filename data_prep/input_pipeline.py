"""The one input pipeline: how every dataset builder (classifier, NER, SQuAD,
pre-training) reads its TFRecords, orders, batches and cuts them, and the one
metadata type they take.

The contract. Every builder takes, in this order,

  (files, metadata, batch_size, is_training, seed=None, input_context=None, *,
   shuffle_buffer_size, pad_to_max_seq_length, group_by_length)

`files` is the record file or files (each builder names it as it takes them);
`batch_size` is the global batch size (over all replicas); under a
`tf.distribute.InputContext` each input pipeline reads its share of the records
(every `num_input_pipelines`-th) and batches at the per-replica size. `metadata` is a
`RecordMetadata`. A builder only says how its records decode (`decode_batch`) and
which of its features are sequences; `batched_records` does the rest:

- Training: every epoch a new seeded order of the records (a shuffle buffer of at
  most the file; one buffer never holds two epochs, so epochs do not mix), repeated.
  Batches of exactly the per-replica size run on across an epoch's end: step k holds
  the records k*B .. (k+1)*B - 1 of that stream, as `finetuning.epoch_end_steps`
  counts epochs. With `group_by_length`, records of similar lengths share a batch
  (`length_grouped_order`). Evaluation and prediction read the file once, in order,
  the last batch partial.
- Cut to length. Records keep the original release's layout, every sequence padded
  to max_seq_length, so that record files and feature caches stay valid. Each batch
  is cut to the longest example it holds (its last position with `input_mask` 1;
  over every choice of a multiple-choice example), rounded up to one of a few sizes
  (`length_sizes`), so that a compiled step sees a bounded number of shapes. The
  positions cut are padding, which the attention mask and the labels (-1, or
  positions inside the real tokens) leave inert: a cut batch computes what the full
  one does, up to float summation order. Dropout is the exception: its masks are
  drawn for the shape computed, so the draws differ (equal in distribution).
  `pad_to_max_seq_length` keeps the full padding (static shapes, for TPUs).

Where the pre-training builder differs (`pretraining_data.pretraining_dataset`), for
what its shards are: a corpus read as a stream, not a file of a task's examples. It
keeps the arguments and their order, and the cut, but
- takes no `group_by_length`: grouping holds every record in memory to sort an
  epoch, and create_pretraining_data fills nearly every sequence to max_seq_length;
- orders its records itself: every epoch the shards in a new seeded order, read
  interleaved, through a buffer of `PRETRAINING_SHUFFLE_BUFFER_SIZE` records, epochs
  never mixed; under an input context each pipeline reads its own shards, or (fewer
  shards than pipelines) its slice of every global batch;
- defaults `seed` to `DEFAULT_SEED`, not None: pipelines that slice one stream must
  read it in one order.
`tests/data_prep/test_input_pipeline.py` checks every builder's arguments against
`BUILDER_ARGUMENTS` and `BUILDER_OPTIONS`.

Shape legend: B batch, S sequence (max_seq_length), C choices.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Callable, Iterator, Mapping, Sequence

from absl import logging
import numpy as np
import tensorflow as tf

from data_prep import records

# The encoder inputs: the features of every task that have a sequence axis.
SEQUENCE_FEATURES = ("input_word_ids", "input_mask", "input_type_ids")
# Training records in the shuffle buffer unless told otherwise (--shuffle_buffer_size).
DEFAULT_SHUFFLE_BUFFER_SIZE = 10000
# A run's seed unless told otherwise (--seed): of the records' order, and in the
# runners of initialisation and dropout too.
DEFAULT_SEED = 12345
# The contract of every dataset builder: its arguments in order, then its keyword
# options (the module docstring says where pre-training differs).
BUILDER_ARGUMENTS = ("files", "metadata", "batch_size", "is_training", "seed", "input_context")
BUILDER_OPTIONS = ("shuffle_buffer_size", "pad_to_max_seq_length", "group_by_length")
# Length grouping: records sorted by length together, in batches.
DEFAULT_GROUP_BATCHES = 50
# Cut lengths: multiples of SMALLEST_SIZE, then SIZES_PER_DOUBLING sizes per doubling.
SMALLEST_SIZE = 16
SIZES_PER_DOUBLING = 4


# ----------------------------------------------------------------------------
# Metadata.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RecordMetadata:
    """What the `.meta.json` beside a record file says, as every builder takes it.

    Attributes:
      max_seq_length: S, the length sequences are padded to in the records.
      num_records: records in the file: classifier examples, NER windows, SQuAD
        features, pre-training instances (None: not known, e.g. shards of the
        original release, which have no metadata).
      entries: every entry of the metadata as written (settings, labels, counts),
        read-only; `metadata[key]`, `key in metadata` and `metadata.get(key)` read
        them.
    """

    max_seq_length: int
    num_records: int | None
    entries: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "entries", types.MappingProxyType(dict(self.entries)))

    def __getitem__(self, key: str) -> Any:
        return self.entries[key]

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def get(self, key: str, default: Any = None) -> Any:
        return self.entries.get(key, default)

    @classmethod
    def from_entries(cls, entries: Mapping[str, Any], count_key: str) -> RecordMetadata:
        """From the entries of a metadata file; `count_key` names its record count
        ("num_examples", "num_features", "num_instances": as each format writes it)."""
        return cls(entries["max_seq_length"], entries[count_key], entries)

    @classmethod
    def read(cls, record_file: str, record_format: str, count_key: str) -> RecordMetadata:
        """The metadata of `record_file` (`records.read_metadata`: an error naming the
        file when there is none, or of another format)."""
        return cls.from_entries(records.read_metadata(record_file, record_format), count_key)


# ----------------------------------------------------------------------------
# Reading and ordering.
# ----------------------------------------------------------------------------


def per_replica_batch_size(
    batch_size: int, input_context: tf.distribute.InputContext | None
) -> int:
    """The B of one replica for a global batch size (itself without a strategy)."""
    if input_context is None:
        return batch_size
    return input_context.get_per_replica_batch_size(batch_size)


def pipeline_batch_size(batch_size: int, input_context: tf.distribute.InputContext | None) -> int:
    """One input pipeline's share of a global batch (the batch size without a strategy)."""
    if input_context is None:
        return batch_size
    return batch_size // input_context.num_input_pipelines


def tfrecord_dataset(
    files: str | Sequence[str], input_context: tf.distribute.InputContext | None = None
) -> tf.data.Dataset:
    """The serialized records of `files`, in file order.

    Under a distribution strategy with several input pipelines, each pipeline reads
    every `num_input_pipelines`-th record from its `input_pipeline_id` on.
    """
    dataset = tf.data.TFRecordDataset(files)
    if input_context is not None and input_context.num_input_pipelines > 1:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return dataset


def shuffle_each_epoch(
    dataset: tf.data.Dataset, shuffle_buffer_size: int, num_records: int | None, seed: int | None
) -> tf.data.Dataset:
    """Training order: a new, seeded order every epoch (a buffer of at most
    `num_records`), the epochs one after the other, repeated."""
    buffer_size = (
        shuffle_buffer_size if num_records is None else min(shuffle_buffer_size, num_records)
    )
    return dataset.shuffle(max(1, buffer_size), seed=seed, reshuffle_each_iteration=True).repeat()


def length_grouped_order(
    lengths: np.ndarray,
    batch_size: int,
    seed: int | None,
    epoch: int,
    group_batches: int = DEFAULT_GROUP_BATCHES,
) -> np.ndarray:
    """One epoch's order of the records, similar lengths batched together.

    The records are permuted (seeded by `seed` and `epoch`), taken in groups of
    `group_batches` batches, sorted by length within each group and cut into
    batches; the batches of the whole epoch are then put in a seeded random order.
    Batches run on across an epoch's end (`batched_records`): the first records of
    this epoch complete the previous epoch's last batch, and the last ones start the
    next epoch's first; those two partial batches keep their places.

    Args:
      lengths: int [N], each record's length.
      batch_size: records per batch (of one input pipeline).
      seed: the run's seed (None: another order every run).
      epoch: 0, 1, ...
      group_batches: batches per sorted group.

    Returns:
      int64 [N], a permutation of the record indices.
    """
    lengths = np.asarray(lengths)
    n = len(lengths)
    rng = np.random.default_rng(None if seed is None else [seed, epoch])
    order = rng.permutation(n)
    head = min((-epoch * n) % batch_size, n)  # completes the previous epoch's last batch
    body, size = order[head:], batch_size * max(1, group_batches)
    groups = [body[i : i + size] for i in range(0, len(body), size)]
    if groups:
        body = np.concatenate([g[np.argsort(lengths[g], kind="stable")] for g in groups])
    full = len(body) // batch_size * batch_size
    batches = body[:full].reshape(-1, batch_size)[rng.permutation(full // batch_size)]
    return np.concatenate([order[:head], batches.reshape(-1), body[full:]]).astype(np.int64)


def record_lengths(
    serialized: Sequence[bytes], decode_batch: Callable[[tf.Tensor], dict]
) -> np.ndarray:
    """int [N]: the length of each serialized record (its longest choice's, for
    multiple choice)."""
    lengths = [np.zeros([0], np.int32)]
    for start in range(0, len(serialized), 1024):
        mask = decode_batch(tf.constant(serialized[start : start + 1024]))["input_mask"]
        lengths.append(sequence_lengths(mask).numpy().reshape(mask.shape[0], -1).max(-1))
    return np.concatenate(lengths)


def length_grouped_records(
    records_dataset: tf.data.Dataset,
    decode_batch: Callable[[tf.Tensor], dict],
    batch_size: int,
    seed: int | None,
    group_batches: int = DEFAULT_GROUP_BATCHES,
) -> tf.data.Dataset:
    """The serialized records epoch after epoch in `length_grouped_order`, repeated.

    The records are held in memory (about the record file's size): the order of an
    epoch needs every record's length first.
    """
    serialized = list(records_dataset.as_numpy_iterator())
    lengths = record_lengths(serialized, decode_batch)
    warn_if_one_group(len(serialized), batch_size, group_batches)

    def generate() -> Iterator[bytes]:
        epoch = 0
        while serialized:
            for index in length_grouped_order(lengths, batch_size, seed, epoch, group_batches):
                yield serialized[index]
            epoch += 1

    return tf.data.Dataset.from_generator(generate, output_signature=tf.TensorSpec([], tf.string))


# ----------------------------------------------------------------------------
# Cutting batches to their length.
# ----------------------------------------------------------------------------


def length_sizes(max_seq_length: int) -> list[int]:
    """The lengths a batch is cut to, ascending, the last one `max_seq_length`.

    Multiples of 16 up to 128 (16, 32, ..., 128), then SIZES_PER_DOUBLING per
    doubling: 160, 192, 224, 256, 320, 384, 448, 512, ...: a batch computes at most a
    quarter more positions than its longest example above 64, and a compiled step
    sees at most 8 shapes at max_seq_length 128, 16 at 512.
    """
    sizes, size, step = [], SMALLEST_SIZE, SMALLEST_SIZE
    while size < max_seq_length:
        sizes.append(size)
        if size >= 8 * step:
            step *= 2
        size += step
    return sizes + [max_seq_length]


def cut_length(longest, max_seq_length: int):
    """The size of `length_sizes(max_seq_length)` a batch whose longest example has
    `longest` positions is cut to (an int, or an int32 tensor for a tensor)."""
    sizes = length_sizes(max_seq_length)
    if isinstance(longest, (int, np.integer)):
        return (
            next(size for size in sizes if size >= longest) if longest <= sizes[-1] else sizes[-1]
        )
    index = tf.searchsorted(
        tf.constant(sizes, tf.int32), tf.reshape(tf.cast(longest, tf.int32), [1])
    )
    return tf.constant(sizes, tf.int32)[tf.minimum(index[0], len(sizes) - 1)]


def sequence_lengths(input_mask: tf.Tensor) -> tf.Tensor:
    """int32 [...]: the last position with mask 1, plus one, of `input_mask` [..., S]."""
    positions = tf.range(1, tf.shape(input_mask)[-1] + 1, dtype=tf.int32)
    return tf.reduce_max(tf.where(tf.cast(input_mask, tf.bool), positions, 0), axis=-1)


def cut_batch(
    batch: dict, max_seq_length: int, sequence_features: Sequence[str] = SEQUENCE_FEATURES
) -> dict:
    """`batch` with its sequence features ([B, S] or [B, C, S]) cut along the last
    axis to `cut_length` of its longest example; other features as they are."""
    length = cut_length(tf.reduce_max(sequence_lengths(batch["input_mask"])), max_seq_length)
    return {
        key: value[..., :length] if key in sequence_features else value
        for key, value in batch.items()
    }


def as_written(fn: Callable) -> Callable:
    """`fn` traced as written, without AutoGraph's rewriting of its Python control flow
    (and of every function it calls) into graph control flow. For functions whose
    branches and loops depend only on Python values, as every decoder and step of this
    project: the graph is the same, and the rewriting took about a quarter of the time
    of a small fine-tuning run. A branch on a tensor in such a function is an error
    when it is traced ("using a `tf.Tensor` as a Python `bool` is not allowed")."""
    return tf.autograph.experimental.do_not_convert(fn)


def cut_batches(
    dataset: tf.data.Dataset,
    max_seq_length: int,
    pad_to_max_seq_length: bool,
    sequence_features: Sequence[str] = SEQUENCE_FEATURES,
) -> tf.data.Dataset:
    """Batches of feature dicts, each cut to its length (`cut_batch`) unless
    `pad_to_max_seq_length`."""
    if pad_to_max_seq_length:
        return dataset
    return dataset.map(
        as_written(lambda batch: cut_batch(batch, max_seq_length, sequence_features)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def pad_to_length(array: np.ndarray, length: int, axis: int = 1, value=0) -> np.ndarray:
    """`array` padded with `value` along `axis` to `length` (outputs of cut batches
    back in the records' layout)."""
    missing = length - array.shape[axis]
    if missing <= 0:
        return array
    widths = [(0, 0)] * array.ndim
    widths[axis] = (0, missing)
    return np.pad(array, widths, constant_values=value)


# ----------------------------------------------------------------------------
# The pipeline.
# ----------------------------------------------------------------------------


def batched_records(
    records_dataset: tf.data.Dataset,
    metadata: RecordMetadata,
    decode_batch: Callable[[tf.Tensor], dict],
    batch_size: int,
    is_training: bool,
    seed: int | None = None,
    input_context: tf.distribute.InputContext | None = None,
    *,
    shuffle_buffer_size: int = DEFAULT_SHUFFLE_BUFFER_SIZE,
    pad_to_max_seq_length: bool = False,
    group_by_length: bool = False,
    sequence_features: Sequence[str] = SEQUENCE_FEATURES,
    drop_remainder: bool | None = None,
) -> tf.data.Dataset:
    """Batches of decoded feature dicts from one input pipeline's serialized records,
    as the Trainer takes them (the module docstring says how).

    Args:
      records_dataset: this pipeline's serialized records (`tfrecord_dataset`).
      metadata: their `RecordMetadata` (S, and the count for the shuffle buffer).
      decode_batch: string [B] -> dict of tensors [B, ...], with `input_mask`.
      batch_size: the global batch size.
      is_training: shuffle each epoch and repeat (else: once, in order).
      seed: the order's seed.
      input_context: the pipeline's place under a distribution strategy.
      shuffle_buffer_size: records in the shuffle buffer (at most the file's).
      pad_to_max_seq_length: keep every batch at S (static shapes).
      group_by_length: training batches of similar lengths (`length_grouped_order`).
      sequence_features: the features with a sequence axis, cut with the batch.
      drop_remainder: defaults to `is_training`.
    """
    if drop_remainder is None:
        drop_remainder = is_training
    if is_training and group_by_length:
        records_dataset = length_grouped_records(
            records_dataset, decode_batch, pipeline_batch_size(batch_size, input_context), seed
        )
    elif is_training:
        records_dataset = shuffle_each_epoch(
            records_dataset, shuffle_buffer_size, metadata.num_records, seed
        )
    dataset = records_dataset.batch(
        per_replica_batch_size(batch_size, input_context), drop_remainder=drop_remainder
    )
    dataset = dataset.map(as_written(decode_batch), num_parallel_calls=tf.data.AUTOTUNE)
    dataset = cut_batches(
        dataset, metadata.max_seq_length, pad_to_max_seq_length, sequence_features
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def warn_if_one_group(num_records: int, batch_size: int, group_batches: int) -> bool:
    """Warns when `--group_by_length` sorts the whole training set as one group: then
    each batch holds nearly the same records every epoch, which cost entity F1 on the
    bundled sciner set (docs/padding.md). Returns whether it warned."""
    group = batch_size * max(1, group_batches)
    if num_records <= 0 or num_records > group:
        return False
    logging.warning(
        "--group_by_length on %d training examples, no more than one group of %d "
        "(%d batches of %d): every epoch sorts the whole set by length, so each batch "
        "holds nearly the same examples every epoch, which can cost accuracy "
        "(docs/padding.md). Consider training without --group_by_length.",
        num_records,
        group,
        group_batches,
        batch_size,
    )
    return True


def warn_if_batch_exceeds_data(num_records: int, batch_size: int, flag: str) -> bool:
    """Warns (naming `flag`) when a training batch is larger than the data: the data is
    repeated to fill it, so a batch holds some examples twice. Returns whether it
    warned."""
    if num_records <= 0 or batch_size <= num_records:
        return False
    logging.warning(
        "%s=%d is larger than the %d training examples: every batch holds some of them "
        "more than once (the data is repeated to fill it). Use a batch size of at most "
        "%d, or more data.",
        flag,
        batch_size,
        num_records,
        num_records,
    )
    return True
