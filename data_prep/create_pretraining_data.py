"""Creates masked-LM / next-sentence TFRecord examples for BERT pre-training.

Input: plain text, one sentence per line, a blank line between documents.
Output: TFRecord files of `tf.train.Example`s with the features of the original
release (S = max_seq_length, P = max_predictions_per_seq):

    input_ids             int64 [S]  `[CLS] A [SEP] B [SEP]` after masking, 0-padded
    input_mask            int64 [S]  1 for real tokens, 0 for padding
    segment_ids           int64 [S]  0 for [CLS], A and its [SEP]; 1 for B and its [SEP]
    masked_lm_positions   int64 [P]  ascending positions of the predictions, 0-padded
    masked_lm_ids         int64 [P]  original ids at those positions, 0-padded
    masked_lm_weights     float [P]  1.0 per prediction, 0.0 for padding
    next_sentence_labels  int64 [1]  1 if B is a random segment, else 0

With the same input, vocabulary, flags and seed the files hold the records of the
original `create_pretraining_data.py`, in the same order and files: the same
documents, the same calls on one `random.Random` in the same order. Byte for
byte, they equal the original's records re-serialized with sorted feature keys
(`canonical_record`): the original's own bytes change from run to run, as the
protobuf runtime orders the feature map differently in every process.

Beyond the original:
  * `--num_workers N > 1`: each input file becomes its own shard, built in a pool
    of N processes exactly as the original would build it from that file alone
    (same seed). Memory is then bounded by the largest input file.
  * Instances are spilled to an unnamed temporary file while they are generated
    (the final shuffle needs all of them), so memory holds the documents only.
  * Ablations: `--mask_token_prob` / `--random_token_prob` (the 80/10/10 split)
    and `--next_sentence_prediction=false`: single-segment instances
    `[CLS] A [SEP]` filling `max_seq_length`, segment ids 0, next_sentence_labels 0.
  * Every shard is written under a temporary name and renamed when complete;
    beside it `<shard>.meta.json` (see `shard_metadata`) records the settings
    and counts, for the pre-training runner to check.
  * Progress and a final summary (instances, tokens, masked fraction) are logged.

Usage:
    python -m data_prep.create_pretraining_data \
        --input_file=sample_data/corpus/*.txt --output_file=output/pretrain.tfrecord \
        --vocab_file=sample_data/vocab/uncased_vocab.txt
"""

import array
import collections
import contextlib
import dataclasses
import fractions
import functools
import json
import mmap
import multiprocessing
import os
import pathlib
import random
import sys
import tempfile
import time
from typing import Callable, Iterable, Iterator, Sequence

if __package__ in (None, ""):
    # Run as a script: make the repository root importable.
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

from data_prep import pretraining_data, records
from data_prep import tokenization

REQUIRED_TOKENS = (
    tokenization.CLS_TOKEN,
    tokenization.SEP_TOKEN,
    tokenization.MASK_TOKEN,
    tokenization.UNK_TOKEN,
)
METADATA_SUFFIX = ".meta.json"
METADATA_FORMAT = "bert_pretraining_tfrecord/1"
NUM_LOGGED_WARNINGS = 5


# ----------------------------------------------------------------------------
# Options.
# ----------------------------------------------------------------------------


def _exact(x: float) -> fractions.Fraction:
    """`x` as the decimal it prints as, so 1 - 0.8 - 0.1 is exactly 0.1."""
    return fractions.Fraction(repr(float(x)))


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError("%s=%r must lie in [0, 1]." % (name, value))


@dataclasses.dataclass(frozen=True)
class InstanceOptions:
    """How documents are cut into instances.

    Attributes:
        max_seq_length: S, the length of every example, special tokens included.
        short_seq_prob: probability of a random target length in [2, S - 3]
            instead of S - 3 (S - 2 without next-sentence prediction).
        next_sentence_prediction: pairs `[CLS] A [SEP] B [SEP]` with a random B
            half of the time (True, the original), or single segments
            `[CLS] A [SEP]` with next_sentence_labels 0 (False).
    """

    max_seq_length: int = 128
    short_seq_prob: float = 0.1
    next_sentence_prediction: bool = True

    def __post_init__(self):
        _check_probability("short_seq_prob", self.short_seq_prob)
        minimum = 5 if self.next_sentence_prediction else 4
        if self.max_seq_length < minimum:
            raise ValueError(
                "max_seq_length=%d is too small: it must be at least %d to hold "
                "the special tokens and two tokens of text." % (self.max_seq_length, minimum)
            )

    @property
    def max_num_tokens(self) -> int:
        """Tokens of text an instance holds: S minus [CLS] and the [SEP]s."""
        return self.max_seq_length - (3 if self.next_sentence_prediction else 2)


@dataclasses.dataclass(frozen=True)
class MaskingOptions:
    """How tokens are chosen and replaced for the masked LM.

    Attributes:
        masked_lm_prob: fraction of an instance's tokens to predict (at least 1).
        max_predictions_per_seq: P, the cap on predictions per instance.
        mask_token_prob: a chosen token becomes [MASK] with this probability,
        random_token_prob: a random vocabulary word with this one, and is kept
            as it is otherwise. Defaults: the original 80/10/10.
        do_whole_word_mask: choose whole words: a "##" piece is chosen together
            with the pieces before it.
    """

    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    mask_token_prob: float = 0.8
    random_token_prob: float = 0.1
    do_whole_word_mask: bool = False

    def __post_init__(self):
        _check_probability("masked_lm_prob", self.masked_lm_prob)
        _check_probability("mask_token_prob", self.mask_token_prob)
        _check_probability("random_token_prob", self.random_token_prob)
        if _exact(self.mask_token_prob) + _exact(self.random_token_prob) > 1:
            raise ValueError(
                "mask_token_prob=%r + random_token_prob=%r exceeds 1."
                % (self.mask_token_prob, self.random_token_prob)
            )
        if self.max_predictions_per_seq < 0:
            raise ValueError(
                "max_predictions_per_seq=%d must not be negative." % self.max_predictions_per_seq
            )
        if self.max_predictions_per_seq == 0 and self.masked_lm_prob > 0:
            raise ValueError(
                "max_predictions_per_seq=0 with masked_lm_prob=%r: no position could be "
                "masked, and the shards would teach the masked LM nothing. Give "
                "max_predictions_per_seq > 0 (the original uses 20 at max_seq_length 128, "
                "80 at 512)." % self.masked_lm_prob
            )

    @functools.cached_property
    def keep_share(self) -> float:
        """P(keep | not [MASK]): the threshold of the original's second draw."""
        not_masked = 1 - _exact(self.mask_token_prob)
        if not not_masked:
            return 0.0
        kept = not_masked - _exact(self.random_token_prob)
        return float(kept / not_masked)


@dataclasses.dataclass(frozen=True)
class VocabIds:
    """What instance creation needs of the vocabulary, as ids.

    Attributes:
        cls_id, sep_id, mask_id: ids of [CLS], [SEP] and [MASK].
        word_ids: ids in vocabulary order (the original draws random words from
            `list(vocab.keys())`).
        is_continuation: byte per id, 1 for "##" pieces.
    """

    cls_id: int
    sep_id: int
    mask_id: int
    word_ids: tuple
    is_continuation: bytes

    @classmethod
    def from_vocab(cls, vocab, vocab_file: str = "<vocab>") -> "VocabIds":
        """Builds it from a token -> id map; ValueError names a missing token."""
        tokenization.validate_vocab(vocab, REQUIRED_TOKENS, vocab_file)
        flags_by_id = bytearray(max(vocab.values()) + 1)
        for token, token_id in vocab.items():
            if token.startswith(tokenization.WORDPIECE_PREFIX):
                flags_by_id[token_id] = 1
        return cls(
            cls_id=vocab[tokenization.CLS_TOKEN],
            sep_id=vocab[tokenization.SEP_TOKEN],
            mask_id=vocab[tokenization.MASK_TOKEN],
            word_ids=tuple(vocab.values()),
            is_continuation=bytes(flags_by_id),
        )


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """Everything one run needs (the command line, as values).

    Attributes:
        input_files: text files, in the order they are read.
        output_files: TFRecord files. Pooled (`per_input_file` False): instances
            go round-robin across them. Per input file: one per input file.
        vocab_file, do_lower_case: the tokenizer.
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
    dupe_factor: int = 10
    random_seed: int = 12345
    instance: InstanceOptions = InstanceOptions()
    masking: MaskingOptions = MaskingOptions()
    per_input_file: bool = False
    num_workers: int = 1
    progress_interval_s: float = 30.0

    def __post_init__(self):
        if self.dupe_factor < 1:
            raise ValueError("dupe_factor=%d must be at least 1." % self.dupe_factor)
        if self.per_input_file and len(self.input_files) != len(self.output_files):
            raise ValueError(
                "One output file per input file is needed: %d input files, %d "
                "output files." % (len(self.input_files), len(self.output_files))
            )


# ----------------------------------------------------------------------------
# Statistics and progress.
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class Stats:
    """Counts over a run, logged at the end and written to the metadata."""

    lines: int = 0
    documents: int = 0
    one_sentence_documents: int = 0
    long_lines: int = 0
    instances: int = 0
    tokens: int = 0
    masked: int = 0
    random_next: int = 0
    # Instance length (tokens, special ones included) -> number of instances.
    lengths: dict = dataclasses.field(default_factory=dict)

    def add(self, other: "Stats") -> None:
        for field in dataclasses.fields(self):
            if field.name != "lengths":
                setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        for length, count in other.lengths.items():
            self.lengths[length] = self.lengths.get(length, 0) + count

    def summary(self) -> dict:
        return dict(
            dataclasses.asdict(self),
            lengths={str(length): self.lengths[length] for length in sorted(self.lengths)},
            masked_fraction=self.masked / max(self.tokens, 1),
            random_next_fraction=self.random_next / max(self.instances, 1),
        )


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
# Reading documents.
# ----------------------------------------------------------------------------


def expand_input_patterns(patterns: str) -> list[str]:
    """Comma-separated file names or globs -> files, in `tf.io.gfile.glob` order.

    The order is the original's (unsorted, as the file system lists them), so
    that the same command gives the same output.

    Raises:
        ValueError: a pattern matches no file.
    """
    files = []
    for pattern in patterns.split(","):
        matches = tf.io.gfile.glob(pattern)
        if not matches:
            raise ValueError("Input pattern %r matches no file." % pattern)
        files.extend(matches)
    return files


def read_documents(
    input_files: Sequence[str],
    tokenizer,
    max_num_tokens: int,
    stats: Stats,
    progress_interval_s: float = 30.0,
) -> list[list[list[int]]]:
    """Reads and tokenizes the documents of text files, as the original does.

    The files are read one after the other as one text (a document continues
    across files); see `documents_from_lines`.

    Args:
        input_files: text files, one sentence per line.
        tokenizer: a `tokenization.FullTokenizer`.
        max_num_tokens: lines with more tokens are counted (they are truncated).
        stats: receives lines, documents and the counts of one-sentence
            documents and long lines.
        progress_interval_s: seconds between lines logging the lines read.

    Returns:
        Documents, each a list of sentences, each a list of token ids.
    """
    lines = (
        (path, line_number, line)
        for path in input_files
        for line_number, line in records.read_lines(path)
    )
    return documents_from_lines(lines, tokenizer, max_num_tokens, stats, progress_interval_s)


def documents_from_lines(
    lines: Iterable[tuple[str, int, str]],
    tokenizer,
    max_num_tokens: int,
    stats: Stats,
    progress_interval_s: float = 30.0,
    empty_document: Callable[[str, int], None] | None = None,
) -> list[list[list[int]]]:
    """Tokenizes lines of text into documents, as the original does.

    A line that is empty after stripping whitespace starts a new document; a
    line with no token is skipped; empty documents are dropped.

    Args:
        lines: (file name, line number, text) of each line, in order; the name
            and number only label warnings and progress.
        tokenizer: a `tokenization.FullTokenizer`.
        max_num_tokens: lines with more tokens are counted (they are truncated).
        stats: receives lines, documents and the counts of one-sentence
            documents and long lines.
        progress_interval_s: seconds between lines logging the lines read.
        empty_document: called with the file name and first line of each
            document that has lines but no token.

    Returns:
        Documents, each a list of sentences, each a list of token ids.
    """
    documents = [[]]
    start = None  # (file name, line number) of the current document's first line.
    last_log = time.monotonic()
    for path, line_number, line in lines:
        stats.lines += 1
        if not stats.lines % 10000 and (time.monotonic() - last_log >= progress_interval_s):
            last_log = time.monotonic()
            logging.info("%s: read %d lines, %d documents", path, line_number, len(documents))
        line = line.strip()
        if not line:
            if start and not documents[-1] and empty_document:
                empty_document(*start)
            start = None
            documents.append([])
            continue
        start = start or (path, line_number)
        ids = tokenizer.tokenize_to_ids(line)
        if not ids:
            continue
        if len(ids) > max_num_tokens:
            stats.long_lines += 1
            if stats.long_lines <= NUM_LOGGED_WARNINGS:
                logging.warning(
                    "%s:%d has %d tokens, more than the %d an "
                    "instance holds: it will be truncated.",
                    path,
                    line_number,
                    len(ids),
                    max_num_tokens,
                )
        documents[-1].append(ids)
    if start and not documents[-1] and empty_document:
        empty_document(*start)
    documents = [document for document in documents if document]
    stats.documents += len(documents)
    stats.one_sentence_documents += sum(len(d) == 1 for d in documents)
    return documents


# ----------------------------------------------------------------------------
# Instances.
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class TrainingInstance:
    """One example before padding (T = its length, at most S).

    Attributes:
        input_ids: int list [T], `[CLS] A [SEP] B [SEP]` after masking.
        segment_ids: int list [T].
        masked_lm_positions: int list [<= P], ascending.
        masked_lm_ids: int list [<= P], the original ids at those positions.
        is_random_next: B is a random segment (next_sentence_labels 1).
    """

    input_ids: list
    segment_ids: list
    masked_lm_positions: list
    masked_lm_ids: list
    is_random_next: bool


def _shuffle_like_stdlib(items, rng: random.Random) -> None:
    """`rng.shuffle(items)` inlined: the same draws, without a call per item."""
    getrandbits = rng.getrandbits
    for i in range(len(items) - 1, 0, -1):
        n = i + 1
        bits = n.bit_length()
        j = getrandbits(bits)
        while j >= n:
            j = getrandbits(bits)
        items[i], items[j] = items[j], items[i]


def _inlined_shuffle_is_exact() -> bool:
    """Whether this Python's `Random.shuffle` draws as `_shuffle_like_stdlib`."""
    for seed in range(3):
        for size in (0, 1, 2, 3, 7, 64, 129, 1000):
            expected, rng_a = list(range(size)), random.Random(seed)
            actual, rng_b = list(range(size)), random.Random(seed)
            rng_a.shuffle(expected)
            _shuffle_like_stdlib(actual, rng_b)
            if actual != expected or rng_a.getstate() != rng_b.getstate():
                return False
    return True


_INLINED_SHUFFLE_IS_EXACT = _inlined_shuffle_is_exact()


def shuffle(items, rng: random.Random) -> None:
    """Shuffles a mutable sequence in place exactly as `rng.shuffle(items)`.

    The masking shuffles every instance's positions, the largest share of the
    run's draws; the inlined loop is used only where it was checked at import
    to give the same result and state as the standard library.
    """
    if _INLINED_SHUFFLE_IS_EXACT and type(rng) is random.Random:
        _shuffle_like_stdlib(items, rng)
    else:
        rng.shuffle(items)


def target_length(max_num_tokens: int, short_seq_prob: float, rng: random.Random) -> int:
    """Usually `max_num_tokens`; with `short_seq_prob` a length in [2, max]."""
    if rng.random() < short_seq_prob:
        return rng.randint(2, max_num_tokens)
    return max_num_tokens


def random_segment(
    all_documents, document_index: int, target_b_length: int, rng: random.Random
) -> list[int]:
    """Tokens of consecutive sentences of another random document.

    Ten draws at most to avoid `document_index`; the last draw stands.
    """
    for _ in range(10):
        random_index = rng.randint(0, len(all_documents) - 1)
        if random_index != document_index:
            break
    document = all_documents[random_index]
    tokens = []
    for j in range(rng.randint(0, len(document) - 1), len(document)):
        tokens.extend(document[j])
        if len(tokens) >= target_b_length:
            break
    return tokens


def sentence_pairs(
    all_documents, document_index: int, target_seq_length: int, rng: random.Random
) -> Iterator[tuple[list, list, bool]]:
    """Yields (tokens_a, tokens_b, is_random_next) of one document, untruncated.

    Sentences are gathered until they reach `target_seq_length`; A is a random
    number of the first of them. B is the rest, or (always for a single
    sentence, else half of the time) a random segment of another document, the
    unused sentences then going back to the document.
    """
    document = all_documents[document_index]
    chunk = []
    chunk_length = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        chunk_length += len(document[i])
        if i == len(document) - 1 or chunk_length >= target_seq_length:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [token for sentence in chunk[:a_end] for token in sentence]
            if len(chunk) == 1 or rng.random() < 0.5:
                tokens_b = random_segment(
                    all_documents, document_index, target_seq_length - len(tokens_a), rng
                )
                i -= len(chunk) - a_end
                yield tokens_a, tokens_b, True
            else:
                tokens_b = [token for sentence in chunk[a_end:] for token in sentence]
                yield tokens_a, tokens_b, False
            chunk = []
            chunk_length = 0
        i += 1


def single_segments(document, target_seq_length: int) -> Iterator[list]:
    """Yields the tokens of consecutive sentences reaching `target_seq_length`."""
    segment = []
    for i, sentence in enumerate(document):
        segment.extend(sentence)
        if i == len(document) - 1 or len(segment) >= target_seq_length:
            yield segment
            segment = []


def truncate_seq_pair(
    tokens_a: list, tokens_b: list, max_num_tokens: int, rng: random.Random
) -> None:
    """Cuts the longer list (B on ties), at a random end, until the pair fits."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def masking_candidates(
    input_ids: Sequence[int], vocab: VocabIds, do_whole_word_mask: bool
) -> list[list[int]]:
    """Groups of positions that are masked together; [CLS] and [SEP] excluded.

    Each position is its own group, unless `do_whole_word_mask`: then a "##"
    piece joins the group before it.
    """
    cls_id, sep_id = vocab.cls_id, vocab.sep_id
    if not do_whole_word_mask:
        return [
            [position]
            for position, token_id in enumerate(input_ids)
            if token_id != cls_id and token_id != sep_id
        ]
    candidates = []
    for position, token_id in enumerate(input_ids):
        if token_id == cls_id or token_id == sep_id:
            continue
        if candidates and vocab.is_continuation[token_id]:
            candidates[-1].append(position)
        else:
            candidates.append([position])
    return candidates


def create_masked_lm_predictions(
    input_ids: Sequence[int], options: MaskingOptions, vocab: VocabIds, rng: random.Random
) -> tuple[list[int], list[int], list[int]]:
    """Chooses and replaces the tokens to predict.

    round(T * masked_lm_prob) tokens (at least 1, at most P) in random groups
    (see `masking_candidates`; a group that would exceed the count is skipped).
    Each becomes [MASK] with `mask_token_prob`; otherwise it is kept with
    `keep_share` and else replaced by a random vocabulary word (two draws, as
    in the original).

    Args:
        input_ids: int sequence [T], the packed instance.
        options: the masking probabilities.
        vocab: special and vocabulary ids.
        rng: the run's random generator.

    Returns:
        (output_ids [T], masked_lm_positions [<= P] ascending,
         masked_lm_ids [<= P] the original ids there).
    """
    candidates = masking_candidates(input_ids, vocab, options.do_whole_word_mask)
    shuffle(candidates, rng)
    num_to_predict = min(
        options.max_predictions_per_seq, max(1, int(round(len(input_ids) * options.masked_lm_prob)))
    )
    mask_token_prob, keep_share = options.mask_token_prob, options.keep_share
    word_ids, last_word = vocab.word_ids, len(vocab.word_ids) - 1
    output_ids = list(input_ids)
    positions = []
    for group in candidates:
        if len(positions) >= num_to_predict:
            break
        if len(positions) + len(group) > num_to_predict:
            continue
        for position in group:
            if rng.random() < mask_token_prob:
                output_ids[position] = vocab.mask_id
            elif rng.random() >= keep_share:
                output_ids[position] = word_ids[rng.randint(0, last_word)]
            positions.append(position)
    positions.sort()
    return output_ids, positions, [input_ids[p] for p in positions]


def pack_instance(
    tokens_a: list,
    tokens_b: list | None,
    is_random_next: bool,
    masking: MaskingOptions,
    vocab: VocabIds,
    rng: random.Random,
) -> TrainingInstance:
    """`[CLS] A [SEP] (B [SEP])`, then masked."""
    input_ids = [vocab.cls_id] + tokens_a + [vocab.sep_id]
    segment_ids = [0] * len(input_ids)
    if tokens_b is not None:
        input_ids += tokens_b + [vocab.sep_id]
        segment_ids += [1] * (len(tokens_b) + 1)
    output_ids, positions, labels = create_masked_lm_predictions(input_ids, masking, vocab, rng)
    return TrainingInstance(
        input_ids=output_ids,
        segment_ids=segment_ids,
        masked_lm_positions=positions,
        masked_lm_ids=labels,
        is_random_next=is_random_next,
    )


def create_instances_from_document(
    all_documents,
    document_index: int,
    options: InstanceOptions,
    masking: MaskingOptions,
    vocab: VocabIds,
    rng: random.Random,
) -> list[TrainingInstance]:
    """Instances of one document (sentence lists of token ids).

    Draws, in the original's order: the target length, then per instance the
    A/B split, the random-next choice, the truncation and the masking.
    """
    max_num_tokens = options.max_num_tokens
    target = target_length(max_num_tokens, options.short_seq_prob, rng)
    instances = []
    if not options.next_sentence_prediction:
        for tokens in single_segments(all_documents[document_index], target):
            truncate_seq_pair(tokens, [], max_num_tokens, rng)
            instances.append(pack_instance(tokens, None, False, masking, vocab, rng))
        return instances
    for tokens_a, tokens_b, is_random_next in sentence_pairs(
        all_documents, document_index, target, rng
    ):
        truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
        instances.append(pack_instance(tokens_a, tokens_b, is_random_next, masking, vocab, rng))
    return instances


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

    Each file is written under a hidden temporary name (`records`); when all
    are complete, `metadata[i]` is written to `<output_files[i]>.meta.json`,
    then the files are renamed. A shard never appears without its metadata;
    on an error the temporary files are removed.
    """
    with contextlib.ExitStack() as stack:
        writers = [
            stack.enter_context(records.atomic_tfrecord_writer(path)) for path in output_files
        ]
        for k, index in enumerate(order):
            writers[k % len(writers)].write(spill[index])
        for path, shard_metadata_ in zip(output_files, metadata):
            records.write_json(metadata_path(path), shard_metadata_, sort_keys=False)


def metadata_path(tfrecord_path: str) -> str:
    """Where the metadata of a shard lives: `<shard>.meta.json`."""
    return tfrecord_path + METADATA_SUFFIX


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
        "format": METADATA_FORMAT,
        "max_seq_length": instance.max_seq_length,
        "max_predictions_per_seq": masking.max_predictions_per_seq,
        "vocab_file": os.path.basename(options.vocab_file),
        "vocab_size": vocab_size,
        "do_lower_case": options.do_lower_case,
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


def load_metadata(tfrecord_path: str) -> dict:
    """Reads the metadata of a shard written by this module.

    Raises:
        ValueError: the file is missing or is not such metadata.
    """
    path = metadata_path(tfrecord_path)
    if not tf.io.gfile.exists(path):
        raise ValueError("%s has no metadata file %s." % (tfrecord_path, path))
    with tf.io.gfile.GFile(path, "r") as f:
        metadata = json.load(f)
    if metadata.get("format") != METADATA_FORMAT:
        raise ValueError(
            "%s is not pre-training metadata (format %r)." % (path, metadata.get("format"))
        )
    return metadata


# ----------------------------------------------------------------------------
# A run.
# ----------------------------------------------------------------------------


def generate_instances(
    documents,
    options: RunOptions,
    vocab: VocabIds,
    rng: random.Random,
    spill: RecordSpill,
    stats: Stats,
    label: str,
) -> None:
    """`dupe_factor` passes over the documents, serialized into `spill`."""
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
    stats.instances += len(spill)
    stats.tokens += sum(spill.num_tokens)
    stats.masked += sum(spill.num_masked)
    for length, count in collections.Counter(spill.num_tokens).items():
        stats.lengths[length] = stats.lengths.get(length, 0) + count


def build_shards(
    input_files: Sequence[str], output_files: Sequence[str], options: RunOptions
) -> Stats:
    """The original's run: read, shuffle documents, generate, shuffle, write.

    Args:
        input_files: text files, pooled into one corpus.
        output_files: TFRecord files, filled round-robin; `<file>.meta.json`
            is written beside each.

    Returns:
        The run's statistics.

    Raises:
        ValueError: the vocabulary lacks a special token; the corpus is empty.
    """
    tokenizer = tokenization.FullTokenizer(options.vocab_file, options.do_lower_case)
    vocab = VocabIds.from_vocab(tokenizer.vocab, options.vocab_file)
    stats = Stats()
    documents = read_documents(
        input_files, tokenizer, options.instance.max_num_tokens, stats, options.progress_interval_s
    )
    return write_instances(
        documents, len(tokenizer.vocab), input_files, output_files, options, vocab, stats
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

    Returns:
        `stats`.

    Raises:
        ValueError: there is no document.
    """
    label = input_files[0] if len(input_files) == 1 else "corpus"
    if not documents:
        raise ValueError("The corpus is empty: no line of %s has a token." % ", ".join(input_files))
    rng = random.Random(options.random_seed)
    shuffle(documents, rng)
    spill = RecordSpill(_spill_directory(output_files[0]))
    try:
        generate_instances(documents, options, vocab, rng, spill, stats, label)
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


def _build_one_shard(task: tuple) -> Stats:
    """Pool task: one input file -> one shard."""
    input_file, output_file, options = task
    return build_shards([input_file], [output_file], options)


def _init_worker(verbosity: int) -> None:
    logging.set_verbosity(verbosity)


def run(options: RunOptions) -> Stats:
    """Builds the shards of `options`; returns the statistics of all of them."""
    # Fail on a bad vocabulary before reading (or forking for) the corpus.
    VocabIds.from_vocab(tokenization.load_vocab(options.vocab_file), options.vocab_file)
    for directory in {os.path.dirname(path) for path in options.output_files}:
        if directory:
            tf.io.gfile.makedirs(directory)
    if not options.per_input_file:
        return build_shards(options.input_files, options.output_files, options)
    tasks = [(i, o, options) for i, o in zip(options.input_files, options.output_files)]
    total = Stats()
    if options.num_workers <= 1:
        for task in tasks:
            total.add(_build_one_shard(task))
    else:
        context = multiprocessing.get_context("spawn")
        with context.Pool(
            min(options.num_workers, len(tasks)), _init_worker, (logging.get_verbosity(),)
        ) as pool:
            for stats in pool.imap_unordered(_build_one_shard, tasks):
                total.add(stats)
    _log_summary("all shards", total)
    return total


def resolve_output_files(
    output_file: str, input_files: Sequence[str], per_input_file: bool
) -> list[str]:
    """Output paths from `--output_file`.

    Pooled: the comma-separated list as is. Per input file: a comma list with
    one entry per input file, or a directory (existing, or written with a
    trailing "/") that receives `<input name without extension>.tfrecord`.

    Raises:
        ValueError: the outputs do not match the input files.
    """
    outputs = output_file.split(",")
    if not per_input_file:
        return outputs
    if len(outputs) == 1 and (output_file.endswith("/") or tf.io.gfile.isdir(output_file)):
        tf.io.gfile.makedirs(output_file)
        outputs = [
            os.path.join(output_file, os.path.splitext(os.path.basename(path))[0] + ".tfrecord")
            for path in input_files
        ]
        if len(set(outputs)) != len(outputs):
            raise ValueError(
                "Input files share a name, so their shards in %s "
                "would collide: list the output files instead." % output_file
            )
        return outputs
    if len(outputs) != len(input_files):
        raise ValueError(
            "With --num_workers > 1, --output_file needs one file per input file "
            "(%d given for %d input files) or a directory." % (len(outputs), len(input_files))
        )
    return outputs


# ----------------------------------------------------------------------------
# Command line.
# ----------------------------------------------------------------------------


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """The original's flags (names and defaults) and this module's additions."""
    define = dict(flag_values=flag_values)
    flags.DEFINE_string(
        "input_file",
        None,
        "Input raw text file (or comma-separated list of files and globs): one "
        "sentence per line, a blank line between documents.",
        **define,
    )
    flags.DEFINE_string(
        "output_file",
        None,
        "Output TF example file (or comma-separated list of files; instances go "
        "round-robin across them). With --num_workers > 1: one file per input "
        "file (comma list in --input_file order), or a directory (existing or "
        "ending in '/') that receives <input name without extension>.tfrecord. "
        "Each file gets <file>.meta.json beside it.",
        **define,
    )
    flags.DEFINE_string(
        "vocab_file", None, "The vocabulary file that the BERT model was trained on.", **define
    )
    define_instance_flags(flag_values)
    flags.DEFINE_integer(
        "num_workers",
        1,
        "1: the original (all inputs pooled into one corpus). N > 1: one shard "
        "per input file, built by N processes, each byte-identical to a run on "
        "that file alone; memory is bounded by the largest file.",
        **define,
    )
    for name in ("input_file", "output_file", "vocab_file"):
        flags.mark_flag_as_required(name, flag_values=flag_values)


def define_instance_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """The flags of tokenization, instances and masking (read by
    `run_options_from_flags`), shared with the Beam pipeline."""
    define = dict(flag_values=flag_values)
    flags.DEFINE_bool(
        "do_lower_case",
        True,
        "Whether to lower case the input text. Should be True for uncased "
        "models and False for cased models.",
        **define,
    )
    flags.DEFINE_bool(
        "do_whole_word_mask",
        False,
        "Whether to use whole word masking rather than per-WordPiece masking.",
        **define,
    )
    flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.", **define)
    flags.DEFINE_integer(
        "max_predictions_per_seq",
        20,
        "Maximum number of masked LM predictions per sequence.",
        **define,
    )
    flags.DEFINE_integer(
        "random_seed",
        12345,
        "Random seed for data generation (of each shard with --num_workers > 1).",
        **define,
    )
    flags.DEFINE_integer(
        "dupe_factor",
        10,
        "Number of times to duplicate the input data (with different masks).",
        **define,
    )
    flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.", **define)
    flags.DEFINE_float(
        "short_seq_prob",
        0.1,
        "Probability of creating sequences which are shorter than the maximum length.",
        **define,
    )
    flags.DEFINE_float(
        "mask_token_prob",
        0.8,
        "Probability that a chosen token becomes [MASK] (ablation; the original's 0.8).",
        **define,
    )
    flags.DEFINE_float(
        "random_token_prob",
        0.1,
        "Probability that a chosen token becomes a random word (ablation; the "
        "original's 0.1). The rest keep their token.",
        **define,
    )
    flags.DEFINE_bool(
        "next_sentence_prediction",
        True,
        "Pairs [CLS] A [SEP] B [SEP] with a random B half of the time (the "
        "original). If false: single segments [CLS] A [SEP] filling "
        "max_seq_length, segment_ids 0, next_sentence_labels always 0.",
        **define,
    )
    flags.DEFINE_float("progress_interval_s", 30.0, "Seconds between progress log lines.", **define)


def options_from_flags(flag_values: flags.FlagValues) -> RunOptions:
    """`RunOptions` from parsed flags (the only place that reads them)."""
    fv = flag_values
    if fv.num_workers < 1:
        raise ValueError("--num_workers=%d must be at least 1." % fv.num_workers)
    per_input_file = fv.num_workers > 1
    input_files = expand_input_patterns(fv.input_file)
    return run_options_from_flags(
        fv,
        input_files=tuple(input_files),
        output_files=tuple(resolve_output_files(fv.output_file, input_files, per_input_file)),
        vocab_file=fv.vocab_file,
        per_input_file=per_input_file,
        num_workers=fv.num_workers,
    )


def run_options_from_flags(flag_values: flags.FlagValues, **fields) -> RunOptions:
    """`RunOptions` from the flags of `define_instance_flags` and `fields`."""
    fv = flag_values
    return RunOptions(
        do_lower_case=fv.do_lower_case,
        dupe_factor=fv.dupe_factor,
        random_seed=fv.random_seed,
        instance=InstanceOptions(
            max_seq_length=fv.max_seq_length,
            short_seq_prob=fv.short_seq_prob,
            next_sentence_prediction=fv.next_sentence_prediction,
        ),
        masking=MaskingOptions(
            masked_lm_prob=fv.masked_lm_prob,
            max_predictions_per_seq=fv.max_predictions_per_seq,
            mask_token_prob=fv.mask_token_prob,
            random_token_prob=fv.random_token_prob,
            do_whole_word_mask=fv.do_whole_word_mask,
        ),
        progress_interval_s=fv.progress_interval_s,
        **fields,
    )


def main(argv):
    del argv  # Unused.
    logging.set_verbosity(logging.INFO)
    try:
        options = options_from_flags(flags.FLAGS)
        logging.info("Reading %s", ", ".join(options.input_files))
        logging.info("Writing %s", ", ".join(options.output_files))
        run(options)
    except ValueError as e:
        # Bad input or flags: the message says what and where; no traceback.
        raise SystemExit("create_pretraining_data: error: %s" % e) from None


if __name__ == "__main__":
    define_flags()
    app.run(main)
