"""Tests of evaluation/glue_metrics.py: metric values and the files a run writes."""

import math
import os
import warnings

import numpy as np
import pytest
from scipy import stats

from data_prep.classifier import classifier_tasks
from evaluation import glue_metrics as gm


def _task(name):
    """The reader class of a task of classifier_tasks (the metrics take the reader)."""
    return classifier_tasks.task_class(name)


def _generic(is_regression=False):
    return classifier_tasks.get_processor(
        "generic", text_a_column="a", label_column="l", is_regression=is_regression
    )


# ----------------------------------------------------------------------------
# Metric values.
# ----------------------------------------------------------------------------


def test_accuracy():
    assert gm.accuracy([1, 0, 2, 2], [1, 1, 2, 0]) == 0.5


def test_f1_by_hand():
    # TP = 2 (positions 0, 4), FP = 1 (1), FN = 1 (2): F1 = 2*2 / (2*2 + 1 + 1).
    assert gm.f1_score([1, 1, 0, 0, 1], [1, 0, 1, 0, 1]) == pytest.approx(4 / 6)
    # Precision 1/1, recall 1/3: F1 = 2 * (1 * 1/3) / (1 + 1/3) = 0.5.
    assert gm.f1_score([1, 0, 0, 0], [1, 1, 1, 0]) == pytest.approx(0.5)


def test_f1_without_true_positive_is_zero():
    assert gm.f1_score([0, 0, 0], [0, 0, 0]) == 0.0
    assert gm.f1_score([1, 1, 0], [0, 0, 1]) == 0.0


def test_binary_mcc_by_hand():
    # TP=2 TN=1 FP=1 FN=1: (2*1 - 1*1) / sqrt(3 * 3 * 2 * 2) = 1/6.
    predictions = [1, 1, 1, 0, 0]
    labels = [1, 1, 0, 1, 0]
    assert gm.matthews_corrcoef(predictions, labels) == pytest.approx(1 / 6)


def test_binary_mcc_is_pearson_of_indicators():
    rng = np.random.default_rng(0)
    predictions = rng.integers(0, 2, 200)
    labels = rng.integers(0, 2, 200)
    expected = stats.pearsonr(predictions, labels)[0]
    assert gm.matthews_corrcoef(predictions, labels) == pytest.approx(expected)


def test_multiclass_mcc_by_hand():
    # correct c=4 of s=6; true counts t=(2,2,2); predicted p=(2,3,1):
    # (4*6 - (4+6+2)) / sqrt((36 - 14) * (36 - 12)) = 12 / sqrt(528).
    predictions = [0, 1, 1, 1, 2, 0]
    labels = [0, 0, 1, 1, 2, 2]
    assert gm.matthews_corrcoef(predictions, labels) == pytest.approx(12 / math.sqrt(528))


def test_mcc_matches_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(1)
    for num_classes in (2, 3):
        labels = rng.integers(0, num_classes, 300)
        predictions = np.where(rng.random(300) < 0.6, labels, rng.integers(0, num_classes, 300))
        assert gm.matthews_corrcoef(predictions, labels) == pytest.approx(
            metrics.matthews_corrcoef(labels, predictions)
        )
        if num_classes == 2:
            assert gm.f1_score(predictions, labels) == pytest.approx(
                metrics.f1_score(labels, predictions)
            )


@pytest.mark.parametrize(
    "predictions,labels",
    [
        ([1, 1, 1, 1], [1, 1, 1, 1]),  # everything in one class
        ([1, 0, 1, 0], [1, 1, 1, 1]),  # labels in one class
        ([0, 0, 0, 0], [1, 0, 1, 0]),  # predictions in one class
    ],
)
def test_degenerate_mcc_is_zero_without_warning(predictions, labels):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gm.matthews_corrcoef(predictions, labels) == 0.0


def test_perfect_and_inverse_mcc():
    assert gm.matthews_corrcoef([0, 1, 0, 1], [0, 1, 0, 1]) == pytest.approx(1.0)
    assert gm.matthews_corrcoef([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)


def test_correlations_match_scipy():
    rng = np.random.default_rng(2)
    labels = rng.uniform(0, 5, 100).round(1)  # rounding makes ties
    predictions = (labels + rng.normal(0, 1, 100)).round(0)
    assert gm.pearson_correlation(predictions, labels) == pytest.approx(
        stats.pearsonr(predictions, labels)[0]
    )
    assert gm.spearman_correlation(predictions, labels) == pytest.approx(
        stats.spearmanr(predictions, labels)[0]
    )


def test_spearman_by_hand_with_ties():
    # Ranks of [10, 20, 20, 30] are [1, 2.5, 2.5, 4]; of labels [1, 2, 3, 4].
    ranks = np.array([1, 2.5, 2.5, 4])
    expected = np.corrcoef(ranks, [1, 2, 3, 4])[0, 1]
    assert gm.spearman_correlation([10, 20, 20, 30], [1, 2, 3, 4]) == pytest.approx(expected)
    assert gm.spearman_correlation([1, 5, 7, 100], [0, 1, 2, 3]) == pytest.approx(1.0)


def test_constant_correlation_is_zero():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gm.pearson_correlation([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]) == 0.0
        assert gm.spearman_correlation([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]) == 0.0


def test_length_mismatch_and_empty_raise():
    with pytest.raises(ValueError, match="`labels` has 2"):
        gm.accuracy([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="empty"):
        gm.matthews_corrcoef([], [])


# ----------------------------------------------------------------------------
# compute_metrics.
# ----------------------------------------------------------------------------


def test_compute_metrics_mrpc_from_logits():
    logits = np.array([[0.1, 0.9], [2.0, -1.0], [0.0, 1.0], [0.3, 0.2]])
    # predictions [1, 0, 1, 0] against labels [1, 0, 0, 1]: TP=1 FP=1 FN=1.
    result = gm.compute_metrics(_task("MRPC"), logits, [1, 0, 0, 1])
    assert result == {"eval_accuracy": 0.5, "eval_f1": pytest.approx(0.5)}


def test_compute_metrics_per_task_keys():
    ids = [0, 1, 1, 0]
    assert set(gm.compute_metrics(_task("CoLA"), ids, ids)) == {"eval_accuracy", "eval_mcc"}
    assert set(gm.compute_metrics(_task("qqp"), ids, ids)) == {"eval_accuracy", "eval_f1"}
    assert set(gm.compute_metrics(_task("sst-2"), ids, ids)) == {"eval_accuracy"}
    assert set(gm.compute_metrics(_generic(), ids, ids)) == {"eval_accuracy"}


def test_compute_metrics_stsb_and_generic_regression():
    predictions = np.array([[0.5], [2.0], [4.5], [3.0]])
    labels = [1.0, 2.0, 5.0, 2.5]
    result = gm.compute_metrics(_task("sts-b"), predictions, labels)
    assert set(result) == {"eval_pearson", "eval_spearman"}
    assert result["eval_pearson"] == pytest.approx(stats.pearsonr(predictions[:, 0], labels)[0])
    assert result["eval_spearman"] == pytest.approx(1.0)
    generic = gm.compute_metrics(_generic(is_regression=True), predictions, labels)
    assert generic == result


def test_compute_metrics_mnli_mismatched_prefix():
    result = gm.compute_metrics(_task("mnli"), [0, 1, 2], [0, 1, 1], prefix="eval_mismatched_")
    assert result == {"eval_mismatched_accuracy": pytest.approx(2 / 3)}


# ----------------------------------------------------------------------------
# Output files.
# ----------------------------------------------------------------------------


def _no_temp_files(directory):
    return [name for name in os.listdir(directory) if ".tmp" in name] == []


def test_test_results_probabilities_and_scores(tmp_path):
    path = tmp_path / "test_results.tsv"
    gm.write_test_results(str(path), np.array([[0.25, 0.75], [0.5, 0.5]], dtype=np.float32))
    assert path.read_text() == "0.25\t0.75\n0.5\t0.5\n"
    gm.write_test_results(str(path), [3.5, 1.25])
    assert path.read_text() == "3.5\n1.25\n"
    assert _no_temp_files(tmp_path)


def test_glue_submission_files(tmp_path):
    path = gm.write_glue_submission(
        str(tmp_path),
        _task("mrpc"),
        ["0", "1", "2"],
        np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6]]),
        ["0", "1"],
    )
    assert os.path.basename(path) == "MRPC.tsv"
    assert open(path).read() == "index\tprediction\n0\t0\n1\t1\n2\t1\n"

    path = gm.write_glue_submission(
        str(tmp_path),
        _task("mnli"),
        [7, 8],
        [2, 0],
        ["contradiction", "entailment", "neutral"],
        split="test_mismatched",
    )
    assert os.path.basename(path) == "MNLI-mm.tsv"
    assert open(path).read() == "index\tprediction\n7\tneutral\n8\tcontradiction\n"

    path = gm.write_glue_submission(str(tmp_path), _task("STS-B"), [0, 1], [3.25, 0.5])
    assert open(path).read() == "index\tprediction\n0\t3.250000\n1\t0.500000\n"
    assert _no_temp_files(tmp_path)


def test_submission_file_names():
    expected = {
        ("cola", "test"): "CoLA.tsv",
        ("sst-2", "test"): "SST-2.tsv",
        ("MRPC", "test"): "MRPC.tsv",
        ("sts-b", "test"): "STS-B.tsv",
        ("qqp", "test"): "QQP.tsv",
        ("mnli", "test_matched"): "MNLI-m.tsv",
        ("mnli", "test_mismatched"): "MNLI-mm.tsv",
        ("qnli", "test"): "QNLI.tsv",
        ("rte", "test"): "RTE.tsv",
        ("wnli", "test"): "WNLI.tsv",
        ("ax", "test"): "AX.tsv",
    }
    for (task, split), name in expected.items():
        assert gm.submission_file_name(_task(task), split) == name
    with pytest.raises(ValueError, match="xnli"):
        gm.submission_file_name(_task("xnli"))


def test_submission_length_mismatch_raises(tmp_path):
    with pytest.raises(ValueError, match="`indices` has 1"):
        gm.write_glue_submission(
            str(tmp_path), _task("rte"), ["0"], [0, 1], ["entailment", "not_entailment"]
        )


def test_per_class_metrics_by_hand():
    # labels    0 0 0 1 1 2;  predictions 0 0 1 1 0 0 (class 2 never predicted)
    metrics = gm.per_class_metrics([0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 2], ["a", "b", "c"])
    assert metrics["eval_precision_a"] == pytest.approx(2 / 4)
    assert metrics["eval_recall_a"] == pytest.approx(2 / 3)
    assert metrics["eval_f1_a"] == pytest.approx(2 * 2 / (4 + 3))
    assert metrics["eval_precision_b"] == pytest.approx(1 / 2)
    assert metrics["eval_recall_b"] == pytest.approx(1 / 2)
    assert metrics["eval_precision_c"] == metrics["eval_recall_c"] == metrics["eval_f1_c"] == 0.0
    assert metrics["eval_macro_f1"] == pytest.approx((4 / 7 + 1 / 2 + 0.0) / 3)
    assert list(metrics)[0] == "eval_macro_f1"
    # From logits (argmax) and with another prefix; MRPC's F1 is class "1"'s.
    logits = np.array([[2.0, 1.0], [0.0, 3.0], [1.0, 0.0], [0.0, 1.0]])
    by_logits = gm.per_class_metrics(logits, [0, 1, 1, 1], ["0", "1"], "eval_mismatched_")
    assert by_logits["eval_mismatched_f1_1"] == gm.f1_score([0, 1, 0, 1], [0, 1, 1, 1])


def test_multi_label_metrics_by_hand():
    labels = np.array([[1, 0, 1], [0, 0, 0], [1, 1, 0], [0, 0, 1]])
    predicted = np.array([[1, 0, 0], [0, 0, 0], [1, 1, 0], [1, 0, 1]])
    metrics = gm.multi_label_metrics(predicted, labels, ["LOC", "ORG", "PER"])
    # Pooled: TP 4 (LOC twice, ORG, PER), predicted 5, true 5.
    assert metrics["eval_micro_f1"] == pytest.approx(2 * 4 / (5 + 5))
    # LOC: TP 2, predicted 3, true 2; ORG: 1, 1, 1; PER: 1, 1, 2.
    assert metrics["eval_precision_LOC"] == pytest.approx(2 / 3)
    assert metrics["eval_recall_LOC"] == 1.0
    assert metrics["eval_f1_ORG"] == 1.0
    assert metrics["eval_recall_PER"] == pytest.approx(1 / 2)
    f1 = [2 * 2 / (3 + 2), 1.0, 2 * 1 / (1 + 2)]
    assert metrics["eval_macro_f1"] == pytest.approx(np.mean(f1))
    assert metrics["eval_subset_accuracy"] == pytest.approx(2 / 4)  # rows 1 and 2 exact
    with pytest.raises(ValueError, match=r"\[N, L\]"):
        gm.multi_label_metrics(predicted[:, :2], labels, ["LOC", "ORG"])


def test_multi_label_results_file(tmp_path):
    path = tmp_path / "test_results.tsv"
    probabilities = np.array([[0.9, 0.2, 0.6], [0.1, 0.5, 0.4]])
    gm.write_multi_label_results(str(path), probabilities, ["LOC", "ORG", "PER"], 0.5, "|")
    rows = [line.split("\t") for line in path.read_text().splitlines()]
    assert rows == [["0.9", "0.2", "0.6", "LOC|PER"], ["0.1", "0.5", "0.4", ""]]
