"""Task models: an encoder plus one head.

Each model takes the encoder's input dict (int32 [B, S] `input_word_ids`, `input_mask`,
`input_type_ids`; multiple choice takes [B, C, S]) and returns a dict of float32 logits.
The encoder may be a `BertEncoder` or any layer with the same dict contract (a TF Hub
encoder loaded with `modeling.hub`).

Each class names its kind in `MODEL_KIND`; checkpoints use it to tell which head a
checkpoint holds for it (modeling/checkpoints.py). The task models take
`head_initializer`: how their new head's kernel is drawn, "truncated_normal" (the
original release's) or "normal" (Hugging Face's); see `layers.INITIALIZERS`.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from modeling import heads
from modeling.config import BertConfig
from modeling.encoder import INPUT_KEYS


def _encoder_inputs(inputs: dict) -> dict:
    return {k: inputs[k] for k in INPUT_KEYS}


class BertPretrainer(keras.Model):
    """Encoder with the masked-LM and next-sentence heads (`cls/predictions`,
    `cls/seq_relationship`).

    Extra input: int32 [B, P] `masked_lm_positions`. Returns `mlm_logits` [B, P, V]
    and `next_sentence_logits` [B, 2].
    """

    MODEL_KIND = "pretrainer"

    def __init__(self, encoder, config: BertConfig, **kwargs):
        super().__init__(dtype=encoder.dtype_policy, **kwargs)
        self.encoder = encoder
        self.config = config
        self.masked_lm = heads.MaskedLMHead(
            config, getattr(encoder, "kernels", None), name="predictions", dtype=self.dtype_policy
        )
        self.next_sentence = heads.PooledClassifierHead(
            config, 2, dropout_rate=0.0, name="seq_relationship", dtype=self.dtype_policy
        )
        self.masked_lm.build()
        self.next_sentence.build()
        self.built = True

    def call(self, inputs, training=False):
        outputs = self.encoder(_encoder_inputs(inputs), training=training)
        mlm_logits = self.masked_lm(
            outputs["sequence_output"], inputs["masked_lm_positions"], self.encoder.word_embeddings
        )
        nsp_logits = self.next_sentence(outputs["pooled_output"], training=training)
        return {"mlm_logits": mlm_logits, "next_sentence_logits": nsp_logits}


class _LabelClassifier(keras.Model):
    """One encoder output (`ENCODER_OUTPUT`) through a `HEAD` named `classifier` with
    one output per label. Returns `logits`."""

    HEAD = None
    ENCODER_OUTPUT = None

    def __init__(
        self,
        encoder,
        config: BertConfig,
        num_labels: int,
        head_initializer: str = "truncated_normal",
        **kwargs,
    ):
        super().__init__(dtype=encoder.dtype_policy, **kwargs)
        self.encoder = encoder
        self.num_labels = num_labels
        self.classifier = self.HEAD(
            config,
            num_labels,
            name="classifier",
            dtype=self.dtype_policy,
            initializer=head_initializer,
        )
        self.classifier.build()
        self.built = True

    def call(self, inputs, training=False):
        outputs = self.encoder(_encoder_inputs(inputs), training=training)
        return {"logits": self.classifier(outputs[self.ENCODER_OUTPUT], training=training)}


class BertClassifier(_LabelClassifier):
    """Sequence classification (num_labels > 1) or regression (num_labels == 1) on the
    pooled output. Returns `logits` [B, num_labels]."""

    MODEL_KIND = "classifier"
    HEAD = heads.PooledClassifierHead
    ENCODER_OUTPUT = "pooled_output"


class BertMultipleChoice(keras.Model):
    """Multiple choice (SWAG): each choice is its own `[CLS] context [SEP] ending [SEP]`
    sequence, scored from its pooled output. Inputs are [B, C, S]; returns `logits`
    [B, C] (softmax over the choices)."""

    MODEL_KIND = "multiple_choice"

    def __init__(
        self, encoder, config: BertConfig, head_initializer: str = "truncated_normal", **kwargs
    ):
        super().__init__(dtype=encoder.dtype_policy, **kwargs)
        self.encoder = encoder
        self.scorer = heads.PooledClassifierHead(
            config, 1, name="classifier", dtype=self.dtype_policy, initializer=head_initializer
        )
        self.scorer.build()
        self.built = True

    def call(self, inputs, training=False):
        ids = inputs["input_word_ids"]
        num_choices, seq_length = tf.shape(ids)[1], tf.shape(ids)[2]
        flat = {k: tf.reshape(inputs[k], [-1, seq_length]) for k in INPUT_KEYS}  # [B*C, S]
        pooled = self.encoder(flat, training=training)["pooled_output"]
        scores = self.scorer(pooled, training=training)  # [B*C, 1]
        return {"logits": tf.reshape(scores, [-1, num_choices])}


class BertSpanLabeler(keras.Model):
    """SQuAD span prediction (`cls/squad`). Returns `start_logits` and `end_logits`
    [B, S]."""

    MODEL_KIND = "span"

    def __init__(
        self, encoder, config: BertConfig, head_initializer: str = "truncated_normal", **kwargs
    ):
        super().__init__(dtype=encoder.dtype_policy, **kwargs)
        self.encoder = encoder
        self.span = heads.TokenClassifierHead(
            config,
            2,
            dropout_rate=0.0,
            name="squad",
            dtype=self.dtype_policy,
            initializer=head_initializer,
        )
        self.span.build()
        self.built = True

    def call(self, inputs, training=False):
        sequence = self.encoder(_encoder_inputs(inputs), training=training)["sequence_output"]
        logits = self.span(sequence, training=training)  # [B, S, 2]
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}


class BertTokenClassifier(_LabelClassifier):
    """Token classification (NER) on the sequence output. Returns `logits` [B, S, L]."""

    MODEL_KIND = "token_classifier"
    HEAD = heads.TokenClassifierHead
    ENCODER_OUTPUT = "sequence_output"
