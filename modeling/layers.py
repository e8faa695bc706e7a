"""Keras 3 layers of the BERT encoder.

Shape legend: B batch, S sequence length, H hidden size, N attention heads,
D head size (H / N), I intermediate size, V vocabulary size, T token types.

Layer and weight names follow the original release's checkpoint names, so that
`modeling.checkpoints` maps them with a small table.
"""

from __future__ import annotations

import contextlib
import functools
import math

import keras
import tensorflow as tf

from common.errors import UserError
from modeling.config import BertConfig

# The additive attention bias for padding, as in the original release.
_MASK_BIAS = -10000.0


def gelu(x):
    """The tanh approximation of GELU that the original release computes."""
    cube = x * x * x
    return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * cube)))


def _gelu_grad(x, dy):
    c = math.sqrt(2.0 / math.pi)
    t = tf.tanh(c * (x + 0.044715 * x * x * x))
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 0.134145 * x * x))


def gelu_exact(x):
    """GELU with the exact erf (Hugging Face's "gelu")."""
    return 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


def _gelu_exact_grad(x, dy):
    return dy * (
        0.5 * (1.0 + tf.math.erf(x / math.sqrt(2.0)))
        + x * tf.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    )


# Element-wise chains (GELU, LayerNorm, dropout's mask) run as single XLA-compiled
# kernels in the layers whose `fused` setting is True: unfused, each of their dozen ops
# is a pass over memory, which on CPU costs more than a tenth of a training step.
# Exports trace the model with that setting False (`standard_ops`), so that a SavedModel
# holds only standard ops (TF Serving, TFLite and hub users need no XLA).


@contextlib.contextmanager
def standard_ops(*models):
    """Within this block, `models` (Keras layers or models) and every layer inside them
    trace as standard TF ops: each layer's `fused` setting is False, then set back."""
    found = {}
    for model in models:
        for layer in model._flatten_layers(include_self=True, recursive=True):
            if hasattr(layer, "fused"):
                found[id(layer)] = layer
    before = [(layer, layer.fused) for layer in found.values()]
    try:
        for layer, _ in before:
            layer.fused = False
        yield
    finally:
        for layer, fused in before:
            layer.fused = fused


def _in_float32(fn):
    """fn computed in float32, returning its first argument's dtype."""

    def wrapped(x, *more):
        out = fn(tf.cast(x, tf.float32), *[tf.cast(t, tf.float32) for t in more])
        return tf.cast(out, x.dtype)

    return wrapped


def _fused(forward, backward):
    """`forward` with gradient `backward(x, dy)`, both compiled as one kernel each.

    The kernels compute in float32 whatever the input's dtype: XLA's CPU code for a
    chain of bfloat16 ops rounds after each one, and ran a bfloat16 GELU with its
    gradient 5-8x slower than the same chain in float32 with one cast in and out.
    """
    forward_xla = tf.function(_in_float32(forward), jit_compile=True, autograph=False)
    backward_xla = tf.function(_in_float32(backward), jit_compile=True, autograph=False)

    @tf.custom_gradient
    def op(x):
        return forward_xla(x), lambda dy: backward_xla(x, dy)

    def call(x):
        return op(x)

    call.plain = forward  # What `Dense` computes with `fused` False.
    return call


_ACTIVATIONS = {
    "gelu": _fused(gelu, _gelu_grad),
    "gelu_exact": _fused(gelu_exact, _gelu_exact_grad),
    "relu": tf.nn.relu,
    "tanh": tf.tanh,
    "linear": tf.identity,
}
_PLAIN_ACTIVATIONS = dict(_ACTIVATIONS, gelu=gelu, gelu_exact=gelu_exact)


def get_activation(name: str, fused: bool = True):
    """The activation `name`; with `fused`, GELU as compiled kernels (see `_fused`)."""
    if name not in _ACTIVATIONS:
        raise UserError(f"unknown activation {name!r}; choose one of {sorted(_ACTIVATIONS)}")
    return (_ACTIVATIONS if fused else _PLAIN_ACTIVATIONS)[name]


# How a kernel is drawn: the original release's truncated normal (values beyond two
# stddev redrawn, an actual spread of about 0.88 stddev), or a plain normal, as Hugging
# Face draws the task heads it adds to a checkpoint.
INITIALIZERS = ("truncated_normal", "normal")


def initializer(config: BertConfig, distribution: str = "truncated_normal"):
    """The kernel initializer with stddev config.initializer_range."""
    if distribution == "truncated_normal":
        return keras.initializers.TruncatedNormal(stddev=config.initializer_range)
    if distribution == "normal":
        return keras.initializers.RandomNormal(stddev=config.initializer_range)
    raise UserError(f"unknown initializer {distribution!r}; choose one of {INITIALIZERS}")


def last_real_positions(mask):
    """int32 [B]: the position of the last real token of each row of a [B, S] mask."""
    return tf.maximum(tf.cast(tf.reduce_sum(tf.cast(mask, tf.int32), axis=1), tf.int32) - 1, 0)


class LayerNorm(keras.layers.Layer):
    """LayerNorm over the last axis, computed in float32 whatever the policy.

    Variables `gamma` [H] and `beta` [H] as in the original checkpoints. Returns the
    input's dtype, so a bfloat16 stream stays bfloat16 around it. `fused`: forward and
    gradient as one compiled kernel each.
    """

    def __init__(self, epsilon: float = 1e-12, fused: bool = True, **kwargs):
        kwargs["dtype"] = "float32"
        # No autocast: a bfloat16 input stays bfloat16 on the way out.
        super().__init__(autocast=False, **kwargs)
        self.epsilon = epsilon
        self.fused = fused

    def build(self, input_shape):
        width = input_shape[-1]
        self.gamma = self.add_weight(name="gamma", shape=(width,), initializer="ones")
        self.beta = self.add_weight(name="beta", shape=(width,), initializer="zeros")

    def call(self, x):
        if self.fused:
            # Reads, not variables: the custom gradient returns their gradients.
            return _fused_layer_norm(self.epsilon)(
                x, tf.convert_to_tensor(self.gamma), tf.convert_to_tensor(self.beta)
            )
        return _layer_norm(x, self.gamma, self.beta, self.epsilon)

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, x.dtype)


def _layer_norm(x, gamma, beta, epsilon):
    """LayerNorm in float32 over the last axis; returns x's dtype."""
    dtype = x.dtype
    x = tf.cast(x, tf.float32)
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    x = (x - mean) * tf.math.rsqrt(variance + epsilon)
    return tf.cast(x * gamma + beta, dtype)


@functools.lru_cache(maxsize=None)
def _fused_layer_norm(epsilon: float):
    """`_layer_norm` with its gradient, each one XLA-compiled kernel."""

    def normalized(x):
        x = tf.cast(x, tf.float32)
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        inv_std = tf.math.rsqrt(variance + epsilon)
        return (x - mean) * inv_std, inv_std

    @tf.function(jit_compile=True, autograph=False)
    def forward(x, gamma, beta):
        return tf.cast(normalized(x)[0] * gamma + beta, x.dtype)

    @tf.function(jit_compile=True, autograph=False)
    def backward(x, gamma, dy):
        x_hat, inv_std = normalized(x)
        dy32 = tf.cast(dy, tf.float32)
        axes = list(range(len(x.shape) - 1))
        d_gamma = tf.reduce_sum(dy32 * x_hat, axis=axes)
        d_beta = tf.reduce_sum(dy32, axis=axes)
        d_x_hat = dy32 * gamma
        d_x = inv_std * (
            d_x_hat
            - tf.reduce_mean(d_x_hat, axis=-1, keepdims=True)
            - x_hat * tf.reduce_mean(d_x_hat * x_hat, axis=-1, keepdims=True)
        )
        return tf.cast(d_x, x.dtype), d_gamma, d_beta

    @tf.custom_gradient
    def op(x, gamma, beta):
        return forward(x, gamma, beta), lambda dy: backward(x, gamma, dy)

    return op


def _decoder_logits(x, table, bias):
    return tf.matmul(x, table, transpose_b=True) + bias


_decoder_logits_xla = tf.function(_decoder_logits, jit_compile=True, autograph=False)


@tf.custom_gradient
def _fused_decoder_logits(x, table, bias):
    def backward(dy):
        return (tf.matmul(dy, table), tf.matmul(dy, x, transpose_a=True), tf.reduce_sum(dy, axis=0))

    return _decoder_logits_xla(x, table, bias), backward


def decoder_logits(x, table, bias, xla: bool = True, bfloat16: bool = False):
    """x [M, H] times the transposed table [V, H], plus bias [V]: float32 logits [M, V].

    The masked-LM output layer. A [M, H] x [H, V] product with M small (the masked
    positions of a batch) and V about 30k is a skinny shape that TensorFlow's own
    float32 kernel ran at a third of the matrix-multiply rate on a Xeon with AMX; with
    `xla`, XLA's ran it 1.4-1.8x faster there (the forward product and the whole head
    with its gradient; on AMD EPYC the two tie). The gradient products are
    TensorFlow's, which were the faster ones there. With `bfloat16` the product runs in
    bfloat16 on TensorFlow's kernels (faster than either float32 form where the CPU has
    bfloat16 units, slower where it has none), and the bias is added in float32.
    """
    if bfloat16:
        product = tf.matmul(tf.cast(x, tf.bfloat16), tf.cast(table, tf.bfloat16), transpose_b=True)
        return tf.cast(product, tf.float32) + bias
    x, table = tf.cast(x, tf.float32), tf.cast(table, tf.float32)
    if xla:
        return _fused_decoder_logits(x, table, bias)
    return _decoder_logits(x, table, bias)


class Dropout(keras.layers.Dropout):
    """Keras `Dropout` with a mask that costs half as much to draw.

    Each element takes 16 random bits (two per 32-bit Philox word, where Keras draws a
    float per element) and the mask is applied, and in the backward pass re-applied to
    the gradient, by one XLA-compiled kernel. Drawing random numbers is the largest
    element-wise cost of a BERT training step on CPU (the attention-probability mask is
    [B, N, S, S]), and this halves it. An element is dropped with probability
    round(rate * 65536) / 65536 (0.1 -> 0.10001). Seeds come from the layer's Keras
    seed generator, as Keras' own. With `fused=False` (and under `standard_ops`) and
    for a noise shape, this is Keras' dropout.
    """

    def __init__(self, rate, fused: bool = True, **kwargs):
        super().__init__(rate, **kwargs)
        self.fused = fused

    def call(self, inputs, training=False):
        if not training or self.rate == 0 or self.noise_shape is not None or not self.fused:
            return super().call(inputs, training=training)
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), tf.int32.max - 1), tf.int32)
        words = tf.random.stateless_uniform(
            [(tf.size(inputs) + 1) // 2], seed, dtype=tf.uint32, minval=None, maxval=None
        )
        bits = tf.reshape(tf.bitcast(words, tf.uint16), [-1])
        return _dropout_kernel(float(self.rate))(inputs, bits)


@functools.lru_cache(maxsize=None)
def _dropout_kernel(rate: float):
    threshold = round(rate * 65536)
    scale = 1.0 / (1.0 - rate)

    @tf.function(jit_compile=True, autograph=False)
    def apply(x, bits):
        keep = tf.reshape(bits[: tf.size(x)], tf.shape(x)) >= threshold
        return tf.where(keep, x * tf.cast(scale, x.dtype), tf.zeros_like(x))

    @tf.custom_gradient
    def op(x, bits):
        return apply(x, bits), lambda dy: (apply(dy, bits), None)

    return op


class Dense(keras.layers.Dense):
    """Keras' Dense, an input of rank > 2 multiplied as one 2-D MatMul between two
    reshapes, with the standard-op form that exports trace made fast.

    Keras multiplies a 3-D input with `tf.tensordot`, which builds about twenty shape
    ops around its MatMul when the batch and length are unknown, as they are in every
    traced step: about 40% of the time spent tracing the model. The reshapes compute the
    same products from the same kernel (the same MatMul on the same 2-D operands).

    With `fused` False (exports: `standard_ops`), the activation is its standard-op
    form and the bias a BiasAdd: TensorFlow's CPU graph optimizer fuses MatMul, BiasAdd
    and activation into one kernel, where the batched product of Keras' 3-D form leaves
    GELU as a dozen element-wise passes (at BERT-small's shapes the exported encoder ran
    at 0.88x the in-memory one, whose GELU is XLA-compiled). The variables and the
    arithmetic are Keras'.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fused = True

    def call(self, inputs, training=None):
        rank = inputs.shape.rank
        if self.lora_enabled or self.quantization_mode or rank is None or rank < 2:
            return super().call(inputs, training=training)
        shape = tf.shape(inputs)
        flat = tf.reshape(inputs, [-1, self.kernel.shape[0]]) if rank > 2 else inputs
        if self.fused:  # Keras' ops in Keras' order: the same kernels, the same numbers.
            x = self._unflatten(keras.ops.matmul(flat, self.kernel), inputs, shape)
            if self.bias is not None:
                x = keras.ops.add(x, self.bias)
            if self.activation is not None:
                x = self.activation(x)
            return x
        x = tf.matmul(flat, tf.cast(self.kernel, flat.dtype))
        if self.bias is not None:
            x = tf.nn.bias_add(x, tf.cast(self.bias, x.dtype))
        if self.activation is not None:
            x = getattr(self.activation, "plain", self.activation)(x)
        return self._unflatten(x, inputs, shape)

    def _unflatten(self, x, inputs, shape):
        """The 2-D product back in the input's shape, its last axis `units`."""
        if inputs.shape.rank == 2:
            return x
        x = tf.reshape(x, tf.concat([shape[:-1], [self.units]], axis=0))
        x.set_shape(inputs.shape[:-1].concatenate([self.units]))
        return x


def _dense(
    config: BertConfig,
    units: int,
    name: str,
    policy,
    activation=None,
    distribution: str = "truncated_normal",
):
    return Dense(
        units,
        activation=activation,
        name=name,
        dtype=policy,
        kernel_initializer=initializer(config, distribution),
    )


class BertEmbeddings(keras.layers.Layer):
    """Word + token type + learned position embeddings, then LayerNorm and dropout.

    Variables: `word_embeddings` [V, H], `token_type_embeddings` [T, H],
    `position_embeddings` [max_position_embeddings, H], `LayerNorm`. `fused`: compiled
    LayerNorm and dropout kernels.
    """

    def __init__(self, config: BertConfig, fused: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.layer_norm = LayerNorm(name="LayerNorm", fused=fused)
        self.dropout = Dropout(config.hidden_dropout_prob, fused=fused, dtype=self.dtype_policy)

    def build(self, input_shape):
        c = self.config
        init = initializer(c)
        # Read in float32 under a mixed policy (no autocast): the lookup gathers rows
        # of the float32 tables and the sum and LayerNorm run in float32 before the
        # cast, instead of casting the whole [V, H] table each step. The masked-LM
        # decoder also uses the word table in float32.
        self.word_embeddings = self.add_weight(
            name="word_embeddings",
            shape=(c.vocab_size, c.hidden_size),
            initializer=init,
            autocast=False,
        )
        self.token_type_embeddings = self.add_weight(
            name="token_type_embeddings",
            shape=(c.type_vocab_size, c.hidden_size),
            initializer=init,
            autocast=False,
        )
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(c.max_position_embeddings, c.hidden_size),
            initializer=init,
            autocast=False,
        )
        self.layer_norm.build((None, None, c.hidden_size))

    def call(self, input_word_ids, input_type_ids, training=False):
        """int32 [B, S] ids -> compute-dtype [B, S, H]."""
        seq_length = tf.shape(input_word_ids)[1]
        longest = self.position_embeddings.shape[0]
        # A dynamic length (an exported model's input) is checked before the slice, so
        # that a too-long input names the limit rather than failing in the addition.
        check = tf.debugging.assert_less_equal(
            seq_length,
            longest,
            message=f"input_word_ids is longer than max_position_embeddings={longest}",
        )
        words = tf.gather(self.word_embeddings, input_word_ids)  # [B, S, H]
        types = tf.gather(self.token_type_embeddings, input_type_ids)  # [B, S, H]
        with tf.control_dependencies([check]):
            positions = self.position_embeddings[:seq_length]  # [S, H]
        x = self.layer_norm(words + types + positions[tf.newaxis])
        x = tf.cast(x, self.compute_dtype)
        return self.dropout(x, training=training)


class SelfAttention(keras.layers.Layer):
    """Multi-head scaled dot-product self-attention with a padding (and, for a
    left-to-right model, causal) mask.

    Sub-layers `query`, `key`, `value` (Dense H -> H) as in the original
    `attention/self/{query,key,value}`. The softmax runs in float32.
    """

    def __init__(self, config: BertConfig, fused: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = config.num_attention_heads
        self.head_size = config.head_size
        policy = self.dtype_policy
        self.query = _dense(config, config.hidden_size, "query", policy)
        self.key = _dense(config, config.hidden_size, "key", policy)
        self.value = _dense(config, config.hidden_size, "value", policy)
        self.dropout = Dropout(config.attention_probs_dropout_prob, fused=fused, dtype=policy)

    def build(self, input_shape):
        for layer in (self.query, self.key, self.value):
            layer.build(input_shape)

    def _split_heads(self, x):
        batch, seq = tf.shape(x)[0], tf.shape(x)[1]
        x = tf.reshape(x, [batch, seq, self.num_heads, self.head_size])  # [B, S, N, D]
        return tf.transpose(x, [0, 2, 1, 3])  # [B, N, S, D]

    def call(self, x, attention_bias, training=False):
        """x: [B, S, H]; attention_bias: float32 [B, 1, 1, S], or [B, 1, S, S] for a
        mask per query (0 where attending is allowed, -10000 elsewhere)."""
        q = self._split_heads(self.query(x))
        k = self._split_heads(self.key(x))
        v = self._split_heads(self.value(x))
        scores = tf.matmul(q, k, transpose_b=True)  # [B, N, S, S]
        scores = tf.cast(scores, tf.float32) * (1.0 / math.sqrt(self.head_size))
        probs = tf.nn.softmax(scores + tf.cast(attention_bias, tf.float32), axis=-1)
        probs = self.dropout(tf.cast(probs, x.dtype), training=training)
        context = tf.matmul(probs, v)  # [B, N, S, D]
        context = tf.transpose(context, [0, 2, 1, 3])  # [B, S, N, D]
        batch, seq = tf.shape(x)[0], tf.shape(x)[1]
        return tf.reshape(context, [batch, seq, self.num_heads * self.head_size])


class DenseResidualNorm(keras.layers.Layer):
    """dense -> dropout -> residual add -> LayerNorm (the original `*/output` blocks).

    Sub-layers `dense` and `LayerNorm`.
    """

    def __init__(self, config: BertConfig, fused: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.dense = _dense(config, config.hidden_size, "dense", self.dtype_policy)
        self.dropout = Dropout(config.hidden_dropout_prob, fused=fused, dtype=self.dtype_policy)
        self.layer_norm = LayerNorm(name="LayerNorm", fused=fused)

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.layer_norm.build(self.dense.compute_output_shape(input_shape))

    def call(self, x, residual, training=False):
        x = self.dropout(self.dense(x), training=training)
        return self.layer_norm(x + residual)


class TransformerLayer(keras.layers.Layer):
    """One post-LayerNorm Transformer encoder layer (`bert/encoder/layer_N`).

    Sub-layers: `attention_self` (SelfAttention), `attention_output`,
    `intermediate` (Dense H -> I with the config's activation), `output`. `fused`:
    GELU, LayerNorm and dropout as compiled kernels.
    """

    def __init__(self, config: BertConfig, fused: bool = True, **kwargs):
        super().__init__(**kwargs)
        policy = self.dtype_policy
        self.attention_self = SelfAttention(config, fused, name="attention_self", dtype=policy)
        self.attention_output = DenseResidualNorm(
            config, fused, name="attention_output", dtype=policy
        )
        self.intermediate = _dense(
            config,
            config.intermediate_size,
            "intermediate",
            policy,
            activation=get_activation(config.hidden_act, fused),
        )
        self.output_block = DenseResidualNorm(config, fused, name="output", dtype=policy)

    def build(self, input_shape):
        self.attention_self.build(input_shape)
        self.attention_output.build(input_shape)
        self.intermediate.build(input_shape)
        self.output_block.build(self.intermediate.compute_output_shape(input_shape))

    def call(self, x, attention_bias, training=False):
        """x: [B, S, H] -> [B, S, H]."""
        context = self.attention_self(x, attention_bias, training=training)
        x = self.attention_output(context, x, training=training)
        return self.output_block(self.intermediate(x), x, training=training)
