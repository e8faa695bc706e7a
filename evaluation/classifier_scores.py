"""A classifier run's scores of one split: class probabilities, the metrics of a dev
split under its key prefix (`glue_metrics`), multi-label F1s, and the names of its
results files.

Shape legend: N examples, K classes, L labels.
"""

from __future__ import annotations

import numpy as np

from data_prep.classifier.classifier_splits import MultiLabel
from evaluation import glue_metrics


def log_probabilities(logits: np.ndarray) -> np.ndarray:
    """Log-softmax over the last axis. float [N, K]."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def probabilities(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis. float [N, K]."""
    return np.exp(log_probabilities(logits))


def split_prefix(split: str, eval_splits: tuple[str, ...]) -> str:
    """Metric key prefix: "eval_" for the first dev split (MNLI's matched), then
    e.g. "eval_mismatched_"."""
    if split == eval_splits[0]:
        return "eval_"
    return f"eval_{split.removeprefix('dev_')}_"


def score_split(
    processor, logits: np.ndarray, labels: np.ndarray, loss: float, prefix: str
) -> dict[str, float]:
    """The loss (from the task's eval sums) and the task's GLUE metrics of one dev split."""
    metrics = glue_metrics.compute_metrics(processor, logits, labels, prefix=prefix)
    metrics[prefix + "loss"] = loss
    return metrics


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Each label's probability of a multi-label classifier. float [N, L]."""
    return 0.5 * (1.0 + np.tanh(0.5 * logits))


def score_multi_label_split(
    logits: np.ndarray,
    labels: np.ndarray,
    label_names: list[str],
    loss: float,
    multi_label: MultiLabel,
    prefix: str,
) -> dict[str, float]:
    """Micro and macro F1, subset accuracy, the loss, then each label's precision,
    recall and F1 of one dev split (labels above the threshold predicted)."""
    metrics = glue_metrics.multi_label_metrics(
        sigmoid(logits) > multi_label.threshold, labels, label_names, prefix
    )
    overall = {k: v for k, v in metrics.items() if not is_label_metric(k, label_names)}
    return {**overall, prefix + "loss": loss, **metrics}


def is_label_metric(key: str, label_names: list[str]) -> bool:
    """Whether `key` is one label's precision, recall or F1 (not shown on the terminal)."""
    return any(
        key.endswith(f"_{measure}_{label}")
        for label in label_names
        for measure in ("precision", "recall", "f1")
    )


def results_file_name(split: str, test_splits: tuple[str, ...]) -> str:
    """test_results.tsv for the (first) test split, e.g. test_mismatched_results.tsv
    for MNLI's second."""
    return "test_results.tsv" if split == test_splits[0] else f"{split}_results.tsv"
