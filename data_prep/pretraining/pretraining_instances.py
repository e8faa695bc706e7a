"""Pre-training instances: documents in, masked-LM / next-sentence instances out.

This module owns the original release's algorithm for making instances, draw for
draw on one `random.Random`: the options of instances and masking
(`InstanceOptions`, `MaskingOptions`) and the ids they need of the vocabulary
(`VocabIds`); reading text into documents of sentences of token ids
(`read_documents`, `documents_from_lines`) with the counts of a run (`Stats`); and
cutting a document into instances (`create_instances_from_document`): sentence
pairs with a random next segment half of the time, or single segments, truncated
to fit, then masked per WordPiece or per whole word
(`create_masked_lm_predictions`).

Writing the instances as TFRecord shards is `pretraining_records`; the command
line is `create_pretraining_data`.
"""

import dataclasses
import fractions
import functools
import random
import time
from typing import Callable, Iterable, Iterator, Sequence

from absl import logging

from common.errors import UserError
from data_prep import records
from data_prep.text import tokenization

REQUIRED_TOKENS = (
    tokenization.CLS_TOKEN,
    tokenization.SEP_TOKEN,
    tokenization.MASK_TOKEN,
    tokenization.UNK_TOKEN,
)


# ----------------------------------------------------------------------------
# Options.
# ----------------------------------------------------------------------------


def _exact(x: float) -> fractions.Fraction:
    """`x` as the decimal it prints as, so 1 - 0.8 - 0.1 is exactly 0.1."""
    return fractions.Fraction(repr(float(x)))


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise UserError("%s=%r must lie in [0, 1]." % (name, value))


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
            raise UserError(
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
            raise UserError(
                "mask_token_prob=%r + random_token_prob=%r exceeds 1."
                % (self.mask_token_prob, self.random_token_prob)
            )
        if self.max_predictions_per_seq < 0:
            raise UserError(
                "max_predictions_per_seq=%d must not be negative." % self.max_predictions_per_seq
            )
        if self.max_predictions_per_seq == 0 and self.masked_lm_prob > 0:
            raise UserError(
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


# ----------------------------------------------------------------------------
# Statistics.
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
    # The first line longer than an instance: "file:line (N tokens)"; not in `summary`.
    first_long_line: str = ""

    def add(self, other: "Stats") -> None:
        for field in dataclasses.fields(self):
            if field.name not in ("lengths", "first_long_line"):
                setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        for length, count in other.lengths.items():
            self.lengths[length] = self.lengths.get(length, 0) + count
        self.first_long_line = self.first_long_line or other.first_long_line

    def long_lines_note(self, max_num_tokens: int) -> str | None:
        """One line on the lines longer than an instance (truncated, as the original
        does), or None when there is none."""
        if not self.long_lines:
            return None
        one = self.long_lines == 1
        return (
            "%d line%s longer than the %d tokens an instance holds %s truncated (the first: %s)"
            % (
                self.long_lines,
                "" if one else "s",
                max_num_tokens,
                "was" if one else "were",
                self.first_long_line,
            )
        )

    def summary(self) -> dict:
        values = dataclasses.asdict(self)
        del values["first_long_line"]
        return dict(
            values,
            lengths={str(length): self.lengths[length] for length in sorted(self.lengths)},
            masked_fraction=self.masked / max(self.tokens, 1),
            random_next_fraction=self.random_next / max(self.instances, 1),
        )


# ----------------------------------------------------------------------------
# Reading documents.
# ----------------------------------------------------------------------------


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
            # Counted, not warned about line by line: a corpus may hold thousands, and
            # the run ends with one line (`Stats.long_lines_note`).
            stats.long_lines += 1
            if not stats.first_long_line:
                stats.first_long_line = "%s:%d, %d tokens" % (path, line_number, len(ids))
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
