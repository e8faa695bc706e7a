"""Helpers of the run_classifier.py tests: running run_classifier.py (or another
runner, several runs in one process), reading its tsv outputs, a slice of the real
MRPC files, hand-made SWAG files.
"""

import csv
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np

from tests.conftest import SWAG_HEADER, run_results_driver

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
SCRIPT = REPO / "run_classifier.py"

# Dev and test end in partial batches (of 6 and 5 at batch size 8).
MRPC_TRAIN, MRPC_DEV, MRPC_TEST = 64, 30, 13


def _run(args, vocab_file, check=True, env=None):
    """Runs run_classifier.py; returns the CompletedProcess."""
    command = [sys.executable, str(SCRIPT), f"--vocab_file={vocab_file}", *args]
    process = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {})),
    )
    if check and process.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed:\n{process.stderr[-5000:]}")
    return process


_DRIVER = textwrap.dedent("""
    import importlib, json, sys, traceback
    runner = importlib.import_module(sys.argv[2])
    results = {}
    for name, argv in json.loads(sys.argv[1]).items():
        runner.FLAGS.unparse_flags()
        runner.FLAGS([runner.__name__ + ".py", *argv])
        try:
            runner.main([])
            results[name] = ["no error", ""]
        except Exception as e:
            traceback.print_exc()
            results[name] = [type(e).__name__, str(e)]
    print("RESULTS" + json.dumps(results))
""")


def run_runner_in_one_process(runner: str, runs: dict) -> dict:
    """Runs `runner.main` (the module's name: "run_classifier", "run_squad", ...) once
    per {name: argv}, one after the other in one new process (one TensorFlow start-up);
    {name: [error type or "no error", message]}."""
    return run_results_driver(_DRIVER, runs, runner, timeout=900)


def run_in_one_process(runs: dict, vocab_file=None) -> dict:
    """Runs run_classifier.main once per {name: argv} (after `--vocab_file` when given),
    one after the other in one new process (one TensorFlow start-up); {name: [error
    type or "no error", message]}."""
    if vocab_file:
        runs = {name: [f"--vocab_file={vocab_file}", *argv] for name, argv in runs.items()}
    return run_runner_in_one_process("run_classifier", runs)


def _read_tsv(path) -> np.ndarray:
    with open(path, encoding="utf-8") as f:
        return np.array([[float(x) for x in line.rstrip("\n").split("\t")] for line in f])


def _copy_head(source: pathlib.Path, target: pathlib.Path, rows: int) -> None:
    """The header and the first `rows` rows of a file, bytes unchanged (BOM kept)."""
    with open(source, "rb") as f:
        lines = f.read().split(b"\n")
    target.write_bytes(b"\n".join(lines[: rows + 1]) + b"\n")


_ACTIONS = (
    "walks to the door",
    "picks up the cup",
    "opens the box",
    "sits on the bench",
    "looks at the sky",
    "turns on the light",
)
_WRONG = ("falls asleep sadly.", "cries sadly.", "leaves sadly.")


def _swag_rows(count: int, offset: int) -> list[tuple[str, str, list[str], int]]:
    """Scenes whose right ending is the only one with "happily"."""
    rows = []
    for i in range(count):
        label = (i * 3 + offset) % 4
        endings = list(_WRONG)
        endings.insert(label, "smiles happily.")
        action = _ACTIONS[(i + offset) % len(_ACTIONS)]
        rows.append((f"the man {action}.", "then he", endings, label))
    return rows


def _write_swag(directory: pathlib.Path) -> list[int]:
    for name, rows, labelled in (
        ("train.csv", _swag_rows(80, 0), True),
        ("val.csv", _swag_rows(16, 1), True),
        ("test.csv", _swag_rows(16, 1), False),
    ):
        with open(directory / name, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(SWAG_HEADER + ["label"] if labelled else SWAG_HEADER)
            for i, (sent1, sent2, endings, label) in enumerate(rows):
                row = [i, f"lsmdc{i}", i, f"{sent1} {sent2}", sent1, sent2, "gold", *endings]
                writer.writerow(row + [label] if labelled else row)
    return [label for *_, label in _swag_rows(16, 1)]


def _write_lines(path: pathlib.Path, lines) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def per_class_keys(labels, prefixes=("eval_",)) -> set[str]:
    """The keys that a classification task's eval_results.txt adds to its own: macro F1
    and each class's precision, recall and F1, for each evaluation split's prefix."""
    return {
        key
        for prefix in prefixes
        for key in (
            f"{prefix}macro_f1",
            *(f"{prefix}{m}_{label}" for m in ("precision", "recall", "f1") for label in labels),
        )
    }
