"""tf.data input pipeline over the pre-training TFRecord shards.

The records are those of the original `create_pretraining_data.py`: int64 `input_ids`,
`input_mask`, `segment_ids` [max_seq_length]; int64 `masked_lm_positions`,
`masked_lm_ids` and float `masked_lm_weights` [max_predictions_per_seq];
int64 `next_sentence_labels` [1]. The pipeline renames them to the encoder's names
(`input_word_ids`, `input_mask`, `input_type_ids`) and casts ids to int32.
"""

from __future__ import annotations


import tensorflow as tf

from common.errors import UserError
from data_prep import damage, records


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
        metadata = records.read_json_object(metadata_file, "shard metadata (a JSON object)")
        for key in ("max_seq_length", "max_predictions_per_seq", "vocab_size", "num_instances"):
            if key in metadata and not _is_count(metadata[key]):
                raise UserError(f"{metadata_file}: {key} is not a count: {metadata[key]!r}")
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


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_shards(
    files: list[str],
    max_seq_length: int,
    max_predictions_per_seq: int,
    vocab_size: int,
    do_lower_case: bool | None = None,
) -> int:
    """Checks every shard before any work; returns how many records they hold.

    Each shard's framing (`damage.check_tfrecord_file`: a shard cut short is named
    with the record it ends inside); with metadata, the metadata against the run
    (`check_shard_metadata`) and its record count against the shard's; without, its
    first record's shapes (`check_shard_shapes`) and then every record
    (`check_shard_records`: ids within `vocab_size`, masked positions within the
    sequence). Records damaged inside (a flipped bit) show when they are read:
    `damage.naming_damaged_records` names them then.
    """
    total = 0
    for path in files:
        has_metadata = tf.io.gfile.exists(records.metadata_path(path))
        if has_metadata:
            check_shard_metadata(
                [path], max_seq_length, max_predictions_per_seq, vocab_size, do_lower_case
            )
        if "://" in path and has_metadata:  # Not walked: it would be read whole.
            count = records.read_json(records.metadata_path(path)).get("num_instances", 0)
        else:
            count = damage.check_tfrecord_file(path)
        if not count:
            raise UserError(f"pre-training shard {path} holds no record")
        if has_metadata:
            _check_count(path, count)
        else:
            with damage.naming_damaged_records([path]):
                check_shard_shapes([path], max_seq_length, max_predictions_per_seq)
            check_shard_records(path, max_seq_length, max_predictions_per_seq, vocab_size)
        total += count
    return total


def _check_count(path: str, count: int) -> None:
    metadata_file = records.metadata_path(path)
    recorded = records.read_json(metadata_file).get("num_instances")
    if recorded is not None and recorded != count:
        raise UserError(
            f"{path} holds {count} records but its metadata ({metadata_file}) says "
            f"{recorded}: the shard is not the one the metadata was written for (a "
            f"partial copy?): make it again"
        )


def check_shard_records(
    path: str, max_seq_length: int, max_predictions_per_seq: int, vocab_size: int
) -> None:
    """Reads every record of a shard: each must parse with the run's shapes, hold token
    ids in [0, vocab_size) and masked positions in [0, max_seq_length); the error names
    the record (1-based) and what is wrong."""
    spec = feature_spec(max_seq_length, max_predictions_per_seq)
    first = 1
    with damage.naming_damaged_records([path]):
        for batch in tf.data.TFRecordDataset(path).batch(_CHECK_BATCH):
            problem = _batch_problem(batch, spec, max_seq_length, vocab_size)
            if problem:
                index, what = problem
                raise UserError(f"{path}: record {first + index}: {what}")
            first += int(batch.shape[0])


_CHECK_BATCH = 1024


def _batch_problem(batch, spec, max_seq_length: int, vocab_size: int) -> tuple[int, str] | None:
    """(index in the batch, what is wrong) of the first bad record of `batch`, or None."""
    try:
        parsed = tf.io.parse_example(batch, spec)
    except tf.errors.InvalidArgumentError:
        for index in range(int(batch.shape[0])):
            try:
                tf.io.parse_single_example(batch[index], spec)
            except tf.errors.InvalidArgumentError as e:
                detail = e.message.strip().splitlines()[0]
                return index, (
                    f"not a pre-training record of max_seq_length={max_seq_length} and "
                    f"max_predictions_per_seq={spec['masked_lm_ids'].shape[0]} ({detail})"
                )
        return None
    for name, limit, what in (
        ("input_ids", vocab_size, "token id"),
        ("masked_lm_ids", vocab_size, "masked token id"),
        ("masked_lm_positions", max_seq_length, "masked position"),
    ):
        values = parsed[name].numpy()
        bad = (values < 0) | (values >= limit)
        if bad.any():
            index = int(bad.any(axis=1).argmax())
            value = int(values[index][bad[index]][0])
            if limit == vocab_size:
                return index, (
                    f"holds {what} {value}, outside the model's vocab_size {vocab_size}: "
                    f"the shard was made with another vocabulary (use the model's)"
                )
            return index, f"holds {what} {value}, outside max_seq_length {max_seq_length}"
    return None


def check_shard_shapes(files: list[str], max_seq_length: int, max_predictions_per_seq: int) -> None:
    """Reads the first record of the first shard: a clear error when the shards were
    made with another max_seq_length / max_predictions_per_seq than the flags."""
    path = files[0]
    if tf.io.gfile.stat(path).length == 0:
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
