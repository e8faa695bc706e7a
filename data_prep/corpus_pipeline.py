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
     and its `.meta.json`, computed by `create_pretraining_data` exactly as the
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

The command line is `data_prep/pretraining_pipeline.py`.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time

from absl import logging
import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions

from data_prep import corpus
from data_prep import create_pretraining_data as cpd
from data_prep import records
from data_prep import sentences
from data_prep import tokenization
from data_prep import wordpiece_vocab

SUMMARY_NAME = "summary.json"
SUMMARY_FORMAT = "bert_pretraining_pipeline_summary/1"
STAGES = ("sentences", "vocab", "shards")
_METRICS = "pretraining_pipeline"
_MAX_EXAMPLES = 100


@dataclasses.dataclass(frozen=True)
class PipelineSettings:
    """Everything the pipeline needs (the command line, as values).

    Attributes:
        input_files: (path, size in bytes) of each input file.
        input_format: one of `corpus.FORMATS`.
        output_dir: receives the shards and the summary.
        sentences_dir: receives the sentences of raw-text input.
        vocab_file: the vocabulary read, or written when `learn_vocab_size`.
        learn_vocab_size: 0, or the size of the vocabulary to learn.
        max_input_words: the most frequent words the vocabulary is learned from.
        shard_bytes: size of the windows that cut files into document shards.
        bad_input: "skip" or "fail" (see `corpus.BadInputLog`).
        stop_after: the last stage run (one of `STAGES`).
        run: tokenization, instance and masking settings (`random_seed` is the
            run's; input and output files are set per shard).
    """

    input_files: tuple
    input_format: str
    output_dir: str
    sentences_dir: str
    vocab_file: str
    run: cpd.RunOptions
    learn_vocab_size: int = 0
    max_input_words: int = 5_000_000
    shard_bytes: int = 16_000_000
    bad_input: str = "fail"
    stop_after: str = "shards"

    def __post_init__(self):
        if self.input_format not in corpus.FORMATS:
            raise ValueError(
                "--input_format=%s is not one of %s."
                % (self.input_format, ", ".join(corpus.FORMATS))
            )
        if self.stop_after not in STAGES:
            raise ValueError(
                "--stop_after=%s is not one of %s." % (self.stop_after, ", ".join(STAGES))
            )
        if self.stop_after == "vocab" and not self.learn_vocab_size:
            raise ValueError("--stop_after=vocab needs --learn_vocab_size.")
        if self.stop_after == "sentences" and self.input_format == "sentences":
            raise ValueError(
                "--stop_after=sentences needs raw input (--input_format=text or jsonl)."
            )
        if self.shard_bytes < 1:
            raise ValueError("The shard size must be positive.")
        if self.bad_input not in corpus.POLICIES:
            raise ValueError(
                "--bad_input=%s is not one of %s." % (self.bad_input, ", ".join(corpus.POLICIES))
            )

    @property
    def raw(self) -> bool:
        return self.input_format != "sentences"

    def shard_options(
        self, shard: corpus.DocumentShard, vocab_file: str, output_file: str
    ) -> cpd.RunOptions:
        """The run of one shard: its file, its output and seed + its window."""
        return dataclasses.replace(
            self.run,
            input_files=(shard.path,),
            output_files=(output_file,),
            vocab_file=vocab_file,
            random_seed=self.run.random_seed + shard.index,
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
            raise ValueError("--input_file pattern %r matches no file." % pattern)
        for match in matches:
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
                raise ValueError(
                    "%s and %s would both write shards named %s: rename one."
                    % (owners[name], path, name)
                )
            owners[name] = path


def join_path(directory: str, name: str) -> str:
    """`directory`/`name`, for local paths and Beam's file systems."""
    return (
        FileSystems.join(directory, name) if "://" in directory else os.path.join(directory, name)
    )


def _windows(path: str, size: int, shard_bytes: int) -> int:
    """Windows of an input file: a compressed one is read whole."""
    return 1 if corpus.is_compressed(path) else corpus.num_windows(size, shard_bytes)


def _open(path: str):
    """The file for binary reading, decompressed if its name says so."""
    compression = (
        CompressionTypes.detect_compression_type(path)
        if corpus.is_compressed(path)
        else CompressionTypes.UNCOMPRESSED
    )
    return FileSystems.open(path, compression_type=compression)


# ----------------------------------------------------------------------------
# Statistics.
# ----------------------------------------------------------------------------


def shard_stats(
    stats: cpd.Stats | None = None, bad: corpus.BadInputLog | None = None, **counts
) -> dict:
    """One element of the statistics that `MergeStats` adds up."""
    result = dict(counts)
    if stats is not None:
        summary = stats.summary()
        result.update(
            {
                key: summary[key]
                for key in (
                    "lines",
                    "documents",
                    "one_sentence_documents",
                    "long_lines",
                    "instances",
                    "tokens",
                    "masked",
                    "random_next",
                )
            }
        )
        result["lengths"] = dict(summary["lengths"])
    if bad is not None:
        result["bad_input"] = dict(bad.counts)
        result["bad_input_examples"] = list(bad.examples)
    return result


class MergeStats(beam.CombineFn):
    """Adds up statistics: numbers and dicts of numbers by key, lists joined
    (up to 100 entries)."""

    def create_accumulator(self):
        return {}

    def add_input(self, accumulator, element):
        for key, value in element.items():
            if isinstance(value, dict):
                merged = accumulator.setdefault(key, {})
                for name, count in value.items():
                    merged[name] = merged.get(name, 0) + count
            elif isinstance(value, list):
                accumulator[key] = (accumulator.get(key, []) + value)[:_MAX_EXAMPLES]
            else:
                accumulator[key] = accumulator.get(key, 0) + value
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for accumulator in accumulators:
            self.add_input(merged, accumulator)
        return merged

    def extract_output(self, accumulator):
        return accumulator


def summarize(totals: dict, settings: PipelineSettings, vocab_file: str) -> dict:
    """The run's summary from the added-up statistics."""
    tokens, instances = totals.get("tokens", 0), totals.get("instances", 0)
    lengths = {int(length): count for length, count in totals.get("lengths", {}).items()}
    run = settings.run
    return {
        "format": SUMMARY_FORMAT,
        "input_files": len(settings.input_files),
        "input_format": settings.input_format,
        "document_shards": totals.get("document_shards", 0),
        "shards_written": totals.get("shards_written", 0),
        "raw_documents": totals.get("raw_documents", 0),
        "sentences_written": totals.get("sentences_written", 0),
        "lines": totals.get("lines", 0),
        "sentences": totals.get("sentences", 0),
        "documents": totals.get("documents", 0),
        "one_sentence_documents": totals.get("one_sentence_documents", 0),
        "long_lines": totals.get("long_lines", 0),
        "instances": instances,
        "tokens": tokens,
        "masked": totals.get("masked", 0),
        "masked_fraction": totals.get("masked", 0) / max(tokens, 1),
        "random_next_fraction": totals.get("random_next", 0) / max(instances, 1),
        "length_histogram": {str(length): lengths[length] for length in sorted(lengths)},
        "bad_input": totals.get("bad_input", {}),
        "bad_input_examples": totals.get("bad_input_examples", []),
        "vocab_file": vocab_file,
        "learned_vocab_size": settings.learn_vocab_size,
        "settings": {
            "max_seq_length": run.instance.max_seq_length,
            "max_predictions_per_seq": run.masking.max_predictions_per_seq,
            "do_lower_case": run.do_lower_case,
            "do_whole_word_mask": run.masking.do_whole_word_mask,
            "next_sentence_prediction": run.instance.next_sentence_prediction,
            "random_seed": run.random_seed,
            "dupe_factor": run.dupe_factor,
            "masked_lm_prob": run.masking.masked_lm_prob,
            "short_seq_prob": run.instance.short_seq_prob,
            "shard_bytes": settings.shard_bytes,
            "bad_input": settings.bad_input,
            "stop_after": settings.stop_after,
        },
    }


class _Progress:
    """Running totals of a worker process, logged after each shard with rates.

    One per process and kind of work (`progress`), shared by the DoFn instances
    that the process runs in several threads.
    """

    _lock = threading.Lock()
    _by_kind = {}

    def __init__(self, what: str):
        self.what = what
        self.start = time.monotonic()
        self.totals = collections.Counter()

    @classmethod
    def of(cls, what: str) -> "_Progress":
        with cls._lock:
            return cls._by_kind.setdefault(what, cls(what))

    def add(self, label: str, **counts) -> None:
        for name, count in counts.items():
            Metrics.counter(_METRICS, name).inc(count)
        with self._lock:
            self.totals.update(counts)
            elapsed = max(time.monotonic() - self.start, 1e-9)
            rates = ", ".join(
                "%d %s (%.0f/s)" % (self.totals[name], name, self.totals[name] / elapsed)
                for name in sorted(self.totals)
            )
        logging.info("%s %s; this worker process so far: %s", self.what, label, rates)


# ----------------------------------------------------------------------------
# Stages.
# ----------------------------------------------------------------------------


class ScanWindow(beam.DoFn):
    """(path, size, window) -> `corpus.WindowScan`; "stats" gets bad input."""

    def __init__(self, settings: PipelineSettings):
        self.settings = settings

    def process(self, element):
        path, size, index = element
        bad = corpus.BadInputLog(self.settings.bad_input)
        try:
            with _open(path) as reader:
                scan = corpus.scan_window(
                    reader, path, size, index, self.settings.shard_bytes, self.settings.input_format
                )
        except (OSError, IOError) as e:
            if index == 0:  # Reported once per file.
                bad.report("unreadable_file", path, None, "cannot be read (%s)" % e)
                yield beam.pvalue.TaggedOutput("stats", shard_stats(bad=bad))
            return
        yield scan


def plan_file(element, sizes: dict) -> list[corpus.DocumentShard]:
    """(path, scans) -> the file's document shards (none if it was unreadable)."""
    path, scans = element
    scans = list(scans)
    if not any(scan.index == 0 for scan in scans):
        return []  # Unreadable: reported by the scan of window 0.
    return corpus.plan_shards(path, sizes[path], scans)


class SplitSentences(beam.DoFn):
    """A raw-text document shard -> its sentences file, as a document shard.

    Outputs: main, the shard of `<sentences_dir>/<name>.txt`; "words",
    (word, count) pairs when the vocabulary is learned; "stats".
    """

    def __init__(self, settings: PipelineSettings):
        self.settings = settings

    def setup(self):
        self.progress = _Progress.of("Sentences of")
        self.basic_tokenizer = tokenization.BasicTokenizer(
            do_lower_case=self.settings.run.do_lower_case
        )

    def process(self, shard: corpus.DocumentShard):
        settings = self.settings
        bad = corpus.BadInputLog(settings.bad_input)
        output = join_path(settings.sentences_dir, shard.name + ".txt")
        words = collections.Counter()
        counts = collections.Counter()
        try:
            with _open(shard.path) as reader:
                documents = corpus.sentence_documents(
                    corpus.raw_documents(
                        corpus.read_lines(reader, shard, bad),
                        shard.path,
                        settings.input_format,
                        bad,
                    ),
                    shard.path,
                    sentences.split_sentences,
                    bad,
                )
                size = self._write(output, documents, counts, words)
        except _NoDocuments:
            size = 0
        except (OSError, IOError) as e:
            bad.report("unreadable_file", shard.path, None, "cannot be read (%s)" % e)
            size = 0
        self.progress.add(shard.name, documents=counts["documents"], sentences=counts["sentences"])
        yield beam.pvalue.TaggedOutput(
            "stats",
            shard_stats(
                bad=bad, raw_documents=counts["documents"], sentences_written=counts["sentences"]
            ),
        )
        if size:
            if settings.learn_vocab_size:
                yield from (beam.pvalue.TaggedOutput("words", item) for item in words.items())
            yield corpus.DocumentShard(
                path=output,
                index=shard.index,
                start=0,
                end=size,
                first_line=1,
                name=shard.name,
                origin=shard,
            )

    def _write(self, output, documents, counts, words) -> int:
        """Writes the sentences file; its size. Raises `_NoDocuments` (and
        writes nothing) if there is no document."""
        size = 0
        count_words = self.settings.learn_vocab_size > 0
        with records.atomic_open(output, "wb") as writer:
            for line in corpus.format_sentences(
                self._counted(documents, counts, words, count_words)
            ):
                data = line.encode("utf-8")
                writer.write(data)
                size += len(data)
            if not size:
                raise _NoDocuments()
        return size

    def _counted(self, documents, counts, words, count_words):
        for document in documents:
            counts["documents"] += 1
            counts["sentences"] += len(document)
            if count_words:
                for sentence in document:
                    words.update(self.basic_tokenizer.tokenize(sentence))
            yield document


class _NoDocuments(Exception):
    """No sentence to write: the temporary file is removed, nothing appears."""


class CountWords(beam.DoFn):
    """A document shard of sentences -> (word, count) pairs of its lines."""

    def __init__(self, settings: PipelineSettings):
        self.settings = settings

    def process(self, shard: corpus.DocumentShard):
        quiet = corpus.BadInputLog("skip")  # BuildShard reports the same lines.
        try:
            with _open(shard.path) as reader:
                counts = wordpiece_vocab.count_words(
                    (line for _, line in corpus.read_lines(reader, shard, quiet)),
                    self.settings.run.do_lower_case,
                )
        except (OSError, IOError):
            return
        yield from counts.items()


def learn_and_write_vocab(word_counts, settings: PipelineSettings) -> str:
    """Learns the vocabulary from the most frequent words; writes it; its path."""
    start = time.monotonic()
    vocab = wordpiece_vocab.learn_vocab(
        word_counts, settings.learn_vocab_size, max_input_words=settings.max_input_words
    )
    wordpiece_vocab.write_vocab(settings.vocab_file, vocab)
    logging.info(
        "Learned a vocabulary of %d entries from %d words in %.1f s: %s",
        len(vocab),
        len(word_counts),
        time.monotonic() - start,
        settings.vocab_file,
    )
    return settings.vocab_file


class BuildShard(beam.DoFn):
    """A document shard of sentences -> `<output_dir>/<name>.tfrecord` and its
    metadata, built as the original script builds them for that text alone."""

    def __init__(self, settings: PipelineSettings):
        self.settings = settings

    def setup(self):
        self.progress = _Progress.of("Instances of")
        self.tokenizers = {}

    def _tokenizer(self, vocab_file: str):
        if vocab_file not in self.tokenizers:
            tokenizer = tokenization.FullTokenizer(vocab_file, self.settings.run.do_lower_case)
            self.tokenizers[vocab_file] = (
                tokenizer,
                cpd.VocabIds.from_vocab(tokenizer.vocab, vocab_file),
            )
        return self.tokenizers[vocab_file]

    def process(self, shard: corpus.DocumentShard, vocab_file: str):
        settings = self.settings
        tokenizer, vocab = self._tokenizer(vocab_file)
        output = join_path(settings.output_dir, shard.name + ".tfrecord")
        options = settings.shard_options(shard, vocab_file, output)
        bad = corpus.BadInputLog(settings.bad_input)
        stats = cpd.Stats()
        start = time.monotonic()
        try:
            with _open(shard.path) as reader:
                lines = (
                    (shard.path, number, line)
                    for number, line in corpus.read_lines(reader, shard, bad)
                )
                documents = cpd.documents_from_lines(
                    lines,
                    tokenizer,
                    options.instance.max_num_tokens,
                    stats,
                    options.progress_interval_s,
                    lambda path, line: bad.report(
                        "empty_document", path, line, "an empty document"
                    ),
                )
        except (OSError, IOError) as e:
            bad.report("unreadable_file", shard.path, None, "cannot be read (%s)" % e)
            documents = []
        written, num_sentences = 0, sum(map(len, documents))
        if documents:
            cpd.write_instances(
                documents,
                len(tokenizer.vocab),
                [shard.path],
                [output],
                options,
                vocab,
                stats,
                {"document_shard": shard.describe(), "run_random_seed": settings.run.random_seed},
            )
            written = 1
        elif stats.lines:
            logging.warning("%s: no document with a token; no shard %s.", shard.path, output)
        self.progress.add(
            "%s (%.1f s)" % (shard.name, time.monotonic() - start),
            documents=stats.documents,
            sentences=num_sentences,
            instances=stats.instances,
            tokens=stats.tokens,
        )
        yield shard_stats(
            stats, bad, document_shards=1, shards_written=written, sentences=num_sentences
        )


def write_summary(totals: dict, settings: PipelineSettings, vocab_file: str) -> str:
    """Writes `<output_dir>/summary.json`; its path."""
    path = join_path(settings.output_dir, SUMMARY_NAME)
    records.write_json(path, summarize(totals, settings, vocab_file), sort_keys=False)
    return path


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
        cpd.VocabIds.from_vocab(tokenization.load_vocab(settings.vocab_file), settings.vocab_file)
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
