"""SQuAD scoring by the rules of the official evaluation scripts.

SQuAD v1.1 (`evaluate-v1.1.py`): each answer is normalized (lower-cased,
punctuation removed, the articles "a", "an", "the" removed, whitespace
collapsed); a question scores the maximum, over its gold answers, of exact match
and of token F1; a question without a prediction scores 0. Results are
percentages: `exact_match`, `f1`.

SQuAD v2.0 (`evaluate-v2.0.py`): the same, except that gold answers that
normalize to "" are dropped, an unanswerable question's only gold answer is "",
and F1 between two empty answers is 1. With null odds (BERT's null_odds.json:
null score minus best non-null score, per question), questions whose odds exceed
`na_prob_thresh` (default 1.0, as the official script) count as predicted
unanswerable, and `best_exact` / `best_f1` are the scores at the best threshold
over the sorted odds, with that threshold. Results are `exact`, `f1`, `total`,
`HasAns_*`, `NoAns_*` and, with null odds, `best_exact`, `best_exact_thresh`,
`best_f1`, `best_f1_thresh`.

Deliberate difference: where the official v2.0 script fails with a KeyError on a
question without a prediction (or without null odds), this module raises a
ValueError naming the question.
"""

import collections
import re
import string
from typing import Mapping, Sequence

from absl import logging

from common.errors import UserError
from common import file_io
from data_prep.squad import squad_reader

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


# ----------------------------------------------------------------------------
# Answer comparison.
# ----------------------------------------------------------------------------


def normalize_answer(text: str) -> str:
    """Lower-cases, removes punctuation and articles, collapses whitespace."""
    text = text.lower()
    text = "".join(char for char in text if char not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def get_tokens(text: str) -> list[str]:
    """The normalized words of an answer."""
    return normalize_answer(text).split() if text else []


def compute_exact(gold: str, prediction: str) -> int:
    """1 if the normalized answers are equal, else 0."""
    return int(normalize_answer(gold) == normalize_answer(prediction))


def compute_f1(gold: str, prediction: str) -> float:
    """Token F1 by the v2.0 rules: 1.0 if both answers are empty."""
    gold_tokens = get_tokens(gold)
    pred_tokens = get_tokens(prediction)
    if not gold_tokens or not pred_tokens:
        return float(gold_tokens == pred_tokens)
    return _token_f1(gold_tokens, pred_tokens)


def compute_f1_v1(gold: str, prediction: str) -> float:
    """Token F1 by the v1.1 rules: 0.0 when no word is shared, even "" vs ""."""
    return _token_f1(get_tokens(gold), get_tokens(prediction))


def _token_f1(gold_tokens: Sequence[str], pred_tokens: Sequence[str]) -> float:
    common = collections.Counter(gold_tokens) & collections.Counter(pred_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


# ----------------------------------------------------------------------------
# Data sets.
# ----------------------------------------------------------------------------


def gold_answers(articles: Sequence[dict], source: str = "<data>") -> "collections.OrderedDict":
    """qas_id -> list of gold answer texts, in file order.

    Raises:
        UserError: naming `source` (the file) and the article, paragraph or question
            whose structure is not SQuAD's.
    """
    answers = collections.OrderedDict()
    for article_index, article in enumerate(articles):
        for paragraph_index, paragraph in enumerate(
            squad_reader.article_paragraphs(article, article_index, source)
        ):
            where = "paragraph %d of article %d" % (paragraph_index, article_index)
            for qa in squad_reader.field(paragraph, "qas", list, source, where):
                qas_id = squad_reader.question_id(qa, source)
                golds = squad_reader.field(qa, "answers", list, source, "question " + qas_id)
                if not all(isinstance(a, dict) and isinstance(a.get("text"), str) for a in golds):
                    raise UserError(
                        '%s: question %s: an answer has no string "text".' % (source, qas_id)
                    )
                answers[qas_id] = [a["text"] for a in golds]
    return answers


def read_predictions(path: str) -> dict[str, str]:
    """predictions.json: question id -> predicted text ("" for no answer).

    Raises:
        UserError: naming the file, if it is not a JSON object of strings.
    """
    predictions = file_io.read_json_object(path, "predictions (an object of id -> text)")
    for qas_id, text in predictions.items():
        if not isinstance(text, str):
            raise UserError(
                "%s: the prediction of %s is not a string: %.80r" % (path, qas_id, text)
            )
    return predictions


def read_null_odds(path: str) -> dict[str, float]:
    """null_odds.json: question id -> null odds (null score minus the best answer's).

    Raises:
        UserError: naming the file, if it is not a JSON object of numbers.
    """
    odds = file_io.read_json_object(path, "null odds (an object of id -> number)")
    for qas_id, value in odds.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
            raise UserError(
                "%s: the null odds of %s are not a number: %.80r" % (path, qas_id, value)
            )
    return odds


def is_version_2(dataset: Mapping) -> bool:
    """Whether a parsed SQuAD JSON is v2.0 (by its version or its questions)."""
    if str(dataset.get("version", "")).lstrip("v").startswith("2"):
        return True
    return any(
        qa.get("is_impossible", False)
        for article in dataset["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    )


# ----------------------------------------------------------------------------
# SQuAD v1.1.
# ----------------------------------------------------------------------------


def evaluate_v1(
    answers: Mapping[str, Sequence[str]], predictions: Mapping[str, str]
) -> "collections.OrderedDict":
    """Exact match and F1 (percentages) by the official v1.1 script.

    Args:
        answers: qas_id -> gold answer texts (see `gold_answers`).
        predictions: qas_id -> predicted text.

    Returns:
        OrderedDict with `exact_match` and `f1`.
    """
    exact = f1 = 0.0
    for qas_id, golds in answers.items():
        if qas_id not in predictions:
            logging.warning("Unanswered question %s will receive score 0.", qas_id)
            continue
        if not golds:
            raise UserError("Question %s has no gold answer: score it by the v2.0 rules." % qas_id)
        prediction = predictions[qas_id]
        exact += max(compute_exact(gold, prediction) for gold in golds)
        f1 += max(compute_f1_v1(gold, prediction) for gold in golds)
    total = len(answers)
    return collections.OrderedDict(exact_match=100.0 * exact / total, f1=100.0 * f1 / total)


# ----------------------------------------------------------------------------
# SQuAD v2.0.
# ----------------------------------------------------------------------------


def raw_scores_v2(
    answers: Mapping[str, Sequence[str]], predictions: Mapping[str, str]
) -> tuple[dict[str, int], dict[str, float]]:
    """Per-question exact match and F1 by the v2.0 rules, before thresholds."""
    exact = {}
    f1 = {}
    for qas_id, golds in answers.items():
        golds = [gold for gold in golds if normalize_answer(gold)] or [""]
        if qas_id not in predictions:
            raise UserError("No prediction for question %s." % qas_id)
        prediction = predictions[qas_id]
        exact[qas_id] = max(compute_exact(gold, prediction) for gold in golds)
        f1[qas_id] = max(compute_f1(gold, prediction) for gold in golds)
    return exact, f1


def apply_no_answer_threshold(
    scores: Mapping[str, float],
    null_odds: Mapping[str, float],
    has_answer: Mapping[str, bool],
    threshold: float,
) -> dict[str, float]:
    """Scores where a question with odds above `threshold` answers ""."""
    return {
        qas_id: (float(not has_answer[qas_id]) if null_odds[qas_id] > threshold else score)
        for qas_id, score in scores.items()
    }


def find_best_threshold(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    null_odds: Mapping[str, float],
    has_answer: Mapping[str, bool],
) -> tuple[float, float]:
    """(best score in percent, its threshold) over thresholds on null odds.

    As the official script: start with every question predicted unanswerable
    (score = number of unanswerable questions), then, in increasing order of
    odds, let each question keep its prediction; the best running score and the
    odds where it is first reached are the result.
    """
    score = sum(1 for has in has_answer.values() if not has)
    best_score = score
    best_threshold = 0.0
    for qas_id in sorted(null_odds, key=lambda q: null_odds[q]):
        if qas_id not in scores:
            continue
        if has_answer[qas_id]:
            score += scores[qas_id]
        elif predictions[qas_id]:
            score -= 1
        if score > best_score:
            best_score = score
            best_threshold = null_odds[qas_id]
    return 100.0 * best_score / len(scores), best_threshold


def _summary(
    exact: Mapping[str, float], f1: Mapping[str, float], qas_ids: Sequence[str]
) -> list[tuple[str, float]]:
    total = len(qas_ids)
    return [
        ("exact", 100.0 * sum(exact[q] for q in qas_ids) / total),
        ("f1", 100.0 * sum(f1[q] for q in qas_ids) / total),
        ("total", total),
    ]


def evaluate_v2(
    answers: Mapping[str, Sequence[str]],
    predictions: Mapping[str, str],
    null_odds: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> "collections.OrderedDict":
    """Scores by the official v2.0 script.

    Args:
        answers: qas_id -> gold answer texts ([] if unanswerable).
        predictions: qas_id -> predicted text ("" for no answer).
        null_odds: qas_id -> null odds (null_odds.json), optional.
        na_prob_thresh: questions with null odds above this count as
            predicted unanswerable (only with `null_odds`).

    Returns:
        OrderedDict: `exact`, `f1`, `total`, `HasAns_exact`, `HasAns_f1`,
        `HasAns_total`, `NoAns_exact`, `NoAns_f1`, `NoAns_total` (the HasAns and
        NoAns keys only where there are such questions), and with `null_odds`
        also `best_exact`, `best_exact_thresh`, `best_f1`, `best_f1_thresh`.

    Raises:
        ValueError: naming a question without a prediction or null odds.
    """
    has_answer = {qas_id: bool(golds) for qas_id, golds in answers.items()}
    exact_raw, f1_raw = raw_scores_v2(answers, predictions)
    if null_odds is None:
        odds = {qas_id: 0.0 for qas_id in answers}
    else:
        missing = [qas_id for qas_id in answers if qas_id not in null_odds]
        if missing:
            raise UserError(
                "No null odds for question %s (and %d others)." % (missing[0], len(missing) - 1)
            )
        odds = null_odds
    exact = apply_no_answer_threshold(exact_raw, odds, has_answer, na_prob_thresh)
    f1 = apply_no_answer_threshold(f1_raw, odds, has_answer, na_prob_thresh)
    results = collections.OrderedDict(_summary(exact, f1, list(answers)))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qas_ids = [q for q, has in has_answer.items() if has == wanted]
        if qas_ids:
            for key, value in _summary(exact, f1, qas_ids):
                results["%s_%s" % (prefix, key)] = value
    if null_odds is not None:
        for name, raw in (("exact", exact_raw), ("f1", f1_raw)):
            best, threshold = find_best_threshold(predictions, raw, null_odds, has_answer)
            results["best_" + name] = best
            results["best_%s_thresh" % name] = threshold
    return results


# ----------------------------------------------------------------------------
# Files.
# ----------------------------------------------------------------------------


def evaluate_file(
    dataset_file: str,
    predictions: Mapping[str, str],
    null_odds: Mapping[str, float] | None = None,
    version_2_with_negative: bool | None = None,
    na_prob_thresh: float = 1.0,
) -> "collections.OrderedDict":
    """Scores predictions against a SQuAD JSON file.

    Args:
        dataset_file: the SQuAD v1.1 or v2.0 JSON file (e.g. dev-v2.0.json).
        predictions: qas_id -> predicted text (predictions.json).
        null_odds: qas_id -> null odds (null_odds.json), v2.0 only.
        version_2_with_negative: the rules to apply; None: v2.0 if the file
            says version 2 or holds an `is_impossible` question.
        na_prob_thresh: see `evaluate_v2`.

    Returns:
        The OrderedDict of `evaluate_v1` or `evaluate_v2`.

    Raises:
        ValueError: naming the file, if it is not a SQuAD file or a question
            lacks a prediction (v2.0 rules) or null odds.
    """
    dataset = squad_reader.read_squad_json(dataset_file)
    answers = gold_answers(dataset["data"], dataset_file)
    if not answers:
        raise UserError("%s holds no question to score." % dataset_file)
    if version_2_with_negative is None:
        version_2_with_negative = is_version_2(dataset)
    try:
        if not version_2_with_negative:
            return evaluate_v1(answers, predictions)
        return evaluate_v2(answers, predictions, null_odds, na_prob_thresh)
    except ValueError as e:
        raise UserError("%s: %s" % (dataset_file, e)) from e
