"""The feature-based approach of the BERT paper (Section 5.3): a frozen encoder's
layers as fixed features for a two-layer bidirectional LSTM tagger.

The paper extracts the activations of one or more layers of the pre-trained
encoder without fine-tuning any of its parameters, combines them (the top four
layers concatenated is the best choice on CoNLL-2003 NER, 0.3 F1 behind
fine-tuning) and feeds them to a randomly initialised two-layer 768-dimensional
BiLSTM before the classification layer.

Here the frozen encoder sits in the same Keras model (`trainable=False`, always
called with `training=False`, its outputs behind `tf.stop_gradient`), so the
model's `trainable_variables` are only the combination weights (for a weighted
sum), the LSTMs and the classifier: those are all an optimizer built on them
updates.

Combinations of the chosen layers (`parse_feature_layers`):
  concat        [B, S, k*H]: the layers side by side, in the order given;
  sum           [B, S, H]:   their element-wise sum;
  weighted_sum  [B, S, H]:   gamma * sum_j softmax(w)_j * layer_j with learned
                             scalars w (one per layer, starting equal) and gamma,
                             as ELMo's scalar mix.

Shape legend: B batch, S sequence, H hidden, L labels, U LSTM units.
"""

from __future__ import annotations

from typing import Sequence

import keras
import tensorflow as tf

from common.errors import UserError
from modeling import heads, layers
from modeling.config import BertConfig
from modeling.encoder import INPUT_KEYS

COMBINATIONS = ("concat", "sum", "weighted_sum")
# The index `parse_feature_layers` gives the embedding layer's output (below layer 0).
EMBEDDINGS = -1


def parse_layer_numbers(
    spec: str, num_layers: int, flag: str, names: tuple[str, ...] = ()
) -> list[int | str]:
    """The layer numbers of a comma-separated `spec`, as given (negative ones count
    from the top), each checked to be a layer of an encoder of `num_layers` layers;
    an item that is one of `names` is given back as that name.

    Raises:
        UserError: naming `flag` and the item that is not an integer or not a layer.
    """
    numbers = []
    for item in spec.split(","):
        if item.strip() in names:
            numbers.append(item.strip())
            continue
        try:
            number = int(item)
        except ValueError:
            raise UserError(
                f"{flag}={spec!r}: {item.strip()!r} is not a layer number (use "
                "comma-separated integers, e.g. '-1,-2,-3,-4'; -1 is the last layer)"
            ) from None
        if not -num_layers <= number < num_layers:
            raise UserError(
                f"{flag}={spec!r}: layer {number} does not exist in an encoder of "
                f"{num_layers} layers (use {-num_layers} to {num_layers - 1})"
            )
        numbers.append(number)
    return numbers


def parse_feature_layers(spec: str, num_layers: int, flag: str = "--feature_layers") -> list[int]:
    """The 0-based encoder layers named by `spec`.

    Args:
        spec: "all", or comma-separated layer numbers: negative ones count from the
            top (-1 is the last layer), others from the bottom (0 is the first
            Transformer layer); "embeddings" names the embedding layer's output (the
            paper's Table 7 "Embeddings" row).
        num_layers: the encoder's number of layers.
        flag: the flag `spec` comes from, named in errors.

    Returns:
        Layer indices in [0, num_layers), or EMBEDDINGS, in the order given ("all":
        the Transformer layers bottom to top).

    Raises:
        ValueError: an empty spec, a number that is not an integer or not a layer,
            or a layer named twice.
    """
    spec = spec.strip()
    if spec == "all":
        return list(range(num_layers))
    indices = []
    for number in parse_layer_numbers(spec, num_layers, flag, names=("embeddings",)):
        if number == "embeddings":
            if EMBEDDINGS in indices:
                raise UserError(f"{flag}={spec!r}: embeddings named twice")
            indices.append(EMBEDDINGS)
            continue
        index = number % num_layers
        if index in indices:
            raise UserError(f"{flag}={spec!r}: layer {number} is named twice")
        indices.append(index)
    return indices


class LayerCombination(keras.layers.Layer):
    """Combines k tensors [B, S, H] into one (see the module docstring).

    Variables (weighted_sum only): `layer_weights` [k] (softmax-normalised) and
    `gamma` [] (an overall scale).
    """

    def __init__(self, combination: str, num_inputs: int, **kwargs):
        super().__init__(**kwargs)
        if combination not in COMBINATIONS:
            raise UserError(
                f"unknown feature combination {combination!r}; choose one of {COMBINATIONS}"
            )
        if num_inputs < 1:
            raise UserError("at least one layer is needed as features")
        self.combination = combination
        self.num_inputs = num_inputs

    def build(self, input_shape=None):
        if self.combination == "weighted_sum":
            self.layer_weights = self.add_weight(
                shape=(self.num_inputs,), initializer="zeros", name="layer_weights"
            )
            self.gamma = self.add_weight(shape=(), initializer="ones", name="gamma")
        self.built = True

    def output_size(self, hidden_size: int) -> int:
        return hidden_size * (self.num_inputs if self.combination == "concat" else 1)

    def call(self, tensors: Sequence[tf.Tensor]) -> tf.Tensor:
        if len(tensors) != self.num_inputs:
            raise ValueError(f"expected {self.num_inputs} layers, got {len(tensors)}")
        if self.combination == "concat":
            return tf.concat(list(tensors), axis=-1)
        if self.combination == "sum":
            return tf.add_n(list(tensors))
        weights = tf.cast(tf.nn.softmax(self.layer_weights), self.compute_dtype)
        stacked = tf.stack(list(tensors), axis=0)  # [k, B, S, H]
        mixed = tf.tensordot(weights, stacked, axes=1)  # [B, S, H]
        return tf.cast(self.gamma, self.compute_dtype) * mixed


class BertFeatureBasedTagger(keras.Model):
    """Frozen BERT layers -> two-layer BiLSTM -> dense tag classifier.

    Takes the encoder's input dict (int32 [B, S] `input_word_ids`, `input_mask`,
    `input_type_ids`; extra keys are ignored) and returns float32 `logits`
    [B, S, L], the same contract as `BertTokenClassifier`. Padding positions are
    masked out of the LSTMs, so a token's logits do not depend on how far the
    sequence is padded.

    Sub-layers: `encoder` (frozen), `combination`, `bilstm_0` ... `bilstm_{n-1}`
    (Bidirectional LSTMs of U units each way), `classifier` (Dense 2U -> L).
    """

    MODEL_KIND = "feature_based_token_classifier"

    def __init__(
        self,
        encoder,
        config: BertConfig,
        num_labels: int,
        feature_layers: Sequence[int],
        combination: str = "concat",
        lstm_units: int = 256,
        num_lstm_layers: int = 2,
        dropout_rate: float | None = None,
        head_initializer: str = "truncated_normal",
        **kwargs,
    ):
        super().__init__(dtype=encoder.dtype_policy, **kwargs)
        if lstm_units < 1 or num_lstm_layers < 1:
            raise UserError(
                f"lstm_units ({lstm_units}) and num_lstm_layers "
                f"({num_lstm_layers}) must be at least 1"
            )
        if EMBEDDINGS in feature_layers and not hasattr(encoder, "embeddings"):
            raise UserError(
                "the embedding layer's output is a feature of this project's encoder "
                "only, not of a TF Hub encoder's"
            )
        self.encoder = encoder
        self.encoder.trainable = False
        self.num_labels = num_labels
        self.feature_layers = list(feature_layers)
        policy = self.dtype_policy
        rate = config.hidden_dropout_prob if dropout_rate is None else dropout_rate
        self.combination = LayerCombination(
            combination, len(self.feature_layers), name="combination", dtype=policy
        )
        self.dropout = layers.Dropout(rate, dtype=policy)
        self.num_lstm_layers = num_lstm_layers
        # One attribute per layer (not a list): tf.train.Checkpoint tracks attributes.
        for i in range(num_lstm_layers):
            setattr(self, f"bilstm_{i}", heads.BiLSTM(lstm_units, name=f"bilstm_{i}", dtype=policy))
        self.classifier = keras.layers.Dense(
            num_labels,
            name="classifier",
            dtype=policy,
            kernel_initializer=layers.initializer(config, head_initializer),
        )
        self._build_head(config.hidden_size, lstm_units)

    @property
    def lstm_layers(self) -> list:
        return [getattr(self, f"bilstm_{i}") for i in range(self.num_lstm_layers)]

    def _build_head(self, hidden_size: int, lstm_units: int) -> None:
        """Creates every head variable now, before the first call (the Trainer
        collects the trainable variables when it is created)."""
        self.combination.build()
        width = self.combination.output_size(hidden_size)
        for lstm in self.lstm_layers:
            lstm.build((None, None, width))
            width = 2 * lstm_units
        self.classifier.build((None, None, width))
        self.built = True

    def features(self, inputs: dict) -> tf.Tensor:
        """The combined frozen features, [B, S, H] or [B, S, k*H] for concat."""
        outputs = self.encoder({k: inputs[k] for k in INPUT_KEYS}, training=False)
        layers_out = list(outputs["encoder_outputs"])
        if EMBEDDINGS in self.feature_layers:
            embedded = self.encoder.embeddings(
                tf.cast(inputs["input_word_ids"], tf.int32),
                tf.cast(inputs["input_type_ids"], tf.int32),
                training=False,
            )
            layers_out = layers_out + [embedded]  # Index -1 (EMBEDDINGS).
        chosen = [layers_out[i] for i in self.feature_layers]
        return self.combination([tf.stop_gradient(t) for t in chosen])

    def call(self, inputs, training=False):
        mask = inputs["input_mask"]  # [B, S]
        x = self.dropout(self.features(inputs), training=training)
        for lstm in self.lstm_layers:
            x = lstm(x, mask, training=training)  # [B, S, 2U]
        x = self.dropout(x, training=training)
        return {"logits": tf.cast(self.classifier(x), tf.float32)}
