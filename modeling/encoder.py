"""The BERT encoder as a Keras 3 model with the TF Hub input and output dicts."""

from __future__ import annotations

import keras
import tensorflow as tf

from common.errors import UserError
from modeling import kernels as kernel_choices
from modeling import layers
from modeling.config import BertConfig

INPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")


def dtype_policy(dtype: str) -> keras.DTypePolicy:
    """Maps a `--dtype` value to a Keras policy with float32 variables.

    float32 runs everything in float32; bfloat16 and float16 compute in that type
    and keep float32 master weights (float16 training needs loss scaling, which the
    training loop adds). LayerNorm, softmax and losses stay float32 regardless.
    """
    policies = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
    if dtype not in policies:
        raise UserError(f"unknown dtype {dtype!r}; choose one of {sorted(policies)}")
    return keras.DTypePolicy(policies[dtype])


def check_inputs(inputs: dict, max_position_embeddings: int) -> None:
    """Raises a clear error for missing keys or a sequence longer than the model takes."""
    missing = [k for k in INPUT_KEYS if k not in inputs]
    if missing:
        raise UserError(f"encoder inputs lack {missing}; expected the keys {list(INPUT_KEYS)}")
    seq_length = inputs["input_word_ids"].shape[-1]
    if seq_length is not None and seq_length > max_position_embeddings:
        raise UserError(
            f"input_word_ids has sequence length {seq_length}, longer than "
            f"max_position_embeddings={max_position_embeddings} of the BERT config"
        )


def attention_bias(mask, causal_attention: bool = False):
    """The additive attention bias of a float32 [B, S] `input_mask`: 0 where a query may
    attend, -10000 elsewhere.

    Returns [B, 1, 1, S] (every position sees every real token) or, with
    `causal_attention`, [B, 1, S, S] (position i sees the real tokens 0..i: itself and
    its left, never padding).
    """
    bias = (1.0 - mask[:, tf.newaxis, tf.newaxis, :]) * layers._MASK_BIAS
    if not causal_attention:
        return bias
    seq_length = tf.shape(mask)[1]
    # 1 above the diagonal: key j > query i lies to the right of the query.
    future = 1.0 - tf.linalg.band_part(tf.ones([seq_length, seq_length]), -1, 0)  # [S, S]
    return bias + future[tf.newaxis, tf.newaxis] * layers._MASK_BIAS


class BertEncoder(keras.Model):
    """The BERT Transformer encoder.

    Sub-layers carry the original checkpoint's names: `embeddings`, `layer_0` ...
    `layer_{L-1}`, `pooler` (Dense H -> H with tanh).

    `causal_attention`: the left-only constraint of a left-to-right language model (the
    paper's "LTR" ablation, Section 5.1; OpenAI GPT): each position attends to itself
    and the positions to its left. The pooler then reads the last real token, the only
    position that has seen the whole input (under the constraint `[CLS]` sees only
    itself); otherwise it reads the first token, `[CLS]`, as the original release does.
    The setting belongs to the model: `modeling.model_files` records it beside the
    model's files (`model_info.json`), since `bert_config.json` keeps the original keys.

    Call with a dict of int32 [B, S] tensors `input_word_ids`, `input_mask` (1 for real
    tokens, 0 for padding) and `input_type_ids`. Returns a dict:
      sequence_output: [B, S, H], the last layer.
      pooled_output: [B, H], tanh(dense(sequence_output[:, 0])), or of the last real
        token with `causal_attention`.
      encoder_outputs: list of L tensors [B, S, H], one per layer (the last equals
        sequence_output).
    Float outputs are in the policy's compute dtype. Dropout is active only when
    `training=True`. `kernels`: a `modeling.kernels.Kernels` or its name; None or
    "auto" chooses for this machine's CPU (`kernels.for_cpu`). Heads on this encoder
    use the same choice (`BertEncoder.kernels`).
    """

    def __init__(
        self,
        config: BertConfig,
        dtype="float32",
        kernels=None,
        causal_attention: bool = False,
        **kwargs,
    ):
        if isinstance(dtype, str) and dtype in ("float32", "bfloat16", "float16"):
            dtype = dtype_policy(dtype)
        super().__init__(dtype=dtype, name=kwargs.pop("name", "bert"), **kwargs)
        self.config = config
        self.causal_attention = bool(causal_attention)
        self.kernels = kernel_choices.resolve(kernels)
        fused = self.kernels.fused_elementwise
        policy = self.dtype_policy
        self.embeddings = layers.BertEmbeddings(config, fused, name="embeddings", dtype=policy)
        # One attribute per layer (not a list): tf.train.Checkpoint tracks attributes.
        for i in range(config.num_hidden_layers):
            setattr(
                self,
                f"layer_{i}",
                layers.TransformerLayer(config, fused, name=f"layer_{i}", dtype=policy),
            )
        self.pooler = keras.layers.Dense(
            config.hidden_size,
            activation="tanh",
            name="pooler",
            dtype=policy,
            kernel_initializer=layers.initializer(config),
        )
        self.build_variables()

    @property
    def encoder_layers(self) -> list:
        return [getattr(self, f"layer_{i}") for i in range(self.config.num_hidden_layers)]

    def build_variables(self):
        """Creates every variable now, so checkpoints load before the first call."""
        hidden = (None, None, self.config.hidden_size)
        self.embeddings.build((None, None))
        for layer in self.encoder_layers:
            layer.build(hidden)
        self.pooler.build((None, self.config.hidden_size))
        self.built = True

    def call(self, inputs, training=False):
        check_inputs(inputs, self.config.max_position_embeddings)
        word_ids = tf.cast(inputs["input_word_ids"], tf.int32)
        mask = tf.cast(inputs["input_mask"], tf.float32)
        type_ids = tf.cast(inputs["input_type_ids"], tf.int32)
        tf.debugging.assert_less_equal(
            tf.shape(word_ids)[1],
            self.config.max_position_embeddings,
            message="input_word_ids is longer than max_position_embeddings",
        )
        bias = attention_bias(mask, self.causal_attention)
        x = self.embeddings(word_ids, type_ids, training=training)
        encoder_outputs = []
        for layer in self.encoder_layers:
            x = layer(x, bias, training=training)
            encoder_outputs.append(x)
        if self.causal_attention:
            pooled = self.pooler(tf.gather(x, layers.last_real_positions(mask), batch_dims=1))
        else:
            pooled = self.pooler(x[:, 0])
        return {"sequence_output": x, "pooled_output": pooled, "encoder_outputs": encoder_outputs}

    def get_config(self):
        return {
            "config": self.config.to_dict(),
            "dtype": self.dtype_policy.name,
            "kernels": self.kernels.name,
            "causal_attention": self.causal_attention,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(BertConfig.from_dict(config.pop("config")), **config)

    @property
    def word_embeddings(self):
        """The [V, H] word embedding table, shared with the masked-LM decoder."""
        return self.embeddings.word_embeddings
