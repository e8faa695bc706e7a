"""The measurements behind modeling/kernels.py: each kernel choice, forward and gradient,
in float32 and bfloat16, at BERT-base's shapes (batch 8, sequence 128, 20 masked
positions), in milliseconds per call (best of `--repeats` rounds, kernels alternating
within each round).

  .venv-bench/bin/python -m benchmarks.speed.bench_kernels
  # A CPU without bfloat16 units (AVX2 only), emulated on a newer one (float32 only:
  # TensorFlow still takes oneDNN's bfloat16 matmul, which then has no kernel):
  ONEDNN_MAX_CPU_ISA=AVX2 XLA_FLAGS=--xla_cpu_max_isa=AVX2 \
      .venv-bench/bin/python -m benchmarks.speed.bench_kernels --dtypes=float32

Rows:
  decoder      the masked-LM output product [160, 768] x [768, 30522] with its
               gradients: float32 on TensorFlow's kernel, float32 with XLA's forward
               product, and bfloat16 on TensorFlow's (the [V, H] table cast included).
  gelu, layer_norm, dropout   the fused (XLA-compiled, hand-written gradient) kernel
               against the plain TensorFlow ops, on [8, 128, 3072] / [8, 128, 768].
  optimizer    one AdamW step over BERT-base's largest kernel shapes (with the gradient
               clipping scale), compiled against plain ops.
  matmul       the 2048^3 product (the hardware limit, GFLOP/s).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import tensorflow as tf

from modeling import kernels, layers, optimization

BATCH, SEQ, HIDDEN, INTER, VOCAB, MASKED = 8, 128, 768, 3072, 30522, 20


def timed(fn, *args) -> float:
    result = fn(*args)
    tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, result)
    start = time.perf_counter()
    result = fn(*args)
    tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, result)
    return (time.perf_counter() - start) * 1e3


def with_gradient(forward):
    """A compiled function: forward and the gradient of sum(output * dy)."""

    @tf.function
    def run(*args):
        with tf.GradientTape() as tape:
            tape.watch(args)
            out = forward(*args)
            loss = tf.reduce_sum(tf.cast(out, tf.float32) * 1e-3)
        return tape.gradient(loss, args)

    return run


def cases(dtype):
    rng = np.random.default_rng(0)
    compute = tf.as_dtype(dtype)
    x_mlm = tf.constant(rng.normal(size=(BATCH * MASKED, HIDDEN)), tf.float32)
    table = tf.constant(rng.normal(size=(VOCAB, HIDDEN)) * 0.02, tf.float32)
    bias = tf.zeros([VOCAB])
    decoder = {
        "float32 (TF)": dict(xla=False),
        "float32 (XLA forward)": dict(xla=True),
        "bfloat16 (TF)": dict(bfloat16=True),
    }
    if dtype == "float32":
        decoder.pop("bfloat16 (TF)")
    for name, kwargs in decoder.items():
        yield (
            "decoder",
            name,
            with_gradient(lambda x, t, b, kwargs=kwargs: layers.decoder_logits(x, t, b, **kwargs)),
            (x_mlm, table, bias),
        )
    wide = tf.cast(tf.constant(rng.normal(size=(BATCH, SEQ, INTER)), tf.float32), compute)
    hidden = tf.cast(tf.constant(rng.normal(size=(BATCH, SEQ, HIDDEN)), tf.float32), compute)
    for fused in (True, False):
        label = "fused" if fused else "plain"
        gelu = layers.get_activation("gelu", fused)
        yield "gelu", label, with_gradient(gelu), (wide,)
        norm = layers.LayerNorm(fused=fused)
        norm.build(hidden.shape)
        yield "layer_norm", label, with_gradient(lambda x, norm=norm: norm(x)), (hidden,)
        dropout = layers.Dropout(0.1, fused=fused, dtype=dtype)
        yield (
            "dropout",
            label,
            with_gradient(lambda x, dropout=dropout: dropout(x, training=True)),
            (wide,),
        )
    if dtype == "float32":
        for fused in (True, False):
            yield "optimizer", "fused" if fused else "plain", *optimizer_case(fused)


def optimizer_case(fused):
    shapes = [(HIDDEN, INTER), (INTER, HIDDEN), (HIDDEN, HIDDEN)] * 4

    class Named:
        def __init__(self, var, path):
            self.value, self.path, self.shape = var, path, var.shape

    variables = [tf.Variable(tf.zeros(s)) for s in shapes]
    opt = optimization.create_optimizer(
        "adamw", [Named(v, f"layer_{i}/dense/kernel") for i, v in enumerate(variables)], fused=fused
    )
    grads = [tf.ones(s) * 1e-3 for s in shapes]

    @tf.function
    def step(*grads):
        opt.apply(list(grads), 1e-4, grad_scale=tf.constant(0.5))
        return tf.constant(0.0)

    return step, tuple(grads)


def matmul_gflops(dtype, size=2048):
    a = tf.cast(tf.random.normal([size, size]) / size**0.5, tf.as_dtype(dtype))
    ms = min(timed(tf.function(lambda a: tf.matmul(a, a)), a) for _ in range(3))
    return 2 * size**3 / ms / 1e6


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    flags = kernels.cpu_flags()
    print(
        f"CPU: {kernels.cpu_model_name()}; kind {kernels.cpu_kind(flags)}; "
        f"{' '.join(sorted(f for f in flags if f.startswith(('amx', 'avx'))))}"
    )
    for dtype in args.dtypes.split(","):
        print(f"\nmatmul {dtype}: {matmul_gflops(dtype):.0f} GFLOP/s")
        rows = list(cases(dtype))
        best = {}
        for rep in range(args.repeats):
            for kernel, choice, fn, inputs in rows if rep % 2 == 0 else rows[::-1]:
                ms = timed(fn, *inputs)
                best[kernel, choice] = min(ms, best.get((kernel, choice), ms))
        print(f"| {dtype} kernel | choice | ms per call (forward + gradient) |")
        print("|---|---|---|")
        for (kernel, choice), ms in best.items():
            print(f"| {kernel} | {choice} | {ms:.1f} |")


if __name__ == "__main__":
    main()
