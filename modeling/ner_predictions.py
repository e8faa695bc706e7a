"""A tagger's predictions over an NER split: one tag per word of every sentence, from
the windows' predicted label ids (`training.Trainer.predict`)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from data_prep import input_pipeline
from data_prep.ner import ner_features, ner_records
from data_prep.ner.ner_splits import Labels, Split
from modeling import training


def _tags_and_ids(features: dict, outputs: dict) -> dict:
    return {
        "label_ids": tf.argmax(outputs["logits"], axis=-1, output_type=tf.int32),
        "unique_ids": features["unique_ids"],
    }


def predict_tags(
    trainer: training.Trainer,
    split: Split,
    labels: Labels,
    batch_size: int,
    pad_to_max_seq_length: bool,
) -> list[list[str]]:
    """One predicted tag per word of every sentence of the split, in the scheme learnt."""
    outputs = trainer.predict(
        ner_records.inference_dataset(split.features, batch_size, pad_to_max_seq_length),
        _tags_and_ids,
    )
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
