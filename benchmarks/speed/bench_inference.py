"""Inference throughput (`sequence_output` of the encoder): ours, our exported SavedModel,
keras-hub and Hugging Face, in one run.

The inputs are real: the bundled MRPC dev pairs, tokenized by this project's tokenizer
and packed as `[CLS] A [SEP] B [SEP]` to `seq` tokens with padding (the same ids, mask
and segments for every implementation). The weights are random (speed does not depend
on them) in the shapes of bench_training.py. As there, every measurement runs in its own
process, implementations alternate within each repetition, the best repetition counts,
and a matmul chain in the same run gives the hardware limit for MFU. Forward FLOPs per
token: 2 x (encoder weights) + 4 x layers x hidden x seq.

  .venv-bench/bin/python -m benchmarks.speed.bench_inference
  .venv-bench/bin/python -m benchmarks.speed.bench_inference --shapes=small-128 --dtypes=float32 \
      --impls=ours,ours_savedmodel,keras_hub,hf --batch=32 --batches=8 --repeats=3

Implementations:
  ours             BertEncoder(training=False) in a tf.function (--xla: jit_compile).
  ours_savedmodel  the same weights exported by serving.encoder.export_encoder (the TF Hub
                   encoder format) and called through `tf.saved_model.load`.
  keras_hub        keras_hub.models.BertBackbone in a tf.function (mixed_bfloat16 policy
                   for bfloat16).
  hf               transformers.BertModel on PyTorch CPU under torch.inference_mode
                   (torch.autocast to bfloat16 for bfloat16).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import sys
import tempfile
import time

from benchmarks.speed.bench_training import cpu_description, run_worker
from benchmarks.speed.training_workers import (
    SHAPES,
    VOCAB,
    keras_hub_backbone,
    matmul_limit,
    ratio_to_best_peer,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMPLS = ("ours", "ours_savedmodel", "keras_hub", "hf")


def forward_flops_per_sequence(layers, hidden, intermediate, seq):
    weights = layers * (4 * hidden * hidden + 2 * hidden * intermediate)
    return seq * (2 * weights + 4 * layers * hidden * seq)


def real_batches(seq, batch, batches):
    """`batches` batches of MRPC dev pairs packed to `seq`: dicts of int32 arrays."""
    import numpy as np
    from data_prep.text import tokenization

    tokenizer = tokenization.FullTokenizer(
        os.path.join(REPO, "sample_data", "vocab", "uncased_vocab.txt")
    )
    pairs = []
    path = os.path.join(REPO, "sample_data", "glue", "MRPC", "dev.tsv")
    with open(path, encoding="utf-8-sig") as f:
        for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            pairs.append((row["#1 String"], row["#2 String"]))
    rows = {"input_word_ids": [], "input_mask": [], "input_type_ids": []}
    for i in range(batch * batches):
        a, b = (
            tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in pairs[i % len(pairs)]
        )
        tokenization.truncate_seq_pair(a, b, seq - 3)
        ids = [101] + a + [102] + b + [102]
        types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        pad = seq - len(ids)
        rows["input_word_ids"].append(ids + [0] * pad)
        rows["input_mask"].append([1] * len(ids) + [0] * pad)
        rows["input_type_ids"].append(types + [0] * pad)
    arrays = {k: np.asarray(v, "int32") for k, v in rows.items()}
    return [{k: v[i * batch : (i + 1) * batch] for k, v in arrays.items()} for i in range(batches)]


def _our_encoder(shape, dtype):
    import tensorflow as tf
    from modeling.config import BertConfig
    from modeling.encoder import BertEncoder

    layers, hidden, heads, inter, seq = SHAPES[shape]
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=inter,
        max_position_embeddings=512,
        type_vocab_size=2,
    )
    tf.random.set_seed(0)
    encoder = BertEncoder(config, dtype=dtype)
    return encoder


def _time_calls(call, batches, warmup=2):
    for b in batches[:warmup]:
        call(b)
    start = time.perf_counter()
    for b in batches:
        call(b)
    return time.perf_counter() - start


def _time_sequence_output(model, tensors, xla):
    """Times `model`'s `sequence_output` over `tensors` in one tf.function (XLA if
    `xla`)."""
    import tensorflow as tf

    @tf.function(jit_compile=xla)
    def forward(inputs):
        return model(inputs, training=False)["sequence_output"]

    return _time_calls(lambda b: forward(b).numpy(), tensors)


def run_ours(shape, dtype, xla, batches):
    import tensorflow as tf

    encoder = _our_encoder(shape, dtype)
    tensors = [{k: tf.constant(v) for k, v in b.items()} for b in batches]
    return _time_sequence_output(encoder, tensors, xla)


def run_ours_savedmodel(shape, dtype, xla, batches):
    import tensorflow as tf
    from serving import encoder as serving_encoder

    encoder = _our_encoder(shape, dtype)
    vocab = os.path.join(REPO, "sample_data", "vocab", "uncased_vocab.txt")
    with tempfile.TemporaryDirectory() as scratch:
        path = serving_encoder.export_encoder(
            encoder, os.path.join(scratch, "encoder"), vocab, True
        )
        del encoder
        loaded = tf.saved_model.load(path)
        tensors = [{k: tf.constant(v) for k, v in b.items()} for b in batches]
        return _time_calls(lambda b: loaded(b, training=False)["sequence_output"].numpy(), tensors)


def run_keras_hub(shape, dtype, xla, batches):
    import tensorflow as tf

    backbone = keras_hub_backbone(shape, dtype)
    tensors = [
        {
            "token_ids": tf.constant(b["input_word_ids"]),
            "padding_mask": tf.constant(b["input_mask"]),
            "segment_ids": tf.constant(b["input_type_ids"]),
        }
        for b in batches
    ]
    return _time_sequence_output(backbone, tensors, xla)


def run_hf(shape, dtype, xla, batches):
    import torch
    import transformers

    layers, hidden, heads, inter, seq = SHAPES[shape]
    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count())
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=inter,
        max_position_embeddings=512,
    )
    model = transformers.BertModel(config, add_pooling_layer=False).eval()
    tensors = [
        dict(
            input_ids=torch.tensor(b["input_word_ids"], dtype=torch.long),
            attention_mask=torch.tensor(b["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(b["input_type_ids"], dtype=torch.long),
        )
        for b in batches
    ]

    def call(b):
        with (
            torch.inference_mode(),
            torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"),
        ):
            return model(**b).last_hidden_state.float().numpy()

    return _time_calls(call, tensors)


def worker(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.impl == "matmul":
        print(json.dumps({"gflops": matmul_limit(args.dtype)}))
        return
    batches = real_batches(SHAPES[args.shape][4], args.batch, args.batches)
    seconds = globals()[f"run_{args.impl}"](args.shape, args.dtype, args.xla, batches)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "peak_mb": peak_mb}))


def spawn(impl, args, shape="", dtype="float32", xla=False):
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.speed.bench_inference",
        "--worker",
        f"--impl={impl}",
        f"--shape={shape}",
        f"--dtype={dtype}",
        f"--batch={args.batch}",
        f"--batches={args.batches}",
    ] + (["--xla"] if xla else [])
    return run_worker(cmd)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--impl", default="ours")
    parser.add_argument("--shape", default="small-128")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--shapes", default="base-128,small-128")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--xla_modes", default="off", help="off | on | both (TF only)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=6, help="Timed batches per run.")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json_out", default=None)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    xla_modes = {"off": [False], "on": [True], "both": [False, True]}[args.xla_modes]
    configs = [
        (shape, dtype, impl, xla)
        for shape in args.shapes.split(",")
        for dtype in args.dtypes.split(",")
        for impl in args.impls.split(",")
        for xla in (xla_modes if impl != "hf" else [False])
    ]
    limits = {d: [] for d in args.dtypes.split(",")}
    results = {c: [] for c in configs}
    for rep in range(args.repeats):
        for dtype in limits:
            limits[dtype].append(spawn("matmul", args, dtype=dtype)["gflops"])
        for config in configs if rep % 2 == 0 else configs[::-1]:
            shape, dtype, impl, xla = config
            out = spawn(impl, args, shape, dtype, xla)
            results[config].append(out)
            print(
                f"rep {rep} {shape:9s} {dtype:8s} {impl:15s} xla={xla!s:5s} -> {out}",
                file=sys.stderr,
                flush=True,
            )
    rows = []
    for (shape, dtype, impl, xla), outs in results.items():
        good = [o for o in outs if "seconds" in o]
        if not good:
            rows.append(dict(shape=shape, dtype=dtype, impl=impl, xla=xla, error=outs[0]["error"]))
            continue
        layers, hidden, _, inter, seq = SHAPES[shape]
        seqs = args.batch * args.batches / min(o["seconds"] for o in good)
        mfu = (
            seqs * forward_flops_per_sequence(layers, hidden, inter, seq) / 1e9 / max(limits[dtype])
        )
        rows.append(
            dict(
                shape=shape,
                dtype=dtype,
                impl=impl,
                xla=xla,
                seq_per_s=seqs,
                mfu=mfu,
                peak_mb=max(o["peak_mb"] for o in good),
            )
        )
    print(f"\nCPU: {cpu_description()}")
    print(
        "matmul limit (GFLOP/s, best of run): "
        + ", ".join(f"{d} {max(v):.0f}" for d, v in limits.items())
    )
    print(
        f"batch {args.batch} x {args.batches} batches of MRPC dev pairs, best of {args.repeats}\n"
    )
    print("| shape | dtype | impl | XLA | seq/s | MFU | peak MB | vs best peer |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        if "error" in row:
            print(
                f"| {row['shape']} | {row['dtype']} | {row['impl']} | "
                f"{'on' if row['xla'] else 'off'} | error: {row['error']} | | | |"
            )
            continue
        ratio = ratio_to_best_peer(row, rows, lambda impl: not impl.startswith("ours"))
        print(
            f"| {row['shape']} | {row['dtype']} | {row['impl']} | "
            f"{'on' if row['xla'] else 'off'} | {row['seq_per_s']:.1f} | "
            f"{row['mfu']:.0%} | {row['peak_mb']:.0f} | {ratio} |"
        )
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"rows": rows, "matmul_gflops": limits}, f, indent=2)


if __name__ == "__main__":
    main()
