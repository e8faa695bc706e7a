"""GLUE metrics and the files a classifier run writes.

Metrics (NumPy):
  accuracy                              every classification task
  F1 of the positive class "1"          MRPC, QQP (with accuracy)
  Matthews correlation                  CoLA (with accuracy); its multi-class form
                                        (Gorodkin's R_K) is GLUE's R3 for AX
  Pearson and Spearman correlations     STS-B and any regression task
  macro F1; each class's precision,      every classification task
  recall and F1                         (`per_class_metrics`)
  micro and macro F1, subset accuracy   multi-label tasks (`multi_label_metrics`)
MNLI is scored once per evaluation split (matched, mismatched): the caller runs
`compute_metrics` on each split with its own key prefix. Which metrics a task has,
which of them make its score (`glue_score`) and its GLUE submission file name are
declared by its reader in data_prep.classifier.classifier_tasks (`DataProcessor.metrics`,
`score_metrics`, `glue_submission`, `is_regression`).

Output files, written atomically (`common.file_io`, which also writes
eval_results.txt: `file_io.write_results`):
  test_results.tsv   one row per example: tab-separated class probabilities (or the
                     predicted score for a regression task), as the original release
                     (`write_test_results`); multi-label: each label's probability,
                     then the predicted labels (`write_multi_label_results`)
  <Task>.tsv         the GLUE server's submission file: header "index<TAB>prediction"
                     and label names (CoLA.tsv, MNLI-m.tsv, AX.tsv, ...)

Shape legend: N examples, K classes.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from common.errors import UserError
from common import file_io
from data_prep.classifier import classifier_tasks

# Label "1" is the positive class of MRPC and QQP; it has id 1 in their label
# list ["0", "1"].
_POSITIVE_LABEL_ID = 1


def normalize_task_name(task_name: str) -> str:
    """Returns the lookup form of a task name: "SST-2", "sst_2", "sst2" -> "sst2"."""
    return task_name.lower().replace("-", "").replace("_", "")


def _as_pair(predictions, labels, dtype) -> tuple[np.ndarray, np.ndarray]:
    """Checks and converts a predictions/labels pair to 1-D arrays."""
    predictions = np.asarray(predictions, dtype=dtype)
    labels = np.asarray(labels, dtype=dtype)
    if predictions.ndim != 1 or labels.ndim != 1:
        raise UserError(
            f"`predictions` and `labels` must be 1-D, got shapes "
            f"{predictions.shape} and {labels.shape}"
        )
    if predictions.shape != labels.shape:
        raise UserError(
            f"`predictions` has {predictions.shape[0]} values but `labels` has {labels.shape[0]}"
        )
    if predictions.size == 0:
        raise UserError("`predictions` and `labels` are empty")
    return predictions, labels


def accuracy(predictions, labels) -> float:
    """Fraction of predictions equal to their label.

    Args:
      predictions: int [N], predicted class ids.
      labels: int [N], true class ids.
    """
    predictions, labels = _as_pair(predictions, labels, np.int64)
    return float(np.mean(predictions == labels))


def f1_score(predictions, labels, positive_id: int = _POSITIVE_LABEL_ID) -> float:
    """F1 of one class: 2 TP / (2 TP + FP + FN); 0.0 when there is no true positive.

    Args:
      predictions: int [N], predicted class ids.
      labels: int [N], true class ids.
      positive_id: the class scored as positive.
    """
    predictions, labels = _as_pair(predictions, labels, np.int64)
    predicted = predictions == positive_id
    actual = labels == positive_id
    true_positives = np.sum(predicted & actual)
    if true_positives == 0:
        return 0.0
    return float(2 * true_positives / (np.sum(predicted) + np.sum(actual)))


def matthews_corrcoef(predictions, labels) -> float:
    """Matthews correlation coefficient, in its multi-class form.

    With confusion matrix C, t_k = true count of class k, p_k = predicted count,
    c = correct, s = N:
      MCC = (c s - sum_k p_k t_k) / sqrt((s^2 - sum_k p_k^2) (s^2 - sum_k t_k^2)).
    For two classes this is (TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)).
    Returns 0.0 where the denominator is zero (all labels, or all predictions, in
    one class), as scikit-learn does, instead of NaN.

    Args:
      predictions: int [N], predicted class ids.
      labels: int [N], true class ids.
    """
    predictions, labels = _as_pair(predictions, labels, np.int64)
    classes, inverse = np.unique(np.concatenate([predictions, labels]), return_inverse=True)
    num = predictions.size
    predicted_counts = np.bincount(inverse[:num], minlength=classes.size)
    true_counts = np.bincount(inverse[num:], minlength=classes.size)
    correct = np.sum(predictions == labels)
    # Floats: the products overflow int64 for a few million examples.
    s = float(num)
    p = predicted_counts.astype(np.float64)
    t = true_counts.astype(np.float64)
    numerator = correct * s - np.dot(p, t)
    denominator = np.sqrt((s * s - np.dot(p, p)) * (s * s - np.dot(t, t)))
    if denominator == 0.0:
        return 0.0
    return float(numerator / denominator)


def pearson_correlation(predictions, labels) -> float:
    """Pearson correlation; 0.0 (not NaN) when either side is constant.

    Args:
      predictions: float [N], predicted scores.
      labels: float [N], true scores.
    """
    predictions, labels = _as_pair(predictions, labels, np.float64)
    x = predictions - predictions.mean()
    y = labels - labels.mean()
    denominator = np.sqrt(np.dot(x, x) * np.dot(y, y))
    if denominator == 0.0:
        return 0.0
    return float(np.clip(np.dot(x, y) / denominator, -1.0, 1.0))


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..N, ties sharing the mean of their ranks. float64 [N]."""
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    # Start index of each run of equal values.
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = np.r_[starts[1:], values.size]
    run_ranks = (starts + ends + 1) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.repeat(run_ranks, ends - starts)
    return ranks


def spearman_correlation(predictions, labels) -> float:
    """Spearman rank correlation (Pearson of average ranks); 0.0 when constant.

    Args:
      predictions: float [N], predicted scores.
      labels: float [N], true scores.
    """
    predictions, labels = _as_pair(predictions, labels, np.float64)
    return pearson_correlation(_average_ranks(predictions), _average_ranks(labels))


_METRIC_FUNCTIONS = {
    "accuracy": accuracy,
    "f1": f1_score,
    "mcc": matthews_corrcoef,
    "pearson": pearson_correlation,
    "spearman": spearman_correlation,
}


def scored_as(task):
    """The reader whose declarations score `task` (a reader, or its class): `task`
    itself, or, for a reader that declares no metrics of its own but is registered
    under a task's name (e.g. an original-style reader in `PROCESSORS["cola"]`), that
    task's class."""
    if task.metrics is None:
        known = classifier_tasks.task_class(task.name)
        if known is not None:
            return known
    return task


def is_regression_task(task) -> bool:
    """Whether `task` (a reader of data_prep.classifier.classifier_tasks, or its class)
    is a regression (STS-B, a generic task with is_regression)."""
    return bool(task.is_regression or scored_as(task).is_regression)


def metric_names(task) -> tuple[bool, tuple]:
    """(whether `task` is a regression, its metric names): as the reader declares them
    (`metrics`); a reader that declares none (a user's "generic" one) gets accuracy,
    or pearson and spearman for a regression."""
    regression = is_regression_task(task)
    declared = scored_as(task).metrics
    return regression, declared or (("pearson", "spearman") if regression else ("accuracy",))


def glue_score_keys(task) -> tuple[str, ...]:
    """The metrics whose mean is the task's GLUE score (`glue_score`), as keyed in
    eval_results.txt: "eval_<name>" of its `score_metrics` (default: all its metrics)."""
    scored = scored_as(task).score_metrics
    return tuple("eval_" + name for name in scored or metric_names(task)[1])


def glue_score(task, metrics: dict) -> float:
    """The number the best model is chosen by: the task's GLUE score, the mean of its
    `score_metrics` (default: all its metrics) on the first evaluation split (keys
    "eval_<name>"): MRPC, QQP: mean of accuracy and F1; STS-B: mean of Pearson and
    Spearman; CoLA: MCC; MNLI: matched accuracy; others: accuracy."""
    return float(np.mean([metrics[key] for key in glue_score_keys(task)]))


def score_name(keys: tuple[str, ...]) -> str:
    """What a score averaged over `keys` is, in words: "eval_mcc", "mean of eval_accuracy
    and eval_f1"."""
    if len(keys) == 1:
        return keys[0]
    return "mean of " + ", ".join(keys[:-1]) + " and " + keys[-1]


def compute_metrics(task, predictions, labels, prefix: str = "eval_") -> dict[str, float]:
    """Returns the task's metrics, keyed `prefix + name`.

    Names: accuracy, f1 (MRPC, QQP), mcc (CoLA, AX), pearson and spearman (STS-B,
    regression). A task without its own entry (a user's "generic" task) gets
    accuracy, or pearson and spearman when `is_regression`. MNLI: call once per
    evaluation split, e.g. prefix "eval_" for dev_matched and
    "eval_mismatched_" for dev_mismatched.

    Args:
      task: the task's reader (a `DataProcessor`), or its class.
      predictions: class ids int [N], or class scores float [N, K] (argmax is
        taken), or predicted scores float [N] / [N, 1] for regression.
      labels: int [N] class ids, or float [N] scores for regression.
      prefix: prepended to every key.
    """
    regression, names = metric_names(task)
    predictions = np.asarray(predictions)
    if regression:
        if predictions.ndim == 2 and predictions.shape[1] == 1:
            predictions = predictions[:, 0]
    elif predictions.ndim == 2:
        predictions = np.argmax(predictions, axis=-1)
    return {prefix + metric: _METRIC_FUNCTIONS[metric](predictions, labels) for metric in names}


def _precision_recall_f1(true_positives, predicted, actual):
    """Per class, float [K] each; 0.0 where a denominator is zero (as scikit-learn's
    zero_division=0)."""
    tp = np.asarray(true_positives, np.float64)
    predicted = np.asarray(predicted, np.float64)
    actual = np.asarray(actual, np.float64)
    precision = np.divide(tp, predicted, out=np.zeros_like(tp), where=predicted > 0)
    recall = np.divide(tp, actual, out=np.zeros_like(tp), where=actual > 0)
    both = predicted + actual
    f1 = np.divide(2 * tp, both, out=np.zeros_like(tp), where=both > 0)
    return precision, recall, f1


def _class_keys(prefix, label_names, precision, recall, f1) -> dict[str, float]:
    metrics = {}
    for name, p, r, f in zip(label_names, precision, recall, f1):
        metrics[f"{prefix}precision_{name}"] = float(p)
        metrics[f"{prefix}recall_{name}"] = float(r)
        metrics[f"{prefix}f1_{name}"] = float(f)
    return metrics


def per_class_metrics(
    predictions, labels, label_names: Sequence[str], prefix: str = "eval_"
) -> dict[str, float]:
    """Macro F1 and each class's precision, recall and F1 of a single-label task.

    Keys: `<prefix>macro_f1` (the unweighted mean of the classes' F1, every class of
    `label_names` counted, so that a class never predicted pulls it down), then
    `<prefix>precision_<label>`, `<prefix>recall_<label>`, `<prefix>f1_<label>` for
    each label in label order.

    Args:
      predictions: int [N] class ids, or float [N, K] class scores (argmax is taken).
      labels: int [N] class ids.
      label_names: the K labels, in id order.
    """
    predictions = np.asarray(predictions)
    if predictions.ndim == 2:
        predictions = np.argmax(predictions, axis=-1)
    predictions, labels = _as_pair(predictions, labels, np.int64)
    ids = np.arange(len(label_names))
    predicted = predictions[:, None] == ids  # [N, K]
    actual = labels[:, None] == ids
    precision, recall, f1 = _precision_recall_f1(
        (predicted & actual).sum(0), predicted.sum(0), actual.sum(0)
    )
    return {
        prefix + "macro_f1": float(np.mean(f1)),
        **_class_keys(prefix, label_names, precision, recall, f1),
    }


def multi_label_metrics(
    predicted, labels, label_names: Sequence[str], prefix: str = "eval_"
) -> dict[str, float]:
    """Metrics of a multi-label task (zero or more labels per example).

    Keys: `<prefix>micro_f1` (F1 of every (example, label) decision pooled),
    `<prefix>macro_f1` (the mean of the labels' F1), `<prefix>subset_accuracy` (the
    fraction of examples whose predicted set is exactly their set), then each label's
    `<prefix>precision_<label>`, `<prefix>recall_<label>`, `<prefix>f1_<label>`.

    Args:
      predicted: bool or 0/1 [N, L], the labels predicted for each example.
      labels: 0/1 [N, L], the true labels.
      label_names: the L labels, in id order.
    """
    predicted = np.asarray(predicted).astype(bool)
    actual = np.asarray(labels).astype(bool)
    if predicted.shape != actual.shape or predicted.ndim != 2:
        raise UserError(
            f"`predicted` and `labels` must be [N, L] alike, got {predicted.shape} and "
            f"{actual.shape}"
        )
    if predicted.shape[0] == 0:
        raise UserError("`predicted` and `labels` are empty")
    tp = (predicted & actual).sum(0)
    precision, recall, f1 = _precision_recall_f1(tp, predicted.sum(0), actual.sum(0))
    _, _, micro = _precision_recall_f1([tp.sum()], [predicted.sum()], [actual.sum()])
    return {
        prefix + "micro_f1": float(micro[0]),
        prefix + "macro_f1": float(np.mean(f1)),
        prefix + "subset_accuracy": float(np.mean(np.all(predicted == actual, axis=1))),
        **_class_keys(prefix, label_names, precision, recall, f1),
    }


def write_multi_label_results(
    path: str, probabilities, label_names: Sequence[str], threshold: float, separator: str
) -> None:
    """Writes a multi-label task's test_results.tsv: one line per example, each
    label's probability (tab-separated, in label order), then the predicted labels
    (those with a probability above `threshold`, joined by `separator`; empty for
    none).

    Args:
      probabilities: float [N, L], the labels' sigmoid probabilities.
    """
    values = np.asarray(probabilities)
    if values.ndim != 2 or values.shape[1] != len(label_names):
        raise UserError(f"`probabilities` must be [N, {len(label_names)}], got {values.shape}")
    lines = []
    for row in values:
        chosen = separator.join(name for name, p in zip(label_names, row) if p > threshold)
        lines.append("\t".join([*(str(value) for value in row), chosen]) + "\n")
    file_io.write_text(path, "".join(lines))


def write_test_results(path: str, probabilities) -> None:
    """Writes test_results.tsv: one line per example.

    Args:
      path: output file.
      probabilities: float [N, K] class probabilities (one tab-separated column per
        class, in label-list order), or float [N] / [N, 1] predicted scores of a
        regression task.
    """
    values = np.asarray(probabilities)
    if values.ndim == 1:
        values = values[:, None]
    if values.ndim != 2:
        raise UserError(f"`probabilities` must be [N, K] or [N], got shape {values.shape}")
    lines = ["\t".join(str(value) for value in row) + "\n" for row in values]
    file_io.write_text(path, "".join(lines))


def submission_file_name(task, split: str = "test") -> str:
    """GLUE server file name for a task's prediction split, e.g. "MNLI-mm.tsv".

    Raises:
      ValueError: the task/split has no GLUE submission file (XNLI, SWAG, ...).
    """
    name = scored_as(task).glue_submission.get(split)
    if name is None:
        known = sorted(
            f"{normalize_task_name(known.name)}/{known_split}"
            for known in classifier_tasks.TASKS
            for known_split in known.glue_submission
        )
        raise UserError(
            f"No GLUE submission file for task {task.name!r}, split {split!r}; "
            f"known: {', '.join(known)}"
        )
    return name + ".tsv"


def write_glue_submission(
    output_dir: str,
    task,
    indices: Sequence,
    predictions,
    label_list: Sequence[str] | None = None,
    split: str = "test",
) -> str:
    """Writes `<Task>.tsv` for the GLUE server and returns its path.

    Args:
      output_dir: directory of the file.
      task: a GLUE task's reader (CoLA, MNLI, AX, ...), or its class.
      indices: [N] the test file's `index` (or QQP `id`) of each example.
      predictions: int [N] class ids or float [N, K] class scores (argmax is taken),
        written as label names from `label_list`; for STS-B float [N] scores.
      label_list: the task's labels, in id order (classification only).
      split: the prediction split ("test"; MNLI "test_matched"/"test_mismatched").
    """
    path = os.path.join(os.fspath(output_dir), submission_file_name(task, split))
    predictions = np.asarray(predictions)
    if len(indices) != predictions.shape[0]:
        raise UserError(
            f"`indices` has {len(indices)} entries but `predictions` has {predictions.shape[0]}"
        )
    if is_regression_task(task):
        values = [f"{float(score):.6f}" for score in predictions.reshape(-1)]
    else:
        if label_list is None:
            raise UserError(f"`label_list` is required for task {task.name!r}")
        if predictions.ndim == 2:
            predictions = np.argmax(predictions, axis=-1)
        values = [label_list[int(class_id)] for class_id in predictions]
    lines = ["index\tprediction\n"]
    lines += [f"{index}\t{value}\n" for index, value in zip(indices, values)]
    file_io.write_text(path, "".join(lines))
    return path
