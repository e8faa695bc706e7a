"""Output heads on top of the encoder: pre-training and task heads.

Shape legend: B batch, S sequence length, H hidden size, P masked positions,
V vocabulary size, L labels, C choices, U LSTM units. Every head returns float32 logits, whatever
the compute dtype, so that softmax and losses run in float32. The task heads draw their
kernel from the original release's truncated normal unless `initializer="normal"`
(`layers.INITIALIZERS`).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from common.errors import UserError
from modeling import kernels as kernel_choices
from modeling import layers
from modeling.config import BertConfig


def gather_positions(sequence, positions):
    """sequence [B, S, H], positions int [B, P] -> [B, P, H]."""
    return tf.gather(sequence, tf.cast(positions, tf.int32), batch_dims=1)


class MaskedLMHead(keras.layers.Layer):
    """Masked-LM head (`cls/predictions`): transform, then the tied word embeddings.

    Sub-layers `transform_dense` (H -> H with the config's activation) and
    `transform_LayerNorm`; variable `output_bias` [V]. Only the masked positions go
    through the head: at 15% masking that is about 7x less work than every position.
    `kernels`: a `modeling.kernels.Kernels` (or name; None: for this CPU).
    """

    def __init__(self, config: BertConfig, kernels=None, **kwargs):
        # No input autocast: Keras would cast the float32 embedding table passed to
        # `call` to the compute dtype (a [V, H] cast each step, and a rounded decoder).
        super().__init__(autocast=False, **kwargs)
        self.config = config
        self.kernels = kernel_choices.resolve(kernels)
        fused = self.kernels.fused_elementwise
        self.transform_dense = layers._dense(
            config,
            config.hidden_size,
            "transform_dense",
            self.dtype_policy,
            activation=layers.get_activation(config.hidden_act, fused),
        )
        self.transform_layer_norm = layers.LayerNorm(name="transform_LayerNorm", fused=fused)
        # The decoder as XLA's kernel where the kernels say so; False under
        # `layers.standard_ops` (exports).
        self.fused = True

    def build(self, input_shape=None):
        hidden = (None, None, self.config.hidden_size)
        self.transform_dense.build(hidden)
        self.transform_layer_norm.build(hidden)
        self.output_bias = self.add_weight(
            name="output_bias", shape=(self.config.vocab_size,), initializer="zeros", autocast=False
        )

    def call(self, sequence_output, masked_lm_positions, word_embeddings):
        """Returns float32 logits [B, P, V].

        Args:
          sequence_output: [B, S, H] encoder output.
          masked_lm_positions: int [B, P] positions to predict.
          word_embeddings: [V, H] the encoder's embedding table (the tied decoder).
        """
        x = gather_positions(sequence_output, masked_lm_positions)
        x = self.transform_layer_norm(self.transform_dense(x))
        # A 2-D [B*P, H] x [H, V] product: a batched [B, P, H] x [V, H] one broadcasts
        # the table, and its gradient then builds a [B, V, H] tensor to sum over B
        # (375 MB for BERT-base at batch 8), which cost a third of a CPU training step.
        # In float32, unless the kernels say otherwise under a bfloat16 policy: on CPUs
        # without bfloat16 units this skinny product is slower in bfloat16 and the
        # table stays float32 (nothing casts it); with AVX512-BF16 the bfloat16
        # product, and the [V, H] cast it needs, take 0.75x the time.
        batch_shape = tf.shape(x)[:-1]
        flat = tf.reshape(x, [-1, self.config.hidden_size])
        logits = layers.decoder_logits(
            flat,
            word_embeddings,
            tf.convert_to_tensor(self.output_bias),
            xla=self.kernels.decoder_xla and self.fused,
            bfloat16=self.kernels.decoder_bfloat16 and self.compute_dtype == "bfloat16",
        )
        return tf.reshape(logits, tf.concat([batch_shape, [self.config.vocab_size]], 0))


class _DropoutDenseHead(keras.layers.Layer):
    """dropout -> Dense(num_outputs) on the last axis; float32 logits. `LEADING_AXES`
    gives the axes before the input width (H, or `input_size`, e.g. 2U on a BiLSTM)
    that the dense kernel is built for."""

    LEADING_AXES = ()

    def __init__(
        self,
        config: BertConfig,
        num_outputs: int,
        dropout_rate: float = None,
        initializer: str = "truncated_normal",
        input_size: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        rate = config.hidden_dropout_prob if dropout_rate is None else dropout_rate
        self.dropout = layers.Dropout(rate, dtype=self.dtype_policy)
        self.dense = layers._dense(
            config, num_outputs, "dense", self.dtype_policy, distribution=initializer
        )
        self.input_size = config.hidden_size if input_size is None else input_size

    def build(self, input_shape=None):
        self.dense.build((*self.LEADING_AXES, self.input_size))

    def call(self, x, training=False):
        return tf.cast(self.dense(self.dropout(x, training=training)), tf.float32)


class PooledClassifierHead(_DropoutDenseHead):
    """dropout -> Dense(num_outputs) on a [B, H] vector; float32 logits [B, num_outputs].

    Serves as the next-sentence head (`cls/seq_relationship`, 2 outputs, no dropout),
    the sequence classifier / regressor and the per-choice scorer of multiple choice.
    """

    LEADING_AXES = (None,)


class TokenClassifierHead(_DropoutDenseHead):
    """dropout -> Dense(num_outputs) at every position; float32 logits [B, S, num_outputs].

    Token classification (NER) and, with 2 outputs and no dropout, the SQuAD span head
    (`cls/squad`: start and end logits).
    """

    LEADING_AXES = (None, None)


class BiLSTM(keras.layers.Bidirectional):
    """A bidirectional LSTM of `units` each way over [B, S, W] -> [B, S, 2U], padding
    masked out (a token's output does not depend on how far its row is padded).

    The feature-based tagger's layers (`modeling.feature_based`) and the "+ BiLSTM" of
    the paper's Table 5 (a randomly initialised BiLSTM between a fine-tuned encoder and
    its task head, `models.BertClassifier` / `BertSpanLabeler`). Sub-layers
    `forward_layer` and `backward_layer`, as Keras' `Bidirectional`.
    """

    def __init__(self, units: int, **kwargs):
        if units < 1:
            raise UserError(f"a BiLSTM needs at least one unit, got {units}")
        lstm = keras.layers.LSTM(units, return_sequences=True, dtype=kwargs.get("dtype"))
        super().__init__(lstm, **kwargs)
        self.units = units

    def call(self, sequence, mask, training=False):
        """sequence [B, S, W], mask [B, S] (1 or True on real tokens) -> [B, S, 2U]."""
        return super().call(sequence, mask=tf.cast(mask, tf.bool), training=training)

    def summary_vector(self, outputs, mask):
        """[B, 2U]: the forward LSTM at the last real token and the backward one at the
        first, the two states that have read the whole input."""
        last = layers.last_real_positions(mask)
        forward = tf.gather(outputs[..., : self.units], last, batch_dims=1)
        return tf.concat([forward, outputs[:, 0, self.units :]], axis=-1)
