"""End-to-end tests of run_classifier.py on small data in the GLUE layout: MRPC (a
slice of the real files, from a checkpoint: train, resume, two devices, the same
weights as a hub module) and hand-made, learnable STS-B (regression) and SWAG
(multiple choice) samples.

The runner runs in subprocesses: its absl flags would clash with other runners'
in one test process, and a mirrored run must split the CPU into logical devices
before TensorFlow initialises. The runs that only read their outputs afterwards run
one after the other in one process (the `runs` fixture: one TensorFlow start-up; the
mirrored run first, before TensorFlow starts); the resumed run runs on the command
line as a user runs it. The model is a tiny random BERT (2 layers, hidden 32) with
the bundled uncased vocabulary.
"""

import csv
import json
import pathlib
import shutil

import numpy as np
import pytest
from scipy import stats

from tests.conftest import read_results, write_tiny_config
from tests.helpers.run_classifier_helpers import (
    MRPC_TEST,
    MRPC_TRAIN,
    _read_tsv,
    _run,
    _swag_rows,
    _write_swag,
    run_in_one_process,
)


# ----------------------------------------------------------------------------
# MRPC: a slice of the real files.
# ----------------------------------------------------------------------------


def _mrpc_flags(data_dir, config_file, output_dir, *extra):
    # No dropout and float32, so that one-device and mirrored runs compute the same steps.
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
        "--dtype=float32",
        f"--output_dir={output_dir}",
        *extra,
    ]


def _hub_model(directory, vocab_file) -> tuple[str, str, pathlib.Path]:
    """A tiny random BERT (no dropout) written as a checkpoint (for --init_checkpoint)
    and exported as an encoder by this project (for --hub_module_url): (config_file,
    checkpoint, hub module folder)."""
    from modeling import checkpoint_writers
    from serving import encoder as serving_encoder
    from modeling.config import BertConfig
    from modeling.encoder import BertEncoder

    directory.mkdir()
    config_file = write_tiny_config(directory / "bert_config.json", dropout=0.0)
    encoder = BertEncoder(BertConfig.from_json_file(config_file))
    checkpoint = checkpoint_writers.write_original_checkpoint(
        str(directory / "bert_model.ckpt"), encoder
    )
    serving_encoder.export_encoder(encoder, str(directory / "hub"), vocab_file, do_lower_case=True)
    return config_file, checkpoint, directory / "hub"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, mrpc_dir, vocab_file):
    """{name: output_dir} of the runs below, made one after the other in one process:
    MRPC mirrored on two logical CPUs ("mirrored"), MRPC from a checkpoint ("mrpc"),
    MRPC from the same weights as a hub module with its own vocabulary ("hub"), STS-B
    ("stsb") and SWAG ("swag"); "mrpc_flags": the MRPC run's flags but --vocab_file,
    "labels": the STS-B and SWAG dev labels."""
    root = tmp_path_factory.mktemp("runs")
    config_file, checkpoint, hub = _hub_model(root / "model", vocab_file)
    learn_config = write_tiny_config(root / "learn_config.json", dropout=0.1)
    mrpc_flags = _mrpc_flags(
        mrpc_dir, config_file, root / "mrpc", f"--init_checkpoint={checkpoint}"
    )
    hub_flags = [
        *(
            f
            for f in mrpc_flags
            if not f.startswith(("--bert_config_file", "--init_checkpoint", "--output_dir"))
        ),
        f"--hub_module_url={hub}",
        f"--output_dir={root / 'hub'}",
    ]
    stsb_dir, swag_dir = root / "STS-B", root / "swag"
    stsb_dir.mkdir()
    swag_dir.mkdir()
    labels = {"stsb": np.array(_write_stsb(stsb_dir)), "swag": np.array(_write_swag(swag_dir))}
    vocab = f"--vocab_file={vocab_file}"
    cases = {
        # First: it splits the CPU into two logical devices before TensorFlow starts.
        "mirrored": [
            vocab,
            *(f for f in mrpc_flags if not f.startswith("--output_dir")),
            f"--output_dir={root / 'mirrored'}",
            "--distribution_strategy=mirrored",
            "--num_cpu_devices=2",
        ],
        "mrpc": [vocab, *mrpc_flags],
        "hub": hub_flags,  # No --vocab_file: the module's own.
        "stsb": [
            vocab,
            "--task_name=STS-B",
            f"--data_dir={stsb_dir}",
            f"--bert_config_file={learn_config}",
            "--do_train",
            "--do_eval",
            "--do_predict",
            "--max_seq_length=16",
            "--train_batch_size=8",
            "--num_train_epochs=8",
            "--learning_rate=5e-3",
            "--steps_per_loop=6",
            f"--output_dir={root / 'stsb'}",
        ],
        "swag": [
            vocab,
            "--task_name=swag",
            f"--data_dir={swag_dir}",
            f"--bert_config_file={learn_config}",
            "--do_train",
            "--do_eval",
            "--do_predict",
            "--max_seq_length=16",
            "--train_batch_size=8",
            "--num_train_epochs=3",
            "--learning_rate=2e-3",
            "--steps_per_loop=5",
            "--dtype=float32",  # Its export answers as predicted to 1e-5 (bfloat16: not).
            f"--output_dir={root / 'swag'}",
            f"--export_dir={root / 'swag_export'}",
        ],
    }
    errors = run_in_one_process(cases)
    outputs = {
        name: root / name for name in ("mirrored", "mrpc", "hub", "stsb", "swag", "swag_export")
    }
    return {
        "errors": errors,
        "mrpc_flags": mrpc_flags,
        "labels": labels,
        "hub_module": hub,
        **outputs,
    }


@pytest.fixture(scope="module")
def mrpc_run(runs):
    """(output_dir, flags) of one training run with evaluation and prediction."""
    assert runs["errors"]["mrpc"] == ["no error", ""]
    return runs["mrpc"], runs["mrpc_flags"]


def test_mrpc_end_to_end(mrpc_run, mrpc_dir):
    output_dir, _ = mrpc_run
    results = read_results(output_dir / "eval_results.txt")
    per_class = {f"eval_{m}_{label}" for m in ("precision", "recall", "f1") for label in "01"}
    assert set(results) == {
        *("eval_accuracy", "eval_f1", "eval_loss", "loss", "global_step"),
        *("eval_macro_f1", *per_class),
    }
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
def test_mirrored_on_two_cpus_matches_one_device(runs):
    assert runs["errors"]["mirrored"] == ["no error", ""]
    output_dir, mirrored = runs["mrpc"], runs["mirrored"]
    summary = json.loads((mirrored / "train_summary.json").read_text())
    assert summary["num_replicas"] == 2 and summary["replica_max_diff"] == 0.0
    one = json.loads((output_dir / "eval_history.json").read_text())
    two = json.loads((mirrored / "eval_history.json").read_text())
    assert len(one) == len(two) == 2
    for a, b in zip(one, two):
        assert a["global_step"] == b["global_step"]
        assert a["eval_accuracy"] == b["eval_accuracy"]
        assert b["eval_loss"] == pytest.approx(a["eval_loss"], rel=1e-4)
    np.testing.assert_allclose(
        _read_tsv(mirrored / "test_results.tsv"),
        _read_tsv(output_dir / "test_results.tsv"),
        atol=1e-4,
    )


def test_hub_module_gives_the_same_metrics_as_the_checkpoint(runs):
    """--hub_module_url with an encoder exported by this project fine-tunes to the same
    model as --init_checkpoint with the same weights (the MRPC run: no dropout and the
    same seed, so both runs compute the same steps): the same eval metrics and test
    probabilities."""
    for name in ("mrpc", "hub"):
        assert runs["errors"][name] == ["no error", ""]
    one, two = (read_results(runs[name] / "eval_results.txt") for name in ("mrpc", "hub"))
    assert set(one) == set(two)  # global_step: the best epoch's, the same in both
    for key in one:
        assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key
    np.testing.assert_allclose(
        _read_tsv(runs["hub"] / "test_results.tsv"),
        _read_tsv(runs["mrpc"] / "test_results.tsv"),
        atol=1e-4,
    )
    # Training moved the weights: the runs did not merely agree on an untrained model.
    history = json.loads((runs["hub"] / "eval_history.json").read_text())
    assert [h["global_step"] for h in history] == [8, 16]
    assert history[0]["eval_loss"] != history[-1]["eval_loss"]


def test_hub_module_fine_tunes_with_its_own_vocabulary(runs):
    assert runs["errors"]["hub"] == ["no error", ""]
    config = json.loads((runs["hub"] / "run_config.json").read_text())
    assert config["resolved_vocab_file"].startswith(str(runs["hub_module"]))
    assert config["resolved_do_lower_case"] is True


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


def test_stsb_regression_learns_and_metrics_match_scipy(runs):
    assert runs["errors"]["stsb"] == ["no error", ""]
    labels, output_dir = runs["labels"]["stsb"], runs["stsb"]
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


def test_swag_multiple_choice_learns_and_accuracy_matches(runs):
    assert runs["errors"]["swag"] == ["no error", ""]
    labels, output_dir = runs["labels"]["swag"], runs["swag"]
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
    got = tf.saved_model.load(str(runs["swag_export"])).signatures["serving_default"](
        context=tf.constant([r[0] for r in rows]),
        start=tf.constant([r[1] for r in rows]),
        endings=tf.constant([r[2] for r in rows]),
    )
    np.testing.assert_allclose(got["probabilities"].numpy(), probabilities, atol=1e-5)
    np.testing.assert_array_equal(got["best_choice"].numpy(), probabilities.argmax(axis=1))
