"""SQuAD v1.1 and v2.0 JSON files -> examples, as the original release reads them.

Each context is split on whitespace (`CONTEXT_WHITESPACE`: space, tab, CR, LF,
U+202F) and every character is mapped to the word holding it; an answer's
character span becomes a word span. Training uses a question's first answer. A
training answer whose text cannot be found in its word span (odd Unicode) is
skipped, as in the original, but counted and logged with its question id.

Features are made in `squad_features`, written and read in `squad_records`;
answers come back in `squad_postprocess`.
"""

import dataclasses
from typing import Any, Mapping

from absl import logging

from common.errors import UserError
from common import file_io
from data_prep.text import tokenization

# Characters that separate words of a context, as in the original reader
# (U+202F NARROW NO-BREAK SPACE occurs in SQuAD).
CONTEXT_WHITESPACE = frozenset(" \t\r\n\u202f")


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


def read_squad_examples(
    input_file: str, is_training: bool, version_2_with_negative: bool = False
) -> list[SquadExample]:
    """The examples of a SQuAD JSON file (see `read_squad_file`)."""
    return read_squad_file(input_file, is_training, version_2_with_negative).examples


def read_squad_file(
    input_file: str, is_training: bool, version_2_with_negative: bool = False
) -> SquadReadResult:
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
    articles = read_squad_json(input_file)["data"]
    examples = []
    skipped = []
    num_questions = 0
    for article_index, article in enumerate(articles):
        paragraphs = article_paragraphs(article, article_index, input_file)
        for paragraph_index, paragraph in enumerate(paragraphs):
            where = "paragraph %d of article %d" % (paragraph_index, article_index)
            context = field(paragraph, "context", str, input_file, where)
            qas = field(paragraph, "qas", list, input_file, where)
            doc_tokens, char_to_word_offset = split_context(context)
            for qa in qas:
                num_questions += 1
                example = _read_question(
                    qa,
                    context,
                    doc_tokens,
                    char_to_word_offset,
                    is_training,
                    version_2_with_negative,
                    input_file,
                )
                if example is None:
                    skipped.append(qa["id"])
                else:
                    examples.append(example)
    _log_read_summary(input_file, num_questions, examples, skipped)
    return SquadReadResult(examples, num_questions, skipped)


def read_squad_json(input_file: str) -> dict:
    """The parsed SQuAD JSON file (a dict with a "data" list of articles).

    Raises:
        ValueError: naming the file, if it does not exist, is not valid JSON or
            has no top-level "data" list.
    """
    try:
        dataset = file_io.read_json(input_file)
    except FileNotFoundError:
        raise UserError("SQuAD file %s does not exist." % input_file) from None
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        raise UserError('%s is not a SQuAD file: it has no top-level "data" list.' % input_file)
    return dataset


def article_paragraphs(article: Any, article_index: int, input_file: str) -> list:
    where = "article %d" % article_index
    if not isinstance(article, dict):
        raise UserError("%s: %s is not a JSON object." % (input_file, where))
    return field(article, "paragraphs", list, input_file, where)


def field(obj: Mapping, key: str, kind: type, input_file: str, where: str):
    """`obj[key]`, checked to be of type `kind`, or a clear ValueError."""
    value = obj.get(key) if isinstance(obj, Mapping) else None
    if not isinstance(value, kind):
        raise UserError(
            "%s: %s has no %r %s."
            % (input_file, where, key, "string" if kind is str else kind.__name__)
        )
    return value


def question_id(qa: Any, input_file: str) -> str:
    """The "id" of a question (a JSON object), or a clear ValueError."""
    if not isinstance(qa, dict) or not isinstance(qa.get("id"), str):
        raise UserError('%s: a question has no string "id": %.200r' % (input_file, qa))
    return qa["id"]


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


def _read_question(
    qa: Any,
    context: str,
    doc_tokens: list[str],
    char_to_word_offset: list[int],
    is_training: bool,
    version_2_with_negative: bool,
    input_file: str,
) -> SquadExample | None:
    """The example of one question, or None if its answer is unrecoverable."""
    qas_id = question_id(qa, input_file)
    question_text = field(qa, "question", str, input_file, "question %s" % qas_id)
    if not is_training:
        return SquadExample(qas_id, question_text, doc_tokens)
    if version_2_with_negative and qa.get("is_impossible", False):
        return SquadExample(
            qas_id,
            question_text,
            doc_tokens,
            orig_answer_text="",
            start_position=-1,
            end_position=-1,
            is_impossible=True,
        )
    answer = _first_answer(qa, version_2_with_negative, input_file)
    span = _answer_word_span(answer, context, doc_tokens, char_to_word_offset, input_file, qas_id)
    if span is None:
        return None
    return SquadExample(
        qas_id,
        question_text,
        doc_tokens,
        orig_answer_text=answer["text"],
        start_position=span[0],
        end_position=span[1],
    )


def _first_answer(qa: dict, version_2_with_negative: bool, input_file: str) -> dict:
    """The first answer of a training question, checked."""
    answers = qa.get("answers")
    if not isinstance(answers, list) or not answers:
        if qa.get("is_impossible") and not version_2_with_negative:
            raise UserError(
                "%s: question %s is marked is_impossible (SQuAD 2.0 data): pass "
                "--version_2_with_negative to train on unanswerable questions."
                % (input_file, qa["id"])
            )
        hint = "" if version_2_with_negative else " (SQuAD 2.0 data: --version_2_with_negative)"
        raise UserError(
            "%s: question %s has no answer and is not marked "
            "is_impossible%s." % (input_file, qa["id"], hint)
        )
    answer = answers[0]
    if (
        not isinstance(answer, dict)
        or not isinstance(answer.get("text"), str)
        or not isinstance(answer.get("answer_start"), int)
    ):
        raise UserError(
            '%s: question %s: an answer needs a string "text" '
            'and an integer "answer_start", got %.200r.' % (input_file, qa["id"], answer)
        )
    if not answer["text"]:
        raise UserError("%s: question %s has an empty answer text." % (input_file, qa["id"]))
    return answer


def _answer_word_span(
    answer: dict,
    context: str,
    doc_tokens: list[str],
    char_to_word_offset: list[int],
    input_file: str,
    qas_id: str,
) -> tuple[int, int] | None:
    """(first word, last word) of an answer, None if its text is not there."""
    text = answer["text"]
    offset = answer["answer_start"]
    if offset < 0 or offset + len(text) > len(context):
        raise UserError(
            "%s: question %s: answer %r at character %d runs outside its "
            "context of %d characters." % (input_file, qas_id, text, offset, len(context))
        )
    start = char_to_word_offset[offset]
    end = char_to_word_offset[offset + len(text) - 1]
    found = " ".join(doc_tokens[start : end + 1])
    wanted = " ".join(tokenization.whitespace_tokenize(text))
    if wanted not in found:
        logging.warning(
            "%s: skipping question %s: answer %r is not found at "
            "its offset (the words there are %r).",
            input_file,
            qas_id,
            wanted,
            found,
        )
        return None
    return start, end


def _log_read_summary(
    input_file: str, num_questions: int, examples: list[SquadExample], skipped: list[str]
) -> None:
    num_impossible = sum(1 for e in examples if e.is_impossible)
    logging.info(
        "Read %d questions from %s: %d examples (%d impossible), %d skipped.",
        num_questions,
        input_file,
        len(examples),
        num_impossible,
        len(skipped),
    )
    if skipped:
        logging.warning(
            "%d questions of %s skipped because their answer text "
            "could not be recovered from the context: %s",
            len(skipped),
            input_file,
            ", ".join(skipped[:20]),
        )
