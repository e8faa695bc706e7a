"""tf.data input pipeline over the pre-training TFRecord shards, and their metadata.

The records are those of the original `create_pretraining_data.py`: int64 `input_ids`,
`input_mask`, `segment_ids` [max_seq_length]; int64 `masked_lm_positions`,
`masked_lm_ids` and float `masked_lm_weights` [max_predictions_per_seq];
int64 `next_sentence_labels` [1]. The pipeline renames them to the encoder's names
(`input_word_ids`, `input_mask`, `input_type_ids`), casts ids to int32 and cuts each
batch to its longest sequence (`input_pipeline`; the masked positions lie inside the
real tokens). Shards written by this project have `<shard>.meta.json` beside them
(format `RECORD_FORMAT`); the original release's have none.
"""

from __future__ import annotations

import os

import tensorflow as tf

from common.errors import UserError
from common import file_io
from data_prep import damage, input_pipeline, records
from data_prep.input_pipeline import RecordMetadata

# Raise the version when the records written for the same inputs change.
RECORD_FORMAT = "bert_pretraining_tfrecord/1"
# The metadata entry that counts a shard's records.
COUNT_KEY = "num_instances"
# Training records in the shuffle buffer behind the interleaved shards: the shards are
# read as a stream, and create_pretraining_data has already shuffled their instances
# (the original release's pre-training uses 100).
PRETRAINING_SHUFFLE_BUFFER_SIZE = 1000


def read_metadata(shard: str) -> RecordMetadata:
    """The metadata of a shard written by this project (an error naming the file when
    there is none, or of another format)."""
    return RecordMetadata.read(shard, RECORD_FORMAT, COUNT_KEY)


PIPELINE_SUMMARY = "summary.json"


def expand_input_files(pattern: str, what: str = "--input_file") -> list[str]:
    """Comma-separated globs -> files (`records.expand_globs`: sorted per pattern,
    hidden temporary files of unfinished writes skipped; an error if one matches none).

    The JSON files that describe shards (`<shard>.meta.json`, a pipeline's
    summary.json) are left out when a glob such as `shards/*` matches them.
    """
    files = records.expand_globs(pattern, what)
    shards = [
        path
        for path in files
        if not path.endswith(records.METADATA_SUFFIX) and os.path.basename(path) != PIPELINE_SUMMARY
    ]
    return shards or files


def check_shard_runs(files: list[str]) -> None:
    """Refuses shards that a finished run did not leave as they are.

    create_pretraining_data names in each shard's metadata its run (`run_id`) and
    the run's shards (`run_shards`): each of those must be beside it, with the same
    run. The Beam pipeline names its run (`pipeline_run`): the summary.json beside
    the shard, written last, must be that run's and list the shard. So a set that a
    killed run left unfinished, or that mixes an earlier run's shards with a later
    one's, fails before any work, naming the shard and what to do.
    """
    cache = {}

    def metadata_of(path):
        if path not in cache:
            meta = records.metadata_path(path)
            cache[path] = (
                file_io.read_json_object(meta, "shard metadata (a JSON object)")
                if tf.io.gfile.exists(meta)
                else None
            )
            entries = cache[path] or {}
            for key, kind, what in (
                ("run_id", str, "a string"),
                ("pipeline_run", str, "a string"),
                ("run_shards", list, "a list of shard names"),
            ):
                value = entries.get(key)
                if value is not None and not (
                    isinstance(value, kind)
                    and (kind is not list or all(isinstance(n, str) and n for n in value))
                ):
                    raise UserError(f"{meta}: {key} is not {what}: {value!r}")
        return cache[path]

    checked = set()
    for path in files:
        metadata = metadata_of(path)
        if metadata is None:
            continue
        directory = os.path.dirname(path)
        run_id = metadata.get("run_id")
        if run_id and metadata.get("run_shards") and (directory, run_id) not in checked:
            checked.add((directory, run_id))
            for name in metadata["run_shards"]:
                sibling = os.path.join(directory, name)
                other = metadata_of(sibling) if tf.io.gfile.exists(sibling) else None
                if other is None:
                    raise UserError(
                        f"{path} is one of the {len(metadata['run_shards'])} shards of one "
                        f"run, but {sibling} is missing or has no metadata: that run did not "
                        f"finish. Run it again to the end (the same command)."
                    )
                if other.get("run_id") != run_id:
                    raise UserError(
                        f"{path} and {sibling} are shards of two different runs (run_id "
                        f"{run_id} and {other.get('run_id')}): an earlier run's shards are "
                        f"beside a later run's. Make the shards again into an empty place."
                    )
        pipeline_run = metadata.get("pipeline_run")
        if pipeline_run:
            summary_path = os.path.join(directory, PIPELINE_SUMMARY)
            if not tf.io.gfile.exists(summary_path):
                raise UserError(
                    f"{path} is a shard of a pipeline run that did not finish (no "
                    f"{PIPELINE_SUMMARY} in {directory or '.'}): run the pipeline again to "
                    f"the end."
                )
            if summary_path not in cache:
                cache[summary_path] = file_io.read_json_object(summary_path, "a run's summary")
            summary = cache[summary_path]
            listed = summary.get("shards", [])
            if summary.get("run_id") != pipeline_run or os.path.basename(path) not in (
                listed if isinstance(listed, list) else []
            ):
                raise UserError(
                    f"{path} was left by an earlier pipeline run: {summary_path} describes "
                    f"another run, which did not write it. Remove it, or run the pipeline "
                    f"again with --overwrite."
                )


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
    vocab_size: int | None,
    do_lower_case: bool | None = None,
    preserve_unused_tokens: bool | None = None,
) -> int:
    """Checks the `.meta.json` of every shard that has one against the run: sequence
    length, masked positions, vocabulary size (ids past the model's embedding table),
    case and preserve_unused_tokens (None: not checked). Returns how many shards had
    metadata."""
    checked = 0
    for path in files:
        metadata_file = records.metadata_path(path)
        if not tf.io.gfile.exists(metadata_file):
            continue
        # The entries, not a RecordMetadata: a damaged file may lack any of them.
        metadata = records.read_metadata(path, RECORD_FORMAT)
        for key in ("max_seq_length", "max_predictions_per_seq", "vocab_size", COUNT_KEY):
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
        if vocab_size is not None and metadata.get("vocab_size", 0) > vocab_size:
            raise UserError(
                f"{path} was made with a vocabulary of "
                f"{metadata['vocab_size']} entries ({metadata_file}) but the "
                f"model's vocab_size is {vocab_size}: its ids would index past "
                f"the embedding table"
            )
        for key, want in (
            ("do_lower_case", do_lower_case),
            ("preserve_unused_tokens", preserve_unused_tokens),
        ):
            if want is not None and metadata.get(key) is not None and metadata[key] != want:
                raise UserError(
                    f"{path} was made with {key}={metadata[key]} ({metadata_file}) but the "
                    f"model is {key}={want}"
                )
        checked += 1
    return checked


def recorded_setting(files: list[str], key: str, kind: type = object):
    """The value of `key` in the first shard metadata that records it, else None; an
    error naming the metadata file when that value is not a `kind`."""
    for path in files:
        metadata_file = records.metadata_path(path)
        if tf.io.gfile.exists(metadata_file):
            value = file_io.read_json_object(metadata_file, "shard metadata (a JSON object)")
            value = value.get(key)
            if value is not None and not isinstance(value, kind):
                raise UserError(f"{metadata_file}: {key} is not a {kind.__name__}: {value!r}")
            if value is not None:
                return value
    return None


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def shards_metadata(
    files: list[str],
    max_seq_length: int,
    max_predictions_per_seq: int,
    vocab_size: int | None = None,
    do_lower_case: bool | None = None,
    preserve_unused_tokens: bool | None = None,
) -> RecordMetadata:
    """The shards checked against the run, before any work, and described for
    `pretraining_dataset`: S, the number of instances and the entry
    `max_predictions_per_seq`.

    Each shard's framing (`damage.check_tfrecord_file`: a shard cut short is named
    with the record it ends inside, and its records are counted); with metadata, the
    metadata against the run (`check_shard_metadata`: sequence length, masked
    positions, vocabulary when `vocab_size` is given, case, preserve_unused_tokens)
    and its record count against the shard's; without, its first record's shapes
    (`check_shard_shapes`) and then every record (`check_shard_records`: ids within
    `vocab_size`, masked positions within the sequence). Records damaged inside (a
    flipped bit) show when they are read: `damage.naming_damaged_records` names them
    then.
    """
    total = 0
    for path in files:
        has_metadata = tf.io.gfile.exists(records.metadata_path(path))
        if has_metadata:
            check_shard_metadata(
                [path],
                max_seq_length,
                max_predictions_per_seq,
                vocab_size,
                do_lower_case,
                preserve_unused_tokens,
            )
        if "://" in path and has_metadata:  # Not walked: it would be read whole.
            count = file_io.read_json(records.metadata_path(path)).get(COUNT_KEY, 0)
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
    return RecordMetadata(
        max_seq_length, total, {"max_predictions_per_seq": max_predictions_per_seq}
    )


def _check_count(path: str, count: int) -> None:
    metadata_file = records.metadata_path(path)
    recorded = file_io.read_json(metadata_file).get(COUNT_KEY)
    if recorded is not None and recorded != count:
        raise UserError(
            f"{path} holds {count} records but its metadata ({metadata_file}) says "
            f"{recorded}: the shard is not the one the metadata was written for (a "
            f"partial copy?): make it again"
        )


def check_shard_records(
    path: str, max_seq_length: int, max_predictions_per_seq: int, vocab_size: int | None
) -> None:
    """Reads every record of a shard: each must parse with the run's shapes, hold token
    ids in [0, vocab_size) (or >= 0 when `vocab_size` is None) and masked positions in
    [0, max_seq_length); the error names the record (1-based) and what is wrong."""
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


def _batch_problem(
    batch, spec, max_seq_length: int, vocab_size: int | None
) -> tuple[int, str] | None:
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
        bad = values < 0
        if limit is not None:
            bad |= values >= limit
        if bad.any():
            index = int(bad.any(axis=1).argmax())
            value = int(values[index][bad[index]][0])
            if name == "masked_lm_positions":
                return index, f"holds {what} {value}, outside max_seq_length {max_seq_length}"
            if limit is None:
                return index, f"holds {what} {value}, below 0"
            return index, (
                f"holds {what} {value}, outside the model's vocab_size {vocab_size}: "
                f"the shard was made with another vocabulary (use the model's)"
            )
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


def decode_records(serialized: tf.Tensor, max_seq_length: int, max_predictions_per_seq: int):
    """A batch of serialized records (string [B]) -> the features with the encoder's
    names, ids int32: `input_word_ids`, `input_mask`, `input_type_ids` [B, S],
    `masked_lm_positions`, `masked_lm_ids`, `masked_lm_weights` (float32) [B, P],
    `next_sentence_labels` [B, 1]."""
    parsed = tf.io.parse_example(serialized, feature_spec(max_seq_length, max_predictions_per_seq))
    features = {records.ENCODER_INPUT_NAMES.get(k, k): v for k, v in parsed.items()}
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
    metadata: RecordMetadata,
    batch_size: int,
    is_training: bool,
    seed: int | None = input_pipeline.DEFAULT_SEED,
    input_context: tf.distribute.InputContext | None = None,
    *,
    shuffle_buffer_size: int = PRETRAINING_SHUFFLE_BUFFER_SIZE,
    pad_to_max_seq_length: bool = False,
) -> tf.data.Dataset:
    """Batches of decoded features (`decode_records`), each cut to its longest
    sequence unless `pad_to_max_seq_length` (`input_pipeline`).

    The builders' contract (`input_pipeline`), but for the three points it names for
    this builder: no `group_by_length`, its own order of the shards, and `seed`
    defaulting to `input_pipeline.DEFAULT_SEED`.

    Training: every epoch the files in a new seeded order, read in parallel
    (interleaved) and their records shuffled (a buffer of `shuffle_buffer_size`,
    never holding two epochs), repeated, so a resumed run sees the same order; each
    input pipeline of a multi-worker job reads its own share of files. Evaluation: one
    pass in file order.

    Args:
      files: the shards.
      metadata: `shards_metadata` (S, and the entry `max_predictions_per_seq`).
      batch_size: the global batch size; under `input_context`, each replica's share.
      is_training, seed, input_context, shuffle_buffer_size, pad_to_max_seq_length:
        as `input_pipeline.batched_records` takes them.
    """
    max_seq_length = metadata.max_seq_length
    max_predictions_per_seq = metadata["max_predictions_per_seq"]
    per_replica = input_pipeline.per_replica_batch_size(batch_size, input_context)
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
        ds = files_ds.shuffle(max(num_files, 1), seed=seed, reshuffle_each_iteration=True)
        ds = ds.interleave(
            tf.data.TFRecordDataset,
            cycle_length=min(num_files, 8),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        ds = ds.shuffle(shuffle_buffer_size, seed=seed, reshuffle_each_iteration=True).repeat()
    else:
        ds = files_ds.flat_map(tf.data.TFRecordDataset)
    if is_training and pipelines > 1 and not shard_files:
        ds = ds.batch(per_replica * pipelines, drop_remainder=True)
        ds = ds.map(
            input_pipeline.as_written(
                lambda b: b[pipeline_id * per_replica : (pipeline_id + 1) * per_replica]
            )
        )
    else:
        ds = ds.batch(per_replica, drop_remainder=is_training)
    ds = ds.map(
        input_pipeline.as_written(
            lambda serialized: decode_records(serialized, max_seq_length, max_predictions_per_seq)
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    ds = input_pipeline.cut_batches(ds, max_seq_length, pad_to_max_seq_length)
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)
