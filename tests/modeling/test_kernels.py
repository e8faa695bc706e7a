"""Kernel choices per CPU kind (modeling/kernels.py): detection and equal results."""

import numpy as np
import pytest
import tensorflow as tf

from modeling import kernels, layers, optimization

CPUINFO = """processor\t: 0
vendor_id\t: {vendor}
model name\t: {model}
flags\t\t: fpu sse2 {flags}

processor\t: 1
flags\t\t: fpu
"""


@pytest.mark.parametrize(
    "flags,kind",
    [
        ("avx avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile amx_int8", "amx"),
        ("avx avx2 fma avx512f avx512_bf16 avx512_vnni", "avx512_bf16"),
        ("avx avx2 fma avx512f", "avx2"),
        ("avx avx2 fma", "avx2"),
        ("", "avx2"),
    ],
)
def test_cpu_kind_from_proc_cpuinfo(tmp_path, flags, kind):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO.format(vendor="AuthenticAMD", model="AMD EPYC", flags=flags))
    assert kernels.cpu_flags(str(path)) == frozenset(["fpu", "sse2"] + flags.split())
    assert kernels.cpu_model_name(str(path)) == "AMD EPYC"
    assert kernels.cpu_kind(kernels.cpu_flags(str(path))) == kind
    assert kernels.for_cpu(str(path)) == kernels.CHOICES[kind]


def test_unreadable_cpuinfo_and_names(tmp_path):
    assert kernels.cpu_flags(str(tmp_path / "missing")) == frozenset()
    assert kernels.resolve("plain") == kernels.CHOICES["plain"]
    assert kernels.resolve(None) == kernels.resolve("auto") == kernels.for_cpu()
    assert kernels.resolve(kernels.CHOICES["amx"]) is kernels.CHOICES["amx"]
    with pytest.raises(ValueError, match="unknown kernels 'avx9'"):
        kernels.resolve("avx9")


def test_bfloat16_decoder_is_the_float32_one_rounded():
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(6, 32)), tf.float32)
    table = tf.constant(rng.normal(size=(99, 32)) * 0.1, tf.float32)
    bias = tf.constant(rng.normal(size=(99,)), tf.float32)
    results = []
    for kwargs in (dict(xla=True), dict(xla=False), dict(bfloat16=True)):
        with tf.GradientTape() as tape:
            tape.watch([x, table, bias])
            logits = layers.decoder_logits(x, table, bias, **kwargs)
            loss = tf.reduce_sum(logits * tf.cos(logits))
        assert logits.dtype == tf.float32
        results.append([logits] + tape.gradient(loss, [x, table, bias]))
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for got, want in zip(results[2], results[0]):  # bfloat16: 8 bits of mantissa
        np.testing.assert_allclose(got, want, rtol=0.05, atol=0.05 * np.abs(want).max())


@pytest.mark.parametrize("fused", [True, False])
def test_optimizer_scales_gradients_inside_the_update(fused):
    class Named:
        def __init__(self, var, path):
            self.value, self.path, self.shape = var, path, var.shape

    rng = np.random.default_rng(1)
    start = rng.normal(size=(3, 4)).astype(np.float32)
    grads = [rng.normal(size=(3, 4)).astype(np.float32) for _ in range(3)]
    finals = []
    for scale in (0.25, None):
        var = tf.Variable(start)
        opt = optimization.create_optimizer("adamw", [Named(var, "dense/kernel")], fused=fused)
        for g in grads:
            if scale is None:  # the reference: gradients scaled beforehand
                opt.apply([tf.constant(g * 0.25)], tf.constant(1e-2))
            else:
                opt.apply([tf.constant(g)], tf.constant(1e-2), grad_scale=scale)
        finals.append(var.numpy())
    np.testing.assert_allclose(finals[0], finals[1], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "name,dtype",
    [("amx", "bfloat16"), ("avx512_bf16", "bfloat16"), ("avx2", "float32"), ("plain", "float32")],
)
def test_auto_dtype_is_bfloat16_only_where_the_cpu_has_bfloat16_units(name, dtype):
    import runner_settings

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    assert not tf.config.list_physical_devices("GPU")
    assert runner_settings.auto_dtype(strategy, kernels.CHOICES[name]) == dtype
