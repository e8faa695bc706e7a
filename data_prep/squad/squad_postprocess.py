"""SQuAD answers from the model's start and end logits, as the original release picks them.

The n-best start and end positions of every window, spans checked and mapped back
to the original text (`get_final_text`), softmax over the n-best, and for v2.0 the
null score and its threshold. predictions.json, nbest_predictions.json and
null_odds.json are written in the original's format.

Deliberate difference from the original: where a question has no valid non-null
span (its context is empty, or every candidate is the null answer), the original
crashes in v2.0 mode and predicts the text "empty" in v1.1 mode; here the
prediction is "" in both modes (see `NO_SPAN_NULL_ODDS`).

Shape legend: S sequence (max_seq_length).
"""

import collections
import dataclasses
import functools
import math
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from absl import logging

from common.errors import UserError
from common import file_io
from data_prep.text import tokenization
from data_prep.squad.squad_features import InputFeatures
from data_prep.squad.squad_reader import SquadExample

# Null odds written for a question without any non-null candidate span: the
# null answer is certain. Finite so that null_odds.json stays valid JSON.
NO_SPAN_NULL_ODDS = 1e6


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


def compute_predictions(
    examples: Sequence[SquadExample],
    features: Sequence[InputFeatures],
    results: Iterable[Any] | Mapping[int, Any],
    n_best_size: int = 20,
    max_answer_length: int = 30,
    do_lower_case: bool = True,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
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
            example,
            features_by_example[example_index],
            results_by_id,
            n_best_size,
            max_answer_length,
            do_lower_case,
            version_2_with_negative,
            null_score_diff_threshold,
        )
        predictions[example.qas_id] = text
        nbest[example.qas_id] = entries
        if version_2_with_negative:
            null_odds[example.qas_id] = odds
    no_span = sum(1 for entries in nbest.values() if all(e["text"] == "" for e in entries))
    if no_span:
        logging.warning(
            '%d of %d questions have no valid answer span: predicting "" for them '
            "(the log names each).",
            no_span,
            len(nbest),
        )
    return SquadPredictions(predictions, nbest, null_odds)


def write_predictions(
    predictions: SquadPredictions,
    output_prediction_file: str,
    output_nbest_file: str,
    output_null_log_odds_file: str | None = None,
) -> None:
    """Writes predictions.json, nbest_predictions.json and null_odds.json.

    Each file is written atomically, in the original release's format
    (`json.dumps(..., indent=4)` and a newline). null_odds.json is written
    only if `output_null_log_odds_file` is given and there are null odds.
    """
    _write_json(output_prediction_file, predictions.predictions)
    _write_json(output_nbest_file, predictions.nbest)
    if output_null_log_odds_file and predictions.null_odds:
        _write_json(output_null_log_odds_file, predictions.null_odds)
    logging.info(
        "Wrote predictions of %d questions to %s.",
        len(predictions.predictions),
        output_prediction_file,
    )


def _write_json(path: str, obj: Any) -> None:
    file_io.write_json(path, obj, indent=4, sort_keys=False)


def _index_results(results: Iterable[Any] | Mapping[int, Any]) -> dict[int, RawResult]:
    """unique_id -> RawResult with the logits as lists of Python floats."""
    if isinstance(results, Mapping):
        results = results.values()
    indexed = {}
    for result in results:
        indexed[int(result.unique_id)] = RawResult(
            int(result.unique_id), _float_list(result.start_logits), _float_list(result.end_logits)
        )
    return indexed


def _float_list(values: Sequence[float]) -> list[float]:
    if hasattr(values, "tolist"):  # NumPy arrays and scalars.
        values = values.tolist()
    return [float(v) for v in values]


def predict_example(
    example: SquadExample,
    features: Sequence[InputFeatures],
    results_by_id: Mapping[int, RawResult],
    n_best_size: int,
    max_answer_length: int,
    do_lower_case: bool,
    version_2_with_negative: bool,
    null_score_diff_threshold: float,
) -> tuple[str, list, float | None]:
    """(answer, n-best list, null odds or None) of one example."""
    results = [_result_for(feature, example, results_by_id) for feature in features]
    candidates = []
    for feature_index, (feature, result) in enumerate(zip(features, results)):
        candidates.extend(
            feature_candidates(feature_index, feature, result, n_best_size, max_answer_length)
        )
    null = _min_null_score(results) if version_2_with_negative else None
    if null is not None:
        candidates.append(_Candidate(null.feature_index, 0, 0, null.start_logit, null.end_logit))
    candidates.sort(key=lambda c: c.start_logit + c.end_logit, reverse=True)
    entries = _nbest_entries(candidates, features, example, n_best_size, do_lower_case, null)
    best_non_null = next((e for e in entries if e["text"]), None)
    if best_non_null is None:
        return _no_span_prediction(example, entries, version_2_with_negative)
    if not version_2_with_negative:
        return entries[0]["text"], entries, None
    score_diff = null.score - best_non_null["start_logit"] - best_non_null["end_logit"]
    if score_diff > null_score_diff_threshold:
        return "", entries, score_diff
    return best_non_null["text"], entries, score_diff


def _result_for(
    feature: InputFeatures, example: SquadExample, results_by_id: Mapping[int, RawResult]
) -> RawResult:
    try:
        return results_by_id[feature.unique_id]
    except KeyError:
        raise UserError(
            "No result for feature %d (window %d of question %s)."
            % (feature.unique_id, feature.doc_span_index, example.qas_id)
        ) from None


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


def feature_candidates(
    feature_index: int,
    feature: InputFeatures,
    result: RawResult,
    n_best_size: int,
    max_answer_length: int,
) -> list[_Candidate]:
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
            candidates.append(
                _Candidate(
                    feature_index, start, end, result.start_logits[start], result.end_logits[end]
                )
            )
    return candidates


def _is_valid_span(feature: InputFeatures, start: int, end: int, max_answer_length: int) -> bool:
    return (
        start in feature.token_to_orig_map
        and end in feature.token_to_orig_map
        and feature.token_is_max_context.get(start, False)
        and start <= end < start + max_answer_length
    )


def _nbest_entries(
    candidates: Sequence[_Candidate],
    features: Sequence[InputFeatures],
    example: SquadExample,
    n_best_size: int,
    do_lower_case: bool,
    null: _NullScore | None,
) -> list[dict]:
    """Up to `n_best_size` distinct answers (+ null in v2.0), with softmax."""
    entries = []
    seen = set()
    for candidate in candidates:
        if len(entries) >= n_best_size:
            break
        if candidate.start_index > 0:
            text = candidate_text(
                candidate, features[candidate.feature_index], example, do_lower_case
            )
            if text in seen:
                continue
        else:
            text = ""
        seen.add(text)
        entries.append(_entry(text, candidate.start_logit, candidate.end_logit))
    if null is not None and "" not in seen:
        entries.append(_entry("", null.start_logit, null.end_logit))
    probabilities = softmax([e["start_logit"] + e["end_logit"] for e in entries])
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


def _no_span_prediction(
    example: SquadExample, entries: list[dict], version_2_with_negative: bool
) -> tuple[str, list, float | None]:
    """Predicts "" where no non-null span exists (the original's crash)."""
    logging.info('Question %s has no valid answer span; predicting "".', example.qas_id)
    if not entries:
        entries = [_entry("", 0.0, 0.0)]
        entries[0]["probability"] = 1.0
    return "", entries, NO_SPAN_NULL_ODDS if version_2_with_negative else None


def candidate_text(
    candidate: _Candidate, feature: InputFeatures, example: SquadExample, do_lower_case: bool
) -> str:
    """The original text of a candidate span."""
    pieces = feature.tokens[candidate.start_index : candidate.end_index + 1]
    pred_text = " ".join(pieces).replace(" ##", "").replace("##", "")
    pred_text = " ".join(pred_text.split())
    first_word = feature.token_to_orig_map[candidate.start_index]
    last_word = feature.token_to_orig_map[candidate.end_index]
    orig_text = " ".join(example.doc_tokens[first_word : last_word + 1])
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
        logging.debug("Length not equal after stripping spaces: %r vs %r.", orig_text, tok_text)
        return orig_text
    tok_position_to_char = {position: i for i, position in enumerate(tok_chars)}
    if start not in tok_position_to_char or end not in tok_position_to_char:
        logging.debug("Could not map %r back onto %r.", pred_text, orig_text)
        return orig_text
    return orig_text[
        orig_chars[tok_position_to_char[start]] : orig_chars[tok_position_to_char[end]] + 1
    ]


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
