"""A tagger's predictions over an NER split: one tag per word of every sentence, from
the windows' predicted label ids (`training.Trainer.predict`), and for a dev split in
the same pass the evaluation sums of the training loss."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from data_prep import input_pipeline
from data_prep.ner import ner_features, ner_records
from data_prep.ner.ner_splits import Labels, Split
from modeling import training, training_eval


def _tags_and_ids(features: dict, outputs: dict) -> dict:
    return {
        "label_ids": tf.argmax(outputs["logits"], axis=-1, output_type=tf.int32),
        "unique_ids": features["unique_ids"],
    }


def evaluation_outputs(objective: training.Objective):
    """A Trainer.predict output_fn for `evaluate_tags`: the label ids of each window,
    and `objective.eval_sums` of each batch (`training_eval.with_eval_sums`)."""
    return training_eval.with_eval_sums(_tags_and_ids, objective)


def _tags(outputs: dict, split: Split, labels: Labels) -> list[list[str]]:
    """One tag per word of every sentence, from the windows' predicted label ids."""
    order = np.argsort(outputs["unique_ids"], kind="stable")
    if not np.array_equal(outputs["unique_ids"][order], np.arange(len(split.features))):
        raise RuntimeError(f"{split.path}: predictions do not cover every window once")
    # Batches cut to their longest window: back to the features' length.
    label_ids = input_pipeline.pad_to_length(
        outputs["label_ids"][order], len(split.features[0].input_ids)
    )
    return ner_features.predictions_to_tags(
        label_ids, split.features, split.sentences, labels.labels
    )


def predict_tags(
    trainer: training.Trainer,
    split: Split,
    labels: Labels,
    batch_size: int,
    pad_to_max_seq_length: bool,
    output_fn=_tags_and_ids,
) -> list[list[str]]:
    """One predicted tag per word of every sentence of the split, in the scheme learnt.

    `output_fn` may be the run's `evaluation_outputs` (its sums are dropped): then
    evaluation and prediction share one compiled step, traced once."""
    outputs = trainer.predict(
        ner_records.inference_dataset(split.features, batch_size, pad_to_max_seq_length),
        output_fn,
    )
    training_eval.pop_eval_sums(outputs)
    return _tags(outputs, split, labels)


def evaluate_tags(
    trainer: training.Trainer,
    split: Split,
    labels: Labels,
    batch_size: int,
    pad_to_max_seq_length: bool,
    output_fn,
) -> tuple[list[list[str]], dict]:
    """(`predict_tags`'s tags, `trainer.objective.finalize_eval` of the summed eval
    sums: eval_loss, token_accuracy) in one pass over the split; `output_fn` is
    `evaluation_outputs(trainer.objective)`, made once. The sums are added as
    `Trainer.evaluate` adds them: the same eval_loss as a pass of its own."""
    outputs = trainer.predict(
        ner_records.inference_dataset(split.features, batch_size, pad_to_max_seq_length),
        output_fn,
        "evaluate",
    )
    sums = training_eval.add_up(training_eval.pop_eval_sums(outputs))
    return _tags(outputs, split, labels), trainer.objective.finalize_eval(sums)
