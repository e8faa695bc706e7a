"""Tests of data_prep/squad/squad_postprocess.py, against the original release's
run_squad.py: the prediction files must equal those of its `write_predictions`,
on the bundled SQuAD v2.0 sample (its first questions; the whole sample under
`-m slow`), except where a crash is deliberately fixed.
"""

import copy
import json
import pathlib

import numpy as np
import pytest

from data_prep.squad import squad_features
from data_prep.squad import squad_postprocess
from data_prep.squad import squad_reader
from tests.helpers.squad_helpers import (
    NUM_FAST_QUESTIONS,
    orig_features,
    orig_version,
    squad_json,
    write_variant,
)


# ----------------------------------------------------------------------------
# Post-processing equals the original's write_predictions.
# ----------------------------------------------------------------------------


def random_results(features, seed, max_seq_length):
    """float32 logits, as a model outputs them; the [CLS] logits of every
    third question are raised so that some answers are null."""
    rng = np.random.default_rng(seed)
    results = []
    for feature in features:
        logits = (3.0 * rng.standard_normal((2, max_seq_length))).astype(np.float32)
        if feature.example_index % 3 == 0:
            logits[:, 0] += 6.0
        results.append(squad_postprocess.RawResult(feature.unique_id, logits[0], logits[1]))
    return results


def as_orig_results(orig, results):
    return [
        orig.RawResult(
            r.unique_id, [float(x) for x in r.start_logits], [float(x) for x in r.end_logits]
        )
        for r in results
    ]


def orig_prediction_files(
    orig, examples, features, results, directory, version_2_with_negative, threshold=0.0
):
    directory.mkdir()
    files = [
        str(directory / name)
        for name in ("predictions.json", "nbest_predictions.json", "null_odds.json")
    ]
    with orig_version(orig, version_2_with_negative, threshold):
        orig.write_predictions(examples, features, results, 20, 30, True, *files)
    return [
        json.loads(pathlib.Path(f).read_text()) if pathlib.Path(f).exists() else None for f in files
    ]


def our_prediction_files(
    examples, features, results, directory, version_2_with_negative, threshold=0.0
):
    directory.mkdir()
    files = [
        str(directory / name)
        for name in ("predictions.json", "nbest_predictions.json", "null_odds.json")
    ]
    predictions = squad_postprocess.compute_predictions(
        examples,
        features,
        results,
        n_best_size=20,
        max_answer_length=30,
        do_lower_case=True,
        version_2_with_negative=version_2_with_negative,
        null_score_diff_threshold=threshold,
    )
    squad_postprocess.write_predictions(predictions, *files)
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        pathlib.Path(f).name for f in files[: 3 if version_2_with_negative else 2]
    )
    return [
        json.loads(pathlib.Path(f).read_text()) if pathlib.Path(f).exists() else None for f in files
    ]


def without(examples, features, results, excluded_ids):
    """Examples, features (re-indexed) and results without some questions."""
    kept = [i for i, e in enumerate(examples) if e.qas_id not in excluded_ids]
    new_index = {old: new for new, old in enumerate(kept)}
    kept_features = []
    for feature in features:
        if feature.example_index in new_index:
            feature = copy.copy(feature)
            feature.example_index = new_index[feature.example_index]
            kept_features.append(feature)
    unique_ids = {f.unique_id for f in kept_features}
    return (
        [examples[i] for i in kept],
        kept_features,
        [r for r in results if r.unique_id in unique_ids],
    )


def check_predictions(orig, tokenizer, orig_tokenizer, tmp_path, max_questions):
    path = write_variant(tmp_path, max_questions)
    their_examples = orig.read_squad_examples(path, False)
    theirs = orig_features(orig, their_examples, orig_tokenizer, 128, 64, False)
    examples = squad_reader.read_squad_examples(path, False, True)
    features = list(
        squad_features.convert_examples_to_features(examples, tokenizer, 128, 64, 64, False)
    )
    results = random_results(features, seed=1234, max_seq_length=128)
    their_results = as_orig_results(orig, results)

    # SQuAD v1.1 rules. Where no span is valid the original predicts "empty"
    # (a nonce answer) and we predict "".
    their_v1 = orig_prediction_files(
        orig, their_examples, theirs, their_results, tmp_path / "orig_v1", False
    )
    ours_v1 = our_prediction_files(examples, features, results, tmp_path / "ours_v1", False)
    no_span = {q for q, text in their_v1[0].items() if text == "empty"}
    assert {q for q, t in ours_v1[0].items() if t == ""} == no_span
    for qas_id in no_span:
        assert their_v1[1][qas_id] == [
            {"text": "empty", "probability": 1.0, "start_logit": 0.0, "end_logit": 0.0}
        ]
        assert ours_v1[1][qas_id] == [
            {"text": "", "probability": 1.0, "start_logit": 0.0, "end_logit": 0.0}
        ]
        their_v1[0][qas_id] = ours_v1[0][qas_id]
        their_v1[1][qas_id] = ours_v1[1][qas_id]
    assert ours_v1[0] == their_v1[0]
    assert ours_v1[1] == their_v1[1]
    assert ours_v1[2] is None and their_v1[2] is None

    # SQuAD v2.0 rules. The original crashes on questions without a valid
    # span: it runs without them, and ours predicts "" for them.
    num_null = []
    for threshold in (0.0, 2.5):
        name = "v2_%s" % threshold
        ours_v2 = our_prediction_files(
            examples, features, results, tmp_path / ("ours_" + name), True, threshold
        )
        their_v2 = orig_prediction_files(
            orig,
            *without(their_examples, theirs, their_results, no_span),
            tmp_path / ("orig_" + name),
            True,
            threshold,
        )
        for qas_id in no_span:
            assert ours_v2[0].pop(qas_id) == ""
            assert ours_v2[2].pop(qas_id) == squad_postprocess.NO_SPAN_NULL_ODDS
            (entry,) = ours_v2[1].pop(qas_id)
            assert (entry["text"], entry["probability"]) == ("", 1.0)
        assert ours_v2 == their_v2
        num_null.append(sum(1 for text in ours_v2[0].values() if not text))
    # Both kinds of answer are predicted, and the threshold matters.
    assert 0 < num_null[1] < num_null[0] < len(examples)
    return no_span


def test_predictions_equal_original(orig, tokenizer, orig_tokenizer, tmp_path):
    check_predictions(orig, tokenizer, orig_tokenizer, tmp_path, NUM_FAST_QUESTIONS)


@pytest.mark.slow
def test_predictions_equal_original_full_sample(orig, tokenizer, orig_tokenizer, tmp_path):
    no_span = check_predictions(orig, tokenizer, orig_tokenizer, tmp_path, None)
    # Random logits over 128 positions hit the original's crash at least once.
    assert no_span


def test_predictions_accept_numpy_lists_and_dicts(tokenizer, tmp_path):
    path = write_variant(tmp_path, 8)
    examples = squad_reader.read_squad_examples(path, False, True)
    features = list(
        squad_features.convert_examples_to_features(examples, tokenizer, 384, 128, 64, False)
    )
    results = random_results(features, seed=5, max_seq_length=384)
    as_lists = [
        squad_postprocess.RawResult(r.unique_id, r.start_logits.tolist(), r.end_logits.tolist())
        for r in results
    ]
    as_dict = {r.unique_id: r for r in results}
    outputs = [
        squad_postprocess.compute_predictions(examples, features, r, version_2_with_negative=True)
        for r in (results, as_lists, as_dict)
    ]
    assert outputs[0] == outputs[1] == outputs[2]
    with pytest.raises(
        ValueError,
        match="No result for feature 1000000003 "
        r"\(window 0 of question .*\)",
    ):
        squad_postprocess.compute_predictions(examples, features, results[:3])


def test_all_null_candidates_do_not_crash(orig, tokenizer, orig_tokenizer, tmp_path):
    """Logits that peak on the question only: no valid non-null span."""
    path = write_variant(tmp_path, 2)
    examples = squad_reader.read_squad_examples(path, False, True)
    features = list(
        squad_features.convert_examples_to_features(examples, tokenizer, 384, 128, 64, False)
    )
    results = []
    for feature in features:
        # Highest on [CLS] and the question, then on the padding.
        logits = np.full(384, 0.0, np.float32)
        logits[: len(feature.tokens)] = -20.0
        logits[: feature.tokens.index("[SEP]")] = 5.0
        assert 384 - len(feature.tokens) > 20
        results.append(squad_postprocess.RawResult(feature.unique_id, logits, logits))
    with orig_version(orig, True), pytest.raises(AttributeError):
        orig.write_predictions(
            orig.read_squad_examples(path, False),
            features,
            as_orig_results(orig, results),
            20,
            30,
            True,
            *[str(tmp_path / n) for n in ("p.json", "n.json", "o.json")],
        )

    predictions = squad_postprocess.compute_predictions(
        examples, features, results, version_2_with_negative=True
    )
    assert list(predictions.predictions.values()) == ["", ""]
    assert list(predictions.null_odds.values()) == [squad_postprocess.NO_SPAN_NULL_ODDS] * 2
    for entries in predictions.nbest.values():
        assert entries == [{"text": "", "probability": 1.0, "start_logit": 5.0, "end_logit": 5.0}]
    v1 = squad_postprocess.compute_predictions(examples, features, results)
    assert list(v1.predictions.values()) == ["", ""]
    assert v1.null_odds == {}


def test_question_without_features_predicts_empty(tokenizer, tmp_path):
    path = squad_json(tmp_path, [{"id": "q", "question": "Why?", "answers": []}], context=" \n ")
    (example,) = squad_reader.read_squad_examples(path, False, True)
    assert (
        list(squad_features.convert_examples_to_features([example], tokenizer, 384, 128, 64, False))
        == []
    )
    predictions = squad_postprocess.compute_predictions(
        [example], [], [], version_2_with_negative=True
    )
    assert predictions.predictions == {"q": ""}
    assert predictions.nbest["q"][0]["text"] == ""


def test_null_threshold(tokenizer, tmp_path):
    path = write_variant(tmp_path, 4)
    examples = squad_reader.read_squad_examples(path, False, True)
    features = list(
        squad_features.convert_examples_to_features(examples, tokenizer, 384, 128, 64, False)
    )
    results = random_results(features, seed=7, max_seq_length=384)
    base = squad_postprocess.compute_predictions(
        examples, features, results, version_2_with_negative=True
    )
    for threshold in (-1e9, 1e9):
        shifted = squad_postprocess.compute_predictions(
            examples,
            features,
            results,
            version_2_with_negative=True,
            null_score_diff_threshold=threshold,
        )
        assert shifted.null_odds == base.null_odds
        for qas_id, text in shifted.predictions.items():
            best_non_null = next(e["text"] for e in base.nbest[qas_id] if e["text"])
            assert text == ("" if threshold < 0 else best_non_null)


@pytest.mark.parametrize(
    "pred_text, orig_text, do_lower_case",
    [
        ("steve smith", "Steve Smith's", True),
        ("1895", "(1895-1943).", True),
        ("munchen", "München,", True),
        ("Steve", "Steve Smith's", False),
        ("xyz", "Steve", True),
        ("ss", "Straße", True),
    ],
)
def test_get_final_text_equals_original(orig, pred_text, orig_text, do_lower_case):
    expected = orig.get_final_text(pred_text, orig_text, do_lower_case)
    assert squad_postprocess.get_final_text(pred_text, orig_text, do_lower_case) == expected


def test_get_final_text_values():
    assert squad_postprocess.get_final_text("steve smith", "Steve Smith's", True) == "Steve Smith"
    assert squad_postprocess.get_final_text("munchen", "München,", True) == "München"
    assert squad_postprocess.get_final_text("xyz", "Steve", True) == "Steve"


def test_softmax():
    assert squad_postprocess.softmax([]) == []
    probabilities = squad_postprocess.softmax([1000.0, 1000.0 + np.log(3.0)])
    assert probabilities == pytest.approx([0.25, 0.75])
