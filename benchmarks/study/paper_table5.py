"""The paper's Table 5 (Section 5.1, "Effect of Pre-training Tasks") at a size one
machine affords: four pre-training rows on the same shards, fine-tuned with three seeds.

  python -m benchmarks.study.paper_table5                                # the small scale
  python -m benchmarks.study.paper_table5 --scale=tiny --work_dir=/tmp/t5   # a smoke run
  python -m benchmarks.study.paper_table5 --pretrain_steps=20000 --work_dir=runs/t5_long
  python -m benchmarks.study.paper_table5 --rows=bert --tasks=MRPC --layers=6 --hidden=256 \
      --heads=4 --work_dir=runs/t6_L6      # a row of Table 6 (model size)

Rows (every pre-trained row from the same shards, for the same steps):
  BERT          masked LM + next sentence (run_pretraining.py);
  No NSP        masked LM only (--use_next_sentence_loss=false);
  LTR & No NSP  a left-to-right LM (--objective=ltr): causal attention, next-token
                prediction, the left-only constraint kept at fine-tuning;
  + BiLSTM      the LTR model fine-tuned with a randomly initialised BiLSTM between the
                encoder and each task head (--bilstm_units);
  no pre-training  the same model fine-tuned from random weights: the floor.
Columns: GLUE MRPC dev accuracy (the bundled MRPC), entity F1 on the bundled sciner NER
dev set, and SQuAD v1.1 F1 (answerable questions of the bundled SQuAD sample: 4 articles
to train, the 5th scored by the official rules), each the mean and spread over the
fine-tuning seeds.

The corpus goes through the project's Beam pipeline (data_prep/pretraining_pipeline.py):
by default the bundled raw text (the 5 SQuAD articles as raw documents and the two
versions of the BERT paper, one sentence per line), --corpus names a user's. The
pipeline learns a WordPiece vocabulary from it and writes the shards every row reads.

Every command runs as a user runs it (each runner in its own process), its log beside
its output under --work_dir. A run whose output is complete is not re-run, so a stopped
study resumes where it stopped. The table goes to stdout and WORK_DIR/table5.md, every
figure to WORK_DIR/table5_results.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import statistics
import subprocess
import sys
import time

from modeling.kernels import cpu_model_name

REPO = pathlib.Path(__file__).resolve().parent.parent.parent

SAMPLE_DATA = REPO / "sample_data"

# The paper's Table 5 (BERT-Base architecture, dev sets): the columns this study has.
PAPER = {
    "bert": {"MRPC": 86.7, "SQuAD": 88.5},
    "no_nsp": {"MRPC": 86.5, "SQuAD": 87.9},
    "ltr": {"MRPC": 77.5, "SQuAD": 77.8},
    "ltr_bilstm": {"MRPC": 75.7, "SQuAD": 84.9},
}
ROW_NAMES = {
    "bert": "BERT (MLM + NSP)",
    "no_nsp": "No NSP",
    "ltr": "LTR & No NSP",
    "ltr_bilstm": "+ BiLSTM",
    "random": "no pre-training",
}
# row -> (pre-training run it fine-tunes, or None; run_pretraining flags; BiLSTM)
ROWS = {
    "bert": ("bert", [], False),
    "no_nsp": ("no_nsp", ["--use_next_sentence_loss=false"], False),
    "ltr": ("ltr", ["--objective=ltr"], False),
    "ltr_bilstm": ("ltr", None, True),
    "random": (None, None, False),
}
TASKS = ("MRPC", "NER", "SQuAD")

# Model sizes and run lengths. `epoch_factor` scales every fine-tuning run's epochs.
SCALES = {
    "tiny": dict(
        layers=2, hidden=64, heads=2, intermediate=128, vocab=2000, steps=20, epoch_factor=0.05
    ),
    "small": dict(
        layers=4, hidden=256, heads=4, intermediate=1024, vocab=6000, steps=800, epoch_factor=1.0
    ),
    "base": dict(
        layers=12,
        hidden=768,
        heads=12,
        intermediate=3072,
        vocab=30000,
        steps=100000,
        epoch_factor=1.0,
    ),
}
SEQ, PREDS = 128, 20
# The same for every row: learning rate, batch, epochs, sequence length and window
# stride. sciner's sentences are short: windows of 64 (stride 32) hold nearly all whole.
FINE_TUNING = {
    "MRPC": dict(learning_rate=1e-4, batch=32, epochs=2.0, seq=128),
    "NER": dict(learning_rate=1e-4, batch=16, epochs=6.0, seq=64, stride=32),
    "SQuAD": dict(learning_rate=1e-4, batch=32, epochs=2.0, seq=128, stride=64),
}


def run_command(args: list, log_file: pathlib.Path) -> float:
    """Runs a project command from the repository root, its output in log_file;
    returns its wall time in seconds."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    start = time.time()
    print(f"  $ {' '.join(str(a) for a in args)}", flush=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "w", encoding="utf-8") as log:
        result = subprocess.run(
            [sys.executable, *map(str, args)], cwd=REPO, env=env, stdout=log, stderr=log
        )
    if result.returncode != 0:
        tail = log_file.read_text(encoding="utf-8")[-3000:]
        raise RuntimeError(f"command failed ({result.returncode}); end of {log_file}:\n{tail}")
    elapsed = time.time() - start
    print(f"    done in {elapsed:.0f} s (log: {log_file})", flush=True)
    return elapsed


def read_results(path: pathlib.Path) -> dict:
    results = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition(" = ")
        results[key.strip()] = float(value)
    return results


def timings(work: pathlib.Path) -> dict:
    path = work / "timings.json"
    return json.loads(path.read_text()) if path.exists() else {}


def record_time(work: pathlib.Path, name: str, seconds: float) -> None:
    """Adds `seconds` to the run's wall time (a resumed run's parts add up)."""
    values = timings(work)
    values[name] = values.get(name, 0.0) + seconds
    (work / "timings.json").write_text(json.dumps(values, indent=1))


# ---------------------------------------------------------------------------------
# The corpus.


def prepare_corpus(work: pathlib.Path, corpus: list[tuple[str, str]], vocab_size: int) -> dict:
    """Raw documents -> sentences -> a learned vocabulary and shards (Beam pipeline).

    `corpus`: (glob, format) pairs; raw formats ("text", "jsonl") are split into
    sentences first, then every file is read one sentence per line."""
    data = work / "data"
    shards, vocab = data / "shards", data / "vocab.txt"
    if not (shards / "summary.json").exists():
        sentence_globs = []
        for i, (pattern, fmt) in enumerate(corpus):
            if fmt == "sentences":
                sentence_globs.append(pattern)
                continue
            out = data / f"sentences_{i}"
            run_command(
                [
                    "-m",
                    "data_prep.pretraining_pipeline",
                    f"--input_file={pattern}",
                    f"--input_format={fmt}",
                    f"--output_dir={data / f'raw_{i}'}",
                    f"--sentences_dir={out}",
                    # Read by no stage run here; the flag wants an existing file.
                    f"--vocab_file={SAMPLE_DATA / 'vocab' / 'uncased_vocab.txt'}",
                    "--stop_after=sentences",
                ],
                data / f"sentences_{i}.log",
            )
            sentence_globs.append(str(out / "*.txt"))
        run_command(
            [
                "-m",
                "data_prep.pretraining_pipeline",
                f"--input_file={','.join(sentence_globs)}",
                f"--output_dir={shards}",
                f"--vocab_file={vocab}",
                f"--learn_vocab_size={vocab_size}",
                "--do_lower_case",
                f"--max_seq_length={SEQ}",
                f"--max_predictions_per_seq={PREDS}",
                "--dupe_factor=10",
                "--random_seed=12345",
            ],
            data / "shards.log",
        )
    summary = json.loads((shards / "summary.json").read_text())
    return {"shards": str(shards / "*.tfrecord"), "vocab": str(vocab), "summary": summary}


def write_config(work: pathlib.Path, scale: dict) -> pathlib.Path:
    path = work / "bert_config.json"
    path.write_text(
        json.dumps(
            dict(
                vocab_size=scale["vocab"],
                hidden_size=scale["hidden"],
                num_hidden_layers=scale["layers"],
                num_attention_heads=scale["heads"],
                intermediate_size=scale["intermediate"],
                hidden_act="gelu",
                hidden_dropout_prob=0.1,
                attention_probs_dropout_prob=0.1,
                max_position_embeddings=SEQ,
                type_vocab_size=2,
                initializer_range=0.02,
            ),
            indent=2,
        )
    )
    return path


def squad_split(work: pathlib.Path) -> dict:
    """The SQuAD sample as v1.1: answerable questions of 4 articles to train, the 5th's
    to score (as run_demo.sh)."""
    out = {name: work / "data" / f"squad_{name}.json" for name in ("train", "eval")}
    if not all(path.exists() for path in out.values()):
        sample = SAMPLE_DATA / "squad" / "dev-v2.0-first5articles.json"
        data = json.loads(sample.read_text(encoding="utf-8"))
        for name, articles in (("train", data["data"][:4]), ("eval", data["data"][4:])):
            for article in articles:
                for paragraph in article["paragraphs"]:
                    paragraph["qas"] = [
                        {k: v for k, v in q.items() if k != "is_impossible"}
                        for q in paragraph["qas"]
                        if not q["is_impossible"]
                    ]
            out[name].write_text(json.dumps({"version": "1.1", "data": articles}))
    return out


# ---------------------------------------------------------------------------------
# Pre-training and fine-tuning.


def pretrain(work, name, extra, data, config, steps) -> dict:
    output = work / "pretrain" / name
    if not (output / "eval_results.txt").exists():
        seconds = run_command(
            [
                "run_pretraining.py",
                f"--input_file={data['shards']}",
                f"--output_dir={output}",
                f"--bert_config_file={config}",
                f"--vocab_file={data['vocab']}",
                f"--max_seq_length={SEQ}",
                f"--max_predictions_per_seq={PREDS}",
                "--train_batch_size=32",
                "--eval_batch_size=32",
                f"--num_train_steps={steps}",
                f"--num_warmup_steps={max(1, steps // 10)}",
                "--learning_rate=5e-4",
                "--steps_per_loop=50",
                f"--save_checkpoints_steps={max(steps // 4, 1)}",
                "--max_eval_steps=30",
                "--do_train",
                "--do_eval",
                *extra,
            ],
            work / "pretrain" / f"{name}.log",
        )
        record_time(work, f"pretrain/{name}", seconds)
    return read_results(output / "eval_results.txt")


def fine_tune(work, row, task, seed, model_flags, bilstm_units, squad, factor) -> float:
    """One fine-tuning run; returns its dev figure (accuracy, F1) in percent."""
    output = work / "finetune" / row / f"{task}_seed{seed}"
    settings = FINE_TUNING[task]
    common = [
        *model_flags,
        f"--output_dir={output}",
        "--do_train",
        "--do_eval",
        f"--max_seq_length={settings['seq']}",
        f"--train_batch_size={settings['batch']}",
        "--eval_batch_size=32",
        "--predict_batch_size=32",
        f"--learning_rate={settings['learning_rate']}",
        f"--num_train_epochs={settings['epochs'] * factor}",
        f"--seed={seed}",
        # The model at the end of training is scored: no choosing among epochs on dev.
        "--noevaluate_every_epoch",
        "--save_checkpoints_steps=100000",
        f"--bilstm_units={bilstm_units}",
    ]
    if task == "MRPC":
        script = [
            "run_classifier.py",
            "--task_name=MRPC",
            f"--data_dir={SAMPLE_DATA / 'glue' / 'MRPC'}",
        ]
    elif task == "NER":
        script = [
            "run_ner.py",
            f"--data_dir={SAMPLE_DATA / 'sciner'}",
            f"--doc_stride={settings['stride']}",
        ]
    else:
        script = [
            "run_squad.py",
            f"--train_file={squad['train']}",
            f"--predict_file={squad['eval']}",
            "--do_predict",
            f"--doc_stride={settings['stride']}",
            "--max_query_length=32",
        ]
    results_file = output / "eval_results.txt"
    if not results_file.exists():
        seconds = run_command(script + common, output.parent / f"{task}_seed{seed}.log")
        record_time(work, f"finetune/{row}/{task}_seed{seed}", seconds)
    results = read_results(results_file)
    value = {"MRPC": "eval_accuracy", "NER": "eval_f1", "SQuAD": "f1"}[task]
    return results[value] * (1.0 if task == "SQuAD" else 100.0)


# ---------------------------------------------------------------------------------
# The table.


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    mean = statistics.fmean(values)
    if len(values) == 1:
        return f"{mean:.1f}"
    return f"{mean:.1f} ± {statistics.stdev(values):.1f}"


def table(results: dict, pretraining: dict, rows: list[str], tasks: list[str]) -> str:
    head = ["row", *[f"{t} ({'F1' if t != 'MRPC' else 'acc'})" for t in tasks]]
    head += ["paper MRPC", "paper SQuAD", "pre-training eval"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in [r for r in ROWS if r in rows]:  # The paper's order, whatever the run's.
        cells = [ROW_NAMES[row]]
        cells += [spread(results.get(row, {}).get(task, [])) for task in tasks]
        paper = PAPER.get(row, {})
        cells += [str(paper.get("MRPC", "")), str(paper.get("SQuAD", ""))]
        cells.append(pretraining_cell(pretraining.get(ROWS[row][0])))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pretraining_cell(results: dict | None) -> str:
    if not results:
        return ""
    if "next_token_accuracy" in results:
        return (
            f"next-token acc {results['next_token_accuracy']:.3f}, ppl {results['perplexity']:.1f}"
        )
    return (
        f"MLM acc {results['masked_lm_accuracy']:.3f}, "
        f"ppl {math.exp(results['masked_lm_loss']):.1f}"
    )


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--pretrain_steps", type=int, help="default: the scale's")
    parser.add_argument("--layers", type=int, help="L (default: the scale's)")
    parser.add_argument("--hidden", type=int, help="H (default: the scale's); I = 4H")
    parser.add_argument("--heads", type=int, help="A (default: the scale's)")
    parser.add_argument("--seeds", default="1,2,3", help="fine-tuning seeds")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"of {', '.join(ROWS)}")
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"of {', '.join(TASKS)}")
    parser.add_argument(
        "--corpus",
        action="append",
        help="GLOB:FORMAT (format sentences, text or jsonl), repeatable; default: the "
        "bundled raw SQuAD articles (jsonl) and the BERT paper (sentences)",
    )
    parser.add_argument("--work_dir", default=str(REPO / "runs" / "paper_table5"))
    args = parser.parse_args()
    args.rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    for name, given, known in (("rows", args.rows, ROWS), ("tasks", args.tasks, TASKS)):
        unknown = [x for x in given if x not in known]
        if unknown:
            parser.error(f"unknown --{name} {unknown}; choose from {', '.join(known)}")
    args.corpus = (
        [tuple(c.rsplit(":", 1)) for c in args.corpus]
        if args.corpus
        else [
            (str(SAMPLE_DATA / "raw" / "*.jsonl"), "jsonl"),
            (str(SAMPLE_DATA / "corpus" / "*.txt"), "sentences"),
        ]
    )
    return args


def main() -> int:
    args = parse_args()
    scale = dict(SCALES[args.scale])
    for key in ("layers", "hidden", "heads"):  # Table 6's model sizes.
        if getattr(args, key):
            scale[key] = getattr(args, key)
    if args.hidden:
        scale["intermediate"] = 4 * args.hidden
    steps = args.pretrain_steps or scale["steps"]
    seeds = [int(s) for s in args.seeds.split(",")]
    work = pathlib.Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    start = time.time()
    print(f"== corpus -> vocabulary and shards ({work / 'data'})", flush=True)
    data = prepare_corpus(work, args.corpus, scale["vocab"])
    config = write_config(work, scale)
    squad = squad_split(work)
    results, pretraining = {}, {}
    for row in args.rows:
        source, extra, bilstm = ROWS[row]
        if source is not None and source not in pretraining:
            print(f"== pre-training {source}: {steps} steps", flush=True)
            flags = ROWS[source][1]
            pretraining[source] = pretrain(work, source, flags, data, config, steps)
        if source is None:
            model_flags = [f"--bert_config_file={config}", f"--vocab_file={data['vocab']}"]
        else:
            model_flags = [f"--init_checkpoint={work / 'pretrain' / source}"]
        units = scale["hidden"] // 2 if bilstm else 0
        for task in args.tasks:
            for seed in seeds:
                print(f"== {ROW_NAMES[row]}: {task}, seed {seed}", flush=True)
                value = fine_tune(
                    work, row, task, seed, model_flags, units, squad, scale["epoch_factor"]
                )
                results.setdefault(row, {}).setdefault(task, []).append(value)
    text = table(results, pretraining, args.rows, args.tasks)
    header = (
        f"Table 5 at scale {args.scale} (L={scale['layers']}, H={scale['hidden']}, "
        f"A={scale['heads']}, vocab {scale['vocab']}, {steps} pre-training steps of batch 32 "
        f"at length {SEQ}; {data['summary']['instances']} instances from "
        f"{data['summary']['tokens']} tokens), fine-tuning seeds {seeds}; mean ± standard "
        f"deviation. {cpu_model_name()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}; "
        f"this invocation {time.time() - start:.0f} s."
    )
    print("\n" + header + "\n\n" + text)
    (work / "table5.md").write_text(header + "\n\n" + text + "\n")
    (work / "table5_results.json").write_text(
        json.dumps(
            {
                "scale": args.scale,
                "pretrain_steps": steps,
                "seeds": seeds,
                "fine_tuning": FINE_TUNING,
                "results": results,
                "pretraining": pretraining,
                "timings_s": timings(work),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
