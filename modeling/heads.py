"""Output heads on top of the encoder: pre-training and task heads.

Shape legend: B batch, S sequence length, H hidden size, P masked positions,
V vocabulary size, L labels, C choices. Every head returns float32 logits, whatever
the compute dtype, so that softmax and losses run in float32. The task heads draw their
kernel from the original release's truncated normal unless `initializer="normal"`
(`layers.INITIALIZERS`).
"""

from __future__ import annotations

import keras
import tensorflow as tf

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
            xla=self.kernels.decoder_xla,
            bfloat16=self.kernels.decoder_bfloat16 and self.compute_dtype == "bfloat16",
        )
        return tf.reshape(logits, tf.concat([batch_shape, [self.config.vocab_size]], 0))


class _DropoutDenseHead(keras.layers.Layer):
    """dropout -> Dense(num_outputs) on the last axis; float32 logits. `LEADING_AXES`
    gives the axes before H that the dense kernel is built for."""

    LEADING_AXES = ()

    def __init__(
        self,
        config: BertConfig,
        num_outputs: int,
        dropout_rate: float = None,
        initializer: str = "truncated_normal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        rate = config.hidden_dropout_prob if dropout_rate is None else dropout_rate
        self.dropout = layers.Dropout(rate, dtype=self.dtype_policy)
        self.dense = layers._dense(
            config, num_outputs, "dense", self.dtype_policy, distribution=initializer
        )
        self.hidden_size = config.hidden_size

    def build(self, input_shape=None):
        self.dense.build((*self.LEADING_AXES, self.hidden_size))

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
