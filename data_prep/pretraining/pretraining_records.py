"""Pre-training records: a run of `create_pretraining_data`, text files to TFRecord shards.

This module owns what a run does around the instances: its settings
(`RunOptions`); `dupe_factor` passes over the shuffled documents, each instance
serialized as a `tf.train.Example` with sorted feature keys (`serialize_instance`;
`canonical_record` re-serializes another program's record so, to compare it with
ours) into an unnamed temporary file (`RecordSpill`); the final
shuffle; the shards, written round-robin under temporary names with
`<shard>.meta.json` beside each (`write_shards`, `shard_metadata`; read back by
`pretraining_data.read_metadata`); and one shard per input file, built in a pool of processes
(`run`). Progress and the run's summary are logged.

Reading documents and making instances is `pretraining_instances`; the command
line is `create_pretraining_data`.
"""

import array
import collections
import contextlib
import dataclasses
import hashlib
import json
import mmap
import multiprocessing
import os
import random
import tempfile
import time
from typing import Callable, Sequence

from absl import logging
import tensorflow as tf

from common.errors import OutputExistsError, UserError
from common.progress import Progress, Task
from common import file_io
from data_prep.pretraining import pretraining_data
from common import run_control
from data_prep import records
from data_prep.text import tokenization
from data_prep.pretraining.pretraining_instances import (
    InstanceOptions,
    MaskingOptions,
    Stats,
    TrainingInstance,
    VocabIds,
    create_instances_from_document,
    read_documents,
    shuffle,
)

# ----------------------------------------------------------------------------
# Options.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """Everything one run needs (the command line, as values).

    Attributes:
        input_files: text files, in the order they are read.
        output_files: TFRecord files. Pooled (`per_input_file` False): instances
            go round-robin across them. Per input file: one per input file.
        vocab_file, do_lower_case, preserve_unused_tokens: the tokenizer.
        dupe_factor: passes over the corpus, each with fresh masks.
        random_seed: seed of the `random.Random` of a run (of each shard when
            `per_input_file`).
        instance, masking: see `InstanceOptions` and `MaskingOptions`.
        per_input_file: build one shard per input file, as a run on that file alone.
        num_workers: processes building shards when `per_input_file`.
        progress_interval_s: seconds between progress lines.
    """

    input_files: tuple
    output_files: tuple
    vocab_file: str
    do_lower_case: bool = True
    preserve_unused_tokens: bool = False
    dupe_factor: int = 10
    random_seed: int = 12345
    instance: InstanceOptions = InstanceOptions()
    masking: MaskingOptions = MaskingOptions()
    per_input_file: bool = False
    num_workers: int = 1
    progress_interval_s: float = 30.0

    def __post_init__(self):
        if self.dupe_factor < 1:
            raise UserError("dupe_factor=%d must be at least 1." % self.dupe_factor)
        if self.per_input_file and len(self.input_files) != len(self.output_files):
            raise UserError(
                "One output file per input file is needed: %d input files, %d "
                "output files." % (len(self.input_files), len(self.output_files))
            )


# ----------------------------------------------------------------------------
# Progress.
# ----------------------------------------------------------------------------


class ProgressLogger:
    """Logs documents done, instances/s and ETA every `interval_s` seconds."""

    def __init__(
        self, label: str, total: int, interval_s: float, clock: Callable[[], float] = time.monotonic
    ):
        self.label = label
        self.total = total
        self.interval_s = interval_s
        self.clock = clock
        self.start = clock()
        self.last = self.start

    def update(self, done: int, instances: int) -> None:
        now = self.clock()
        if now - self.last < self.interval_s:
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        eta = elapsed * (self.total - done) / max(done, 1)
        logging.info(
            "%s: %d/%d documents (%.1f%%), %d instances, %.0f instances/s, ETA %s",
            self.label,
            done,
            self.total,
            100.0 * done / max(self.total, 1),
            instances,
            instances / elapsed,
            _format_seconds(eta),
        )


def _format_seconds(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return "%d:%02d:%02d" % (hours, minutes, seconds)


# ----------------------------------------------------------------------------
# Serialization and files.
# ----------------------------------------------------------------------------


def instance_to_example(
    instance: TrainingInstance, max_seq_length: int, max_predictions_per_seq: int
) -> tf.train.Example:
    """Pads an instance to S and P and makes it a `tf.train.Example`."""
    num_tokens = len(instance.input_ids)
    seq_padding = [0] * (max_seq_length - num_tokens)
    num_masked = len(instance.masked_lm_positions)
    lm_padding = [0] * (max_predictions_per_seq - num_masked)
    example = tf.train.Example()
    feature = example.features.feature
    # Filling the map in place is twice as fast as building Feature objects.
    feature["input_ids"].int64_list.value[:] = instance.input_ids + seq_padding
    feature["input_mask"].int64_list.value[:] = [1] * num_tokens + seq_padding
    feature["segment_ids"].int64_list.value[:] = instance.segment_ids + seq_padding
    feature["masked_lm_positions"].int64_list.value[:] = instance.masked_lm_positions + lm_padding
    feature["masked_lm_ids"].int64_list.value[:] = instance.masked_lm_ids + lm_padding
    feature["masked_lm_weights"].float_list.value[:] = [1.0] * num_masked + [0.0] * len(lm_padding)
    feature["next_sentence_labels"].int64_list.value[:] = [int(instance.is_random_next)]
    return example


def serialize_instance(
    instance: TrainingInstance, max_seq_length: int, max_predictions_per_seq: int
) -> bytes:
    """The record of an instance, its features in the order of their names.

    The original serializes the feature map in an order that the protobuf
    runtime (upb) seeds afresh in every process, so its files differ from run to
    run; sorted keys make ours reproducible, and equal to its records parsed and
    re-serialized deterministically.
    """
    example = instance_to_example(instance, max_seq_length, max_predictions_per_seq)
    return example.SerializeToString(deterministic=True)


def canonical_record(record: bytes) -> bytes:
    """A serialized `tf.train.Example` re-serialized with sorted feature keys."""
    return tf.train.Example.FromString(record).SerializeToString(deterministic=True)


class RecordSpill:
    """Serialized instances in an unnamed temporary file, read back in any order.

    The final shuffle needs every instance of a run; this keeps them on disk
    (12 bytes of bookkeeping in memory per instance).
    """

    def __init__(self, directory: str | None = None):
        self._file = tempfile.TemporaryFile(dir=directory)
        self._offsets = array.array("q", [0])
        self.num_tokens = array.array("H")
        self.num_masked = array.array("H")
        self._map = None

    def __len__(self) -> int:
        return len(self.num_tokens)

    def append(self, record: bytes, num_tokens: int, num_masked: int) -> None:
        self._file.write(record)
        self._offsets.append(self._offsets[-1] + len(record))
        self.num_tokens.append(num_tokens)
        self.num_masked.append(num_masked)

    def __getitem__(self, index: int) -> bytes:
        if self._map is None:
            self._file.flush()
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        return self._map[self._offsets[index] : self._offsets[index + 1]]

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
        self._file.close()


def shard_counts(spill: RecordSpill, order: Sequence[int], num_files: int) -> list[dict]:
    """Per output file: {"instances", "tokens", "masked"} of `write_shards`."""
    counts = [{"instances": 0, "tokens": 0, "masked": 0} for _ in range(num_files)]
    for k, index in enumerate(order):
        shard = counts[k % num_files]
        shard["instances"] += 1
        shard["tokens"] += spill.num_tokens[index]
        shard["masked"] += spill.num_masked[index]
    return counts


def write_shards(
    spill: RecordSpill, order: Sequence[int], output_files: Sequence[str], metadata: Sequence[dict]
) -> None:
    """Writes `spill[order[k]]` to `output_files[k % len(output_files)]`.

    The metadata of earlier files of these names is removed first; each file is
    written under a hidden temporary name (`records`) and renamed when all are
    complete; then `metadata[i]` is written to `<output_files[i]>.meta.json`.
    Metadata never describes records other than its own (a kill between the two
    steps leaves a complete shard without metadata, which `run_shards` in its
    siblings' metadata shows as unfinished); on an error the temporary files are
    removed.
    """
    for path in output_files:
        if tf.io.gfile.exists(records.metadata_path(path)):
            tf.io.gfile.remove(records.metadata_path(path))
    with contextlib.ExitStack() as stack:
        writers = [
            stack.enter_context(records.atomic_tfrecord_writer(path)) for path in output_files
        ]
        for k, index in enumerate(order):
            writers[k % len(writers)].write(spill[index])
    for path, shard_metadata_ in zip(output_files, metadata):
        file_io.write_json(records.metadata_path(path), shard_metadata_, sort_keys=False)


def shard_metadata(
    options: RunOptions,
    vocab_size: int,
    input_files: Sequence[str],
    output_files: Sequence[str],
    shard_index: int,
    counts: dict,
    stats: Stats,
) -> dict:
    """The metadata JSON of one shard: settings, its counts and the run's.

    Counts: `num_instances` records; `num_tokens` real tokens ([CLS] and [SEP]
    included, padding not); `num_masked` predictions; `masked_fraction` the
    ratio of the last two. `run` holds the same counts over the whole run, with
    lines and documents read. `features` gives the dtype and shape of each
    feature (see `pretraining_data.feature_spec`).
    """
    instance, masking = options.instance, options.masking
    spec = pretraining_data.feature_spec(instance.max_seq_length, masking.max_predictions_per_seq)
    return {
        "format": pretraining_data.RECORD_FORMAT,
        "max_seq_length": instance.max_seq_length,
        "max_predictions_per_seq": masking.max_predictions_per_seq,
        "vocab_file": os.path.basename(options.vocab_file),
        "vocab_size": vocab_size,
        "do_lower_case": options.do_lower_case,
        "preserve_unused_tokens": options.preserve_unused_tokens,
        "do_whole_word_mask": masking.do_whole_word_mask,
        "next_sentence_prediction": instance.next_sentence_prediction,
        "random_seed": options.random_seed,
        "dupe_factor": options.dupe_factor,
        "short_seq_prob": instance.short_seq_prob,
        "masked_lm_prob": masking.masked_lm_prob,
        "mask_token_prob": masking.mask_token_prob,
        "random_token_prob": masking.random_token_prob,
        "num_instances": counts["instances"],
        "num_tokens": counts["tokens"],
        "num_masked": counts["masked"],
        "masked_fraction": counts["masked"] / max(counts["tokens"], 1),
        "shard_index": shard_index,
        "shards": [os.path.basename(path) for path in output_files],
        "input_files": list(input_files),
        "run": stats.summary(),
        "features": {
            name: {"dtype": spec[name].dtype.name, "shape": list(spec[name].shape)} for name in spec
        },
    }


# ----------------------------------------------------------------------------
# A run.
# ----------------------------------------------------------------------------


def run_identity(options: RunOptions, input_sizes: Sequence[int] | None = None) -> str:
    """A name for what a run makes: a hash of every setting that changes its records,
    its input files (names and sizes) and its shard names. The same command gives the
    same name, so a rerun's shards (and their metadata) equal an uninterrupted run's;
    shards of two different runs never share it (`pretraining_data.check_shard_runs`)."""
    if input_sizes is None:
        input_sizes = [tf.io.gfile.stat(path).length for path in options.input_files]
    described = dict(
        dataclasses.asdict(options),
        input_files=[[path, size] for path, size in zip(options.input_files, input_sizes)],
        output_files=[os.path.basename(path) for path in options.output_files],
        vocab_sha256=records.file_sha256(options.vocab_file),
    )
    for unused in ("progress_interval_s", "num_workers", "vocab_file"):
        described.pop(unused)
    text = json.dumps(described, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def earlier_shards(directory: str, keep: Sequence[str]) -> list[str]:
    """The pre-training shards (with this module's metadata) in `directory` that are
    not among the paths `keep`: left by an earlier run into the same place."""
    if not tf.io.gfile.isdir(directory):
        return []
    keep = {os.path.basename(path) for path in keep}
    found = []
    for name in sorted(tf.io.gfile.listdir(directory)):
        path = os.path.join(directory, name)
        if (
            name.startswith(".")
            or name in keep
            or not tf.io.gfile.exists(records.metadata_path(path))
        ):
            continue
        try:
            records.read_metadata(path, pretraining_data.RECORD_FORMAT)
        except ValueError:
            continue
        found.append(path)
    return found


def check_no_earlier_shards(
    directory: str, keep: Sequence[str], overwrite: bool, flag: str
) -> None:
    """Refuses (or, with `overwrite`, removes) the shards of an earlier run in
    `directory` that this run would not replace: never two runs' shards side by side,
    where a glob such as `shards/*` would read both."""
    found = earlier_shards(directory, keep)
    if not found:
        return
    if not overwrite:
        shown = ", ".join(os.path.basename(path) for path in found[:5])
        more = " and %d more" % (len(found) - 5) if len(found) > 5 else ""
        raise OutputExistsError(
            "%s holds %d shards of an earlier run that this run would not replace (%s%s): "
            "a glob over it would read both runs' records. Give another output, or pass "
            "%s to remove them first." % (directory, len(found), shown, more, flag)
        )
    logging.warning("Removing %d shards of an earlier run from %s.", len(found), directory)
    for path in found:
        tf.io.gfile.remove(records.metadata_path(path))  # First: no shard stays described.
        tf.io.gfile.remove(path)


def generate_instances(
    documents,
    options: RunOptions,
    vocab: VocabIds,
    rng: random.Random,
    spill: RecordSpill,
    stats: Stats,
    label: str,
    bar: Task | None = None,
) -> None:
    """`dupe_factor` passes over the documents, serialized into `spill`; `bar` (a
    `common.progress.Task`) is told the documents done."""
    bar = bar if bar is not None else Task()
    progress = ProgressLogger(
        label, options.dupe_factor * len(documents), options.progress_interval_s
    )
    max_seq_length = options.instance.max_seq_length
    max_predictions = options.masking.max_predictions_per_seq
    done = 0
    for _ in range(options.dupe_factor):
        for document_index in range(len(documents)):
            for instance in create_instances_from_document(
                documents, document_index, options.instance, options.masking, vocab, rng
            ):
                spill.append(
                    serialize_instance(instance, max_seq_length, max_predictions),
                    len(instance.input_ids),
                    len(instance.masked_lm_positions),
                )
                stats.random_next += instance.is_random_next
            done += 1
            progress.update(done, len(spill))
            bar.update(done, instances=len(spill))
    stats.instances += len(spill)
    stats.tokens += sum(spill.num_tokens)
    stats.masked += sum(spill.num_masked)
    for length, count in collections.Counter(spill.num_tokens).items():
        stats.lengths[length] = stats.lengths.get(length, 0) + count


def build_shards(
    input_files: Sequence[str],
    output_files: Sequence[str],
    options: RunOptions,
    extra_metadata: dict | None = None,
    progress: Progress | None = None,
) -> Stats:
    """The original's run: read, shuffle documents, generate, shuffle, write.

    Args:
        input_files: text files, pooled into one corpus.
        output_files: TFRecord files, filled round-robin; `<file>.meta.json`
            is written beside each.
        progress: shown the documents done (`common.progress`).

    Returns:
        The run's statistics.

    Raises:
        ValueError: the vocabulary lacks a special token; the corpus is empty.
    """
    tokenizer = tokenization.FullTokenizer(
        options.vocab_file, options.do_lower_case, options.preserve_unused_tokens
    )
    vocab = VocabIds.from_vocab(tokenizer.vocab, options.vocab_file)
    stats = Stats()
    documents = read_documents(
        input_files, tokenizer, options.instance.max_num_tokens, stats, options.progress_interval_s
    )
    return write_instances(
        documents,
        len(tokenizer.vocab),
        input_files,
        output_files,
        options,
        vocab,
        stats,
        extra_metadata,
        progress=progress,
    )


def write_instances(
    documents: list,
    vocab_size: int,
    input_files: Sequence[str],
    output_files: Sequence[str],
    options: RunOptions,
    vocab: VocabIds,
    stats: Stats,
    extra_metadata: dict | None = None,
    progress: Progress | None = None,
) -> Stats:
    """The original's run from its documents on: shuffle, generate, shuffle, write.

    Args:
        documents: as `read_documents` returns them; emptied once the
            instances are generated, to free their memory.
        vocab_size: entries of the vocabulary (for the metadata).
        input_files: where the documents come from (for messages and metadata).
        output_files: TFRecord files, filled round-robin; `<file>.meta.json`
            is written beside each.
        options: the run's settings (`options.random_seed` seeds the run).
        vocab: special and vocabulary ids.
        stats: the counts of reading; receives those of the instances.
        extra_metadata: more entries for every metadata file.
        progress: shown the documents done (`common.progress`).

    Returns:
        `stats`.

    Raises:
        ValueError: there is no document.
    """
    label = input_files[0] if len(input_files) == 1 else "corpus"
    if not documents:
        raise UserError("The corpus is empty: no line of %s has a token." % ", ".join(input_files))
    rng = random.Random(options.random_seed)
    shuffle(documents, rng)
    spill = RecordSpill(_spill_directory(output_files[0]))
    try:
        progress = progress if progress is not None else Progress()
        with progress.task(
            "instances", total=options.dupe_factor * len(documents), unit="document"
        ) as bar:
            generate_instances(documents, options, vocab, rng, spill, stats, label, bar)
        documents.clear()
        order = array.array("q", range(len(spill)))
        shuffle(order, rng)
        counts = shard_counts(spill, order, len(output_files))
        metadata = [
            dict(
                shard_metadata(
                    options, vocab_size, input_files, output_files, index, counts[index], stats
                ),
                **(extra_metadata or {}),
            )
            for index in range(len(output_files))
        ]
        write_shards(spill, order, output_files, metadata)
    finally:
        spill.close()
    _log_summary(label, stats)
    return stats


def _spill_directory(output_file: str) -> str | None:
    """Beside the output when it is local (temp dirs may be small or in RAM)."""
    if "://" in output_file:
        return None
    return os.path.dirname(os.path.abspath(output_file))


def _log_summary(label: str, stats: Stats) -> None:
    summary = stats.summary()
    logging.info(
        "%s: %d instances, %d tokens, masked fraction %.4f, random next "
        "%.3f; %d documents (%d of a single sentence, giving fewer "
        "instances), %d lines longer than an instance (truncated).",
        label,
        stats.instances,
        stats.tokens,
        summary["masked_fraction"],
        summary["random_next_fraction"],
        stats.documents,
        stats.one_sentence_documents,
        stats.long_lines,
    )


def _build_one_shard(job: tuple) -> Stats:
    """A pool's job: one input file -> one shard."""
    input_file, output_file, options, extra_metadata = job
    return build_shards([input_file], [output_file], options, extra_metadata)


def _init_worker(verbosity: int) -> None:
    logging.set_verbosity(verbosity)


def run(options: RunOptions, progress: Progress | None = None) -> Stats:
    """Builds the shards of `options`; returns the statistics of all of them.

    `progress` (`common.progress`) is shown the documents done (one process) or the
    files done (`num_workers` processes)."""
    progress = progress if progress is not None else Progress()
    # Fail on a bad vocabulary before reading (or forking for) the corpus.
    VocabIds.from_vocab(tokenization.load_vocab(options.vocab_file), options.vocab_file)
    for directory in {os.path.dirname(path) for path in options.output_files}:
        if directory:
            tf.io.gfile.makedirs(directory)
    # Every shard names its run and the run's shards, so that a reader sees a set
    # that a killed run left incomplete, or that mixes two runs.
    extra = {
        "run_id": run_identity(options),
        "run_shards": [os.path.basename(path) for path in options.output_files],
    }
    if not options.per_input_file:
        return build_shards(options.input_files, options.output_files, options, extra, progress)
    jobs = [(i, o, options, extra) for i, o in zip(options.input_files, options.output_files)]
    total = Stats()
    with progress.task("files", total=len(jobs), unit="file") as bar:
        if options.num_workers <= 1:
            for done, job in enumerate(jobs, 1):
                total.add(_build_one_shard(job))
                bar.update(done, instances=total.instances)
        else:
            context = multiprocessing.get_context("spawn")
            with run_control.children_ignore_ctrl_c():  # Ctrl-C stops the pool from here.
                pool = context.Pool(
                    min(options.num_workers, len(jobs)), _init_worker, (logging.get_verbosity(),)
                )
            with pool:
                for done, stats in enumerate(pool.imap_unordered(_build_one_shard, jobs), 1):
                    total.add(stats)
                    bar.update(done, instances=total.instances)
    _log_summary("all shards", total)
    return total
