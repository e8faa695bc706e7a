"""Tests of evaluation/squad_eval.py: the official SQuAD scoring rules.

Our figures are compared with an independent implementation of the official
scripts: torchmetrics' SQuAD metric (`torchmetrics.functional.text.squad`,
the official v1.1 script ported) for v1.1, and for v2.0 the official
`evaluate-v2.0.py` aggregation written out below on torchmetrics' per-answer
primitives (whose F1 follows the v2.0 rule for empty answers). Hand-computed
values pin the rest.
"""

import collections
import importlib
import json
import pathlib
import random

import pytest

from evaluation import squad_eval

SAMPLE_FILE = (
    pathlib.Path(__file__).resolve().parent.parent.parent
    / "sample_data"
    / "squad"
    / "dev-v2.0-first5articles.json"
)


# ----------------------------------------------------------------------------
# Independent reference.
# ----------------------------------------------------------------------------


def reference_v1(articles, predictions):
    """torchmetrics' port of the official v1.1 script."""
    from torchmetrics.functional.text.squad import squad

    preds = [{"id": qas_id, "prediction_text": text} for qas_id, text in predictions.items()]
    targets = [
        {
            "id": qa["id"],
            "answers": {
                "text": [a["text"] for a in qa["answers"]],
                "answer_start": [a["answer_start"] for a in qa["answers"]],
            },
        }
        for article in articles
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]
    scores = squad(preds, targets)
    return {"exact_match": float(scores["exact_match"]), "f1": float(scores["f1"])}


def reference_v2(articles, preds, na_probs=None, na_prob_thresh=1.0):
    """The official evaluate-v2.0.py main(), step by step, on torchmetrics'
    exact-match and F1 of one gold answer."""
    # The module, not the function of the same name that the package exports.
    tm = importlib.import_module("torchmetrics.functional.text.squad")

    qid_to_has_ans = {}
    exact_raw = {}
    f1_raw = {}
    for article in articles:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                qid = qa["id"]
                qid_to_has_ans[qid] = bool(qa["answers"])
                gold = [a["text"] for a in qa["answers"] if tm._normalize_text(a["text"])] or [""]
                exact_raw[qid] = max(
                    int(tm._compute_exact_match_score(preds[qid], g)) for g in gold
                )
                f1_raw[qid] = max(float(tm._compute_f1_score(preds[qid], g)) for g in gold)
    has_na_probs = na_probs is not None
    if not has_na_probs:
        na_probs = {k: 0.0 for k in preds}

    def apply(scores):
        return {
            qid: (float(not qid_to_has_ans[qid]) if na_probs[qid] > na_prob_thresh else s)
            for qid, s in scores.items()
        }

    def make_eval_dict(exact, f1, qid_list):
        total = len(qid_list)
        return {
            "exact": 100.0 * sum(exact[k] for k in qid_list) / total,
            "f1": 100.0 * sum(f1[k] for k in qid_list) / total,
            "total": total,
        }

    exact, f1 = apply(exact_raw), apply(f1_raw)
    out = make_eval_dict(exact, f1, list(exact))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [k for k, v in qid_to_has_ans.items() if v == wanted]
        if qids:
            for k, v in make_eval_dict(exact, f1, qids).items():
                out["%s_%s" % (prefix, k)] = v

    def find_best_thresh(scores):
        num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
        cur_score = best_score = num_no_ans
        best_thresh = 0.0
        for qid in sorted(na_probs, key=lambda k: na_probs[k]):
            if qid not in scores:
                continue
            if qid_to_has_ans[qid]:
                diff = scores[qid]
            else:
                diff = -1 if preds[qid] else 0
            cur_score += diff
            if cur_score > best_score:
                best_score = cur_score
                best_thresh = na_probs[qid]
        return 100.0 * best_score / len(scores), best_thresh

    if has_na_probs:
        out["best_exact"], out["best_exact_thresh"] = find_best_thresh(exact_raw)
        out["best_f1"], out["best_f1_thresh"] = find_best_thresh(f1_raw)
    return out


# ----------------------------------------------------------------------------
# Hand-made predictions for the bundled v2.0 sample.
# ----------------------------------------------------------------------------


def load_sample():
    return json.loads(SAMPLE_FILE.read_text(encoding="utf-8"))


def questions(articles):
    return [
        qa for article in articles for paragraph in article["paragraphs"] for qa in paragraph["qas"]
    ]


def make_predictions(articles, seed=0):
    """Predictions that exercise every rule, and the rule each one tests."""
    rng = random.Random(seed)
    predictions = collections.OrderedDict()
    kinds = collections.Counter()
    for index, qa in enumerate(questions(articles)):
        golds = [a["text"] for a in qa["answers"]]
        kind = index % 8
        if not golds:  # Unanswerable.
            plausible = [a["text"] for a in qa.get("plausible_answers", [])]
            if kind % 2 == 0 or not plausible:
                predictions[qa["id"]] = ""
                kinds["empty on unanswerable"] += 1
            else:
                predictions[qa["id"]] = plausible[0]
                kinds["text on unanswerable"] += 1
            continue
        distinct = sorted(set(golds), key=golds.index)
        if kind == 0:
            text = golds[0]
        elif kind == 1:  # Case, punctuation, articles and whitespace.
            text = "  The %s!!   " % golds[0].upper().replace(" ", "  ")
        elif kind == 2 and len(distinct) > 1:  # Matches only a later gold.
            text = distinct[-1]
            kinds["later gold answer"] += 1
        elif kind == 3:  # A prefix: partial F1.
            words = golds[0].split()
            text = " ".join(words[: max(1, len(words) - 1)])
        elif kind == 4:  # Extra words: partial F1.
            text = golds[0] + " and " + rng.choice(golds)
        elif kind == 5:
            text = ""
            kinds["empty on answerable"] += 1
        elif kind == 6:
            text = "a wholly different answer"
        else:
            text = golds[-1].lower()
        predictions[qa["id"]] = text
    return predictions, kinds


def make_null_odds(predictions, seed=0):
    """Null odds that agree more or less with the predictions, with ties."""
    rng = random.Random(seed)
    odds = collections.OrderedDict()
    for qas_id, text in predictions.items():
        center = -1.0 if text else 2.0
        odds[qas_id] = round(rng.gauss(center, 2.0), 1)
    return odds


def test_sample_predictions_exercise_every_rule():
    articles = load_sample()["data"]
    predictions, kinds = make_predictions(articles)
    assert len(predictions) == 1407
    for kind in (
        "empty on unanswerable",
        "text on unanswerable",
        "later gold answer",
        "empty on answerable",
    ):
        assert kinds[kind] > 20, kind
    # Some predictions match only after normalization.
    normalized_only = [
        qa["id"]
        for qa in questions(articles)
        if qa["answers"]
        and predictions[qa["id"]] not in [a["text"] for a in qa["answers"]]
        and squad_eval.compute_exact(qa["answers"][0]["text"], predictions[qa["id"]])
    ]
    assert len(normalized_only) > 50
    odds = make_null_odds(predictions)
    assert len(set(odds.values())) < len(odds)  # Ties.


def test_v2_equals_reference_on_sample():
    articles = load_sample()["data"]
    predictions, _ = make_predictions(articles)
    ours = squad_eval.evaluate_file(str(SAMPLE_FILE), predictions)
    expected = reference_v2(articles, predictions)
    assert list(ours) == [
        "exact",
        "f1",
        "total",
        "HasAns_exact",
        "HasAns_f1",
        "HasAns_total",
        "NoAns_exact",
        "NoAns_f1",
        "NoAns_total",
    ]
    assert ours == pytest.approx(expected, abs=1e-5)
    assert (ours["total"], ours["HasAns_total"], ours["NoAns_total"]) == (1407, 705, 702)
    assert 20 < ours["HasAns_exact"] < ours["HasAns_f1"] < 80


@pytest.mark.parametrize("na_prob_thresh", [1.0, 0.0, -3.0])
def test_v2_with_null_odds_equals_reference_on_sample(na_prob_thresh):
    articles = load_sample()["data"]
    predictions, _ = make_predictions(articles)
    odds = make_null_odds(predictions)
    ours = squad_eval.evaluate_file(
        str(SAMPLE_FILE), predictions, odds, na_prob_thresh=na_prob_thresh
    )
    expected = reference_v2(articles, predictions, odds, na_prob_thresh)
    assert list(ours)[-4:] == ["best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]
    assert ours == pytest.approx(expected, abs=1e-5)
    # The threshold changes the scores, and the best one beats the default.
    plain = squad_eval.evaluate_file(str(SAMPLE_FILE), predictions)
    assert ours["exact"] != plain["exact"]
    assert ours["best_f1"] >= ours["f1"]


@pytest.mark.filterwarnings("ignore:Unanswered question")
def test_v1_equals_reference_on_answerable_questions(tmp_path):
    dataset = load_sample()
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] = [qa for qa in paragraph["qas"] if not qa["is_impossible"]]
            for qa in paragraph["qas"]:
                del qa["is_impossible"]
    dataset["version"] = "1.1"
    path = tmp_path / "dev-v1.1-sample.json"
    path.write_text(json.dumps(dataset), encoding="utf-8")
    predictions, _ = make_predictions(dataset["data"])
    del predictions[next(iter(predictions))]  # Unanswered: scores 0.
    ours = squad_eval.evaluate_file(str(path), predictions)
    assert list(ours) == ["exact_match", "f1"]
    assert ours == pytest.approx(reference_v1(dataset["data"], predictions), abs=1e-4)
    # Forcing the v2.0 rules on the same file: only the missing prediction
    # stands in the way.
    with pytest.raises(ValueError, match="dev-v1.1-sample.json: No prediction for question"):
        squad_eval.evaluate_file(str(path), predictions, version_2_with_negative=True)


# ----------------------------------------------------------------------------
# Hand-computed values.
# ----------------------------------------------------------------------------


def test_normalize_answer():
    assert squad_eval.normalize_answer("  The  Quick, brown fox!! ") == "quick brown fox"
    assert squad_eval.normalize_answer("An apple a day") == "apple day"
    assert squad_eval.normalize_answer("Theater of the Absurd") == ("theater of absurd")
    assert squad_eval.normalize_answer("U.S.-led") == "usled"
    assert squad_eval.normalize_answer("the") == ""


def test_exact_and_f1_by_hand():
    # Normalized: "cat sat" vs "cat sat on": precision 2/2, recall 2/3,
    # F1 = 2 * 1 * (2/3) / (1 + 2/3) = 0.8.
    assert squad_eval.compute_f1("a cat sat on", "the cat sat") == (pytest.approx(0.8))
    assert squad_eval.compute_f1("the cat sat", "a cat sat on") == (pytest.approx(0.8))
    assert squad_eval.compute_exact("a cat sat on", "the cat sat") == 0
    assert squad_eval.compute_exact("The Cat, sat.", "cat  sat") == 1
    # Repeated words count once per occurrence: "the the cat" -> "cat".
    # "cat cat dog" vs "cat": precision 1/1, recall 1/3 -> F1 0.5.
    assert squad_eval.compute_f1("cat cat dog", "cat") == pytest.approx(0.5)
    # Empty answers: F1 1 by the v2.0 rules, 0 by the v1.1 rules.
    assert squad_eval.compute_f1("", "") == 1.0
    assert squad_eval.compute_f1("", "the") == 1.0
    assert squad_eval.compute_f1("Paris", "") == 0.0
    assert squad_eval.compute_f1_v1("", "") == 0.0
    assert squad_eval.compute_f1_v1("cat sat", "the cat sat") == 1.0


TOY = {
    "version": "v2.0",
    "data": [
        {
            "title": "toy",
            "paragraphs": [
                {
                    "context": "Paris and London.",
                    "qas": [
                        {
                            "id": "q1",
                            "question": "?",
                            "is_impossible": False,
                            "answers": [{"text": "Paris", "answer_start": 0}],
                        },
                        {
                            "id": "q2",
                            "question": "?",
                            "is_impossible": False,
                            "answers": [
                                {"text": "London", "answer_start": 10},
                                {"text": "in London", "answer_start": 7},
                            ],
                        },
                        {"id": "q3", "question": "?", "is_impossible": True, "answers": []},
                        {"id": "q4", "question": "?", "is_impossible": True, "answers": []},
                    ],
                }
            ],
        }
    ],
}
TOY_PREDICTIONS = {"q1": "paris", "q2": "in London town", "q3": "Rome", "q4": ""}
TOY_ODDS = {"q1": -2.0, "q2": 0.5, "q3": 1.5, "q4": -1.0}


def test_toy_v2_by_hand(tmp_path):
    """Raw scores: exact (1, 0, 0, 1); F1 (1, 0.8, 0, 1): "in london town"
    vs the gold "in london": precision 2/3, recall 1, F1 0.8.

    At the default na_prob_thresh 1.0, q3 (odds 1.5) counts as "": exact
    (1, 0, 1, 1) -> 75, F1 (1, 0.8, 1, 1) -> 95.

    Threshold search from 2 (every question ""), by increasing odds: q1 +1
    -> 3 (best at -2.0); q4 +0 -> 3; q2 +0 (exact) or +0.8 (F1) -> 3 or 3.8
    (best F1 at 0.5); q3 answered "Rome" -1.
    """
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY), encoding="utf-8")
    results = squad_eval.evaluate_file(str(path), TOY_PREDICTIONS, TOY_ODDS)
    assert results == pytest.approx(
        collections.OrderedDict(
            exact=75.0,
            f1=95.0,
            total=4,
            HasAns_exact=50.0,
            HasAns_f1=90.0,
            HasAns_total=2,
            NoAns_exact=100.0,
            NoAns_f1=100.0,
            NoAns_total=2,
            best_exact=75.0,
            best_exact_thresh=-2.0,
            best_f1=95.0,
            best_f1_thresh=0.5,
        )
    )
    assert results == pytest.approx(reference_v2(TOY["data"], TOY_PREDICTIONS, TOY_ODDS))
    # Without null odds, q3's "Rome" scores 0.
    plain = squad_eval.evaluate_file(str(path), TOY_PREDICTIONS)
    assert (plain["exact"], plain["f1"]) == (50.0, pytest.approx(70.0))
    assert "best_f1" not in plain


def test_bad_inputs(tmp_path):
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY), encoding="utf-8")
    with pytest.raises(ValueError, match="toy.json: No prediction for question q4"):
        squad_eval.evaluate_file(str(path), {"q1": "", "q2": "", "q3": ""})
    with pytest.raises(ValueError, match="toy.json: No null odds for question q2 .and 1 others"):
        squad_eval.evaluate_file(str(path), TOY_PREDICTIONS, {"q1": 0.0, "q3": 0.0})
    with pytest.raises(ValueError, match="Question q3 has no gold answer"):
        squad_eval.evaluate_file(str(path), TOY_PREDICTIONS, version_2_with_negative=False)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": "1.1"}), encoding="utf-8")
    with pytest.raises(ValueError, match="bad.json is not a SQuAD file"):
        squad_eval.evaluate_file(str(bad), {})
    with pytest.raises(ValueError, match="absent.json does not exist"):
        squad_eval.evaluate_file(str(tmp_path / "absent.json"), {})
