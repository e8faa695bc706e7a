"""Pre-training data at corpus scale: the Apache Beam pipeline, raw text to shards.

One pipeline for the whole path, on any Beam runner (the DirectRunner on one
machine; Dataflow, Flink or Spark through that runner's options):

  1. Read: the input files are cut at document boundaries into document shards
     of about `shard_bytes` (a smaller file is one shard, the whole file; see
     `corpus`). Paths are read through Beam's file systems (local, gs://...).
  2. Sentences (raw formats, "text" or "jsonl"): each document shard's documents
     are split into sentences (`sentences`) and written to
     `<sentences_dir>/<name>.txt` in the original one-sentence-per-line format.
  3. Vocabulary (`learn_vocab_size` N): the words of every shard counted in
     parallel and summed, then a WordPiece vocabulary of N entries learned from
     the counts (`wordpiece_vocab`) and written to `vocab_file`.
  4. Instances: each shard of sentences becomes `<output_dir>/<name>.tfrecord`
     and its `.meta.json`, computed by `pretraining_instances` and
     `pretraining_records` (what `create_pretraining_data` runs) exactly as the
     original script computes them for that file alone: document shard k of a
     file with the run's seed + k, so a file smaller than the shard size is
     built with the run's seed, as `--num_workers` builds it.
  5. Summary: `<output_dir>/summary.json` (counts, masked fraction, instance
     length histogram, bad input), written last.

Every file appears under its name only when complete (`records`): a killed
pipeline leaves shards that are whole, each with its metadata, and no summary
(a stale one is removed when the run starts). Workers log their progress
(documents, sentences, instances and tokens per second) and count them in Beam
metrics (namespace "pretraining_pipeline").

Its parts: `corpus_settings` (the settings), `corpus_stages` (the stages as Beam
transforms), `corpus_summary` (statistics and the summary); this module matches
the input files, assembles the stages into one pipeline and runs it.

The command line is `data_prep/pretraining_pipeline.py`.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import threading
import time

from absl import logging
import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from common.errors import OutputExistsError, UserError
from common.progress import Progress
from data_prep.pretraining import corpus
from data_prep.pretraining import pretraining_data
from data_prep.pretraining import pretraining_instances
from common import file_io
from data_prep import records
from data_prep.text import tokenization
from data_prep.pretraining.corpus_settings import PipelineSettings, join_path
from data_prep.pretraining.corpus_stages import (
    BuildShard,
    CountWords,
    ScanWindow,
    SplitSentences,
    learn_and_write_vocab,
    plan_file,
)
from data_prep.pretraining.corpus_summary import (
    PENDING_NAME,
    SUMMARY_NAME,
    MergeStats,
    write_summary,
)

# ----------------------------------------------------------------------------
# Inputs and names.
# ----------------------------------------------------------------------------


def match_input_files(patterns: str) -> list[tuple[str, int]]:
    """Comma-separated files and globs -> sorted (path, size), through Beam's
    file systems. Hidden names (unfinished writes among them) are left out.

    Raises:
        ValueError: a pattern matches no file.
    """
    files = {}
    for pattern in patterns.split(","):
        pattern = pattern.strip()
        if not pattern:
            continue
        matches = [
            m
            for m in FileSystems.match([pattern])[0].metadata_list
            if not os.path.basename(m.path).startswith(".")
        ]
        if not matches:
            raise UserError("--input_file pattern %r matches no file." % pattern)
        for match in matches:
            if "://" not in match.path and os.path.isdir(match.path):
                raise UserError(
                    "--input_file pattern %r: %s is a directory, not a text file: give "
                    "its files (e.g. '%s')" % (pattern, match.path, join_path(match.path, "*"))
                )
            files[match.path] = match.size_in_bytes
    return sorted(files.items())


def check_output_names(input_files, shard_bytes: int) -> list[str]:
    """The shard names of a run, in order; ValueError if two document shards would
    get the same name."""
    owners = {}
    for path, size in input_files:
        windows = _windows(path, size, shard_bytes)
        for index in range(windows):
            name = corpus.shard_name(path, index, windows)
            if name in owners:
                raise UserError(
                    "%s and %s would both write shards named %s: rename one."
                    % (owners[name], path, name)
                )
            owners[name] = path
    return list(owners)


def run_identity(settings: PipelineSettings) -> str:
    """A name for what a run makes: a hash of its settings, its input files (paths
    and sizes) and the vocabulary's content when it is given. The same command gives
    the same name; another shard size or other inputs another."""
    described = dataclasses.asdict(dataclasses.replace(settings, run_id=""))
    described["run"].pop("progress_interval_s", None)
    if not settings.learn_vocab_size:
        described["vocab_sha256"] = records.file_sha256(settings.vocab_file)
    text = json.dumps(described, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _run_shards(output_dir: str, run_id: str | None = None, other: bool = False) -> list[str]:
    """Shard paths in `output_dir` whose metadata names run `run_id` (with `other`:
    any other run, or none: the shards of earlier runs)."""
    if not FileSystems.exists(output_dir):
        return []
    found = []
    for match in FileSystems.match([join_path(output_dir, "*.tfrecord")])[0].metadata_list:
        path = match.path
        if os.path.basename(path).startswith(".") or not FileSystems.exists(
            records.metadata_path(path)
        ):
            continue
        try:
            owner = records.read_metadata(path, pretraining_data.RECORD_FORMAT).get("pipeline_run")
        except ValueError:
            continue
        if (owner != run_id) == other:
            found.append(path)
    return sorted(found)


def _remove_shards(paths: list[str]) -> None:
    for path in paths:  # The metadata first: no shard stays described by another's.
        FileSystems.delete([records.metadata_path(path)])
        FileSystems.delete([path])


def _windows(path: str, size: int, shard_bytes: int) -> int:
    """Windows of an input file: a compressed one is read whole."""
    return 1 if corpus.is_compressed(path) else corpus.num_windows(size, shard_bytes)


# ----------------------------------------------------------------------------
# The pipeline.
# ----------------------------------------------------------------------------


def build_pipeline(pipeline: beam.Pipeline, settings: PipelineSettings) -> None:
    """Adds the stages of `settings` to `pipeline`."""
    shards, stats = _document_shards(pipeline, settings)
    words = None
    if settings.raw:
        split = shards | "SplitSentences" >> beam.ParDo(SplitSentences(settings)).with_outputs(
            "stats", "words", main="shards"
        )
        shards, words = split.shards, split.words
        stats.append(split.stats)
    vocab_file = settings.vocab_file
    if settings.stop_after != "sentences":
        vocab = _vocab(pipeline, settings, shards, words)
        if settings.stop_after == "shards":
            stats.append(
                shards
                | "BuildShards" >> beam.ParDo(BuildShard(settings), beam.pvalue.AsSingleton(vocab))
            )
    (
        stats
        | "AllStats" >> beam.Flatten(pipeline=pipeline)
        | "AddUp" >> beam.CombineGlobally(MergeStats())
        | "Summary" >> beam.Map(write_summary, settings, vocab_file)
    )


def _document_shards(pipeline, settings: PipelineSettings):
    """(PCollection of `corpus.DocumentShard`, [PCollection of statistics]).

    A file of one window is one shard, known without reading it; the windows of
    larger files are scanned in parallel, then grouped by file to plan its shards.
    """
    whole, windows = [], []
    for path, size in settings.input_files:
        count = _windows(path, size, settings.shard_bytes)
        if count == 1:
            end = None if corpus.is_compressed(path) else size
            whole.append(
                corpus.DocumentShard(
                    path=path,
                    index=0,
                    start=0,
                    end=end,
                    first_line=1,
                    name=corpus.shard_name(path, 0, 1),
                )
            )
        else:
            windows += [(path, size, index) for index in range(count)]
    parts, stats = [], []
    if whole:
        parts.append(pipeline | "WholeFiles" >> beam.Create(whole))
    if windows:
        scans = (
            pipeline
            | "Windows" >> beam.Create(windows)
            | "Scan" >> beam.ParDo(ScanWindow(settings)).with_outputs("stats", main="scans")
        )
        parts.append(
            scans.scans
            | "ByFile" >> beam.Map(lambda scan: (scan.path, scan))
            | "GroupByFile" >> beam.GroupByKey()
            | "Plan" >> beam.FlatMap(plan_file, dict(settings.input_files))
            | "Spread" >> beam.Reshuffle()
        )
        stats.append(scans.stats)
    if len(parts) == 1:
        return parts[0], stats
    return tuple(parts) | "AllShards" >> beam.Flatten(), stats


def _vocab(pipeline, settings: PipelineSettings, shards, words):
    """A one-element PCollection: the vocabulary's path, once it is written."""
    if not settings.learn_vocab_size:
        return pipeline | "Vocab" >> beam.Create([settings.vocab_file])
    if words is None:
        words = shards | "CountWords" >> beam.ParDo(CountWords(settings))
    return (
        words
        | "SumWords" >> beam.CombinePerKey(sum)
        | "TopWords"
        >> beam.combiners.Top.Of(settings.max_input_words, key=lambda item: (item[1], item[0]))
        | "LearnVocab" >> beam.Map(learn_and_write_vocab, settings)
    )


def run(
    settings: PipelineSettings,
    beam_options: PipelineOptions,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> dict:
    """Runs the pipeline to the end; returns its summary.

    A run owns its output_dir's shards: shards of an earlier run there that this run
    would not replace (another shard size, other inputs) are refused, or removed
    first with `overwrite`; those it replaces are replaced one by one, and
    summary.json, written once everything succeeded, lists the run's shards
    (`pretraining_data.check_shard_runs` refuses any other beside them).

    `progress` is told how many of the planned document shards have their output
    (`<name>.tfrecord`, or `<name>.txt` with stop_after="sentences") while the
    pipeline runs, from the driver: the files appear only when complete.
    """
    progress = progress if progress is not None else Progress()
    if not settings.learn_vocab_size:
        pretraining_instances.VocabIds.from_vocab(
            tokenization.load_vocab(settings.vocab_file), settings.vocab_file
        )
    names = check_output_names(settings.input_files, settings.shard_bytes)
    output_dir = settings.output_dir
    if not FileSystems.exists(output_dir):
        FileSystems.mkdirs(output_dir)  # Shards spill beside their file.
    elif "://" not in output_dir and not os.path.isdir(output_dir):
        raise UserError("--output_dir=%s is a file, not a folder." % output_dir)
    settings = dataclasses.replace(settings, run_id=run_identity(settings))
    wanted = {name + ".tfrecord" for name in names}
    makes_shards = settings.stop_after == "shards"
    earlier = [
        path
        for path in _run_shards(output_dir, settings.run_id, other=True)
        if os.path.basename(path) not in wanted and makes_shards
    ]
    if earlier and not overwrite:
        shown = ", ".join(os.path.basename(path) for path in earlier[:5])
        raise OutputExistsError(
            "--output_dir=%s holds %d shards of an earlier run that this run would not "
            "replace (%s%s): a glob over it would read both runs' shards. Give another "
            "--output_dir, or pass --overwrite to remove them first."
            % (output_dir, len(earlier), shown, " ..." if len(earlier) > 5 else "")
        )
    summary_path = join_path(output_dir, SUMMARY_NAME)
    pending_path = join_path(output_dir, PENDING_NAME)
    for path in (summary_path, pending_path):  # A stale summary must not look current.
        if FileSystems.exists(path):
            FileSystems.delete([path])
    _remove_shards(earlier)
    start = time.monotonic()
    with ShardWatcher(settings, progress):
        with beam.Pipeline(runner=local_runner(beam_options), options=beam_options) as pipeline:
            build_pipeline(pipeline, settings)
    elapsed = time.monotonic() - start
    # Everything succeeded: the earlier run's shards of this run's names that this run
    # did not write (no document there) go, and the summary, listing the shards, is
    # published.
    if makes_shards:
        _remove_shards(_run_shards(output_dir, settings.run_id, other=True))
    summary = file_io.read_json(pending_path)
    summary["shards"] = [
        os.path.basename(path) for path in _run_shards(output_dir, settings.run_id)
    ]
    file_io.write_json(summary_path, summary, sort_keys=False)
    FileSystems.delete([pending_path])
    _log_summary(summary, elapsed)
    progress.say(
        "%d documents, %d sentences -> %d instances in %d shards, in %.0f s (%s)"
        % (
            summary["documents"],
            summary["sentences"],
            summary["instances"],
            summary["shards_written"],
            elapsed,
            summary_path,
        )
    )
    return summary


class ShardWatcher:
    """Counts the finished outputs of the planned document shards every `interval`
    seconds on a thread of the driver, for `progress`; a context manager."""

    def __init__(self, settings: PipelineSettings, progress: Progress, interval: float = 2.0):
        self.planned = sum(
            _windows(path, size, settings.shard_bytes) for path, size in settings.input_files
        )
        if settings.stop_after == "sentences":
            self.pattern, self.what = join_path(settings.sentences_dir, "*.txt"), "sentences"
        else:
            self.pattern, self.what = join_path(settings.output_dir, "*.tfrecord"), "shards"
        self.progress, self.interval = progress, interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def finished(self, since: float) -> int:
        matches = FileSystems.match([self.pattern])[0].metadata_list
        return sum(
            1
            for m in matches
            if not os.path.basename(m.path).startswith(".")
            and (m.last_updated_in_seconds or since) >= since
        )

    def _watch(self) -> None:
        since = time.time() - 1.0
        with self.progress.task(self.what, total=self.planned, unit="shard") as bar:
            while not self.stop.wait(self.interval):
                bar.update(min(self.finished(since), self.planned))
            bar.update(min(self.finished(since), self.planned))

    def __enter__(self) -> ShardWatcher:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def local_runner(beam_options: PipelineOptions):
    """The engine of the DirectRunner (the default runner) for this batch
    pipeline, or None to let Beam resolve any other `--runner`.

    Beam's DirectRunner first tries its Prism runner, a binary it downloads at
    run time, then falls back to the FnApiRunner; this goes to the FnApiRunner
    directly, set up as the DirectRunner sets it up (it honours
    --direct_num_workers and --direct_running_mode).
    """
    from apache_beam.options.pipeline_options import StandardOptions
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    if beam_options.view_as(StandardOptions).runner not in (None, "DirectRunner"):
        return None
    encoded = JobServiceHandle.encode_pipeline_options(beam_options.get_all_options())
    return fn_runner.FnApiRunner(
        provision_info=fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
        )
    )


def _log_summary(summary: dict, elapsed: float) -> None:
    logging.info(
        "Done in %.1f s: %d input files, %d document shards, %d shards written; "
        "%d documents, %d sentences, %d instances (%.0f/s), %d tokens (%.0f/s), masked "
        "fraction %.4f, random next %.3f; bad input %s.",
        elapsed,
        summary["input_files"],
        summary["document_shards"],
        summary["shards_written"],
        summary["documents"],
        summary["sentences"],
        summary["instances"],
        summary["instances"] / max(elapsed, 1e-9),
        summary["tokens"],
        summary["tokens"] / max(elapsed, 1e-9),
        summary["masked_fraction"],
        summary["random_next_fraction"],
        summary["bad_input"] or "none",
    )
    histogram = summary["length_histogram"]
    if histogram:
        buckets = collections.Counter()
        for length, count in histogram.items():
            buckets[(int(length) - 1) // 16] += count
        logging.info(
            "Instance lengths: %s",
            ", ".join("%d-%d: %d" % (16 * b + 1, 16 * b + 16, buckets[b]) for b in sorted(buckets)),
        )
