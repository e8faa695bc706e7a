"""The objectives: each kind of model's losses and evaluation sums, in the
`modeling.training.Objective` form.

All losses are computed in float32 from float32 logits. Shape legend: B batch,
P masked positions, V vocabulary, L labels, S sequence.
"""

from __future__ import annotations

import math

import tensorflow as tf


def _sparse_nll(labels, logits):
    """Per-position negative log-likelihood, float32, labels int [...], logits [..., K]."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int32), logits=tf.cast(logits, tf.float32)
    )


def _correct(labels, logits):
    return tf.cast(
        tf.equal(tf.argmax(logits, -1, output_type=tf.int32), tf.cast(labels, tf.int32)), tf.float32
    )


class PretrainingObjective:
    """Masked-LM (weighted by `masked_lm_weights`) plus next-sentence loss.

    Features: `masked_lm_ids` int [B, P], `masked_lm_weights` float [B, P],
    `next_sentence_labels` int [B] or [B, 1] (1 = the second segment is random).
    With `use_next_sentence_loss=False` (the paper's No-NSP ablation) only the masked-LM
    loss trains.
    """

    def __init__(self, use_next_sentence_loss: bool = True):
        self.use_next_sentence_loss = use_next_sentence_loss

    @staticmethod
    def _nsp_labels(features):
        return tf.reshape(features["next_sentence_labels"], [-1])

    def loss_weights(self, features):
        weights = {"masked_lm": tf.reduce_sum(tf.cast(features["masked_lm_weights"], tf.float32))}
        if self.use_next_sentence_loss:
            weights["next_sentence"] = tf.cast(tf.shape(features["masked_lm_ids"])[0], tf.float32)
        return weights

    def loss_sums(self, features, outputs):
        mlm_weights = tf.cast(features["masked_lm_weights"], tf.float32)
        nll = _sparse_nll(features["masked_lm_ids"], outputs["mlm_logits"])  # [B, P]
        sums = {"masked_lm": tf.reduce_sum(nll * mlm_weights)}
        if self.use_next_sentence_loss:
            sums["next_sentence"] = tf.reduce_sum(
                _sparse_nll(self._nsp_labels(features), outputs["next_sentence_logits"])
            )
        return sums

    def eval_sums(self, features, outputs):
        mlm_weights = tf.cast(features["masked_lm_weights"], tf.float32)
        labels = features["masked_lm_ids"]
        nsp_labels = self._nsp_labels(features)
        nsp_logits = outputs["next_sentence_logits"]
        return {
            "mlm_loss": tf.reduce_sum(_sparse_nll(labels, outputs["mlm_logits"]) * mlm_weights),
            "mlm_correct": tf.reduce_sum(_correct(labels, outputs["mlm_logits"]) * mlm_weights),
            "mlm_weight": tf.reduce_sum(mlm_weights),
            "nsp_loss": tf.reduce_sum(_sparse_nll(nsp_labels, nsp_logits)),
            "nsp_correct": tf.reduce_sum(_correct(nsp_labels, nsp_logits)),
            "examples": tf.cast(tf.shape(nsp_labels)[0], tf.float32),
        }

    def finalize_eval(self, sums):
        weight = max(sums["mlm_weight"], 1e-5)
        examples = max(sums["examples"], 1.0)
        return {
            "masked_lm_accuracy": sums["mlm_correct"] / weight,
            "masked_lm_loss": sums["mlm_loss"] / weight,
            "next_sentence_accuracy": sums["nsp_correct"] / examples,
            "next_sentence_loss": sums["nsp_loss"] / examples,
        }


class LanguageModelObjective:
    """Left-to-right language modelling: every position predicts the next token.

    Features: `input_word_ids` int [B, S] (the clean text), `input_mask` int [B, S];
    outputs `lm_logits` [B, S-1, V], position i's prediction of token i+1. A prediction
    counts where token i+1 is real (never into padding); the loss is the mean
    cross-entropy over those predictions of the global batch.
    """

    @staticmethod
    def _labels_and_weights(features):
        labels = features["input_word_ids"][:, 1:]  # [B, S-1]
        return labels, tf.cast(features["input_mask"][:, 1:], tf.float32)

    def loss_weights(self, features):
        return {"next_token": tf.reduce_sum(self._labels_and_weights(features)[1])}

    def loss_sums(self, features, outputs):
        labels, weights = self._labels_and_weights(features)
        return {"next_token": tf.reduce_sum(_sparse_nll(labels, outputs["lm_logits"]) * weights)}

    def eval_sums(self, features, outputs):
        labels, weights = self._labels_and_weights(features)
        logits = outputs["lm_logits"]
        return {
            "loss": tf.reduce_sum(_sparse_nll(labels, logits) * weights),
            "correct": tf.reduce_sum(_correct(labels, logits) * weights),
            "predictions": tf.reduce_sum(weights),
        }

    def finalize_eval(self, sums):
        predictions = max(sums["predictions"], 1e-5)
        loss = sums["loss"] / predictions
        return {
            "next_token_accuracy": sums["correct"] / predictions,
            "next_token_loss": loss,
            "perplexity": math.exp(min(loss, 700.0)),
        }


class ClassificationObjective:
    """Sequence classification (and multiple choice) or, with `is_regression`,
    regression on one output; with `multi_label`, zero or more of L labels per example.

    Features: `label_ids` int [B] (float [B] for regression, int 0/1 [B, L] for
    multi-label); outputs `logits` [B, L] ([B, 1] for regression, [B, C] for multiple
    choice). Loss: mean cross-entropy, or mean squared error for regression, over the
    global batch; multi-label: one sigmoid per label, the binary cross-entropy averaged
    over the labels, then over the batch (Hugging Face's multi_label_classification).

    `class_weights` (float [L], rare classes): single-label, each example's
    cross-entropy weighs the weight of its label and the loss is their weighted mean
    (as PyTorch's `CrossEntropyLoss(weight=...)`); multi-label, the weight multiplies
    each label's positive term (`pos_weight` of `BCEWithLogitsLoss`).
    """

    def __init__(
        self,
        is_regression: bool = False,
        multi_label: bool = False,
        class_weights: list[float] | None = None,
    ):
        self.is_regression = is_regression
        self.multi_label = multi_label
        self.class_weights = None if class_weights is None else [float(w) for w in class_weights]

    def _weights(self):
        return tf.constant(self.class_weights, tf.float32)

    def _example_weights(self, features):
        """float [B]: each example's weight in the mean (1 unless single-label class
        weights)."""
        batch = tf.shape(features["input_word_ids"])[0]
        if self.class_weights is None or self.multi_label or self.is_regression:
            return tf.ones([batch], tf.float32)
        return tf.gather(self._weights(), tf.reshape(features["label_ids"], [-1]))

    def _per_example_loss(self, features, outputs):
        logits = outputs["logits"]
        if self.multi_label:
            labels = tf.cast(features["label_ids"], tf.float32)  # [B, L]
            logits = tf.cast(logits, tf.float32)
            if self.class_weights is None:
                bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
            else:
                bce = tf.nn.weighted_cross_entropy_with_logits(labels, logits, self._weights())
            return tf.reduce_mean(bce, axis=-1)
        if self.is_regression:
            labels = tf.cast(tf.reshape(features["label_ids"], [-1]), tf.float32)
            return tf.square(tf.reshape(logits, [-1]) - labels)
        nll = _sparse_nll(tf.reshape(features["label_ids"], [-1]), logits)
        return nll * self._example_weights(features)

    def loss_weights(self, features):
        return {"loss": tf.reduce_sum(self._example_weights(features))}

    def loss_sums(self, features, outputs):
        return {"loss": tf.reduce_sum(self._per_example_loss(features, outputs))}

    def eval_sums(self, features, outputs):
        sums = {
            "loss": tf.reduce_sum(self._per_example_loss(features, outputs)),
            "examples": tf.cast(tf.shape(features["input_word_ids"])[0], tf.float32),
        }
        if self.class_weights is not None and not self.multi_label:
            sums["loss_weight"] = tf.reduce_sum(self._example_weights(features))
        if not (self.is_regression or self.multi_label):
            sums["correct"] = tf.reduce_sum(
                _correct(tf.reshape(features["label_ids"], [-1]), outputs["logits"])
            )
        return sums

    def finalize_eval(self, sums):
        examples = max(sums["examples"], 1.0)
        weight = max(sums.get("loss_weight", examples), 1e-12)
        metrics = {"eval_loss": sums["loss"] / weight}
        if "correct" in sums:
            metrics["eval_accuracy"] = sums["correct"] / examples
        return metrics


class SpanObjective:
    """SQuAD span prediction: the mean of the start and end cross-entropies.

    Features: `start_positions`, `end_positions` int [B]; outputs `start_logits`,
    `end_logits` [B, S]. A loss only, no evaluation sums: SQuAD is scored by the
    official rules on its predictions (run_squad.py).

    The softmax runs over every position of the window, padding included, as in the
    original release and Hugging Face: a batch cut to its longest window has fewer
    positions, so its loss differs (`loss_sees_padding`; fine-tuning pads SQuAD's
    training batches unless told otherwise, docs/padding.md).
    """

    loss_sees_padding = True

    def _per_example_loss(self, features, outputs):
        start = _sparse_nll(tf.reshape(features["start_positions"], [-1]), outputs["start_logits"])
        end = _sparse_nll(tf.reshape(features["end_positions"], [-1]), outputs["end_logits"])
        return (start + end) / 2.0

    def loss_weights(self, features):
        return {"loss": tf.cast(tf.shape(features["input_word_ids"])[0], tf.float32)}

    def loss_sums(self, features, outputs):
        return {"loss": tf.reduce_sum(self._per_example_loss(features, outputs))}


class TokenClassificationObjective:
    """Token classification (NER): cross-entropy at the positions that carry a label.

    Features: `label_ids` int [B, S] with -1 where a position has no label (padding,
    [CLS]/[SEP], word pieces after a word's first); outputs `logits` [B, S, L]. The loss
    is the mean over labelled positions of the global batch.
    """

    @staticmethod
    def _mask(features):
        return tf.cast(features["label_ids"] >= 0, tf.float32)

    def _nll(self, features, outputs):
        labels = tf.maximum(features["label_ids"], 0)
        return _sparse_nll(labels, outputs["logits"]) * self._mask(features)

    def loss_weights(self, features):
        return {"loss": tf.reduce_sum(self._mask(features))}

    def loss_sums(self, features, outputs):
        return {"loss": tf.reduce_sum(self._nll(features, outputs))}

    def eval_sums(self, features, outputs):
        mask = self._mask(features)
        labels = tf.maximum(features["label_ids"], 0)
        return {
            "loss": tf.reduce_sum(self._nll(features, outputs)),
            "correct": tf.reduce_sum(_correct(labels, outputs["logits"]) * mask),
            "tokens": tf.reduce_sum(mask),
        }

    def finalize_eval(self, sums):
        tokens = max(sums["tokens"], 1.0)
        return {"eval_loss": sums["loss"] / tokens, "token_accuracy": sums["correct"] / tokens}
