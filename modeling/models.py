"""Task models: an encoder plus one head.

Each model takes the encoder's input dict (int32 [B, S] `input_word_ids`, `input_mask`,
`input_type_ids`; multiple choice takes [B, C, S]) and returns a dict of float32 logits.
The encoder may be a `BertEncoder` or any layer with the same dict contract (a TF Hub
encoder loaded with `modeling.hub`).

Each class names its kind in `MODEL_KIND` (the name model_info.json keeps);
modeling/model_kinds.py declares the rest of each kind (its checkpoint names,
evaluation, export). The task models take
`head_initializer`: how their new head's kernel is drawn, "truncated_normal" (the
original release's) or "normal" (Hugging Face's); see `layers.INITIALIZERS`.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from common.errors import UserError
from modeling import heads
from modeling.config import BertConfig
from modeling.encoder import INPUT_KEYS


def _encoder_inputs(inputs: dict) -> dict:
    return {k: inputs[k] for k in INPUT_KEYS}


def _bilstm(config: BertConfig, units: int, policy):
    """The "+ BiLSTM" of a task model (`heads.BiLSTM` named `bilstm`, built on H), or
    None for units == 0."""
    if units < 0:
        raise UserError(f"bilstm_units must be 0 (no BiLSTM) or positive, got {units}")
    if not units:
        return None
    bilstm = heads.BiLSTM(units, name="bilstm", dtype=policy)
    bilstm.build((None, None, config.hidden_size))
    return bilstm


OBJECTIVES = ("mlm", "ltr")


class BertPretrainer(keras.Model):
    """Encoder with the masked-LM and next-sentence heads (`cls/predictions`,
    `cls/seq_relationship`).

    objective "mlm" (masked LM): extra input int32 [B, P] `masked_lm_positions`;
    returns `mlm_logits` [B, P, V] and `next_sentence_logits` [B, 2].

    objective "ltr" (the paper's left-to-right LM, Section 5.1): the encoder must have
    `causal_attention`; returns `lm_logits` [B, S-1, V], position i's prediction of
    token i+1, through the same tied output layer (`cls/predictions`), so the
    checkpoint keeps the original names. The next-sentence head stays in the model
    (and its checkpoints) untrained, as in the No-NSP ablation.
    """

    MODEL_KIND = "pretrainer"

    def __init__(self, encoder, config: BertConfig, objective: str = "mlm", **kwargs):
        super().__init__(dtype=encoder.dtype_policy, **kwargs)
        if objective not in OBJECTIVES:
            raise UserError(
                f"unknown pre-training objective {objective!r}; choose one of {OBJECTIVES}"
            )
        if (objective == "ltr") != bool(getattr(encoder, "causal_attention", False)):
            raise UserError(
                f"the {objective} objective needs an encoder "
                f"{'with' if objective == 'ltr' else 'without'} causal_attention"
            )
        self.objective = objective
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
        sequence = outputs["sequence_output"]
        if self.objective == "ltr":
            ids = inputs["input_word_ids"]
            # Every position but the last predicts its right neighbour.
            positions = tf.broadcast_to(
                tf.range(tf.shape(ids)[1] - 1)[tf.newaxis], [tf.shape(ids)[0], tf.shape(ids)[1] - 1]
            )  # [B, S-1]
            logits = self.masked_lm(sequence, positions, self.encoder.word_embeddings)
            return {"lm_logits": logits}
        mlm_logits = self.masked_lm(
            sequence, inputs["masked_lm_positions"], self.encoder.word_embeddings
        )
        nsp_logits = self.next_sentence(outputs["pooled_output"], training=training)
        return {"mlm_logits": mlm_logits, "next_sentence_logits": nsp_logits}


class _LabelClassifier(keras.Model):
    """The encoder, optionally a BiLSTM (`bilstm_units` U > 0: `heads.BiLSTM` named
    `bilstm`, randomly initialised, the paper's Table 5 "+ BiLSTM"), and a `HEAD` named
    `classifier` with one output per label on what `_features` gives. Returns
    `logits`."""

    HEAD = None

    def __init__(
        self,
        encoder,
        config: BertConfig,
        num_labels: int,
        head_initializer: str = "truncated_normal",
        bilstm_units: int = 0,
        **kwargs,
    ):
        super().__init__(dtype=encoder.dtype_policy, **kwargs)
        self.encoder = encoder
        self.num_labels = num_labels
        self.bilstm_units = bilstm_units
        self.bilstm = _bilstm(config, bilstm_units, self.dtype_policy)
        self.classifier = self.HEAD(
            config,
            num_labels,
            name="classifier",
            dtype=self.dtype_policy,
            initializer=head_initializer,
            input_size=2 * bilstm_units if bilstm_units else None,
        )
        self.classifier.build()
        self.built = True

    def call(self, inputs, training=False):
        outputs = self.encoder(_encoder_inputs(inputs), training=training)
        features = self._features(outputs, inputs["input_mask"], training)
        return {"logits": self.classifier(features, training=training)}


def _sequence_features(model, outputs: dict, mask, training):
    """[B, S, H] sequence output, or [B, S, 2U] through the model's BiLSTM."""
    sequence = outputs["sequence_output"]
    return sequence if model.bilstm is None else model.bilstm(sequence, mask, training=training)


class BertClassifier(_LabelClassifier):
    """Sequence classification (num_labels > 1) or regression (num_labels == 1) on the
    pooled output (`[CLS]`, or the last real token of a left-to-right encoder: see
    `BertEncoder`). Returns `logits` [B, num_labels]. With a BiLSTM the head reads its
    summary vector [B, 2U] (`heads.BiLSTM.summary_vector`) instead."""

    MODEL_KIND = "classifier"
    HEAD = heads.PooledClassifierHead

    def __init__(self, *args, multi_label: bool = False, **kwargs):
        """`multi_label`: each output is its own label's logit (a sigmoid each, zero
        or more labels per example) rather than one of a softmax; kept with the model
        (model_info.json, a Hugging Face config's problem_type, the export's answer)."""
        super().__init__(*args, **kwargs)
        self.multi_label = bool(multi_label)

    def _features(self, outputs, mask, training):
        if self.bilstm is None:
            return outputs["pooled_output"]
        return self.bilstm.summary_vector(_sequence_features(self, outputs, mask, training), mask)


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
    [B, S].

    `bilstm_units` U > 0: a randomly initialised BiLSTM (`heads.BiLSTM`, sub-layer
    `bilstm`) between the sequence output and the span head, which then reads [B, S, 2U]
    (the paper's Table 5 "+ BiLSTM").
    """

    MODEL_KIND = "span"

    def __init__(
        self,
        encoder,
        config: BertConfig,
        head_initializer: str = "truncated_normal",
        bilstm_units: int = 0,
        **kwargs,
    ):
        super().__init__(dtype=encoder.dtype_policy, **kwargs)
        self.encoder = encoder
        self.bilstm_units = bilstm_units
        self.bilstm = _bilstm(config, bilstm_units, self.dtype_policy)
        self.span = heads.TokenClassifierHead(
            config,
            2,
            dropout_rate=0.0,
            name="squad",
            dtype=self.dtype_policy,
            initializer=head_initializer,
            input_size=2 * bilstm_units if bilstm_units else None,
        )
        self.span.build()
        self.built = True

    def call(self, inputs, training=False):
        outputs = self.encoder(_encoder_inputs(inputs), training=training)
        sequence = _sequence_features(self, outputs, inputs["input_mask"], training)
        logits = self.span(sequence, training=training)  # [B, S, 2]
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}


class BertTokenClassifier(_LabelClassifier):
    """Token classification (NER) on the sequence output (through the BiLSTM, when
    there is one). Returns `logits` [B, S, L]."""

    MODEL_KIND = "token_classifier"
    HEAD = heads.TokenClassifierHead

    def _features(self, outputs, mask, training):
        return _sequence_features(self, outputs, mask, training)
