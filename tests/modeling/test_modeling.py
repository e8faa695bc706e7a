"""Tiny-config tests of the encoder, heads and task models (fast, CPU)."""

import contextlib
import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from modeling import checkpoints, layers, models
from modeling import checkpoint_names, checkpoint_readers, checkpoint_writers
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from tests.conftest import tiny_config

TINY = tiny_config(vocab_size=99)


@pytest.fixture(scope="module")
def config():
    return BertConfig(**TINY)


@pytest.fixture(scope="module")
def encoder(config):
    keras.utils.set_random_seed(1)
    return BertEncoder(config)


def make_inputs(batch=3, seq=7, seed=0, vocab=99):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, seq + 1, size=batch)
    lengths[0] = seq
    ids = rng.integers(1, vocab, size=(batch, seq)).astype(np.int32)
    mask = (np.arange(seq)[None] < lengths[:, None]).astype(np.int32)
    types = ((np.arange(seq)[None] >= (lengths[:, None] // 2)) & (mask == 1)).astype(np.int32)
    return {"input_word_ids": ids * mask, "input_mask": mask, "input_type_ids": types}


def numpy_attention(x, attention, mask):
    """Reference multi-head attention on float64 numpy arrays. x [B,S,H], mask [B,S]."""

    def dense(layer, v):
        return v @ layer.kernel.numpy().astype(np.float64) + layer.bias.numpy()

    b, s, h = x.shape
    n = attention.num_heads
    d = h // n
    q, k, v = (
        dense(getattr(attention, name), x).reshape(b, s, n, d).transpose(0, 2, 1, 3)
        for name in ("query", "key", "value")
    )
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    scores = scores + (1.0 - mask[:, None, None, :]) * -10000.0
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, h)


def test_attention_matches_numpy_reference(encoder):
    attention = encoder.encoder_layers[0].attention_self
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 5, 32)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.float32)
    bias = ((1.0 - mask) * -10000.0)[:, None, None, :]
    got = attention(tf.constant(x), tf.constant(bias)).numpy()
    want = numpy_attention(x.astype(np.float64), attention, mask.astype(np.float64))
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_gelu_is_the_tanh_approximation():
    x = np.linspace(-5, 5, 41).astype(np.float32)
    want = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(layers.gelu(tf.constant(x)).numpy(), want, atol=1e-6)
    from scipy.special import erf

    np.testing.assert_allclose(
        layers.gelu_exact(tf.constant(x)).numpy(), 0.5 * x * (1 + erf(x / np.sqrt(2))), atol=1e-6
    )
    # The two forms differ measurably, so a mix-up would show in parity tests.
    assert (
        np.abs(
            layers.gelu(tf.constant(x)).numpy() - layers.gelu_exact(tf.constant(x)).numpy()
        ).max()
        > 1e-4
    )


def test_output_dict_shapes_and_layers(encoder):
    outputs = encoder(make_inputs())
    assert outputs["sequence_output"].shape == (3, 7, 32)
    assert outputs["pooled_output"].shape == (3, 32)
    assert len(outputs["encoder_outputs"]) == 2
    np.testing.assert_array_equal(outputs["encoder_outputs"][-1], outputs["sequence_output"])
    assert not np.allclose(outputs["encoder_outputs"][0], outputs["encoder_outputs"][1])
    pooled = np.tanh(
        outputs["sequence_output"][:, 0].numpy() @ encoder.pooler.kernel.numpy()
        + encoder.pooler.bias.numpy()
    )
    np.testing.assert_allclose(outputs["pooled_output"], pooled, atol=1e-5)


def test_padding_invariance(encoder):
    inputs = make_inputs(batch=2, seq=6, seed=5)
    short = encoder(inputs)["sequence_output"].numpy()
    padded_inputs = {k: np.pad(v, [(0, 0), (0, 5)]) for k, v in inputs.items()}
    padded = encoder(padded_inputs)
    long = padded["sequence_output"].numpy()
    mask = inputs["input_mask"].astype(bool)
    np.testing.assert_allclose(long[:, :6][mask], short[mask], atol=1e-5)
    np.testing.assert_allclose(padded["pooled_output"], encoder(inputs)["pooled_output"], atol=1e-5)


def test_training_false_is_deterministic_and_training_true_drops(encoder):
    inputs = make_inputs()
    a = encoder(inputs, training=False)["sequence_output"].numpy()
    b = encoder(inputs, training=False)["sequence_output"].numpy()
    np.testing.assert_array_equal(a, b)
    c = encoder(inputs, training=True)["sequence_output"].numpy()
    assert np.abs(a - c).max() > 1e-3


@pytest.mark.parametrize("key", ["input_word_ids", "input_mask", "input_type_ids"])
def test_every_input_changes_the_output(encoder, key):
    inputs = make_inputs(batch=1, seq=6, seed=9)
    inputs["input_mask"][0, -2:] = 0
    changed = {k: v.copy() for k, v in inputs.items()}
    if key == "input_word_ids":
        changed[key][0, 1] = (changed[key][0, 1] % 98) + 1
    elif key == "input_mask":
        changed[key][0, -2] = 1
    else:
        changed[key][0, 2] = 1 - changed[key][0, 2]
    a = encoder(inputs)["sequence_output"].numpy()[0, 0]
    b = encoder(changed)["sequence_output"].numpy()[0, 0]
    assert np.abs(a - b).max() > 1e-4


def test_sequence_longer_than_max_position_embeddings_is_an_error(encoder):
    inputs = make_inputs(batch=1, seq=65)
    with pytest.raises(ValueError, match="max_position_embeddings=64"):
        encoder(inputs)
    with pytest.raises(ValueError, match="lack"):
        encoder({"input_word_ids": inputs["input_word_ids"]})


@pytest.mark.parametrize("dtype,compute", [("bfloat16", tf.bfloat16), ("float16", tf.float16)])
def test_mixed_precision_dtypes(config, dtype, compute):
    enc = BertEncoder(config, dtype=dtype)
    assert all(w.dtype == "float32" for w in enc.weights)
    inputs = make_inputs()
    out = enc(inputs)
    assert out["sequence_output"].dtype == compute
    assert out["pooled_output"].dtype == compute
    pretrainer = models.BertPretrainer(enc, config)
    logits = pretrainer(dict(inputs, masked_lm_positions=np.array([[1, 2]] * 3, np.int32)))
    assert logits["mlm_logits"].dtype == tf.float32
    assert logits["next_sentence_logits"].dtype == tf.float32
    # Same weights in float32 give close outputs: mixed precision changes precision only.
    ref = BertEncoder(config)
    for a, b in zip(ref.weights, enc.weights):
        a.assign(b)
    np.testing.assert_allclose(
        tf.cast(out["sequence_output"], tf.float32), ref(inputs)["sequence_output"], atol=0.1
    )


@pytest.mark.parametrize("kernels", ["avx2", "avx512_bf16"])
def test_mixed_precision_casts_the_vocabulary_table_only_for_a_bfloat16_decoder(config, kernels):
    # The embedding lookup gathers float32 rows (casting the [V, H] table would cost a
    # pass over it each step). The masked-LM decoder multiplies by the float32 table,
    # except where the kernels run it in bfloat16 (CPUs with AVX512-BF16): then the
    # table is cast once, in the head.
    pretrainer = models.BertPretrainer(
        BertEncoder(config, dtype="bfloat16", kernels=kernels), config
    )
    inputs = dict(make_inputs(), masked_lm_positions=np.array([[1, 2]] * 3, np.int32))
    graph = tf.function(lambda: pretrainer(inputs, training=True)).get_concrete_function().graph
    casts = [op for op in graph.get_operations() if op.type == "Cast"]
    assert casts  # the layers do cast their [H, H] kernels and activations
    table = [config.vocab_size, config.hidden_size]
    table_casts = [
        op.name
        for op in casts
        if op.inputs[0].shape.rank is not None and op.inputs[0].shape.as_list() == table
    ]
    if kernels == "avx2":
        assert table_casts == []
    else:
        assert len(table_casts) == 1 and "predictions" in table_casts[0], table_casts


def test_layer_norm_runs_in_float32_and_keeps_input_dtype():
    norm = layers.LayerNorm()
    x = tf.constant(np.random.default_rng(0).normal(size=(2, 3, 8)) * 100, tf.bfloat16)
    y = norm(x)
    assert y.dtype == tf.bfloat16
    ref = tf.cast(x, tf.float32)
    ref = (ref - tf.reduce_mean(ref, -1, keepdims=True)) / tf.math.reduce_std(
        ref, -1, keepdims=True
    )
    np.testing.assert_allclose(tf.cast(y, tf.float32), ref, atol=0.02)


@pytest.mark.parametrize("dtype, atol", [(tf.float32, 1e-4), (tf.bfloat16, 0.07)])
def test_fused_kernels_equal_plain_ops_with_gradients(dtype, atol):
    # Training runs GELU and LayerNorm as XLA-compiled kernels with hand-written
    # gradients; under standard_ops() (used by exports) a layer traces the plain TF ops,
    # as does an activation's `plain` form. Both must agree in value and in every
    # gradient.
    rng = np.random.default_rng(5)
    x = tf.cast(rng.normal(size=(3, 6, 48)) * 3 + 0.5, dtype)
    norm = layers.LayerNorm()
    norm.build(x.shape)
    norm.gamma.assign(rng.normal(size=48).astype(np.float32))
    norm.beta.assign(rng.normal(size=48).astype(np.float32))
    weights = tf.constant(rng.normal(size=(3, 6, 48)), tf.float32)
    functions = {
        "layer_norm": norm,
        "gelu": layers.get_activation("gelu"),
        "gelu_exact": layers.get_activation("gelu_exact"),
    }
    for name, fn in functions.items():
        results = []
        for fused in (True, False):
            context = contextlib.nullcontext() if fused else layers.standard_ops(norm)
            if not fused and name != "layer_norm":
                fn = fn.plain
            with context, tf.GradientTape() as tape:
                tape.watch(x)
                y = fn(x)
                loss = tf.reduce_sum(tf.cast(y, tf.float32) * weights)
            assert norm.fused is True  # Set back.
            assert y.dtype == dtype
            sources = [x] + ([norm.gamma, norm.beta] if name == "layer_norm" else [])
            results.append([y] + tape.gradient(loss, sources))
        for got, want in zip(*results):
            scale = max(1.0, float(tf.reduce_max(tf.abs(tf.cast(want, tf.float32)))))
            np.testing.assert_allclose(
                tf.cast(got, tf.float32), tf.cast(want, tf.float32), atol=atol * scale, err_msg=name
            )


@pytest.mark.parametrize("policy, atol", [("float32", 1e-5), ("mixed_bfloat16", 0.05)])
def test_dense_plain_ops_form_equals_keras_with_gradients(policy, atol):
    # Under standard_ops() a 3-D input runs as a 2-D MatMul + BiasAdd + activation (the
    # chain TensorFlow fuses on CPU): Keras' values and gradients, Keras' dtypes.
    rng = np.random.default_rng(7)
    dense = layers.Dense(40, activation=layers.get_activation("gelu"), dtype=policy)
    x = tf.constant(rng.normal(size=(3, 5, 24)), tf.float32)
    dense.build(x.shape)
    dense.bias.assign(rng.normal(size=40).astype(np.float32))
    results = []
    for context in (contextlib.nullcontext(), layers.standard_ops(dense)):
        with context, tf.GradientTape() as tape:
            tape.watch(x)
            y = dense(x)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) ** 2)
        assert y.shape == (3, 5, 40) and y.dtype == dense.compute_dtype
        results.append([y] + tape.gradient(loss, [x, dense.kernel, dense.bias]))
    for got, want in zip(*results):
        scale = max(1.0, float(tf.reduce_max(tf.abs(tf.cast(want, tf.float32)))))
        np.testing.assert_allclose(
            tf.cast(got, tf.float32), tf.cast(want, tf.float32), atol=atol * scale
        )


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_dense_computes_keras_numbers_with_a_few_ops(policy):
    # Traced with the batch and length unknown (as every step is): the values and
    # gradients of Keras' own Dense bit for bit, without tf.tensordot's shape ops.
    rng = np.random.default_rng(3)
    ours = layers.Dense(40, activation=layers.get_activation("gelu"), dtype=policy)
    theirs = keras.layers.Dense(40, activation=layers.get_activation("gelu"), dtype=policy)
    x = tf.constant(rng.normal(size=(3, 5, 24)), tf.float32)
    for dense in (ours, theirs):
        dense.build(x.shape)
        dense.kernel.assign(rng.normal(size=(24, 40)).astype(np.float32))
        dense.bias.assign(rng.normal(size=40).astype(np.float32))
    theirs.set_weights(ours.get_weights())
    results, sizes = [], []
    for dense in (ours, theirs):

        @tf.function(input_signature=[tf.TensorSpec([None, None, 24])], autograph=False)
        def step(x, dense=dense):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = dense(x)
                loss = tf.reduce_sum(tf.cast(y, tf.float32) ** 2)
            return [y] + tape.gradient(loss, [x, dense.kernel, dense.bias])

        results.append([t.numpy() for t in step(x)])
        sizes.append(len(step.get_concrete_function().graph.get_operations()))
        assert results[-1][0].shape == (3, 5, 40) and results[-1][0].dtype == dense.compute_dtype
    for got, want in zip(*results):
        np.testing.assert_array_equal(got, want)
    assert sizes[0] <= sizes[1] - 10, sizes


def test_fused_decoder_equals_plain_ops_with_gradients():
    # The masked-LM output layer: XLA forward, TensorFlow gradient products; the same
    # values and gradients (of the hidden states, the table and the bias) as plain ops.
    rng = np.random.default_rng(6)
    x = tf.constant(rng.normal(size=(10, 24)), tf.float32)
    table = tf.constant(rng.normal(size=(77, 24)), tf.float32)
    bias = tf.constant(rng.normal(size=77), tf.float32)
    labels = rng.integers(0, 77, size=10)
    results = []
    for xla in (True, False):
        with tf.GradientTape() as tape:
            tape.watch([x, table, bias])
            logits = layers.decoder_logits(x, table, bias, xla=xla)
            loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        results.append([logits] + tape.gradient(loss, [x, table, bias]))
    np.testing.assert_allclose(
        results[0][0], x.numpy() @ table.numpy().T + bias.numpy(), rtol=1e-5, atol=1e-5
    )
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dropout_drops_at_its_rate_and_masks_the_gradient(dtype):
    dropout = layers.Dropout(0.1, seed=7, dtype=dtype)
    x = tf.ones([4, 50, 501], dtype)  # odd size: the last 16-bit draw is unused
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = dropout(x, training=True)
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * 3.0)
    grad = tape.gradient(loss, x)
    y = tf.cast(y, tf.float32).numpy()
    scale = float(tf.cast(1 / 0.9, dtype))
    assert set(np.unique(y)) == {0.0, scale}
    assert abs((y == 0).mean() - 0.1) < 0.004  # 100,200 draws: 4 sigma is 0.004
    # The gradient is the same mask: 3 x scale where kept, 0 where dropped.
    np.testing.assert_allclose(tf.cast(grad, tf.float32), y * 3.0, rtol=1e-2)
    # Fresh masks per call; identity when not training; Keras' op under standard_ops().
    assert (tf.cast(dropout(x, training=True), tf.float32).numpy() != y).any()
    assert dropout(x, training=False) is x or np.array_equal(dropout(x), x)
    with layers.standard_ops(dropout):
        z = tf.cast(dropout(x, training=True), tf.float32).numpy()
    assert abs((z == 0).mean() - 0.1) < 0.004


def test_masked_lm_head_is_tied_to_word_embeddings(config, encoder):
    pretrainer = models.BertPretrainer(encoder, config)
    inputs = dict(make_inputs(), masked_lm_positions=np.array([[0, 3], [1, 1], [2, 0]], np.int32))
    out = pretrainer(inputs)
    assert out["mlm_logits"].shape == (3, 2, 99)
    assert out["next_sentence_logits"].shape == (3, 2)
    seq = encoder(inputs)["sequence_output"].numpy()
    head = pretrainer.masked_lm
    x = seq[np.arange(3)[:, None], inputs["masked_lm_positions"]]
    x = head.transform_layer_norm(head.transform_dense(tf.constant(x))).numpy()
    want = x @ encoder.word_embeddings.numpy().T + head.output_bias.numpy()
    np.testing.assert_allclose(out["mlm_logits"], want, atol=1e-4)
    # No separate decoder matrix: the only [V, H] variable is the embedding table.
    assert sum(tuple(w.shape) == (99, 32) for w in pretrainer.weights) == 1


def test_task_models(config, encoder):
    inputs = make_inputs()
    assert models.BertClassifier(encoder, config, 3)(inputs)["logits"].shape == (3, 3)
    assert models.BertClassifier(encoder, config, 1)(inputs)["logits"].shape == (3, 1)
    spans = models.BertSpanLabeler(encoder, config)(inputs)
    assert spans["start_logits"].shape == (3, 7) and spans["end_logits"].shape == (3, 7)
    assert models.BertTokenClassifier(encoder, config, 5)(inputs)["logits"].shape == (3, 7, 5)
    choice = models.BertMultipleChoice(encoder, config)
    stacked = {k: np.stack([v, v[::-1]], axis=0) for k, v in inputs.items()}  # [2, 3, 7]
    logits = choice(stacked)["logits"].numpy()
    assert logits.shape == (2, 3)
    # Each choice is scored on its own: row 1 is row 0's choices reversed.
    np.testing.assert_allclose(logits[1], logits[0][::-1], atol=1e-5)


@pytest.mark.parametrize(
    "build",
    [
        lambda e, c, init: models.BertClassifier(e, c, 100, head_initializer=init).classifier,
        lambda e, c, init: models.BertMultipleChoice(e, c, head_initializer=init).scorer,
        lambda e, c, init: models.BertSpanLabeler(e, c, head_initializer=init).span,
        lambda e, c, init: models.BertTokenClassifier(e, c, 100, head_initializer=init).classifier,
    ],
)
def test_head_initializer(config, encoder, build):
    """Heads draw from the original's truncated normal (nothing beyond 2 stddev) unless
    asked for Hugging Face's plain normal (about 4.6% beyond)."""
    stddev = config.initializer_range
    kinds = {
        "truncated_normal": keras.initializers.TruncatedNormal,
        "normal": keras.initializers.RandomNormal,
    }
    for distribution in layers.INITIALIZERS:
        keras.utils.set_random_seed(3)
        dense = build(encoder, config, distribution).dense
        assert type(dense.kernel_initializer) is kinds[distribution]
        kernel = dense.kernel.numpy()
        beyond = np.mean(np.abs(kernel) > 2 * stddev)
        if distribution == "truncated_normal":
            assert beyond == 0.0
        if kernel.size > 1000:  # 100 outputs: the spread tells the two apart
            expected = {
                "truncated_normal": (0.0, 0.0, 0.84, 0.92),
                "normal": (0.03, 0.07, 0.95, 1.05),
            }[distribution]
            assert expected[0] <= beyond <= expected[1]
            assert expected[2] * stddev < kernel.std() < expected[3] * stddev
    with pytest.raises(ValueError, match="unknown initializer 'uniform'"):
        build(encoder, config, "uniform")


def test_tf2_checkpoint_round_trip(config, tmp_path):
    src = BertEncoder(config)
    pretrainer = models.BertPretrainer(src, config)
    path = tf.train.Checkpoint(model=pretrainer).save(str(tmp_path / "ckpt"))
    dst = BertEncoder(config)
    dst_pre = models.BertPretrainer(dst, config)
    info = checkpoints.restore_model(str(tmp_path), dst_pre)
    assert info == {
        "kind": "tf2",
        "path": path,
        "restored": ["encoder", "masked_lm", "next_sentence"],
        "fresh": [],
    }
    for a, b in zip(pretrainer.weights, dst_pre.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_original_checkpoint_round_trip_and_names(config, tmp_path):
    src = BertEncoder(config)
    pretrainer = models.BertPretrainer(src, config)
    prefix = checkpoint_writers.write_original_checkpoint(
        str(tmp_path / "bert_model.ckpt"), src, pretrainer
    )
    names = dict(tf.train.list_variables(prefix))
    assert names["bert/encoder/layer_1/attention/self/query/kernel"] == [32, 32]
    assert names["bert/encoder/layer_0/intermediate/dense/kernel"] == [32, 37]
    assert names["cls/seq_relationship/output_weights"] == [2, 32]
    assert names["cls/predictions/output_bias"] == [99]
    assert len(names) == len(src.weights) + 7
    dst = BertEncoder(config)
    dst_pre = models.BertPretrainer(dst, config)
    assert checkpoints.restore_model(prefix, dst_pre)["restored"] == [
        "encoder",
        "masked_lm",
        "next_sentence",
    ]
    for a, b in zip(pretrainer.weights, dst_pre.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # Encoder-only checkpoints load with heads left at their initializers.
    enc_only = checkpoint_writers.write_original_checkpoint(
        str(tmp_path / "enc" / "bert_model.ckpt"), src
    )
    info = checkpoints.restore_model(enc_only, models.BertPretrainer(BertEncoder(config), config))
    assert info["restored"] == ["encoder"]
    assert info["fresh"] == ["masked_lm", "next_sentence"]


def test_checkpoint_of_another_size_names_variable_and_shapes(config, tmp_path):
    prefix = checkpoint_writers.write_original_checkpoint(
        str(tmp_path / "bert_model.ckpt"), BertEncoder(config)
    )
    other = BertConfig(**dict(TINY, vocab_size=120))
    with pytest.raises(
        checkpoint_readers.CheckpointMismatchError,
        match=r"bert/embeddings/word_embeddings.*\[99, 32\].*\[120, 32\]",
    ):
        checkpoints.restore_model(prefix, BertEncoder(other))
    deeper = BertConfig(**dict(TINY, num_hidden_layers=3))
    with pytest.raises(checkpoint_readers.CheckpointMismatchError, match="layer_2"):
        checkpoints.restore_model(prefix, BertEncoder(deeper))
    tf2 = tf.train.Checkpoint(model=models.BertPretrainer(BertEncoder(config), config)).save(
        str(tmp_path / "tf2" / "ckpt")
    )
    with pytest.raises(checkpoint_readers.CheckpointMismatchError, match=r"\(99, 32\)|\[99, 32\]"):
        checkpoints.restore_model(tf2, BertEncoder(other))
    with pytest.raises(FileNotFoundError, match="nowhere"):
        checkpoints.restore_model(str(tmp_path / "nowhere"), BertEncoder(config))


def test_hf_names_derive_from_original_names():
    assert checkpoint_names.hf_name("bert/encoder/layer_3/attention/self/query/kernel", "") == (
        "encoder.layer.3.attention.self.query.weight",
        True,
    )
    assert checkpoint_names.hf_name("bert/embeddings/LayerNorm/gamma", "bert.") == (
        "bert.embeddings.LayerNorm.weight",
        False,
    )
    assert checkpoint_names.hf_name("bert/embeddings/word_embeddings", "") == (
        "embeddings.word_embeddings.weight",
        False,
    )
    assert checkpoint_names.hf_name("cls/predictions/transform/dense/kernel", "bert.") == (
        "cls.predictions.transform.dense.weight",
        True,
    )
    assert checkpoint_names.hf_name("cls/seq_relationship/output_weights", "") == (
        "cls.seq_relationship.weight",
        False,
    )


def test_safetensors_reader_handles_bfloat16(tmp_path):
    import ml_dtypes

    values = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    raw = values.astype(ml_dtypes.bfloat16).tobytes()
    header = json.dumps(
        {"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, len(raw)]}}
    ).encode()
    path = tmp_path / "x.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + raw)
    np.testing.assert_array_equal(checkpoint_readers.read_safetensors(str(path))["w"], values)
