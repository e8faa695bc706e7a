"""Training throughput of this project against keras-hub and Hugging Face, in one run.

Two modes:

  e2e   (default) as a user runs it: `run_pretraining.py` in its own process on real
        shards (made once by `python -m data_prep.create_pretraining_data` from
        sample_data/corpus), with its flags; the peers train the same model on the same
        shards (read by the same tf.data pipeline) with their own training loops:
        keras-hub `BertMaskedLM.fit` with `steps_per_execution`, Hugging Face
        `BertForPreTraining` with torch.optim.AdamW. Every implementation prints a line
        per loop of `--steps_per_loop` steps (ours: the runner's own progress lines),
        which the driver stamps as they arrive. Steady-state throughput is
        batch x (S_last - S_first) / (T_last - T_first) over those lines; time to first
        step is T_first - (process start) - (S_first - 1) x the steady step time, i.e.
        imports, model building, tracing and compilation, input pipeline start and the
        first step; peak memory is the process's maximum resident set.
  loop  the inner training loop on one synthetic in-memory batch (no input pipeline, no
        runner), `--warmup` steps then `--steps` timed.

Each measurement runs in its own process (so memory peaks and thread pools do not
leak between runs); the implementations alternate within each repetition, so they see
the same machine load, and the best repetition counts. A matmul chain measured in the
same run gives the hardware limit for model FLOP utilisation (MFU), and the CPU's model
name and instruction sets are printed with the table.

  .venv-bench/bin/python -m benchmarks.speed.bench_training              # e2e, BERT-base
  .venv-bench/bin/python -m benchmarks.speed.bench_training --mode=loop \
      --shapes=base-128,small-128 \
      --dtypes=float32,bfloat16 --impls=ours,keras_hub,hf --xla_modes=both --repeats=2
  .venv-bench/bin/python -m benchmarks.speed.bench_training --impls=ours --kernels=auto,avx2,plain

Set up the environment with `bash benchmarks/setup_bench_env.sh`.
Model FLOPs per token: 6 x (encoder weights) + 12 x layers x hidden x seq (the
attention score and context products), the same count for every implementation.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from benchmarks import stamped_runs
from benchmarks.speed.training_workers import (
    PREDICTIONS,
    SHAPES,
    bert_config,
    ratio_to_best_peer,
    worker,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = [os.path.join(REPO, "sample_data", "corpus", f"bert_paper_v{i}.txt") for i in (1, 2)]
VOCAB_FILE = os.path.join(REPO, "sample_data", "vocab", "uncased_vocab.txt")

PEERS = ("keras_hub", "hf")


def model_flops_per_sequence(layers, hidden, intermediate, seq):
    per_layer = 4 * hidden * hidden + 2 * hidden * intermediate
    weights = layers * per_layer + hidden * hidden  # encoder matmul weights + pooler
    return seq * (6 * weights + 12 * layers * hidden * seq)


def cpu_description() -> str:
    from modeling import kernels

    flags = kernels.cpu_flags()
    isa = " ".join(sorted(f for f in flags if f.startswith(("amx", "avx", "fma"))))
    return (
        f"{kernels.cpu_model_name()} ({os.cpu_count()} cores; kernels "
        f"{kernels.cpu_kind(flags)}): {isa or 'no AVX'}"
    )


# ------------------------------------------------------------------ driver side


def run_worker(cmd):
    """Runs a worker process; its last JSON line, or {"error": its last stderr line}."""
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        return {"error": (result.stderr.strip().splitlines() or ["?"])[-1][:160]}
    return json.loads(lines[-1])


def worker_command(args, impl, shape, dtype, xla=False, kernels="auto"):
    return [
        sys.executable,
        "-m",
        "benchmarks.speed.bench_training",
        "--worker",
        f"--impl={impl}",
        f"--mode={args.mode}",
        f"--shape={shape}",
        f"--dtype={dtype}",
        f"--batch={args.batch}",
        f"--steps={args.steps}",
        f"--warmup={args.warmup}",
        f"--steps_per_loop={args.steps_per_loop}",
        f"--train_steps={args.train_steps}",
        f"--shards={args.shards}",
        f"--kernels={kernels}",
    ] + (["--xla"] if xla else [])


def make_shards(work: str, seq: int) -> str:
    """Pre-training shards of the bundled corpus, made once by the project's own tool."""
    output = os.path.join(work, f"corpus_seq{seq}.tfrecord")
    if not os.path.exists(output):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "data_prep.create_pretraining_data",
                f"--input_file={','.join(CORPUS)}",
                f"--output_file={output}",
                f"--vocab_file={VOCAB_FILE}",
                "--do_lower_case",
                f"--max_seq_length={seq}",
                f"--max_predictions_per_seq={PREDICTIONS[seq]}",
                "--dupe_factor=5",
            ],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
    return output


def e2e_command(args, impl, shape, dtype, kernels, work, output_dir):
    if impl != "ours":
        return worker_command(args, impl, shape, dtype)
    config_file = os.path.join(work, f"bert_config_{shape}.json")
    with open(config_file, "w") as f:
        json.dump(bert_config(shape), f)
    seq = SHAPES[shape][4]
    return [
        sys.executable,
        os.path.join(REPO, "run_pretraining.py"),
        f"--input_file={args.shards}",
        f"--output_dir={output_dir}",
        f"--bert_config_file={config_file}",
        "--do_train",
        f"--dtype={dtype}",
        f"--train_batch_size={args.batch}",
        f"--max_seq_length={seq}",
        f"--max_predictions_per_seq={PREDICTIONS[seq]}",
        f"--num_train_steps={args.train_steps}",
        "--num_warmup_steps=10",
        "--learning_rate=1e-4",
        f"--steps_per_loop={args.steps_per_loop}",
        f"--save_checkpoints_steps={10**6}",
        f"--kernels={kernels}",
        "--logtostderr",
    ]


STEP_LINE = re.compile(r"(?:^|\] )step (\d+)(?:/\d+)?\b")


def run_e2e(cmd, batch):
    """Runs one e2e process, stamping its progress lines; throughput, time to first
    step and peak memory, or {"error": ...}."""
    run = stamped_runs.run_stamped(
        cmd,
        cwd=REPO,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        echo=False,
        step_line=STEP_LINE,
    )
    step_time = stamped_runs.steady_step_seconds(run["stamps"])
    if run["code"] != 0 or step_time is None:
        return {"error": (run["tail"] or ["?"])[-1][:160]}
    return {
        "seq_per_s": batch / step_time,
        "first_step_s": stamped_runs.first_step_seconds(run["stamps"]),
        "total_s": run["seconds"],
        "peak_mb": run["peak_mb"],
        "stamps": run["stamps"],
    }


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--impl", default="ours", help=argparse.SUPPRESS)
    parser.add_argument("--shape", default="base-128", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--xla", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--shards", default="", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="e2e", choices=["e2e", "loop"])
    parser.add_argument("--impls", default="ours,keras_hub,hf")
    parser.add_argument("--shapes", default="base-128")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument(
        "--kernels",
        default="auto",
        help="Our --kernels choices to compare, comma-separated "
        "(auto, amx, avx512_bf16, avx2, plain).",
    )
    parser.add_argument(
        "--xla_modes", default="off", help="off | on | both (loop mode, TF implementations)"
    )
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10, help="loop mode: timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="loop mode: warm-up steps")
    parser.add_argument(
        "--train_steps", type=int, default=36, help="e2e mode: training steps per run"
    )
    parser.add_argument(
        "--steps_per_loop",
        type=int,
        default=6,
        help="e2e mode: steps per loop (ours: --steps_per_loop; keras-hub: steps_per_execution)",
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--skip",
        default="",
        help="impl:dtype pairs not to run, comma-separated, e.g. "
        "hf:bfloat16 (PyTorch's bfloat16 step takes minutes on CPUs "
        "without bfloat16 units, AMX or AVX512-BF16).",
    )
    parser.add_argument(
        "--work_dir",
        default=None,
        help="e2e: where shards and runs go (default: a temporary folder)",
    )
    parser.add_argument("--json_out", default=None, help="Also write the rows as JSON.")
    args = parser.parse_args()
    if args.train_steps <= args.steps_per_loop:
        parser.error("--train_steps must be more than one loop (--steps_per_loop)")
    return parser, args


def configurations(parser, args):
    xla_modes = {"off": [False], "on": [True], "both": [False, True]}[args.xla_modes]
    if args.mode == "e2e":
        xla_modes = [False]
    skip = {tuple(pair.split(":")) for pair in args.skip.split(",") if pair}
    for pair in skip:
        if len(pair) != 2 or pair[0] not in ("ours",) + PEERS:
            parser.error(
                f"--skip: {':'.join(pair)!r} is not impl:dtype with impl one of "
                f"ours, keras_hub, hf (e.g. hf:bfloat16)"
            )
    configs = []
    for shape in args.shapes.split(","):
        for dtype in args.dtypes.split(","):
            for impl in args.impls.split(","):
                if (impl, dtype) in skip:
                    continue
                for kernels in args.kernels.split(",") if impl == "ours" else ["auto"]:
                    for xla in xla_modes if impl != "hf" else [False]:
                        configs.append((shape, dtype, impl, kernels, xla))
    return configs


def main():
    parser, args = parse_args()
    if args.worker:
        worker(args)
        return
    configs = configurations(parser, args)
    work = args.work_dir or tempfile.mkdtemp(prefix="bench_training_")
    os.makedirs(work, exist_ok=True)
    dtypes = args.dtypes.split(",")
    limits = {d: [] for d in dtypes}
    results = {c: [] for c in configs}
    load = []
    for rep in range(args.repeats):
        load.append(os.getloadavg()[0])
        for dtype in limits:
            limits[dtype].append(
                run_worker(worker_command(args, "matmul", "", dtype)).get("gflops", 0.0)
            )
        # Alternate implementations inside each repetition (same load for each).
        for config in configs if rep % 2 == 0 else configs[::-1]:
            shape, dtype, impl, kernels, xla = config
            if args.mode == "e2e":
                args.shards = make_shards(work, SHAPES[shape][4])
                output_dir = tempfile.mkdtemp(dir=work)  # the runner's; its final
                out = run_e2e(
                    e2e_command(args, impl, shape, dtype, kernels, work, output_dir), args.batch
                )
                shutil.rmtree(output_dir)  # checkpoint is 1.3 GB at BERT-base
            else:
                out = run_worker(worker_command(args, impl, shape, dtype, xla, kernels))
                if "seconds" in out:
                    out["seq_per_s"] = args.batch * args.steps / out["seconds"]
            results[config].append(out)
            print(
                f"rep {rep} {shape:9s} {dtype:8s} {impl:9s} kernels={kernels} xla={xla!s:5s}"
                f" -> {out}",
                file=sys.stderr,
                flush=True,
            )
    load.append(os.getloadavg()[0])
    rows = summarize(args, results, limits)
    print_table(args, rows, limits, load)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(
                {
                    "rows": rows,
                    "matmul_gflops": limits,
                    "cpu": cpu_description(),
                    "load": load,
                    "args": vars(args),
                },
                f,
                indent=2,
            )


def summarize(args, results, limits):
    rows = []
    for (shape, dtype, impl, kernels, xla), outs in results.items():
        good = [o for o in outs if "seq_per_s" in o]
        name = impl if impl != "ours" or kernels == "auto" else f"ours ({kernels})"
        row = dict(shape=shape, dtype=dtype, impl=name, xla=xla)
        if not good:
            rows.append(dict(row, error=outs[0].get("error")))
            continue
        layers, hidden, _, inter, seq = SHAPES[shape]
        seqs = max(o["seq_per_s"] for o in good)  # least disturbed repetition
        limit = max(limits[dtype]) or float("nan")
        rows.append(
            dict(
                row,
                seq_per_s=seqs,
                tokens_per_s=seqs * seq,
                mfu=seqs * model_flops_per_sequence(layers, hidden, inter, seq) / 1e9 / limit,
                first_step_s=min(
                    (o["first_step_s"] for o in good if "first_step_s" in o), default=None
                ),
                peak_mb=max(o["peak_mb"] for o in good),
            )
        )
    return rows


def print_table(args, rows, limits, load):
    print(f"\nCPU: {cpu_description()}")
    print(
        "matmul limit (GFLOP/s, best of run): "
        + ", ".join(f"{d} {max(v):.0f}" for d, v in limits.items())
    )
    print(f"load average (1 min) during the run: {min(load):.1f} to {max(load):.1f}")
    what = (
        f"run_pretraining.py and peers on real shards, {args.train_steps} steps, loops of "
        f"{args.steps_per_loop}"
        if args.mode == "e2e"
        else f"inner loop, {args.steps} timed steps after {args.warmup}"
    )
    print(f"mode {args.mode}: {what}, batch {args.batch}, best of {args.repeats}\n")
    print(
        "| shape | dtype | impl | XLA | seq/s | tokens/s | MFU | first step s | peak MB "
        "| vs best peer |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        head = (
            f"| {row['shape']} | {row['dtype']} | {row['impl']} | {'on' if row['xla'] else 'off'} |"
        )
        if "error" in row:
            print(f"{head} error: {row['error']} | | | | | |")
            continue
        ratio = ratio_to_best_peer(row, rows, lambda impl: impl in PEERS)
        first = "" if row["first_step_s"] is None else f"{row['first_step_s']:.1f}"
        print(
            f"{head} {row['seq_per_s']:.2f} | {row['tokens_per_s']:.0f} | {row['mfu']:.0%} | "
            f"{first} | {row['peak_mb']:.0f} | {ratio} |"
        )


if __name__ == "__main__":
    main()
