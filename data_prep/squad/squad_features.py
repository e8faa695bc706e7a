"""SQuAD examples -> features, window by window, as the original release makes them.

`[CLS] question [SEP] document window [SEP]`, the question cut to
`max_query_length` word pieces, windows of the document every `doc_stride` word
pieces (`doc_spans`), the answer re-aligned to word-piece boundaries, a "max
context" flag per document token (`is_max_context`), impossible or out-of-window
answers pointing at `[CLS]`. The features are the same token for token as the
original's (tests compare them).

Shape legend: S sequence (max_seq_length).
"""

import dataclasses
from typing import Iterator, NamedTuple, Sequence

from absl import logging

from common.progress import Task
from common.errors import UserError
from data_prep import context_windows
from data_prep.squad.squad_reader import SquadExample

# First unique id of a feature, as in the original release.
FIRST_UNIQUE_ID = 1000000000


@dataclasses.dataclass(frozen=True)
class InputFeatures:
    """One window of one example, packed as a model input.

    Attributes:
        unique_id: id of the feature, from `FIRST_UNIQUE_ID` on.
        example_index: index of its example in the list of examples.
        doc_span_index: index of the window among its example's windows.
        doc_span_start: index of the window's first word piece in the
            example's document word pieces.
        tokens: `[CLS] question [SEP] window [SEP]`, unpadded.
        token_to_orig_map: position in `tokens` -> index in `doc_tokens` of the
            word holding that piece, for the window's pieces.
        token_is_max_context: position in `tokens` -> whether this window is
            the one where that piece has the most context on both sides.
        input_ids: int list [S], zero-padded.
        input_mask: int list [S], 1 for real tokens.
        segment_ids: int list [S], 0 for `[CLS] question [SEP]`, 1 after.
        start_position: position of the answer's first piece in `tokens`, 0 if
            impossible or outside the window (training only, else None).
        end_position: position of the answer's last piece (training only).
        is_impossible: the example's `is_impossible`.
    """

    unique_id: int
    example_index: int
    doc_span_index: int
    doc_span_start: int
    tokens: list[str]
    token_to_orig_map: dict[int, int]
    token_is_max_context: dict[int, bool]
    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool = False


class DocSpan(NamedTuple):
    """A window of a document's word pieces."""

    start: int
    length: int


def check_lengths(max_seq_length: int, doc_stride: int, max_query_length: int) -> None:
    """Raises ValueError if no document piece would fit into a window."""
    if max_seq_length <= max_query_length + 3:
        raise UserError(
            "--max_seq_length=%d must be greater than --max_query_length=%d + 3 ([CLS] and "
            "two [SEP]) to leave room for the document: raise the one or lower the other."
            % (max_seq_length, max_query_length)
        )
    if doc_stride < 1:
        raise UserError("--doc_stride=%d must be positive." % doc_stride)


def convert_examples_to_features(
    examples: Sequence[SquadExample],
    tokenizer,
    max_seq_length: int,
    doc_stride: int,
    max_query_length: int,
    is_training: bool,
    log_every: int = 1000,
    bar=None,
) -> Iterator[InputFeatures]:
    """Yields the features of `examples`, window by window.

    Args:
        examples: from `read_squad_examples` (with answers if `is_training`).
        tokenizer: a `tokenization.FullTokenizer`.
        max_seq_length: S, length of every feature.
        doc_stride: word pieces between the starts of consecutive windows.
        max_query_length: questions are cut to this many word pieces.
        is_training: compute start and end positions.
        log_every: log progress every this many examples.
        bar: a `common.progress.Task`, told the examples done.

    Returns:
        An iterator of `InputFeatures`, unique ids from `FIRST_UNIQUE_ID` on.

    Raises:
        ValueError: at the call, if `max_seq_length <= max_query_length + 3` or
            `doc_stride < 1`.
    """
    check_lengths(max_seq_length, doc_stride, max_query_length)
    return _generate_features(
        examples,
        tokenizer,
        max_seq_length,
        doc_stride,
        max_query_length,
        is_training,
        log_every,
        bar if bar is not None else Task(),
    )


def _generate_features(
    examples, tokenizer, max_seq_length, doc_stride, max_query_length, is_training, log_every, bar
):
    unique_id = FIRST_UNIQUE_ID
    for example_index, example in enumerate(examples):
        for feature in example_to_features(
            example,
            example_index,
            unique_id,
            tokenizer,
            max_seq_length,
            doc_stride,
            max_query_length,
            is_training,
        ):
            unique_id += 1
            yield feature
        bar.update(example_index + 1)
        if (example_index + 1) % log_every == 0:
            logging.info(
                "Converted %d of %d examples into %d features.",
                example_index + 1,
                len(examples),
                unique_id - FIRST_UNIQUE_ID,
            )
    logging.info(
        "Converted %d examples into %d features.", len(examples), unique_id - FIRST_UNIQUE_ID
    )


def example_to_features(
    example: SquadExample,
    example_index: int,
    first_unique_id: int,
    tokenizer,
    max_seq_length: int,
    doc_stride: int,
    max_query_length: int,
    is_training: bool,
) -> list[InputFeatures]:
    """The features (one per document window) of one example."""
    query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]
    doc_pieces, piece_to_word, word_to_piece = tokenize_document(tokenizer, example.doc_tokens)
    answer = None
    if is_training:
        answer = _answer_piece_span(example, tokenizer, doc_pieces, word_to_piece)
    spans = doc_spans(len(doc_pieces), max_seq_length - len(query_tokens) - 3, doc_stride)
    features = []
    for span_index, span in enumerate(spans):
        feature = _window_feature(
            example,
            example_index,
            first_unique_id + span_index,
            span_index,
            spans,
            query_tokens,
            doc_pieces,
            piece_to_word,
            tokenizer,
            max_seq_length,
        )
        if is_training:
            start, end = _window_labels(answer, span, len(query_tokens))
            feature = dataclasses.replace(feature, start_position=start, end_position=end)
        features.append(feature)
    return features


def tokenize_document(
    tokenizer, doc_tokens: Sequence[str]
) -> tuple[list[str], list[int], list[int]]:
    """Word pieces of a whitespace-split document and the maps between them.

    Returns:
        (pieces, piece_to_word, word_to_piece): all word pieces; for each piece
        the index of its word; for each word the index of its first piece.
    """
    pieces = []
    piece_to_word = []
    word_to_piece = []
    for word_index, word in enumerate(doc_tokens):
        word_to_piece.append(len(pieces))
        word_pieces = tokenizer.tokenize(word)
        pieces.extend(word_pieces)
        piece_to_word.extend([word_index] * len(word_pieces))
    return pieces, piece_to_word, word_to_piece


def _answer_piece_span(
    example: SquadExample, tokenizer, doc_pieces: list[str], word_to_piece: list[int]
) -> tuple[int, int] | None:
    """(first piece, last piece) of a training answer, None if impossible."""
    if example.is_impossible:
        return None
    start = word_to_piece[example.start_position]
    if example.end_position + 1 < len(example.doc_tokens):
        end = word_to_piece[example.end_position + 1] - 1
    else:
        end = len(doc_pieces) - 1
    return improve_answer_span(doc_pieces, start, end, tokenizer, example.orig_answer_text)


def improve_answer_span(
    doc_pieces: Sequence[str], start: int, end: int, tokenizer, orig_answer_text: str
) -> tuple[int, int]:
    """Narrows a word-aligned answer span to the pieces of the answer text.

    Annotations are character spans; mapped to whole words, "(1895-1943)."
    answers "1895" with the whole word. After word-piece tokenization the
    pieces "( 1895 - 1943 ) ." contain the answer exactly, so the span becomes
    just "1895". When the answer is part of a piece ("Japan" in "Japanese")
    the word span is kept.

    Args:
        doc_pieces: the document's word pieces.
        start: index of the first piece of the answer's first word.
        end: index of the last piece of the answer's last word.
        tokenizer: the tokenizer that made `doc_pieces`.
        orig_answer_text: the annotated answer.

    Returns:
        (start, end) of the first sub-span, by increasing start and then
        decreasing end, whose pieces equal the answer's pieces; else the input
        span.
    """
    answer_pieces = " ".join(tokenizer.tokenize(orig_answer_text))
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if " ".join(doc_pieces[new_start : new_end + 1]) == answer_pieces:
                return new_start, new_end
    return start, end


def doc_spans(num_pieces: int, max_pieces: int, doc_stride: int) -> list[DocSpan]:
    """Windows of at most `max_pieces` pieces, starts `doc_stride` apart.

    The last window ends at the document's end; an empty document has none.
    (`context_windows.windows`, the formula the in-graph export shares.)
    """
    if num_pieces == 0:
        return []
    spans = context_windows.windows(num_pieces, max_pieces, doc_stride)
    return [DocSpan(start, length) for start, length in spans]


def is_max_context(spans: Sequence[DocSpan], span_index: int, position: int) -> bool:
    """Whether span `span_index` gives the piece at `position` most context.

    A piece in several windows is scored in each by the smaller of its left
    and right context (plus 0.01 x window length to break ties towards longer
    windows); the first window with the best score wins
    (`context_windows.max_context_window`). E.g. in "the man went to the
    store and bought a gallon of milk" with windows "to the store and bought"
    and "and bought a gallon of", "bought" has context (4, 0) in the first and
    (1, 3) in the second, which wins.
    """
    return span_index == context_windows.max_context_window(position, spans)


def _window_feature(
    example: SquadExample,
    example_index: int,
    unique_id: int,
    span_index: int,
    spans: Sequence[DocSpan],
    query_tokens: list[str],
    doc_pieces: list[str],
    piece_to_word: list[int],
    tokenizer,
    max_seq_length: int,
) -> InputFeatures:
    """Packs `[CLS] query [SEP] window [SEP]` with its maps, unlabelled."""
    span = spans[span_index]
    tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
    token_to_orig_map = {}
    token_is_max_context = {}
    for piece_index in range(span.start, span.start + span.length):
        token_to_orig_map[len(tokens)] = piece_to_word[piece_index]
        token_is_max_context[len(tokens)] = is_max_context(spans, span_index, piece_index)
        tokens.append(doc_pieces[piece_index])
    tokens.append("[SEP]")
    num_padding = max_seq_length - len(tokens)
    segment_ids = [0] * (len(query_tokens) + 2) + [1] * (span.length + 1)
    return InputFeatures(
        unique_id=unique_id,
        example_index=example_index,
        doc_span_index=span_index,
        doc_span_start=span.start,
        tokens=tokens,
        token_to_orig_map=token_to_orig_map,
        token_is_max_context=token_is_max_context,
        input_ids=tokenizer.convert_tokens_to_ids(tokens) + [0] * num_padding,
        input_mask=[1] * len(tokens) + [0] * num_padding,
        segment_ids=segment_ids + [0] * num_padding,
        is_impossible=example.is_impossible,
    )


def _window_labels(
    answer: tuple[int, int] | None, span: DocSpan, num_query_tokens: int
) -> tuple[int, int]:
    """(start, end) positions in the packed window; (0, 0) = [CLS] = none."""
    if answer is None:
        return 0, 0
    start, end = answer
    if start < span.start or end > span.start + span.length - 1:
        return 0, 0
    offset = num_query_tokens + 2 - span.start  # [CLS] query [SEP]
    return start + offset, end + offset
