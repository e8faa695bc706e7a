"""The stages of the corpus pipeline (`corpus_pipeline`), as Beam transforms.

`ScanWindow` and `plan_file` cut large input files into document shards;
`SplitSentences` writes the sentences of raw text; `CountWords` and
`learn_and_write_vocab` learn the WordPiece vocabulary; `BuildShard` makes a
shard of sentences into `<output_dir>/<name>.tfrecord` and its metadata with
`pretraining_instances` and `pretraining_records`, exactly as
`create_pretraining_data` does for that text alone. Each worker process logs its
progress and counts it in Beam metrics (`_Progress`). Input files are read
through Beam's file systems, decompressed if their name says so.
"""

from __future__ import annotations

# First: Beam's worker processes load this module to run the stages, and TensorFlow's
# start-up lines would reach the terminal from each of them.
import common.quiet_tensorflow  # noqa: F401

import collections
import threading
import time

from absl import logging
import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from data_prep.pretraining import corpus
from data_prep import damage
from data_prep.pretraining import pretraining_instances
from data_prep.pretraining import pretraining_records
from common import file_io
from common.errors import DamagedFileError
from data_prep.text import sentences
from data_prep.text import tokenization
from data_prep.text import wordpiece_vocab
from data_prep.pretraining.corpus_settings import PipelineSettings, join_path
from data_prep.pretraining.corpus_summary import shard_stats

_METRICS = "pretraining_pipeline"


def open_input(path: str):
    """The file for binary reading (any file system Beam reads), decompressed if its
    name says so; reading a damaged compressed file raises `DamagedFileError`."""
    raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    return damage.open_decompressed(raw, path)


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
            with open_input(path) as reader:
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
            with open_input(shard.path) as reader:
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
        except DamagedFileError as e:  # Nothing of the file is kept.
            bad.report("damaged_file", shard.path, None, "%s: %s" % (e.where, e.reason))
            size = 0
            counts.clear()
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
        with file_io.atomic_open(output, "wb") as writer:
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
            with open_input(shard.path) as reader:
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
            run = self.settings.run
            tokenizer = tokenization.FullTokenizer(
                vocab_file, run.do_lower_case, run.preserve_unused_tokens
            )
            self.tokenizers[vocab_file] = (
                tokenizer,
                pretraining_instances.VocabIds.from_vocab(tokenizer.vocab, vocab_file),
            )
        return self.tokenizers[vocab_file]

    def process(self, shard: corpus.DocumentShard, vocab_file: str):
        settings = self.settings
        tokenizer, vocab = self._tokenizer(vocab_file)
        output = join_path(settings.output_dir, shard.name + ".tfrecord")
        options = settings.shard_options(shard, vocab_file, output)
        bad = corpus.BadInputLog(settings.bad_input)
        stats = pretraining_instances.Stats()
        start = time.monotonic()
        try:
            with open_input(shard.path) as reader:
                lines = (
                    (shard.path, number, line)
                    for number, line in corpus.read_lines(reader, shard, bad)
                )
                documents = pretraining_instances.documents_from_lines(
                    lines,
                    tokenizer,
                    options.instance.max_num_tokens,
                    stats,
                    options.progress_interval_s,
                    lambda path, line: bad.report(
                        "empty_document", path, line, "an empty document"
                    ),
                )
        except DamagedFileError as e:  # Nothing of the file is kept.
            bad.report("damaged_file", shard.path, None, "%s: %s" % (e.where, e.reason))
            documents = []
        except (OSError, IOError) as e:
            bad.report("unreadable_file", shard.path, None, "cannot be read (%s)" % e)
            documents = []
        written, num_sentences = 0, sum(map(len, documents))
        if documents:
            pretraining_records.write_instances(
                documents,
                len(tokenizer.vocab),
                [shard.path],
                [output],
                options,
                vocab,
                stats,
                {
                    "document_shard": shard.describe(),
                    "run_random_seed": settings.run.random_seed,
                    "pipeline_run": settings.run_id,
                },
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
