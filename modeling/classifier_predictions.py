"""A classifier's outputs over a split, from `training.Trainer.predict`: the logits
and labels of every example (or, for a split of windows, of every text, its windows'
logits pooled), and in the same pass the evaluation sums of the training loss.

Shape legend: N examples, T texts, K classes (1 for a regression, C choices).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from data_prep.classifier import classifier_windows
from data_prep.classifier.classifier_splits import WindowFeatures
from modeling import training, training_eval


def _logits_and_labels(features: dict, outputs: dict) -> dict:
    return {"logits": outputs["logits"], "label_ids": features["label_ids"]}


def predict_logits(
    trainer: training.Trainer,
    dataset: tf.data.Dataset,
    description: str = "predict",
    output_fn=_logits_and_labels,
) -> tuple[np.ndarray, np.ndarray]:
    """(logits float [N, K] ([N, 1] regression, [N, C] choices), labels [N]).

    `output_fn` may be the run's `evaluation_outputs` (its sums are dropped): then
    evaluation and prediction share one compiled step, traced once."""
    outputs = trainer.predict(dataset, output_fn, description)
    training_eval.pop_eval_sums(outputs)
    return outputs["logits"].astype(np.float64), outputs["label_ids"]


def evaluation_outputs(objective: training.Objective):
    """A Trainer.predict output_fn: the logits and labels of each example, and
    `objective.eval_sums` of each batch (`training_eval.with_eval_sums`), so that one
    pass over a dev split gives both the metrics' inputs and the in-graph loss."""
    return training_eval.with_eval_sums(_logits_and_labels, objective)


def _summed(outputs: dict) -> dict[str, float]:
    """The eval sums of a prediction's outputs, each added up over its batches."""
    return {
        name: float(np.sum(values, dtype=np.float64))
        for name, values in training_eval.pop_eval_sums(outputs).items()
    }


def predict_for_evaluation(
    trainer: training.Trainer, dataset: tf.data.Dataset, output_fn
) -> tuple[np.ndarray, np.ndarray, dict]:
    """(logits float [N, K], labels [N], `trainer.objective.finalize_eval` of the summed
    eval sums: eval_loss, the loss that training minimises, on these examples)."""
    outputs = trainer.predict(dataset, output_fn, "evaluate")
    sums = _summed(outputs)
    return (
        outputs["logits"].astype(np.float64),
        outputs["label_ids"],
        trainer.objective.finalize_eval(sums),
    )


def _with_example_index(output_fn):
    """`output_fn` with each window's `example_index` (a module-level cache keeps one
    compiled prediction step per function)."""
    if output_fn not in _WITH_INDEX:

        def with_index(features: dict, outputs: dict) -> dict:
            return dict(output_fn(features, outputs), example_index=features["example_index"])

        _WITH_INDEX[output_fn] = with_index
    return _WITH_INDEX[output_fn]


_WITH_INDEX = {}


def predict_text_logits(
    trainer: training.Trainer,
    features: WindowFeatures,
    batch_size: int,
    pad: bool,
    output_fn=_logits_and_labels,
    description: str = "predict",
) -> tuple[np.ndarray, np.ndarray, dict]:
    """(logits float [T, K], labels [T], the outputs' eval sums added up) of a split's T texts,
    each text's logits pooled over its windows (`features.pooling`)."""
    outputs = trainer.predict(
        features.dataset(batch_size, pad), _with_example_index(output_fn), description
    )
    index, texts = outputs["example_index"], features.num_texts
    logits = classifier_windows.pool_windows(outputs["logits"], index, texts, features.pooling)
    labels = classifier_windows.first_of_each_text(outputs["label_ids"], index, texts)
    return logits, labels, _summed(outputs)
