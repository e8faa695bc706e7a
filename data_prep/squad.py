"""SQuAD v1.1 and v2.0: reading, features, TFRecords and answer post-processing.

The behaviour is that of the original release's `run_squad.py`, so that features
and predictions are the same token for token:

* Reading: each context is split on whitespace (space, tab, CR, LF, U+202F)
  and every character is mapped to the word holding it; an answer's character
  span becomes a word span. Training uses a question's first answer. A
  training answer whose text cannot be found in its word span (odd Unicode) is
  skipped, as in the original, but counted and logged with its question id.
* Features: `[CLS] question [SEP] document window [SEP]`, the question cut to
  `max_query_length` word pieces, windows of the document every `doc_stride`
  word pieces, the answer re-aligned to word-piece boundaries, a "max context"
  flag per document token, impossible or out-of-window answers pointing at
  `[CLS]`.
* Post-processing: the n-best start and end positions of every window, spans
  checked and mapped back to the original text, softmax over the n-best, and for
  v2.0 the null score and its threshold.

Deliberate difference from the original: where a question has no valid non-null
span (its context is empty, or every candidate is the null answer), the original
crashes in v2.0 mode and predicts the text "empty" in v1.1 mode; here the
prediction is "" in both modes (see `NO_SPAN_NULL_ODDS`).

Shape legend: S sequence (max_seq_length).
"""

import collections
import dataclasses
import functools
import json
import math
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Sequence

from absl import logging

from data_prep import context_windows, tokenization

# First unique id of a feature, as in the original release.
FIRST_UNIQUE_ID = 1000000000

# Null odds written for a question without any non-null candidate span: the
# null answer is certain. Finite so that null_odds.json stays valid JSON.
NO_SPAN_NULL_ODDS = 1e6

# Characters that separate words of a context, as in the original reader
# (U+202F NARROW NO-BREAK SPACE occurs in SQuAD).
CONTEXT_WHITESPACE = frozenset(" \t\r\n\u202f")


# ----------------------------------------------------------------------------
# Data classes.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SquadExample:
    """One question on one context.

    Attributes:
        qas_id: the question id of the JSON file.
        question_text: the question.
        doc_tokens: the context split on whitespace.
        orig_answer_text: the answer text (training only; "" if impossible).
        start_position: index in `doc_tokens` of the answer's first word
            (training only; -1 if impossible).
        end_position: index in `doc_tokens` of the answer's last word.
        is_impossible: the question has no answer (v2.0 training only).
    """
    qas_id: str
    question_text: str
    doc_tokens: list[str]
    orig_answer_text: str | None = None
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool = False


@dataclasses.dataclass(frozen=True)
class SquadReadResult:
    """What `read_squad_file` found.

    Attributes:
        examples: the examples, in file order.
        num_questions: questions in the file.
        skipped_qas_ids: ids of the training questions skipped because their
            answer text could not be recovered from the context.
    """
    examples: list[SquadExample]
    num_questions: int
    skipped_qas_ids: list[str]


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


class RawResult(NamedTuple):
    """The model's output for one feature.

    Attributes:
        unique_id: the feature's unique id.
        start_logits: float list or array [S].
        end_logits: float list or array [S].
    """
    unique_id: int
    start_logits: Sequence[float]
    end_logits: Sequence[float]


@dataclasses.dataclass(frozen=True)
class SquadPredictions:
    """Answers of a set of questions, keyed and ordered by question id.

    Attributes:
        predictions: qas_id -> answer text ("" for no answer).
        nbest: qas_id -> list of {"text", "probability", "start_logit",
            "end_logit"}, best first.
        null_odds: qas_id -> null score minus best non-null score (v2.0 only,
            else empty).
    """
    predictions: "collections.OrderedDict[str, str]"
    nbest: "collections.OrderedDict[str, list]"
    null_odds: "collections.OrderedDict[str, float]"


# ----------------------------------------------------------------------------
# Reading.
# ----------------------------------------------------------------------------


def read_squad_examples(input_file: str, is_training: bool,
                        version_2_with_negative: bool = False
                        ) -> list[SquadExample]:
    """The examples of a SQuAD JSON file (see `read_squad_file`)."""
    return read_squad_file(input_file, is_training,
                           version_2_with_negative).examples


def read_squad_file(input_file: str, is_training: bool,
                    version_2_with_negative: bool = False) -> SquadReadResult:
    """Reads a SQuAD v1.1 or v2.0 JSON file.

    Args:
        input_file: path of the JSON file (local or any `tf.io.gfile` path).
        is_training: read the first answer of each question; skip (count and
            log) questions whose answer text is not found in the context.
        version_2_with_negative: read `is_impossible` (training only; at
            prediction time answers are not read at all, as in the original).

    Returns:
        A `SquadReadResult`.

    Raises:
        ValueError: naming the file and, where there is one, the question id,
            for: invalid JSON, no top-level "data" list, a paragraph without
            "context" or "qas", a question without "id" or "question", and in
            training a question without an answer (unless impossible in v2.0),
            an empty answer text, or an answer offset outside the context.
    """
    articles = _load_squad_json(input_file)
    examples = []
    skipped = []
    num_questions = 0
    for article_index, article in enumerate(articles):
        paragraphs = _paragraphs(article, article_index, input_file)
        for paragraph_index, paragraph in enumerate(paragraphs):
            where = "paragraph %d of article %d" % (paragraph_index,
                                                    article_index)
            context = _field(paragraph, "context", str, input_file, where)
            qas = _field(paragraph, "qas", list, input_file, where)
            doc_tokens, char_to_word_offset = split_context(context)
            for qa in qas:
                num_questions += 1
                example = _read_question(qa, context, doc_tokens,
                                         char_to_word_offset, is_training,
                                         version_2_with_negative, input_file)
                if example is None:
                    skipped.append(qa["id"])
                else:
                    examples.append(example)
    _log_read_summary(input_file, num_questions, examples, skipped)
    return SquadReadResult(examples, num_questions, skipped)


def _load_squad_json(input_file: str) -> list:
    """The "data" list of a SQuAD JSON file."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    if not tf.io.gfile.exists(input_file):
        raise ValueError("SQuAD file %s does not exist." % input_file)
    with tf.io.gfile.GFile(input_file, "r") as reader:
        try:
            dataset = json.load(reader)
        except json.JSONDecodeError as e:
            raise ValueError("%s is not valid JSON: %s"
                             % (input_file, e)) from e
    if (not isinstance(dataset, dict)
            or not isinstance(dataset.get("data"), list)):
        raise ValueError("%s is not a SQuAD file: it has no top-level \"data\" "
                         "list." % input_file)
    return dataset["data"]


def _paragraphs(article: Any, article_index: int, input_file: str) -> list:
    where = "article %d" % article_index
    if not isinstance(article, dict):
        raise ValueError("%s: %s is not a JSON object." % (input_file, where))
    return _field(article, "paragraphs", list, input_file, where)


def _field(obj: Mapping, key: str, kind: type, input_file: str, where: str):
    """`obj[key]`, checked to be of type `kind`, or a clear ValueError."""
    value = obj.get(key) if isinstance(obj, Mapping) else None
    if not isinstance(value, kind):
        raise ValueError("%s: %s has no %r %s." % (
            input_file, where, key, "string" if kind is str else kind.__name__))
    return value


def split_context(context: str) -> tuple[list[str], list[int]]:
    """Splits a context on whitespace, keeping each character's word index.

    Args:
        context: the paragraph text.

    Returns:
        (doc_tokens, char_to_word_offset): the words, and for every character of
        `context` the index of the word it belongs to (for whitespace, the word
        before it; -1 before the first word).
    """
    doc_tokens = []
    char_to_word_offset = []
    word_start = None
    for i, char in enumerate(context):
        if char in CONTEXT_WHITESPACE:
            if word_start is not None:
                doc_tokens.append(context[word_start:i])
                word_start = None
            char_to_word_offset.append(len(doc_tokens) - 1)
        else:
            if word_start is None:
                word_start = i
            char_to_word_offset.append(len(doc_tokens))
    if word_start is not None:
        doc_tokens.append(context[word_start:])
    return doc_tokens, char_to_word_offset


def _read_question(qa: Any, context: str, doc_tokens: list[str],
                   char_to_word_offset: list[int], is_training: bool,
                   version_2_with_negative: bool,
                   input_file: str) -> SquadExample | None:
    """The example of one question, or None if its answer is unrecoverable."""
    if not isinstance(qa, dict) or not isinstance(qa.get("id"), str):
        raise ValueError("%s: a question has no string \"id\": %.200r"
                         % (input_file, qa))
    qas_id = qa["id"]
    question_text = _field(qa, "question", str, input_file,
                           "question %s" % qas_id)
    if not is_training:
        return SquadExample(qas_id, question_text, doc_tokens)
    if version_2_with_negative and qa.get("is_impossible", False):
        return SquadExample(qas_id, question_text, doc_tokens,
                            orig_answer_text="", start_position=-1,
                            end_position=-1, is_impossible=True)
    answer = _first_answer(qa, version_2_with_negative, input_file)
    span = _answer_word_span(answer, context, doc_tokens, char_to_word_offset,
                             input_file, qas_id)
    if span is None:
        return None
    return SquadExample(qas_id, question_text, doc_tokens,
                        orig_answer_text=answer["text"],
                        start_position=span[0], end_position=span[1])


def _first_answer(qa: dict, version_2_with_negative: bool,
                  input_file: str) -> dict:
    """The first answer of a training question, checked."""
    answers = qa.get("answers")
    if not isinstance(answers, list) or not answers:
        hint = ("" if version_2_with_negative else
                " (for SQuAD 2.0 data set version_2_with_negative)")
        raise ValueError("%s: question %s has no answer and is not marked "
                         "is_impossible%s." % (input_file, qa["id"], hint))
    answer = answers[0]
    if (not isinstance(answer, dict) or not isinstance(answer.get("text"), str)
            or not isinstance(answer.get("answer_start"), int)):
        raise ValueError("%s: question %s: an answer needs a string \"text\" "
                         "and an integer \"answer_start\", got %.200r."
                         % (input_file, qa["id"], answer))
    if not answer["text"]:
        raise ValueError("%s: question %s has an empty answer text."
                         % (input_file, qa["id"]))
    return answer


def _answer_word_span(answer: dict, context: str, doc_tokens: list[str],
                      char_to_word_offset: list[int], input_file: str,
                      qas_id: str) -> tuple[int, int] | None:
    """(first word, last word) of an answer, None if its text is not there."""
    text = answer["text"]
    offset = answer["answer_start"]
    if offset < 0 or offset + len(text) > len(context):
        raise ValueError(
            "%s: question %s: answer %r at character %d runs outside its "
            "context of %d characters." % (input_file, qas_id, text, offset,
                                           len(context)))
    start = char_to_word_offset[offset]
    end = char_to_word_offset[offset + len(text) - 1]
    found = " ".join(doc_tokens[start:end + 1])
    wanted = " ".join(tokenization.whitespace_tokenize(text))
    if wanted not in found:
        logging.warning("%s: skipping question %s: answer %r is not found at "
                        "its offset (the words there are %r).",
                        input_file, qas_id, wanted, found)
        return None
    return start, end


def _log_read_summary(input_file: str, num_questions: int,
                      examples: list[SquadExample], skipped: list[str]) -> None:
    num_impossible = sum(1 for e in examples if e.is_impossible)
    logging.info("Read %d questions from %s: %d examples (%d impossible), "
                 "%d skipped.", num_questions, input_file, len(examples),
                 num_impossible, len(skipped))
    if skipped:
        logging.warning("%d questions of %s skipped because their answer text "
                        "could not be recovered from the context: %s",
                        len(skipped), input_file, ", ".join(skipped[:20]))


# ----------------------------------------------------------------------------
# Features.
# ----------------------------------------------------------------------------


def check_lengths(max_seq_length: int, doc_stride: int,
                  max_query_length: int) -> None:
    """Raises ValueError if no document piece would fit into a window."""
    if max_seq_length <= max_query_length + 3:
        raise ValueError(
            "The max_seq_length (%d) must be greater than max_query_length "
            "(%d) + 3 ([CLS] and two [SEP])." % (max_seq_length,
                                                  max_query_length))
    if doc_stride < 1:
        raise ValueError("doc_stride must be positive, got %d." % doc_stride)


def convert_examples_to_features(examples: Sequence[SquadExample], tokenizer,
                                 max_seq_length: int, doc_stride: int,
                                 max_query_length: int, is_training: bool,
                                 log_every: int = 1000
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

    Returns:
        An iterator of `InputFeatures`, unique ids from `FIRST_UNIQUE_ID` on.

    Raises:
        ValueError: at the call, if `max_seq_length <= max_query_length + 3` or
            `doc_stride < 1`.
    """
    check_lengths(max_seq_length, doc_stride, max_query_length)
    return _generate_features(examples, tokenizer, max_seq_length, doc_stride,
                              max_query_length, is_training, log_every)


def _generate_features(examples, tokenizer, max_seq_length, doc_stride,
                       max_query_length, is_training, log_every):
    unique_id = FIRST_UNIQUE_ID
    for example_index, example in enumerate(examples):
        for feature in example_to_features(
                example, example_index, unique_id, tokenizer, max_seq_length,
                doc_stride, max_query_length, is_training):
            unique_id += 1
            yield feature
        if (example_index + 1) % log_every == 0:
            logging.info("Converted %d of %d examples into %d features.",
                         example_index + 1, len(examples),
                         unique_id - FIRST_UNIQUE_ID)
    logging.info("Converted %d examples into %d features.", len(examples),
                 unique_id - FIRST_UNIQUE_ID)


def example_to_features(example: SquadExample, example_index: int,
                        first_unique_id: int, tokenizer, max_seq_length: int,
                        doc_stride: int, max_query_length: int,
                        is_training: bool) -> list[InputFeatures]:
    """The features (one per document window) of one example."""
    query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]
    doc_pieces, piece_to_word, word_to_piece = tokenize_document(
        tokenizer, example.doc_tokens)
    answer = None
    if is_training:
        answer = _answer_piece_span(example, tokenizer, doc_pieces,
                                    word_to_piece)
    spans = doc_spans(len(doc_pieces), max_seq_length - len(query_tokens) - 3,
                      doc_stride)
    features = []
    for span_index, span in enumerate(spans):
        feature = _window_feature(
            example, example_index, first_unique_id + span_index, span_index,
            spans, query_tokens, doc_pieces, piece_to_word, tokenizer,
            max_seq_length)
        if is_training:
            start, end = _window_labels(answer, span, len(query_tokens))
            feature = dataclasses.replace(feature, start_position=start,
                                          end_position=end)
        features.append(feature)
    return features


def tokenize_document(tokenizer, doc_tokens: Sequence[str]
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


def _answer_piece_span(example: SquadExample, tokenizer,
                       doc_pieces: list[str], word_to_piece: list[int]
                       ) -> tuple[int, int] | None:
    """(first piece, last piece) of a training answer, None if impossible."""
    if example.is_impossible:
        return None
    start = word_to_piece[example.start_position]
    if example.end_position + 1 < len(example.doc_tokens):
        end = word_to_piece[example.end_position + 1] - 1
    else:
        end = len(doc_pieces) - 1
    return improve_answer_span(doc_pieces, start, end, tokenizer,
                               example.orig_answer_text)


def improve_answer_span(doc_pieces: Sequence[str], start: int, end: int,
                        tokenizer, orig_answer_text: str) -> tuple[int, int]:
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
            if " ".join(doc_pieces[new_start:new_end + 1]) == answer_pieces:
                return new_start, new_end
    return start, end


def doc_spans(num_pieces: int, max_pieces: int, doc_stride: int
              ) -> list[DocSpan]:
    """Windows of at most `max_pieces` pieces, starts `doc_stride` apart.

    The last window ends at the document's end; an empty document has none.
    (`context_windows.windows`, the formula the in-graph export shares.)
    """
    if num_pieces == 0:
        return []
    spans = context_windows.windows(num_pieces, max_pieces, doc_stride)
    return [DocSpan(start, length) for start, length in spans]


def is_max_context(spans: Sequence[DocSpan], span_index: int,
                   position: int) -> bool:
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


def _window_feature(example: SquadExample, example_index: int, unique_id: int,
                    span_index: int, spans: Sequence[DocSpan],
                    query_tokens: list[str], doc_pieces: list[str],
                    piece_to_word: list[int], tokenizer,
                    max_seq_length: int) -> InputFeatures:
    """Packs `[CLS] query [SEP] window [SEP]` with its maps, unlabelled."""
    span = spans[span_index]
    tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
    token_to_orig_map = {}
    token_is_max_context = {}
    for piece_index in range(span.start, span.start + span.length):
        token_to_orig_map[len(tokens)] = piece_to_word[piece_index]
        token_is_max_context[len(tokens)] = is_max_context(spans, span_index,
                                                           piece_index)
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
        is_impossible=example.is_impossible)


def _window_labels(answer: tuple[int, int] | None, span: DocSpan,
                   num_query_tokens: int) -> tuple[int, int]:
    """(start, end) positions in the packed window; (0, 0) = [CLS] = none."""
    if answer is None:
        return 0, 0
    start, end = answer
    if start < span.start or end > span.start + span.length - 1:
        return 0, 0
    offset = num_query_tokens + 2 - span.start  # [CLS] query [SEP]
    return start + offset, end + offset


# ----------------------------------------------------------------------------
# TFRecords.
# ----------------------------------------------------------------------------


def feature_to_tf_example(feature: InputFeatures, is_training: bool):
    """The `tf.train.Example` of a feature, with the original release's keys.

    int64 `unique_ids` [1], `input_ids`, `input_mask`, `segment_ids` [S]; for
    training also `start_positions`, `end_positions`, `is_impossible` [1].
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    fields = collections.OrderedDict()
    fields["unique_ids"] = ints([feature.unique_id])
    fields["input_ids"] = ints(feature.input_ids)
    fields["input_mask"] = ints(feature.input_mask)
    fields["segment_ids"] = ints(feature.segment_ids)
    if is_training:
        fields["start_positions"] = ints([feature.start_position])
        fields["end_positions"] = ints([feature.end_position])
        fields["is_impossible"] = ints([int(feature.is_impossible)])
    return tf.train.Example(features=tf.train.Features(feature=fields))


def write_features(features: Iterable[InputFeatures], output_file: str,
                   is_training: bool) -> int:
    """Writes features to a TFRecord file, atomically.

    The records go to `output_file + ".tmp"`, renamed to `output_file` once
    complete, so an interrupted run leaves no truncated file under the final
    name.

    Args:
        features: e.g. the iterator from `convert_examples_to_features`.
        output_file: path of the TFRecord file.
        is_training: also write the labels.

    Returns:
        The number of features written.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    temp_file = output_file + ".tmp"
    count = 0
    try:
        with tf.io.TFRecordWriter(temp_file) as writer:
            for feature in features:
                writer.write(feature_to_tf_example(
                    feature, is_training).SerializeToString())
                count += 1
    except BaseException:
        if tf.io.gfile.exists(temp_file):
            tf.io.gfile.remove(temp_file)
        raise
    tf.io.gfile.rename(temp_file, output_file, overwrite=True)
    logging.info("Wrote %d features to %s.", count, output_file)
    return count


def write_metadata(metadata_file: str, *, max_seq_length: int, doc_stride: int,
                   max_query_length: int, do_lower_case: bool,
                   is_training: bool, version_2_with_negative: bool,
                   num_questions: int, num_examples: int, num_features: int,
                   num_skipped: int = 0, vocab_file: str | None = None,
                   extra: Mapping[str, Any] | None = None) -> dict:
    """Writes the metadata JSON that goes beside a SQuAD TFRecord file.

    Args:
        metadata_file: path of the JSON file to write.
        max_seq_length, doc_stride, max_query_length, do_lower_case: the
            settings the features were made with.
        is_training: the records hold labels.
        version_2_with_negative: impossible questions were read.
        num_questions: questions in the SQuAD file.
        num_examples: examples read (questions less skipped ones).
        num_features: records written.
        num_skipped: questions skipped (answer text not in the context).
        vocab_file: the vocabulary the ids come from.
        extra: more JSON-serializable entries (e.g. what a runner needs to
            decide whether the file can be reused).

    Returns:
        The metadata written, as a dict.
    """
    metadata = collections.OrderedDict(
        task="squad",
        is_training=is_training,
        version_2_with_negative=version_2_with_negative,
        max_seq_length=max_seq_length,
        doc_stride=doc_stride,
        max_query_length=max_query_length,
        do_lower_case=do_lower_case,
        num_questions=num_questions,
        num_examples=num_examples,
        num_features=num_features,
        num_skipped=num_skipped,
        vocab_file=vocab_file)
    metadata.update(extra or {})
    _write_text_atomic(metadata_file, json.dumps(metadata, indent=2) + "\n")
    return dict(metadata)


def read_metadata(metadata_file: str) -> dict:
    """Reads a metadata JSON written by `write_metadata`."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    with tf.io.gfile.GFile(metadata_file, "r") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError("%s is not valid JSON: %s"
                             % (metadata_file, e)) from e


def make_decoder(max_seq_length: int, is_training: bool):
    """A function decoding one serialized SQuAD record into int32 tensors.

    Args:
        max_seq_length: S, as written in the records.
        is_training: the records hold labels.

    Returns:
        A function: scalar string tensor -> dict of int32 tensors
        `unique_ids` [], `input_word_ids`, `input_mask`, `input_type_ids` [S],
        and for training `start_positions`, `end_positions`, `is_impossible` [].
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    spec = {
        "unique_ids": tf.io.FixedLenFeature([], tf.int64),
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
    }
    if is_training:
        for name in ("start_positions", "end_positions", "is_impossible"):
            spec[name] = tf.io.FixedLenFeature([], tf.int64)
    renames = {"input_ids": "input_word_ids", "segment_ids": "input_type_ids"}

    def decode(record):
        parsed = tf.io.parse_single_example(record, spec)
        # int32: TPUs have no int64, and ids fit.
        return {renames.get(name, name): tf.cast(value, tf.int32)
                for name, value in parsed.items()}

    return decode


def load_dataset(input_file: str | Sequence[str], max_seq_length: int,
                 is_training: bool):
    """An unbatched `tf.data.Dataset` of decoded records (`make_decoder`)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.data.TFRecordDataset(input_file).map(
        make_decoder(max_seq_length, is_training),
        num_parallel_calls=tf.data.AUTOTUNE)


def _write_text_atomic(path: str, text: str) -> None:
    """Writes `text` to `path + ".tmp"`, then renames it to `path`."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    temp_path = path + ".tmp"
    with tf.io.gfile.GFile(temp_path, "w") as f:
        f.write(text)
    tf.io.gfile.rename(temp_path, path, overwrite=True)


# ----------------------------------------------------------------------------
# Post-processing.
# ----------------------------------------------------------------------------


class _Candidate(NamedTuple):
    """A candidate answer span in one feature."""
    feature_index: int
    start_index: int
    end_index: int
    start_logit: float
    end_logit: float


class _NullScore(NamedTuple):
    """The lowest [CLS] score over an example's features."""
    feature_index: int
    start_logit: float
    end_logit: float

    @property
    def score(self) -> float:
        return self.start_logit + self.end_logit


def compute_predictions(examples: Sequence[SquadExample],
                        features: Sequence[InputFeatures],
                        results: Iterable[Any] | Mapping[int, Any],
                        n_best_size: int = 20, max_answer_length: int = 30,
                        do_lower_case: bool = True,
                        version_2_with_negative: bool = False,
                        null_score_diff_threshold: float = 0.0
                        ) -> SquadPredictions:
    """Turns per-feature logits into an answer for every example.

    Args:
        examples: the examples the features were made from.
        features: all their features.
        results: `RawResult`s (or objects with `unique_id`, `start_logits`,
            `end_logits`: float lists or arrays [S]), as an iterable or a
            mapping from unique id.
        n_best_size: start and end indexes kept per feature, answers kept
            per example.
        max_answer_length: longest answer, in word pieces.
        do_lower_case: as the tokenizer, to map answers back to the text.
        version_2_with_negative: consider the null answer ([CLS]).
        null_score_diff_threshold: predict "" if the null score exceeds the
            best non-null score by more than this.

    Returns:
        `SquadPredictions`, in the order of `examples`.

    Raises:
        ValueError: naming the feature and question if a result is missing.
    """
    results_by_id = _index_results(results)
    features_by_example = collections.defaultdict(list)
    for feature in features:
        features_by_example[feature.example_index].append(feature)
    predictions = collections.OrderedDict()
    nbest = collections.OrderedDict()
    null_odds = collections.OrderedDict()
    for example_index, example in enumerate(examples):
        text, entries, odds = predict_example(
            example, features_by_example[example_index], results_by_id,
            n_best_size, max_answer_length, do_lower_case,
            version_2_with_negative, null_score_diff_threshold)
        predictions[example.qas_id] = text
        nbest[example.qas_id] = entries
        if version_2_with_negative:
            null_odds[example.qas_id] = odds
    return SquadPredictions(predictions, nbest, null_odds)


def write_predictions(predictions: SquadPredictions,
                      output_prediction_file: str, output_nbest_file: str,
                      output_null_log_odds_file: str | None = None) -> None:
    """Writes predictions.json, nbest_predictions.json and null_odds.json.

    Each file is written atomically, in the original release's format
    (`json.dumps(..., indent=4)` and a newline). null_odds.json is written
    only if `output_null_log_odds_file` is given and there are null odds.
    """
    _write_json(output_prediction_file, predictions.predictions)
    _write_json(output_nbest_file, predictions.nbest)
    if output_null_log_odds_file and predictions.null_odds:
        _write_json(output_null_log_odds_file, predictions.null_odds)
    logging.info("Wrote predictions of %d questions to %s.",
                 len(predictions.predictions), output_prediction_file)


def _write_json(path: str, obj: Any) -> None:
    _write_text_atomic(path, json.dumps(obj, indent=4) + "\n")


def _index_results(results: Iterable[Any] | Mapping[int, Any]
                   ) -> dict[int, RawResult]:
    """unique_id -> RawResult with the logits as lists of Python floats."""
    if isinstance(results, Mapping):
        results = results.values()
    indexed = {}
    for result in results:
        indexed[int(result.unique_id)] = RawResult(
            int(result.unique_id), _float_list(result.start_logits),
            _float_list(result.end_logits))
    return indexed


def _float_list(values: Sequence[float]) -> list[float]:
    if hasattr(values, "tolist"):  # NumPy arrays and scalars.
        values = values.tolist()
    return [float(v) for v in values]


def predict_example(example: SquadExample, features: Sequence[InputFeatures],
                    results_by_id: Mapping[int, RawResult], n_best_size: int,
                    max_answer_length: int, do_lower_case: bool,
                    version_2_with_negative: bool,
                    null_score_diff_threshold: float
                    ) -> tuple[str, list, float | None]:
    """(answer, n-best list, null odds or None) of one example."""
    results = [_result_for(feature, example, results_by_id)
               for feature in features]
    candidates = []
    for feature_index, (feature, result) in enumerate(zip(features, results)):
        candidates.extend(feature_candidates(
            feature_index, feature, result, n_best_size, max_answer_length))
    null = _min_null_score(results) if version_2_with_negative else None
    if null is not None:
        candidates.append(_Candidate(null.feature_index, 0, 0,
                                     null.start_logit, null.end_logit))
    candidates.sort(key=lambda c: c.start_logit + c.end_logit, reverse=True)
    entries = _nbest_entries(candidates, features, example, n_best_size,
                             do_lower_case, null)
    best_non_null = next((e for e in entries if e["text"]), None)
    if best_non_null is None:
        return _no_span_prediction(example, entries, version_2_with_negative)
    if not version_2_with_negative:
        return entries[0]["text"], entries, None
    score_diff = (null.score - best_non_null["start_logit"]
                  - best_non_null["end_logit"])
    if score_diff > null_score_diff_threshold:
        return "", entries, score_diff
    return best_non_null["text"], entries, score_diff


def _result_for(feature: InputFeatures, example: SquadExample,
                results_by_id: Mapping[int, RawResult]) -> RawResult:
    try:
        return results_by_id[feature.unique_id]
    except KeyError:
        raise ValueError("No result for feature %d (window %d of question %s)."
                         % (feature.unique_id, feature.doc_span_index,
                            example.qas_id)) from None


def _min_null_score(results: Sequence[RawResult]) -> _NullScore | None:
    """The [CLS] score of the feature where it is lowest (first one on ties)."""
    best = None
    for index, result in enumerate(results):
        null = _NullScore(index, result.start_logits[0], result.end_logits[0])
        if best is None or null.score < best.score:
            best = null
    return best


def best_indexes(logits: Sequence[float], n_best_size: int) -> list[int]:
    """Indexes of the `n_best_size` largest logits, largest first (stable)."""
    order = sorted(range(len(logits)), key=lambda i: logits[i], reverse=True)
    return order[:n_best_size]


def feature_candidates(feature_index: int, feature: InputFeatures,
                       result: RawResult, n_best_size: int,
                       max_answer_length: int) -> list[_Candidate]:
    """Valid spans among the n-best starts x n-best ends of one feature.

    A span is valid if both ends are document pieces of the window, the start
    is a max-context piece, end >= start and its length is at most
    `max_answer_length`.
    """
    candidates = []
    for start in best_indexes(result.start_logits, n_best_size):
        for end in best_indexes(result.end_logits, n_best_size):
            if not _is_valid_span(feature, start, end, max_answer_length):
                continue
            candidates.append(_Candidate(
                feature_index, start, end, result.start_logits[start],
                result.end_logits[end]))
    return candidates


def _is_valid_span(feature: InputFeatures, start: int, end: int,
                   max_answer_length: int) -> bool:
    return (start in feature.token_to_orig_map
            and end in feature.token_to_orig_map
            and feature.token_is_max_context.get(start, False)
            and start <= end < start + max_answer_length)


def _nbest_entries(candidates: Sequence[_Candidate],
                   features: Sequence[InputFeatures], example: SquadExample,
                   n_best_size: int, do_lower_case: bool,
                   null: _NullScore | None) -> list[dict]:
    """Up to `n_best_size` distinct answers (+ null in v2.0), with softmax."""
    entries = []
    seen = set()
    for candidate in candidates:
        if len(entries) >= n_best_size:
            break
        if candidate.start_index > 0:
            text = candidate_text(candidate, features[candidate.feature_index],
                                  example, do_lower_case)
            if text in seen:
                continue
        else:
            text = ""
        seen.add(text)
        entries.append(_entry(text, candidate.start_logit, candidate.end_logit))
    if null is not None and "" not in seen:
        entries.append(_entry("", null.start_logit, null.end_logit))
    probabilities = softmax([e["start_logit"] + e["end_logit"]
                             for e in entries])
    for entry, probability in zip(entries, probabilities):
        entry["probability"] = probability
    return entries


def _entry(text: str, start_logit: float, end_logit: float) -> dict:
    entry = collections.OrderedDict()
    entry["text"] = text
    entry["probability"] = None  # Set once all entries are known.
    entry["start_logit"] = start_logit
    entry["end_logit"] = end_logit
    return entry


def _no_span_prediction(example: SquadExample, entries: list[dict],
                        version_2_with_negative: bool
                        ) -> tuple[str, list, float | None]:
    """Predicts "" where no non-null span exists (the original's crash)."""
    logging.warning("Question %s has no valid answer span; predicting \"\".",
                    example.qas_id)
    if not entries:
        entries = [_entry("", 0.0, 0.0)]
        entries[0]["probability"] = 1.0
    return "", entries, NO_SPAN_NULL_ODDS if version_2_with_negative else None


def candidate_text(candidate: _Candidate, feature: InputFeatures,
                   example: SquadExample, do_lower_case: bool) -> str:
    """The original text of a candidate span."""
    pieces = feature.tokens[candidate.start_index:candidate.end_index + 1]
    pred_text = " ".join(pieces).replace(" ##", "").replace("##", "")
    pred_text = " ".join(pred_text.split())
    first_word = feature.token_to_orig_map[candidate.start_index]
    last_word = feature.token_to_orig_map[candidate.end_index]
    orig_text = " ".join(example.doc_tokens[first_word:last_word + 1])
    return get_final_text(pred_text, orig_text, do_lower_case)


def get_final_text(pred_text: str, orig_text: str, do_lower_case: bool) -> str:
    """Projects a normalized predicted text back onto the original words.

    `pred_text` ("steve smith") comes from word pieces: lower-cased, accents
    stripped, punctuation split off. `orig_text` ("Steve Smith's") is the run of
    whole original words holding it. The answer wanted is "Steve Smith": the
    original characters of the predicted ones. `orig_text` is tokenized as
    `pred_text` was; if, spaces removed, it has as many characters as
    `orig_text`, characters correspond one to one and the prediction's first
    and last characters are mapped back. Otherwise (e.g. a character that
    normalization expands) the whole `orig_text` is returned.

    Args:
        pred_text: the predicted pieces, joined and de-"##"-ed.
        orig_text: the original words spanned by those pieces.
        do_lower_case: as the tokenizer.

    Returns:
        The slice of `orig_text` that corresponds to `pred_text`, or
        `orig_text` if the alignment fails.
    """
    tok_text = " ".join(_basic_tokenizer(do_lower_case).tokenize(orig_text))
    start = tok_text.find(pred_text)
    if start == -1:
        logging.debug("Unable to find text %r in %r.", pred_text, orig_text)
        return orig_text
    end = start + len(pred_text) - 1
    orig_chars = _non_space_positions(orig_text)
    tok_chars = _non_space_positions(tok_text)
    if len(orig_chars) != len(tok_chars):
        logging.debug("Length not equal after stripping spaces: %r vs %r.",
                      orig_text, tok_text)
        return orig_text
    tok_position_to_char = {position: i for i, position in enumerate(tok_chars)}
    if start not in tok_position_to_char or end not in tok_position_to_char:
        logging.debug("Could not map %r back onto %r.", pred_text, orig_text)
        return orig_text
    return orig_text[orig_chars[tok_position_to_char[start]]:
                     orig_chars[tok_position_to_char[end]] + 1]


@functools.lru_cache(maxsize=2)
def _basic_tokenizer(do_lower_case: bool) -> tokenization.BasicTokenizer:
    return tokenization.BasicTokenizer(do_lower_case=do_lower_case)


def _non_space_positions(text: str) -> list[int]:
    """Positions in `text` of its characters other than " "."""
    return [i for i, char in enumerate(text) if char != " "]


def softmax(scores: Sequence[float]) -> list[float]:
    """Softmax of a list of floats, in Python floats (empty for empty)."""
    if not scores:
        return []
    max_score = max(scores)
    exps = [math.exp(score - max_score) for score in scores]
    total = 0.0
    for value in exps:
        total += value
    return [value / total for value in exps]
