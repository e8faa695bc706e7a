"""Training throughput of this project against keras-hub and Hugging Face, in one run.

Each measurement runs in its own process (so memory peaks and thread pools do not
leak between runs); the implementations alternate within each repetition, so they see
the same machine load. A matmul chain measured in the same run gives the hardware limit
for model FLOP utilisation (MFU).

  .venv-bench/bin/python benchmarks/bench_training.py              # the default table
  .venv-bench/bin/python benchmarks/bench_training.py --shapes base-128,small-128 \
      --dtypes float32,bfloat16 --impls ours,keras_hub,hf --xla both --repeats 2

Set up the environment with `bash benchmarks/setup_bench_env.sh`.
Model FLOPs per token: 6 x (encoder weights) + 12 x layers x hidden x seq (the
attention score and context products), the same count for every implementation.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SHAPES = {  # layers, hidden, heads, intermediate, seq
    "base-128": (12, 768, 12, 3072, 128),
    "base-512": (12, 768, 12, 3072, 512),
    "small-128": (6, 384, 12, 1536, 128),
}
VOCAB = 30522
PREDICTIONS = {128: 20, 512: 76}


def model_flops_per_sequence(layers, hidden, intermediate, seq):
    per_layer = 4 * hidden * hidden + 2 * hidden * intermediate
    weights = layers * per_layer + hidden * hidden  # encoder matmul weights + pooler
    return seq * (6 * weights + 12 * layers * hidden * seq)


# ------------------------------------------------------------------ worker side


def synthetic_batch(batch, seq, preds, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, VOCAB, size=(batch, seq)).astype("int32")
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq), preds, replace=False)
                                  for _ in range(batch)]), axis=1).astype("int32")
    return {"input_word_ids": ids, "input_mask": np.ones_like(ids),
            "input_type_ids": np.zeros_like(ids), "masked_lm_positions": positions,
            "masked_lm_ids": np.take_along_axis(ids, positions, 1),
            "masked_lm_weights": np.ones(positions.shape, "float32"),
            "next_sentence_labels": rng.integers(0, 2, size=(batch, 1)).astype("int32")}


def run_ours(shape, dtype, xla, batch, steps, warmup):
    import tensorflow as tf
    import tempfile
    from modeling import training
    from modeling.config import BertConfig
    from modeling.encoder import BertEncoder
    from modeling.models import BertPretrainer
    from modeling.tasks import PretrainingTask

    layers, hidden, heads, inter, seq = SHAPES[shape]
    config = BertConfig(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=inter,
                        max_position_embeddings=512, type_vocab_size=2)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = BertPretrainer(BertEncoder(config, dtype=dtype), config)
    data = synthetic_batch(batch, seq, PREDICTIONS[seq])
    trainer = training.Trainer(strategy, model, PretrainingTask(), tempfile.mkdtemp(),
                               learning_rate=1e-4, num_train_steps=10 ** 9, dtype=dtype,
                               steps_per_loop=steps, enable_xla=xla)
    dataset = strategy.distribute_datasets_from_function(
        lambda ctx: tf.data.Dataset.from_tensors(data).repeat())
    iterator = iter(dataset)
    loop = trainer._make_train_loop()
    float(loop(iterator, tf.constant(warmup))[0])
    start = time.perf_counter()
    loss = float(loop(iterator, tf.constant(steps))[0])
    return time.perf_counter() - start, loss


def run_keras_hub(shape, dtype, xla, batch, steps, warmup):
    import keras
    import keras_hub
    import tensorflow as tf

    layers, hidden, heads, inter, seq = SHAPES[shape]
    keras.config.set_dtype_policy({"float32": "float32", "bfloat16": "mixed_bfloat16"}[dtype])
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=VOCAB, num_layers=layers, num_heads=heads, hidden_dim=hidden,
        intermediate_dim=inter, max_sequence_length=512, num_segments=2)
    model = keras_hub.models.BertMaskedLM(backbone=backbone, preprocessor=None)
    model.compile(optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.01, epsilon=1e-6,
                                                   global_clipnorm=1.0),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=xla, steps_per_execution=steps)
    data = synthetic_batch(batch, seq, PREDICTIONS[seq])
    x = {"token_ids": data["input_word_ids"], "padding_mask": data["input_mask"],
         "segment_ids": data["input_type_ids"], "mask_positions": data["masked_lm_positions"]}
    ds = tf.data.Dataset.from_tensors((x, data["masked_lm_ids"])).repeat()
    model.fit(ds, steps_per_epoch=warmup, epochs=1, verbose=0)
    start = time.perf_counter()
    history = model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0)
    return time.perf_counter() - start, float(history.history["loss"][-1])


def run_hf(shape, dtype, xla, batch, steps, warmup):
    import torch
    import transformers

    layers, hidden, heads, inter, seq = SHAPES[shape]
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=hidden,
                                     num_hidden_layers=layers, num_attention_heads=heads,
                                     intermediate_size=inter, max_position_embeddings=512)
    model = transformers.BertForPreTraining(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)
    data = synthetic_batch(batch, seq, PREDICTIONS[seq])
    labels = torch.full((batch, seq), -100, dtype=torch.long)
    positions = torch.tensor(data["masked_lm_positions"], dtype=torch.long)
    labels.scatter_(1, positions, torch.tensor(data["masked_lm_ids"], dtype=torch.long))
    inputs = dict(input_ids=torch.tensor(data["input_word_ids"], dtype=torch.long),
                  attention_mask=torch.tensor(data["input_mask"], dtype=torch.long),
                  token_type_ids=torch.tensor(data["input_type_ids"], dtype=torch.long),
                  labels=labels,
                  next_sentence_label=torch.tensor(data["next_sentence_labels"][:, 0],
                                                   dtype=torch.long))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
            loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        return float(loss)

    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    return time.perf_counter() - start, loss


def matmul_limit(dtype, size=2048, reps=20):
    """GFLOP/s of a chain of size x size matmuls in TensorFlow (the hardware limit)."""
    import tensorflow as tf
    tf_dtype = {"float32": tf.float32, "bfloat16": tf.bfloat16}[dtype]
    a = tf.random.normal([size, size], dtype=tf.float32)
    a = tf.cast(a / size ** 0.5, tf_dtype)

    @tf.function
    def chain(x):
        for _ in range(reps):
            x = tf.matmul(x, a)
        return x

    chain(a).numpy()
    start = time.perf_counter()
    chain(a).numpy()
    return 2 * size ** 3 * reps / (time.perf_counter() - start) / 1e9


def worker(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, REPO)
    if args.impl == "matmul":
        print(json.dumps({"gflops": matmul_limit(args.dtype)}))
        return
    fn = {"ours": run_ours, "keras_hub": run_keras_hub, "hf": run_hf}[args.impl]
    seconds, loss = fn(args.shape, args.dtype, args.xla, args.batch, args.steps, args.warmup)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "loss": loss, "peak_mb": peak_mb}))


# ------------------------------------------------------------------ driver side


def spawn(impl, shape="", dtype="float32", xla=False, batch=8, steps=10, warmup=3):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", f"--impl={impl}",
           f"--shape={shape}", f"--dtype={dtype}", f"--batch={batch}", f"--steps={steps}",
           f"--warmup={warmup}"] + (["--xla"] if xla else [])
    return run_worker(cmd)


def run_worker(cmd):
    """Runs a worker process; its last JSON line, or {"error": its last stderr line}."""
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        return {"error": (result.stderr.strip().splitlines() or ["?"])[-1][:160]}
    return json.loads(lines[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--impl", default="ours")
    parser.add_argument("--impls", default="ours,keras_hub,hf")
    parser.add_argument("--shape", default="base-128")
    parser.add_argument("--shapes", default="base-128,small-128")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--xla_modes", default="off", help="off | on | both (TF peers only)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip", default="",
                        help="impl:dtype pairs not to run, comma-separated, e.g. "
                             "hf:bfloat16 (PyTorch's bfloat16 step takes minutes on CPUs "
                             "without bfloat16 units, AMX or AVX512-BF16).")
    parser.add_argument("--json_out", default=None, help="Also write the rows as JSON.")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    xla_modes = {"off": [False], "on": [True], "both": [False, True]}[args.xla_modes]
    skip = {tuple(pair.split(":")) for pair in args.skip.split(",") if pair}
    for pair in skip:
        if len(pair) != 2 or pair[0] not in ("ours", "keras_hub", "hf"):
            parser.error(f"--skip: {':'.join(pair)!r} is not impl:dtype with impl one of "
                         f"ours, keras_hub, hf (e.g. hf:bfloat16)")
    configs = []
    for shape in args.shapes.split(","):
        for dtype in args.dtypes.split(","):
            for impl in args.impls.split(","):
                if (impl, dtype) in skip:
                    continue
                for xla in (xla_modes if impl != "hf" else [False]):
                    configs.append((shape, dtype, impl, xla))
    limits = {d: [] for d in args.dtypes.split(",")}
    results = {c: [] for c in configs}
    for rep in range(args.repeats):
        for dtype in limits:
            limits[dtype].append(spawn("matmul", dtype=dtype)["gflops"])
        # Alternate implementations inside each repetition (same load for each).
        order = configs if rep % 2 == 0 else configs[::-1]
        for config in order:
            shape, dtype, impl, xla = config
            out = spawn(impl, shape, dtype, xla, args.batch, args.steps, args.warmup)
            results[config].append(out)
            print(f"rep {rep} {shape:9s} {dtype:8s} {impl:9s} xla={xla!s:5s} -> {out}",
                  file=sys.stderr, flush=True)

    rows = []
    for (shape, dtype, impl, xla), outs in results.items():
        good = [o for o in outs if "seconds" in o]
        if not good:
            rows.append(dict(shape=shape, dtype=dtype, impl=impl, xla=xla,
                             error=outs[0].get("error")))
            continue
        layers, hidden, _, inter, seq = SHAPES[shape]
        best = min(o["seconds"] for o in good)  # least disturbed repetition
        seqs = args.batch * args.steps / best
        limit = max(limits[dtype])
        mfu = seqs * model_flops_per_sequence(layers, hidden, inter, seq) / 1e9 / limit
        rows.append(dict(shape=shape, dtype=dtype, impl=impl, xla=xla, seq_per_s=seqs,
                         tokens_per_s=seqs * seq, mfu=mfu,
                         peak_mb=max(o["peak_mb"] for o in good)))
    print_table(rows, limits)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"rows": rows, "matmul_gflops": limits}, f, indent=2)


def print_table(rows, limits):
    print("\nmatmul limit (GFLOP/s, best of run): " +
          ", ".join(f"{d} {max(v):.0f}" for d, v in limits.items()))
    print("\n| shape | dtype | impl | XLA | seq/s | tokens/s | MFU | peak MB | vs best peer |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        if "error" in row:
            print(f"| {row['shape']} | {row['dtype']} | {row['impl']} | {row['xla']} | "
                  f"error: {row['error']} | | | | |")
            continue
        peers = [r["seq_per_s"] for r in rows if "error" not in r and r["impl"] != "ours"
                 and r["shape"] == row["shape"] and r["dtype"] == row["dtype"]]
        ratio = f"{row['seq_per_s'] / max(peers):.2f}x" if peers and row["impl"] == "ours" \
            else ""
        print(f"| {row['shape']} | {row['dtype']} | {row['impl']} | {'on' if row['xla'] else 'off'}"
              f" | {row['seq_per_s']:.2f} | {row['tokens_per_s']:.0f} | {row['mfu']:.0%} | "
              f"{row['peak_mb']:.0f} | {ratio} |")


if __name__ == "__main__":
    main()
