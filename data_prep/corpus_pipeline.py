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
import os
import time

from absl import logging
import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from common.errors import UserError
from data_prep import corpus
from data_prep import pretraining_instances
from data_prep import records
from data_prep import tokenization
from data_prep.corpus_settings import PipelineSettings, join_path
from data_prep.corpus_stages import (
    BuildShard,
    CountWords,
    ScanWindow,
    SplitSentences,
    learn_and_write_vocab,
    plan_file,
)
from data_prep.corpus_summary import SUMMARY_NAME, MergeStats, write_summary

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


def check_output_names(input_files, shard_bytes: int) -> None:
    """Raises ValueError if two document shards would get the same name."""
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


def run(settings: PipelineSettings, beam_options: PipelineOptions) -> dict:
    """Runs the pipeline to the end; returns its summary."""
    if not settings.learn_vocab_size:
        pretraining_instances.VocabIds.from_vocab(
            tokenization.load_vocab(settings.vocab_file), settings.vocab_file
        )
    check_output_names(settings.input_files, settings.shard_bytes)
    if not FileSystems.exists(settings.output_dir):
        FileSystems.mkdirs(settings.output_dir)  # Shards spill beside their file.
    summary_path = join_path(settings.output_dir, SUMMARY_NAME)
    if FileSystems.exists(summary_path):
        FileSystems.delete([summary_path])  # A stale summary must not look current.
    start = time.monotonic()
    with beam.Pipeline(runner=local_runner(beam_options), options=beam_options) as pipeline:
        build_pipeline(pipeline, settings)
    elapsed = time.monotonic() - start
    summary = records.read_json(summary_path)
    _log_summary(summary, elapsed)
    return summary


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
