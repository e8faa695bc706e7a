"""End-to-end tests of run_classifier.py on small data in the real task layouts.

The runner runs in subprocesses: its absl flags would clash with other runners'
in one test process, and a mirrored run must split the CPU into logical devices
before TensorFlow initialises. The model is a tiny random BERT (2 layers, hidden
32) with the bundled uncased vocabulary.
"""

import csv
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from scipy import stats

from tests.conftest import SWAG_HEADER, read_results, run_results_driver, write_tiny_config

REPO = pathlib.Path(__file__).resolve().parent.parent
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


def _read_tsv(path) -> np.ndarray:
    with open(path, encoding="utf-8") as f:
        return np.array([[float(x) for x in line.rstrip("\n").split("\t")] for line in f])


def _copy_head(source: pathlib.Path, target: pathlib.Path, rows: int) -> None:
    """The header and the first `rows` rows of a file, bytes unchanged (BOM kept)."""
    with open(source, "rb") as f:
        lines = f.read().split(b"\n")
    target.write_bytes(b"\n".join(lines[: rows + 1]) + b"\n")


# ----------------------------------------------------------------------------
# MRPC: a slice of the real files.
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mrpc_dir(tmp_path_factory, sample_data):
    directory = tmp_path_factory.mktemp("MRPC")
    source = sample_data / "glue" / "MRPC"
    for name, rows in (("train.tsv", MRPC_TRAIN), ("dev.tsv", MRPC_DEV), ("test.tsv", MRPC_TEST)):
        _copy_head(source / name, directory / name, rows)
    return directory


def _mrpc_flags(data_dir, config_file, output_dir, *extra):
    # No dropout, so that one-device and mirrored runs compute the same steps.
    return [
        "--task_name=MRPC",
        f"--data_dir={data_dir}",
        f"--bert_config_file={config_file}",
        "--do_train",
        "--do_eval",
        "--do_predict",
        "--max_seq_length=32",
        "--train_batch_size=8",
        "--num_train_epochs=2",
        "--learning_rate=1e-3",
        "--steps_per_loop=3",
        "--seed=7",
        f"--output_dir={output_dir}",
        *extra,
    ]


@pytest.fixture(scope="module")
def mrpc_run(tmp_path_factory, mrpc_dir, vocab_file):
    """(output_dir, flags) of one training run with evaluation and prediction."""
    directory = tmp_path_factory.mktemp("mrpc_run")
    config_file = write_tiny_config(directory / "bert_config.json", dropout=0.0)
    flags = _mrpc_flags(mrpc_dir, config_file, directory / "out")
    _run(flags, vocab_file)
    return directory / "out", flags


def test_mrpc_end_to_end(mrpc_run, mrpc_dir):
    output_dir, _ = mrpc_run
    results = read_results(output_dir / "eval_results.txt")
    assert set(results) == {"eval_accuracy", "eval_f1", "eval_loss", "loss", "global_step"}
    # 64 examples / 8 per batch * 2 epochs: an evaluation after steps 8 and 16; the
    # results are those of the better one, the model kept in best/.
    history = json.loads((output_dir / "eval_history.json").read_text())
    assert [h["global_step"] for h in history] == [8, 16]
    for h in history:
        assert h["score"] == pytest.approx((h["eval_accuracy"] + h["eval_f1"]) / 2)
    best = max(history, key=lambda h: h["score"])
    assert results["global_step"] == best["global_step"]
    for key in ("eval_accuracy", "eval_f1", "eval_loss"):
        assert results[key] == pytest.approx(best[key], rel=1e-5)
    assert (output_dir / "best" / f"best-{best['global_step']}.index").is_file()

    probabilities = _read_tsv(output_dir / "test_results.tsv")
    assert probabilities.shape == (MRPC_TEST, 2)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)
    assert np.all((probabilities > 0) & (probabilities < 1))

    with open(output_dir / "MRPC.tsv", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    assert rows[0] == ["index", "prediction"]
    with open(mrpc_dir / "test.tsv", encoding="utf-8") as f:
        test_indices = [line.split("\t")[0] for line in f.read().splitlines()[1:]]
    assert [row[0] for row in rows[1:]] == test_indices
    assert [row[1] for row in rows[1:]] == [str(i) for i in probabilities.argmax(axis=1)]

    config = json.loads((output_dir / "run_config.json").read_text())
    assert config["task_name"] == "MRPC" and config["num_train_steps"] == 16
    assert config["num_warmup_steps"] == 1 and config["labels"] == ["0", "1"]
    metadata = json.loads((output_dir / "train.tf_record.meta.json").read_text())
    assert metadata["num_examples"] == MRPC_TRAIN and metadata["max_seq_length"] == 32


def test_mrpc_second_run_resumes_without_training(mrpc_run, vocab_file, tmp_path):
    output_dir, flags = mrpc_run
    copy = tmp_path / "out"
    shutil.copytree(output_dir, copy)
    files = {p.name: p.stat().st_mtime_ns for p in copy.iterdir() if p.is_file()}
    flags = [f for f in flags if not f.startswith("--output_dir")]
    _run([*flags, f"--output_dir={copy}"], vocab_file)

    (log_file,) = [p for p in copy.glob("run_classifier.*.INFO.*") if p.name not in files]
    log = log_file.read_text(encoding="utf-8")
    assert "Resumed from" in log and "Already trained 16 steps" in log
    assert "Reusing" in log  # the TFRecord cache
    after = {p.name: p.stat().st_mtime_ns for p in copy.iterdir() if p.is_file()}
    for name in (
        "ckpt-16.index",
        "train.tf_record",
        "dev.tf_record",
        "test.tf_record",
        "eval_history.json",
    ):
        assert after[name] == files[name], name
    assert sorted(n for n in after if n.startswith("ckpt-")) == sorted(
        n for n in files if n.startswith("ckpt-")
    )
    assert read_results(copy / "eval_results.txt") == pytest.approx(
        read_results(output_dir / "eval_results.txt"), rel=1e-6
    )
    np.testing.assert_allclose(
        _read_tsv(copy / "test_results.tsv"), _read_tsv(output_dir / "test_results.tsv"), rtol=1e-5
    )


@pytest.mark.slow
def test_mirrored_on_two_cpus_matches_one_device(mrpc_run, mrpc_dir, vocab_file, tmp_path):
    output_dir, _ = mrpc_run
    config_file = write_tiny_config(tmp_path / "bert_config.json", dropout=0.0)
    _run(
        _mrpc_flags(
            mrpc_dir,
            config_file,
            tmp_path / "out",
            "--distribution_strategy=mirrored",
            "--num_cpu_devices=2",
        ),
        vocab_file,
    )
    summary = json.loads((tmp_path / "out" / "train_summary.json").read_text())
    assert summary["num_replicas"] == 2 and summary["replica_max_diff"] == 0.0
    one = json.loads((output_dir / "eval_history.json").read_text())
    two = json.loads((tmp_path / "out" / "eval_history.json").read_text())
    assert len(one) == len(two) == 2
    for a, b in zip(one, two):
        assert a["global_step"] == b["global_step"]
        assert a["eval_accuracy"] == b["eval_accuracy"]
        assert b["eval_loss"] == pytest.approx(a["eval_loss"], rel=1e-4)
    np.testing.assert_allclose(
        _read_tsv(tmp_path / "out" / "test_results.tsv"),
        _read_tsv(output_dir / "test_results.tsv"),
        atol=1e-4,
    )


def test_hub_module_gives_the_same_metrics_as_the_checkpoint(mrpc_dir, vocab_file, tmp_path):
    """--hub_module_url with an encoder exported by this project fine-tunes to the same
    model as --init_checkpoint with the same weights (no dropout, so both runs compute
    the same steps): the same eval metrics and test probabilities."""
    from modeling import checkpoints
    from serving import encoder as serving_encoder
    from modeling.config import BertConfig
    from modeling.encoder import BertEncoder

    config_file = write_tiny_config(tmp_path / "bert_config.json", dropout=0.0)
    encoder = BertEncoder(BertConfig.from_json_file(config_file))
    checkpoint = checkpoints.write_original_checkpoint(str(tmp_path / "bert_model.ckpt"), encoder)
    serving_encoder.export_encoder(encoder, str(tmp_path / "hub"), vocab_file, do_lower_case=True)
    runs = {
        "checkpoint": [
            "--task_name=MRPC",
            f"--data_dir={mrpc_dir}",
            f"--bert_config_file={config_file}",
            f"--init_checkpoint={checkpoint}",
        ],
        "hub": [
            "--task_name=MRPC",
            f"--data_dir={mrpc_dir}",
            f"--hub_module_url={tmp_path / 'hub'}",
        ],
    }
    for name, model_flags in runs.items():
        _run(
            [
                *model_flags,
                "--do_train",
                "--do_eval",
                "--do_predict",
                "--max_seq_length=32",
                "--train_batch_size=8",
                "--num_train_epochs=2",
                "--learning_rate=1e-3",
                "--seed=3",
                f"--output_dir={tmp_path / name}",
            ],
            vocab_file,
        )
    one, two = (read_results(tmp_path / name / "eval_results.txt") for name in runs)
    assert set(one) == set(two)  # global_step: the best epoch's, the same in both
    for key in one:
        assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key
    np.testing.assert_allclose(
        _read_tsv(tmp_path / "hub" / "test_results.tsv"),
        _read_tsv(tmp_path / "checkpoint" / "test_results.tsv"),
        atol=1e-4,
    )
    # Training moved the weights: the runs did not merely agree on an untrained model.
    history = json.loads((tmp_path / "hub" / "eval_history.json").read_text())
    assert [h["global_step"] for h in history] == [8, 16]
    assert history[0]["eval_loss"] != history[-1]["eval_loss"]


# ----------------------------------------------------------------------------
# STS-B (regression) and SWAG (multiple choice): hand-made, learnable samples.
# ----------------------------------------------------------------------------

_SUBJECTS = ("the car", "a house", "my hat", "the door", "his boat", "her bike")
_COLOURS = {"red": 0.5, "green": 2.5, "blue": 4.5}


def _stsb_rows(count: int, offset: int) -> list[tuple[str, str, float]]:
    """Pairs whose score is set by the colour word of the second sentence."""
    rows = []
    for i in range(count):
        subject = _SUBJECTS[(i + offset) % len(_SUBJECTS)]
        colour = list(_COLOURS)[(i * 7 + offset) % len(_COLOURS)]
        rows.append((f"{subject} is here.", f"{colour} {subject}.", _COLOURS[colour]))
    return rows


def _write_stsb(directory: pathlib.Path) -> list[float]:
    """train.tsv, dev.tsv and test.tsv (the dev pairs, unlabelled); returns dev scores."""
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
    for split, rows in (("train", _stsb_rows(96, 0)), ("dev", _stsb_rows(15, 1))):
        lines = [header + "\tscore"] + [
            f"{i}\tmain-captions\tMSRvid\t2012test\t{i:04d}\tnone\tnone\t{a}\t{b}\t{s:.3f}"
            for i, (a, b, s) in enumerate(rows)
        ]
        (directory / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = _stsb_rows(15, 1)
    lines = [header] + [
        f"{i}\tmain-captions\tMSRvid\t2012test\t{i:04d}\tnone\tnone\t{a}\t{b}"
        for i, (a, b, _) in enumerate(rows)
    ]
    (directory / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [s for _, _, s in rows]


def test_stsb_regression_learns_and_metrics_match_scipy(tmp_path, vocab_file):
    data_dir = tmp_path / "STS-B"
    data_dir.mkdir()
    labels = np.array(_write_stsb(data_dir))
    config_file = write_tiny_config(tmp_path / "bert_config.json", dropout=0.1)
    output_dir = tmp_path / "out"
    _run(
        [
            "--task_name=STS-B",
            f"--data_dir={data_dir}",
            f"--bert_config_file={config_file}",
            "--do_train",
            "--do_eval",
            "--do_predict",
            "--max_seq_length=16",
            "--train_batch_size=8",
            "--num_train_epochs=8",
            "--learning_rate=5e-3",
            "--steps_per_loop=6",
            f"--output_dir={output_dir}",
        ],
        vocab_file,
    )

    history = json.loads((output_dir / "eval_history.json").read_text())
    assert len(history) == 8
    losses = [h["eval_loss"] for h in history]
    # Predicting the mean of the labels scores their variance (2.67): the model must
    # end well below it.
    assert losses[-1] < losses[0] and losses[-1] < 0.5 * labels.var()

    results = read_results(output_dir / "eval_results.txt")
    assert set(results) == {"eval_pearson", "eval_spearman", "eval_loss", "loss", "global_step"}
    scores = _read_tsv(output_dir / "test_results.tsv")
    assert scores.shape == (15, 1)
    scores = scores[:, 0]
    # test.tsv holds the dev pairs, so the predictions of the best model are its dev
    # predictions: the metrics follow from them.
    assert results["eval_pearson"] == pytest.approx(stats.pearsonr(scores, labels)[0], abs=1e-5)
    assert results["eval_spearman"] == pytest.approx(stats.spearmanr(scores, labels)[0], abs=1e-5)
    assert results["eval_loss"] == pytest.approx(np.mean((scores - labels) ** 2), rel=1e-5)
    assert results["eval_pearson"] > 0.8

    with open(output_dir / "STS-B.tsv", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    assert rows[0] == ["index", "prediction"]
    assert [r[0] for r in rows[1:]] == [str(i) for i in range(15)]
    np.testing.assert_allclose([float(r[1]) for r in rows[1:]], scores, atol=1e-6)


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


def test_swag_multiple_choice_learns_and_accuracy_matches(tmp_path, vocab_file):
    data_dir = tmp_path / "swag"
    data_dir.mkdir()
    labels = np.array(_write_swag(data_dir))
    config_file = write_tiny_config(tmp_path / "bert_config.json", dropout=0.1)
    output_dir = tmp_path / "out"
    _run(
        [
            "--task_name=swag",
            f"--data_dir={data_dir}",
            f"--bert_config_file={config_file}",
            "--do_train",
            "--do_eval",
            "--do_predict",
            "--max_seq_length=16",
            "--train_batch_size=8",
            "--num_train_epochs=3",
            "--learning_rate=2e-3",
            "--steps_per_loop=5",
            f"--output_dir={output_dir}",
            f"--export_dir={tmp_path / 'export'}",
        ],
        vocab_file,
    )

    history = json.loads((output_dir / "eval_history.json").read_text())
    losses = [h["eval_loss"] for h in history]
    assert len(history) == 3 and losses[-1] < losses[0] < np.log(4) + 0.1
    results = read_results(output_dir / "eval_results.txt")
    assert set(results) == {"eval_accuracy", "eval_loss", "loss", "global_step"}

    probabilities = _read_tsv(output_dir / "test_results.tsv")
    assert probabilities.shape == (16, 4)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)
    accuracy = np.mean(probabilities.argmax(axis=1) == labels)
    loss = -np.mean(np.log(probabilities[np.arange(16), labels]))
    assert results["eval_accuracy"] == pytest.approx(accuracy)
    assert results["eval_loss"] == pytest.approx(loss, rel=1e-5)
    assert accuracy >= 0.75
    assert not (output_dir / "SWAG.tsv").exists()  # not a GLUE task

    # The export answers the CSV's fields with the probabilities --do_predict wrote.
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    rows = _swag_rows(16, 1)
    got = tf.saved_model.load(str(tmp_path / "export")).signatures["serving_default"](
        context=tf.constant([r[0] for r in rows]),
        start=tf.constant([r[1] for r in rows]),
        endings=tf.constant([r[2] for r in rows]),
    )
    np.testing.assert_allclose(got["probabilities"].numpy(), probabilities, atol=1e-5)
    np.testing.assert_array_equal(got["best_choice"].numpy(), probabilities.argmax(axis=1))


# ----------------------------------------------------------------------------
# More tasks and bad input: every case in one process (one TensorFlow start-up).
# ----------------------------------------------------------------------------

_DRIVER = textwrap.dedent("""
    import json, sys
    import run_classifier
    from modeling import finetuning
    from serving import encoder as serving_encoder
    from modeling.config import BertConfig
    from modeling.encoder import BertEncoder
    hub_path, config_file, vocab_file = sys.argv[2:5]
    serving_encoder.export_encoder(BertEncoder(BertConfig.from_json_file(config_file)),
                                   hub_path, vocab_file, do_lower_case=True)
    results = {}
    for name, argv in json.loads(sys.argv[1]).items():
        run_classifier.FLAGS.unparse_flags()
        run_classifier.FLAGS(["run_classifier.py", *argv])
        try:
            run_classifier.main([])
            results[name] = ["no error", ""]
        except Exception as e:
            results[name] = [type(e).__name__, str(e)]
    rc = run_classifier
    results["functions"] = {
        "train_schedule": finetuning.train_schedule(3668, 32, 3.0, 0.1),
        "epoch_ends_mrpc": finetuning.epoch_end_steps(3668, 32, 343),
        "epoch_ends_fractional": finetuning.epoch_end_steps(10, 4, 6),
        "score_cola": rc.glue_score("CoLA", {"eval_accuracy": 0.9, "eval_mcc": 0.5}),
        "score_stsb": rc.glue_score("sts-b", {"eval_pearson": 0.8, "eval_spearman": 0.6}),
        "score_mnli": rc.glue_score("mnli", {"eval_accuracy": 0.7,
                                             "eval_mismatched_accuracy": 0.1}),
        "score_mrpc": rc.glue_score("MRPC", {"eval_accuracy": 0.8, "eval_f1": 0.9}),
        "prefixes": [rc.split_prefix(s, ("dev_matched", "dev_mismatched"))
                     for s in ("dev_matched", "dev_mismatched")],
    }
    print("RESULTS" + json.dumps(results))
""")

_NLI = (
    ("a man plays a guitar.", "a person makes music.", "entailment"),
    ("a man plays a guitar.", "nobody plays.", "contradiction"),
    ("a dog runs in a park.", "the dog is old.", "neutral"),
)


def _write_lines(path: pathlib.Path, lines) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _write_mnli(directory: pathlib.Path) -> None:
    """dev_{matched,mismatched}.tsv (3 and 6 pairs) and test_{...}.tsv (2 and 4)."""
    header = (
        "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\t"
        "sentence2_binary_parse\tsentence1_parse\tsentence2_parse\tsentence1\t"
        "sentence2"
    )
    for part, count in (("matched", 3), ("mismatched", 6)):
        rows = [_NLI[i % 3] for i in range(count)]
        _write_lines(
            directory / f"dev_{part}.tsv",
            [header + "\tlabel1\tgold_label"]
            + [
                f"{i}\t1\t1e\tfiction\t( x )\t( y )\t(S x)\t(S y)\t{a}\t{b}\t{label}\t{label}"
                for i, (a, b, label) in enumerate(rows)
            ],
        )
        _write_lines(
            directory / f"test_{part}.tsv",
            [header]
            + [
                f"{100 + i}\t1\t1e\tfiction\t( x )\t( y )\t(S x)\t(S y)\t{a}\t{b}"
                for i, (a, b, _) in enumerate(rows[: count * 2 // 3])
            ],
        )


def _write_paws(directory: pathlib.Path, mrpc_dir: pathlib.Path) -> None:
    """PAWS-Wiki's layout (`id  sentence1  sentence2  label`, every split labelled),
    filled with real pairs: MRPC's training file, rows 1-24 / 25-36 / 37-48."""
    lines = (mrpc_dir / "train.tsv").read_text(encoding="utf-8-sig").splitlines()
    rows = [line.split("\t") for line in lines]
    for split, (start, stop) in (("train", (1, 25)), ("dev", (25, 37)), ("test", (37, 49))):
        _write_lines(
            directory / f"{split}.tsv",
            ["id\tsentence1\tsentence2\tlabel"]
            + [f"{i}\t{r[3]}\t{r[4]}\t{r[0]}" for i, r in enumerate(rows[start:stop], start)],
        )


def _write_xnli(directory: pathlib.Path) -> None:
    """XNLI-MT German training data and xnli.dev.tsv with German and other rows."""
    _write_lines(
        directory / "multinli" / "multinli.train.de.tsv",
        ["premise\thypo\tlabel"]
        + [
            f"{a}\t{b}\t{'contradictory' if label == 'contradiction' else label}"
            for a, b, label in _NLI * 4
        ],
    )
    header = (
        "language\tgold_label\tsentence1_binary_parse\tsentence2_binary_parse\t"
        "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tpromptID\tpairID\t"
        "genre\tlabel1"
    )
    rows = [
        f"{language}\t{label}\tx\ty\tx\ty\t{a}\t{b}\t1\t1\tfiction\t{label}"
        for language in ("de", "en", "de")
        for a, b, label in _NLI
    ]
    _write_lines(directory / "xnli.dev.tsv", [header] + rows)


def _write_generic(directory: pathlib.Path) -> None:
    """A user's CSV files with a header, quoted commas and string labels."""
    rows = [
        ('"great, really good"', "pos"),
        ('"bad, really bad"', "neg"),
        ("fine film", "pos"),
        ("dull film", "neg"),
    ] * 4
    for split in ("train", "dev", "test"):
        _write_lines(
            directory / f"{split}.csv",
            ["id,review,sentiment"]
            + [f"{i},{text},{label}" for i, (text, label) in enumerate(rows[:12])],
        )


def _write_cola(directory: pathlib.Path) -> None:
    """CoLA's dev.tsv: no header; source, label, author's label, sentence."""
    _write_lines(
        directory / "dev.tsv",
        [
            f"gj04\t{label}\t\t{sentence}"
            for label, sentence in (
                ("1", "the dog barked."),
                ("0", "dog the barked."),
                ("1", "she left."),
                ("0", "left she the."),
            )
        ],
    )


@pytest.fixture(scope="module")
def driver(tmp_path_factory, mrpc_dir, vocab_file):
    """Runs every case in one process: {case: (exception name or "no error",
    message)}, and "root": the directory of the data and output_dirs (out_<case>)."""
    root = tmp_path_factory.mktemp("driver")
    config_file = write_tiny_config(root / "bert_config.json", dropout=0.1)
    cases = {}

    def add(
        case,
        directory,
        *extra,
        task="MRPC",
        do=("--do_train", "--do_eval"),
        model=(f"--bert_config_file={config_file}", f"--vocab_file={vocab_file}"),
    ):
        cases[case] = [
            f"--task_name={task}",
            f"--data_dir={directory}",
            *model,
            "--max_seq_length=32",
            *do,
            f"--output_dir={root / f'out_{case}'}",
            *extra,
        ]

    def mrpc_copy(name, train_edit=None, with_dev=True):
        directory = root / name
        lines = (mrpc_dir / "train.tsv").read_text(encoding="utf-8").splitlines()
        if train_edit:
            lines[2] = train_edit(lines[2])  # line 3 of the file
        _write_lines(directory / "train.tsv", lines)
        if with_dev:
            shutil.copy(mrpc_dir / "dev.tsv", directory / "dev.tsv")
        return directory

    good = mrpc_copy("good")
    add("unknown_task", good, task="MRPCX")
    add("missing_dev", mrpc_copy("no_dev", with_dev=False))
    add("short_row", mrpc_copy("short_row", lambda line: line.rsplit("\t", 1)[0]))
    add("bad_label", mrpc_copy("bad_label", lambda line: "2" + line[1:]))
    add("long_sequence", good, "--max_seq_length=128")
    add("nothing_to_do", good, do=())
    add("missing_hub_module", good, "--hub_module_url=/nonexistent/hub", model=())
    add(
        "hub_module",
        good,
        f"--hub_module_url={root / 'hub'}",
        "--num_train_epochs=1",
        "--train_batch_size=16",
        model=(),
    )
    (root / "user_files").mkdir()
    (root / "user_files" / "notes.txt").write_text("mine")
    add("export_over_user_files", good, f"--export_dir={root / 'user_files'}")
    add("missing_test", good, do=("--do_predict",))
    for name, write in (
        ("mnli", _write_mnli),
        ("xnli", _write_xnli),
        ("generic", _write_generic),
        ("cola", _write_cola),
        ("swag", _write_swag),
    ):
        (root / name).mkdir(exist_ok=True)
        write(root / name)
    add("mnli", root / "mnli", task="MNLI", do=("--do_eval", "--do_predict"))
    add(
        "xnli",
        root / "xnli",
        "--xnli_language=de",
        "--train_batch_size=4",
        "--num_train_epochs=1",
        task="XNLI",
    )
    add(
        "generic",
        root / "generic",
        "--text_a_column=review",
        "--label_column=sentiment",
        "--train_batch_size=4",
        "--num_train_epochs=1",
        f"--export_dir={root / 'export'}",
        task="generic",
        do=("--do_train", "--do_eval", "--do_predict"),
    )
    add("cola", root / "cola", task="CoLA", do=("--do_eval",))
    _write_paws(root / "paws", mrpc_dir)
    add(
        "paws",
        root / "paws",
        "--train_batch_size=8",
        "--num_train_epochs=1",
        task="PAWS",
        do=("--do_train", "--do_eval", "--do_predict"),
    )
    results = run_results_driver(
        _DRIVER, cases, str(root / "hub"), config_file, vocab_file, timeout=600
    )
    return {"root": root, **results}


@pytest.mark.parametrize(
    "case,error,parts",
    [
        ("unknown_task", "ValueError", ["Unknown task 'MRPCX'", "known tasks: cola, sst-2, mrpc"]),
        ("missing_dev", "FileNotFoundError", ["mrpc dev file not found", "no_dev/dev.tsv"]),
        ("missing_test", "FileNotFoundError", ["mrpc test file not found", "good/test.tsv"]),
        (
            "short_row",
            "ValueError",
            ["short_row/train.tsv:3", "expected at least 5 columns", "got 4"],
        ),
        (
            "bad_label",
            "ValueError",
            ["bad_label/train.tsv:3", "label '2' is not one of ['0', '1']"],
        ),
        ("long_sequence", "ValueError", ["--max_seq_length=128", "max_position_embeddings=64"]),
        ("nothing_to_do", "UsageError", ["--do_train, --do_eval or --do_predict"]),
        ("missing_hub_module", "FileNotFoundError", ["/nonexistent/hub is not a folder"]),
        (
            "export_over_user_files",
            "FileExistsError",
            ["--export_dir=", "user_files", "not an export of this project"],
        ),
    ],
)
def test_bad_input_is_a_clear_error(driver, case, error, parts):
    got_error, message = driver[case]
    assert got_error == error, message
    for part in parts:
        assert part in message


def test_export_dir_of_user_files_is_refused_before_training(driver):
    assert os.listdir(driver["root"] / "user_files") == ["notes.txt"]
    assert (driver["root"] / "user_files" / "notes.txt").read_text() == "mine"
    assert not list((driver["root"] / "out_export_over_user_files").glob("*.tf_record"))


def test_schedule_epochs_and_scores(driver):
    got = driver["functions"]
    # As the original: int(3668 / 32 * 3) steps, 10% of them warmup.
    assert got["train_schedule"] == [343, 34]
    assert got["epoch_ends_mrpc"] == [114, 229, 343]
    assert got["epoch_ends_fractional"] == [2, 5, 6]  # 2.5 epochs of 10 at batch 4
    assert got["score_cola"] == 0.5 and got["score_mnli"] == 0.7
    assert got["score_stsb"] == pytest.approx(0.7)
    assert got["score_mrpc"] == pytest.approx(0.85)
    assert got["prefixes"] == ["eval_", "eval_mismatched_"]


def test_mnli_matched_and_mismatched(driver):
    assert driver["mnli"] == ["no error", ""]
    output_dir = driver["root"] / "out_mnli"
    results = read_results(output_dir / "eval_results.txt")
    assert set(results) == {
        "eval_accuracy",
        "eval_loss",
        "eval_mismatched_accuracy",
        "eval_mismatched_loss",
        "loss",
        "global_step",
    }
    # An untrained model: accuracies are multiples of 1/3 and 1/6.
    assert results["eval_accuracy"] * 3 == pytest.approx(round(results["eval_accuracy"] * 3))
    assert results["eval_mismatched_accuracy"] * 6 == pytest.approx(
        round(results["eval_mismatched_accuracy"] * 6)
    )
    assert _read_tsv(output_dir / "test_results.tsv").shape == (2, 3)
    assert _read_tsv(output_dir / "test_mismatched_results.tsv").shape == (4, 3)
    for name, indices in (
        ("MNLI-m.tsv", ["100", "101"]),
        ("MNLI-mm.tsv", ["100", "101", "102", "103"]),
    ):
        with open(output_dir / name, encoding="utf-8") as f:
            rows = list(csv.reader(f, delimiter="\t"))
        assert rows[0] == ["index", "prediction"]
        assert [r[0] for r in rows[1:]] == indices
        assert {r[1] for r in rows[1:]} <= {"contradiction", "entailment", "neutral"}


def test_paws_a_task_added_as_one_class(driver):
    """PAWS (classifier_tasks.PawsProcessor): trained, scored on dev and on its labelled
    test split, and predicted, through the same runner as every GLUE task."""
    assert driver["paws"] == ["no error", ""]
    output_dir = driver["root"] / "out_paws"
    results = read_results(output_dir / "eval_results.txt")
    assert set(results) == {
        "eval_accuracy",
        "eval_loss",
        "eval_test_accuracy",
        "eval_test_loss",
        "loss",
        "global_step",
    }
    assert results["global_step"] == 3  # 24 pairs, batch 8, one epoch
    assert results["eval_accuracy"] * 12 == pytest.approx(round(results["eval_accuracy"] * 12))
    assert _read_tsv(output_dir / "test_results.tsv").shape == (12, 2)
    assert json.loads((output_dir / "run_config.json").read_text())["labels"] == ["0", "1"]


def test_xnli_reads_only_its_language(driver):
    assert driver["xnli"] == ["no error", ""]
    output_dir = driver["root"] / "out_xnli"
    dev = json.loads((output_dir / "dev.tf_record.meta.json").read_text())
    train = json.loads((output_dir / "train.tf_record.meta.json").read_text())
    assert dev["num_examples"] == 6 and train["num_examples"] == 12
    assert dev["processor_options"] == {"xnli_language": "de"}
    results = read_results(output_dir / "eval_results.txt")
    assert results["global_step"] == 3 and "eval_accuracy" in results


def test_generic_csv_task(driver):
    assert driver["generic"] == ["no error", ""]
    output_dir = driver["root"] / "out_generic"
    config = json.loads((output_dir / "run_config.json").read_text())
    assert config["labels"] == ["neg", "pos"]  # sorted labels of train.csv
    assert set(read_results(output_dir / "eval_results.txt")) == {
        "eval_accuracy",
        "eval_loss",
        "loss",
        "global_step",
    }
    assert _read_tsv(output_dir / "test_results.tsv").shape == (12, 2)
    assert not list(output_dir.glob("[A-Z]*.tsv"))  # no GLUE submission file


def test_generic_export_answers_raw_text_as_predicted(driver):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    model = tf.saved_model.load(str(driver["root"] / "export"))
    with open(driver["root"] / "generic" / "test.csv", encoding="utf-8") as f:
        texts = [row[1] for row in list(csv.reader(f))[1:]]
    outputs = model.signatures["serving_text_a"](text_a=tf.constant(texts))
    want = _read_tsv(driver["root"] / "out_generic" / "test_results.tsv")
    np.testing.assert_allclose(outputs["probabilities"].numpy(), want, atol=1e-5)
    assert [label.decode() for label in outputs["labels"].numpy()] == [
        ["neg", "pos"][i] for i in want.argmax(axis=1)
    ]


def test_hub_module_fine_tunes_with_its_own_vocabulary(driver):
    assert driver["hub_module"] == ["no error", ""]
    output_dir = driver["root"] / "out_hub_module"
    config = json.loads((output_dir / "run_config.json").read_text())
    assert config["resolved_vocab_file"].startswith(str(driver["root"] / "hub"))
    assert config["resolved_do_lower_case"] is True
    results = read_results(output_dir / "eval_results.txt")
    assert results["global_step"] == 4  # 64 examples / 16 per batch, 1 epoch
    history = json.loads((output_dir / "eval_history.json").read_text())
    assert [h["global_step"] for h in history] == [4]


def test_cola_reports_matthews_correlation(driver):
    assert driver["cola"] == ["no error", ""]
    results = read_results(driver["root"] / "out_cola" / "eval_results.txt")
    assert set(results) == {"eval_accuracy", "eval_mcc", "eval_loss", "loss", "global_step"}
    assert results["global_step"] == 0


def test_feature_cache_is_not_fooled_by_another_data_dir(tmp_path, mrpc_dir, vocab_file):
    """Two data dirs whose train.tsv have the same size and mtime (files unpacked from
    archives, or written within one clock tick) but different labels: switching
    --data_dir rebuilds the features."""
    from data_prep import classifier_features, classifier_tasks

    lines = (mrpc_dir / "train.tsv").read_text(encoding="utf-8").splitlines()
    flipped = [lines[0]] + [("1" if line[0] == "0" else "0") + line[1:] for line in lines[1:]]
    first = _write_lines(tmp_path / "a" / "train.tsv", lines)
    second = _write_lines(tmp_path / "b" / "train.tsv", flipped)
    os.utime(first, ns=(10**18, 10**18))
    os.utime(second, ns=(10**18, 10**18))
    processor = classifier_tasks.get_processor("mrpc")
    output_file = str(tmp_path / "train.tf_record")

    def labels(data_dir):
        metadata = classifier_features.get_or_create_features(
            processor, str(data_dir), "train", output_file, vocab_file, True, 16
        )
        dataset = classifier_features.build_dataset(output_file, metadata, 64, False)
        return np.concatenate([batch["label_ids"].numpy() for batch in dataset])

    a, b = labels(tmp_path / "a"), labels(tmp_path / "b")
    np.testing.assert_array_equal(a, 1 - b)
