"""tf.data input pipeline over the pre-training TFRecord shards.

The records are those of the original `create_pretraining_data.py`: int64 `input_ids`,
`input_mask`, `segment_ids` [max_seq_length]; int64 `masked_lm_positions`,
`masked_lm_ids` and float `masked_lm_weights` [max_predictions_per_seq];
int64 `next_sentence_labels` [1]. The pipeline renames them to the encoder's names
(`input_word_ids`, `input_mask`, `input_type_ids`) and casts ids to int32.
"""

from __future__ import annotations

import os

import tensorflow as tf

from common.errors import UserError
from data_prep import records


def expand_input_files(pattern: str, what: str = "--input_file") -> list[str]:
    """Comma-separated globs -> files (`records.expand_globs`: sorted per pattern,
    hidden temporary files of unfinished writes skipped; an error if one matches none)."""
    return records.expand_globs(pattern, what)


def feature_spec(max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """`tf.io.parse_single_example` spec of the shards' features."""
    fixed = tf.io.FixedLenFeature
    return {
        "input_ids": fixed([max_seq_length], tf.int64),
        "input_mask": fixed([max_seq_length], tf.int64),
        "segment_ids": fixed([max_seq_length], tf.int64),
        "masked_lm_positions": fixed([max_predictions_per_seq], tf.int64),
        "masked_lm_ids": fixed([max_predictions_per_seq], tf.int64),
        "masked_lm_weights": fixed([max_predictions_per_seq], tf.float32),
        "next_sentence_labels": fixed([1], tf.int64),
    }


def check_shard_metadata(
    files: list[str],
    max_seq_length: int,
    max_predictions_per_seq: int,
    vocab_size: int,
    do_lower_case: bool | None = None,
) -> int:
    """Checks the `.meta.json` of every shard that has one against the run: sequence
    length, masked positions, vocabulary size (ids past the model's embedding table)
    and case. Returns how many shards had metadata."""
    checked = 0
    for path in files:
        metadata_file = records.metadata_path(path)
        if not tf.io.gfile.exists(metadata_file):
            continue
        metadata = records.read_json(metadata_file)
        for key, want, flag in (
            ("max_seq_length", max_seq_length, "--max_seq_length"),
            ("max_predictions_per_seq", max_predictions_per_seq, "--max_predictions_per_seq"),
        ):
            if key in metadata and metadata[key] != want:
                raise UserError(
                    f"{path} was made with {key}={metadata[key]} "
                    f"({metadata_file}) but {flag}={want}"
                )
        if metadata.get("vocab_size", 0) > vocab_size:
            raise UserError(
                f"{path} was made with a vocabulary of "
                f"{metadata['vocab_size']} entries ({metadata_file}) but the "
                f"model's vocab_size is {vocab_size}: its ids would index past "
                f"the embedding table"
            )
        if (
            do_lower_case is not None
            and metadata.get("do_lower_case") is not None
            and metadata["do_lower_case"] != do_lower_case
        ):
            raise UserError(
                f"{path} was made with do_lower_case="
                f"{metadata['do_lower_case']} ({metadata_file}) but the model "
                f"is do_lower_case={do_lower_case}"
            )
        checked += 1
    return checked


def check_shard_shapes(files: list[str], max_seq_length: int, max_predictions_per_seq: int) -> None:
    """Reads the first record of the first shard: a clear error when the shards were
    made with another max_seq_length / max_predictions_per_seq than the flags."""
    path = files[0]
    if os.path.getsize(path) == 0:
        raise UserError(f"pre-training shard {path} is empty")
    for raw in tf.data.TFRecordDataset(path).take(1):
        example = tf.train.Example.FromString(raw.numpy())
        feature = example.features.feature
        for name, want, flag in (
            ("input_ids", max_seq_length, "max_seq_length"),
            ("masked_lm_positions", max_predictions_per_seq, "max_predictions_per_seq"),
        ):
            if name not in feature:
                raise UserError(
                    f"{path}: record has no feature {name!r}; is it a "
                    f"pre-training shard from create_pretraining_data?"
                )
            have = len(feature[name].int64_list.value)
            if have != want:
                raise UserError(
                    f"{path}: {name} has length {have} but --{flag}={want}; "
                    f"use the value the shards were made with"
                )
        return
    raise UserError(f"pre-training shard {path} holds no record")


def _decode(record, spec):
    parsed = tf.io.parse_single_example(record, spec)
    features = {
        "input_word_ids": parsed["input_ids"],
        "input_mask": parsed["input_mask"],
        "input_type_ids": parsed["segment_ids"],
        "masked_lm_positions": parsed["masked_lm_positions"],
        "masked_lm_ids": parsed["masked_lm_ids"],
        "masked_lm_weights": parsed["masked_lm_weights"],
        "next_sentence_labels": parsed["next_sentence_labels"],
    }
    return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in features.items()}


def restore_masked_tokens(features: dict) -> dict:
    """The features with `input_word_ids` the clean text: each masked position given
    back its original id (`masked_lm_ids`), so that a left-to-right language model
    reads the very text the masked LM's shards were made from.

    Works on decoded features, one example ([S], [P]) or a batch ([B, S], [B, P]);
    slots of `masked_lm_positions` with zero `masked_lm_weights` are padding and change
    nothing. The other features are returned unchanged.
    """
    ids = features["input_word_ids"]
    batched = ids.shape.rank == 2
    if not batched:
        features = {k: v[tf.newaxis] for k, v in features.items()}
        ids = features["input_word_ids"]
    positions = tf.cast(features["masked_lm_positions"], tf.int32)  # [B, P]
    real = features["masked_lm_weights"] > 0
    # Padding slots (position 0) write back the id already there.
    current = tf.gather(ids, positions, batch_dims=1)
    values = tf.where(real, tf.cast(features["masked_lm_ids"], ids.dtype), current)
    rows = tf.broadcast_to(tf.range(tf.shape(positions)[0])[:, tf.newaxis], tf.shape(positions))
    clean = tf.tensor_scatter_nd_update(ids, tf.stack([rows, positions], axis=-1), values)
    restored = dict(features, input_word_ids=clean)
    return restored if batched else {k: v[0] for k, v in restored.items()}


def pretraining_dataset(
    files: list[str],
    batch_size: int,
    max_seq_length: int,
    max_predictions_per_seq: int,
    is_training: bool,
    input_context: tf.distribute.InputContext | None = None,
    seed: int = 12345,
    shuffle_buffer: int = 1000,
) -> tf.data.Dataset:
    """Batches of decoded features.

    Training: files and records shuffled with a fixed seed (so a resumed run sees the
    same order), repeated, read in parallel (interleaved) and prefetched; each input
    pipeline of a multi-worker job reads its own share of files. Evaluation: one pass
    in file order.
    """
    spec = feature_spec(max_seq_length, max_predictions_per_seq)
    options = tf.data.Options()
    options.deterministic = True
    pipelines = input_context.num_input_pipelines if input_context is not None else 1
    pipeline_id = input_context.input_pipeline_id if input_context is not None else 0
    # Many files: each input pipeline (worker) reads its own files. Fewer files than
    # pipelines: every pipeline reads the same stream and takes its slice of each global
    # batch, so the global batches equal those of a single-pipeline run.
    shard_files = pipelines > 1 and len(files) >= pipelines
    files_ds = tf.data.Dataset.from_tensor_slices(files)
    if shard_files:
        files_ds = files_ds.shard(pipelines, pipeline_id)
    if is_training:
        num_files = len(files) // pipelines if shard_files else len(files)
        files_ds = files_ds.shuffle(max(num_files, 1), seed=seed).repeat()
        ds = files_ds.interleave(
            tf.data.TFRecordDataset,
            cycle_length=min(num_files, 8),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        ds = ds.shuffle(shuffle_buffer, seed=seed)
    else:
        ds = files_ds.flat_map(tf.data.TFRecordDataset)
    ds = ds.map(lambda r: _decode(r, spec), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if is_training and pipelines > 1 and not shard_files:
        ds = ds.batch(batch_size * pipelines, drop_remainder=True)
        ds = ds.map(
            lambda b: tf.nest.map_structure(
                lambda t: t[pipeline_id * batch_size : (pipeline_id + 1) * batch_size], b
            )
        )
    else:
        ds = ds.batch(batch_size, drop_remainder=is_training)
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)
