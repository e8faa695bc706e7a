"""Sentence (pair) classification and regression signatures: raw text
in, the probabilities run_classifier.py's --do_predict writes (`test_results.tsv`) out,
tokenized and packed in-graph as `data_prep.classifier_data.convert_example` does.

Loading the export needs `import tensorflow_text` first.

Shape legend: B batch, S sequence.
"""

from __future__ import annotations

import tensorflow as tf

from serving.inputs import pack_text, text_spec


def classifier_signatures(model, tokenizer, seq_length: int, labels) -> dict:
    """Signatures of a `BertClassifier` export.

    serving_default(text_a, text_b) and serving_text_a(text_a), each tf.string [B] ->
      classification: `probabilities` float32 [B, num_labels], `labels` tf.string [B]
        (the most probable label);
      regression (labels None and one output): `predictions` float32 [B].
    """
    is_regression = labels is None
    if is_regression and model.num_labels != 1:
        raise ValueError(f"labels are required for a classifier with {model.num_labels} "
                         f"outputs (labels=None means regression, one output)")
    if not is_regression and len(labels) != model.num_labels:
        raise ValueError(f"{len(labels)} labels {list(labels)} for a classifier with "
                         f"{model.num_labels} outputs")
    label_names = None if is_regression else tf.constant([str(l) for l in labels])

    def predict(text_a, text_b):
        logits = model(pack_text(tokenizer, seq_length, text_a, text_b),
                       training=False)["logits"]
        if is_regression:
            return {"predictions": logits[:, 0]}
        probabilities = tf.nn.softmax(logits, axis=-1)
        return {"probabilities": probabilities,
                "labels": tf.gather(label_names, tf.argmax(probabilities, axis=-1))}

    pair = tf.function(predict, input_signature=[text_spec("text_a"), text_spec("text_b")])
    single = tf.function(lambda text_a: predict(text_a, None),
                         input_signature=[text_spec("text_a")])
    return {"serving_default": pair, "serving_text_a": single}

