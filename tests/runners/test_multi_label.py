"""run_classifier.py with several labels per example (--multi_label) and rare classes
(--class_weights), end to end on real data with a tiny random BERT: the WikiGold
multi-label sample (sample_data/wikigold_multilabel: the entity types each sentence
mentions) and a slice of MRPC. Every case runs in one process (the `driver`); the
export is loaded here and answers as test_results.tsv; bad input is one line, exit 2."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT, read_results, write_tiny_config
from tests.helpers.run_classifier_helpers import run_in_one_process

WIKIGOLD = REPO_ROOT / "sample_data" / "wikigold_multilabel"
LABELS = ["LOC", "MISC", "ORG", "PER"]


def train_label_sets(path: pathlib.Path) -> list[set]:
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    return [set(filter(None, row[1].split(","))) for row in rows]


@pytest.fixture(scope="module")
def driver(tmp_path_factory, mrpc_dir, vocab_file):
    root = tmp_path_factory.mktemp("multi_label")
    config_file = write_tiny_config(root / "bert_config.json", dropout=0.0)
    model = (f"--bert_config_file={config_file}", f"--vocab_file={vocab_file}")
    generic = ("--task_name=generic", "--text_a_column=sentence", "--label_column=labels")
    generic += ("--dtype=float32",)  # The export answers as predicted to 1e-5.
    empty = root / "empty"
    empty.mkdir()
    for name in ("train", "dev"):
        rows = (WIKIGOLD / f"{name}.tsv").read_text(encoding="utf-8").splitlines()[:6]
        blank = [rows[0]] + [row.split("\t")[0] + "\t" for row in rows[1:]]
        (empty / f"{name}.tsv").write_text("\n".join(blank) + "\n", encoding="utf-8")

    def out(case):
        return f"--output_dir={root / f'out_{case}'}"

    train = ("--do_train", "--do_eval", "--max_seq_length=32", "--train_batch_size=8")
    cases = {
        "multi": [
            *generic,
            f"--data_dir={WIKIGOLD}",
            *model,
            *train,
            "--do_predict",
            "--multi_label",
            "--class_weights=balanced",
            "--learning_rate=1e-3",
            "--num_train_epochs=2",
            f"--export_dir={root / 'export'}",
            out("multi"),
        ],
        # A new output_dir predicting with the fine-tuned one: multi-label as trained.
        "predict_again": [
            *generic,
            f"--data_dir={WIKIGOLD}",
            "--do_predict",
            "--max_seq_length=32",
            f"--init_checkpoint={root / 'out_multi'}",
            out("predict_again"),
        ],
        "single_from_multi": [
            *generic,
            f"--data_dir={WIKIGOLD}",
            "--do_predict",
            "--max_seq_length=32",
            "--nomulti_label",
            f"--init_checkpoint={root / 'out_multi'}",
            out("single"),
        ],
        "mrpc_balanced": [
            "--task_name=MRPC",
            f"--data_dir={mrpc_dir}",
            *model,
            *train,
            "--class_weights=balanced",
            "--num_train_epochs=1",
            out("mrpc_balanced"),
        ],
        "weights_length": [
            "--task_name=MRPC",
            f"--data_dir={mrpc_dir}",
            *model,
            *train,
            "--class_weights=1,2,3",
            out("weights_length"),
        ],
        "empty_labels": [
            *generic,
            f"--data_dir={empty}",
            *model,
            *train,
            "--multi_label",
            out("empty"),
        ],
    }
    results = run_in_one_process(cases)
    return {"root": root, **results}


def test_multi_label_run_scores_predicts_and_exports(driver):
    assert driver["multi"] == ["no error", ""]
    out = driver["root"] / "out_multi"
    metrics = read_results(out / "eval_results.txt")
    for key in ("eval_micro_f1", "eval_macro_f1", "eval_subset_accuracy", "eval_loss"):
        assert 0.0 <= metrics[key] <= max(1.0, metrics["eval_loss"])
    per_label = [
        metrics[f"eval_{measure}_{label}"]
        for label in LABELS
        for measure in ("precision", "recall", "f1")
    ]
    assert len(per_label) == 12
    assert metrics["eval_macro_f1"] == pytest.approx(
        np.mean([metrics[f"eval_f1_{label}"] for label in LABELS])
    )
    info = json.loads((out / "model_info.json").read_text())
    assert info["multi_label"] is True and info["labels"] == LABELS
    assert (info["label_separator"], info["multi_label_threshold"]) == (",", 0.5)
    # Balanced positive weights: each label's negatives over its positives.
    sets = train_label_sets(WIKIGOLD / "train.tsv")
    counts = [sum(label in s for s in sets) for label in LABELS]
    assert info["class_weights"] == pytest.approx([(len(sets) - n) / n for n in counts])
    # test_results.tsv: one probability per label, then the predicted set.
    rows = [line.split("\t") for line in (out / "test_results.tsv").read_text().splitlines()]
    assert len(rows) == 30 and all(len(row) == 5 for row in rows)
    probabilities = np.array([[float(x) for x in row[:4]] for row in rows])
    assert ((probabilities > 0) & (probabilities < 1)).all()
    for row, p in zip(rows, probabilities):
        assert row[4] == ",".join(label for label, q in zip(LABELS, p) if q > 0.5)
    # Predicting again from output_dir, without --multi_label: the same answers.
    assert driver["predict_again"] == ["no error", ""]
    again = (driver["root"] / "out_predict_again" / "test_results.tsv").read_text()
    assert again == (out / "test_results.tsv").read_text()
    assert driver["single_from_multi"][0] == "UserError"
    assert "multi-label classifier" in driver["single_from_multi"][1]

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    sentences = [
        line.split("\t")[0] for line in (WIKIGOLD / "test.tsv").read_text().splitlines()[1:]
    ]
    answer = tf.saved_model.load(str(driver["root"] / "export")).signatures["serving_text_a"](
        text_a=tf.constant(sentences)
    )
    np.testing.assert_allclose(answer["probabilities"].numpy(), probabilities, atol=1e-5)
    assert [s.decode() for s in answer["labels"].numpy()] == [row[4] for row in rows]
    assert answer["predicted"].numpy().tolist() == (probabilities > 0.5).tolist()


def test_class_weights_and_per_class_metrics_of_a_single_label_task(driver, mrpc_dir):
    assert driver["mrpc_balanced"] == ["no error", ""]
    out = driver["root"] / "out_mrpc_balanced"
    metrics = read_results(out / "eval_results.txt")
    for key in ("eval_accuracy", "eval_f1", "eval_loss", "loss", "global_step"):
        assert key in metrics  # MRPC's own keys stay.
    assert metrics["eval_f1_1"] == pytest.approx(metrics["eval_f1"])  # The same F1.
    assert metrics["eval_macro_f1"] == pytest.approx(
        (metrics["eval_f1_0"] + metrics["eval_f1_1"]) / 2
    )
    lines = (mrpc_dir / "train.tsv").read_text(encoding="utf-8-sig").splitlines()[1:]
    counts = [sum(line.startswith(label) for line in lines) for label in "01"]
    info = json.loads((out / "model_info.json").read_text())
    assert info["class_weights"] == pytest.approx([len(lines) / (2 * n) for n in counts])
    assert driver["weights_length"][0] == "UserError"
    assert "3 weights for 2 labels" in driver["weights_length"][1]
    assert driver["empty_labels"][0] == "UserError"
    assert "empty/train.tsv" in driver["empty_labels"][1]
    assert "holds no label on any row" in driver["empty_labels"][1]


def test_bad_weights_are_one_line_and_exit_2(mrpc_dir, vocab_file, tmp_path):
    process = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "run_classifier.py"),
            "--task_name=MRPC",
            f"--data_dir={mrpc_dir}",
            f"--vocab_file={vocab_file}",
            "--do_train",
            f"--output_dir={tmp_path / 'out'}",
            "--class_weights=1,-2",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
    )
    assert process.returncode == 2
    errors = [line for line in process.stderr.splitlines() if ": error: " in line]
    assert errors == [
        "run_classifier.py: error: --class_weights=1,-2: weight -2 is not positive; "
        "every label's weight must be a positive number"
    ]
