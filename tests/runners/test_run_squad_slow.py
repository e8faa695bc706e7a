"""Slow end-to-end tests of run_squad.py, with runs of their own on questions of
the bundled SQuAD 2.0 sample: the tiny model learns the training questions, a TF Hub
encoder, a mirrored run on two CPUs against one device, SIGTERM. The runs of the first
three share one process (`squad_runs`), the mirrored run first: it splits the CPU in two
before TensorFlow starts, and the single-device runs after it use the first half.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import read_results
from tests.helpers.run_squad_helpers import (
    REPO,
    question_ids,
    read_json,
    run_driver,
    squad_flags,
    tiny_config,
)


# ----------------------------------------------------------------------------
# Slow.
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def squad_runs(root, tmp_path_factory, vocab_file):
    """The runs of the tests below, one after the other in one process: "mirrored" on
    two CPUs first (the CPU is split before TensorFlow starts), then on one device
    "learn", "hub" and "one" (see the tests). -> (name -> [error type, message],
    name -> output_dir)."""
    import keras
    from serving import encoder as serving_encoder
    from modeling.config import BertConfig
    from modeling.encoder import BertEncoder

    directory = tmp_path_factory.mktemp("squad_slow")
    outputs = {name: directory / name for name in ("mirrored", "learn", "hub", "one")}
    # learn: long training, the final model evaluated once.
    learn = [
        a
        for a in squad_flags(root, outputs["learn"])
        if not a.startswith(
            (
                "--num_train_epochs",
                "--save_checkpoints_steps",
                "--steps_per_loop",
                "--learning_rate",
            )
        )
    ]
    learn += [
        "--num_train_epochs=60",
        "--learning_rate=2e-3",
        "--steps_per_loop=50",
        "--save_checkpoints_steps=100000",
        "--warmup_proportion=0.05",
        "--noevaluate_every_epoch",
    ]
    # hub: a TF Hub encoder (our export) in place of the config and vocabulary.
    keras.utils.set_random_seed(3)
    config = BertConfig.from_json_file(str(root / "bert_config.json"))
    hub_dir = str(directory / "hub_module")
    serving_encoder.export_encoder(BertEncoder(config), hub_dir, vocab_file, True)
    hub = [
        a
        for a in squad_flags(root, outputs["hub"])
        if not a.startswith(("--bert_config_file", "--vocab_file"))
    ]
    # one: no dropout, against the mirrored run (the same flags on two CPUs).
    no_dropout = tiny_config(directory / "bert_config.json", dropout=0.0)
    one = [
        a for a in squad_flags(root, outputs["one"], True) if not a.startswith("--bert_config_file")
    ]
    mirrored = [
        a
        for a in squad_flags(
            root,
            outputs["mirrored"],
            True,
            "--distribution_strategy=mirrored",
            "--num_cpu_devices=2",
        )
        if not a.startswith("--bert_config_file")
    ]
    float32 = "--dtype=float32"  # Two replicas compute one device's steps in float32.
    runs = {
        "mirrored": [*mirrored, f"--bert_config_file={no_dropout}", float32],
        "learn": learn,
        "hub": [*hub, f"--hub_module_url={hub_dir}"],
        "one": [*one, f"--bert_config_file={no_dropout}", float32],
    }
    return run_driver(runs), outputs


@pytest.mark.slow
def test_tiny_model_learns_the_training_questions(squad_runs):
    """Trained long enough on 17 questions, predicting the same questions beats the
    answer-nothing baseline (the 9/17 unanswerable) by far. The final model, evaluated
    once: an evaluation at each of the 60 epochs' ends would cost more than the
    training (test_run_squad.py's runs evaluate at each epoch's end)."""
    errors, outputs = squad_runs
    assert errors["learn"] == ["no error", ""]
    results = read_results(outputs["learn"] / "eval_results.txt")
    baseline = 100.0 * 9 / 17
    assert results["f1"] > baseline + 20, results
    assert results["HasAns_f1"] > 40, results


@pytest.mark.slow
def test_tf_hub_encoder(root, squad_runs):
    """--hub_module_url: a TF Hub encoder (our export) fine-tuned in place of the
    checkpoint; its vocabulary and config come from the SavedModel."""
    errors, outputs = squad_runs
    assert errors["hub"] == ["no error", ""]
    out = outputs["hub"]
    run_config = read_json(out / "run_config.json")
    assert run_config["resolved_vocab_file"].endswith("vocab.txt")
    assert read_json(out / "bert_config.json")["hidden_size"] == 32
    assert list(read_json(out / "predictions.json")) == question_ids(root / "v2.json")
    assert read_results(out / "eval_results.txt")["total"] == 17


@pytest.mark.slow
def test_mirrored_on_two_cpus_matches_one_device(squad_runs):
    """Two replicas (the CPU split in two) train and predict as one device: the same
    global batches, and every window's logits back under its own question (the
    prediction batches of 7 split unevenly over the replicas). No dropout."""
    errors, outputs = squad_runs
    assert errors["mirrored"] == ["no error", ""]
    assert errors["one"] == ["no error", ""]
    one, mirrored = outputs["one"], outputs["mirrored"]
    assert read_json(mirrored / "train_summary.json")["num_replicas"] == 2
    assert read_json(one / "train_summary.json")["num_replicas"] == 1
    assert read_json(mirrored / "predictions.json") == read_json(one / "predictions.json")
    odds_one, odds_mirrored = (read_json(d / "null_odds.json") for d in (one, mirrored))
    np.testing.assert_allclose(list(odds_mirrored.values()), list(odds_one.values()), atol=1e-3)
    assert read_results(mirrored / "eval_results.txt") == pytest.approx(
        read_results(one / "eval_results.txt")
    )


@pytest.mark.slow
def test_sigterm_stops_with_a_checkpoint_and_predicts_nothing(root, tmp_path):
    """A preempted run (SIGTERM) saves a checkpoint and exits 143 saying so, without
    predictions or scores from the unfinished model."""
    import signal
    import time

    out = tmp_path / "out"
    argv = [
        a
        for a in squad_flags(root, out)
        if not a.startswith(("--num_train_epochs", "--save_checkpoints_steps", "--steps_per_loop"))
    ]
    process = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "run_squad.py"),
            *argv,
            "--num_train_epochs=10000",
            "--steps_per_loop=1",
            "--save_checkpoints_steps=100000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    deadline = time.time() + 300
    while not list((out / "train").glob("events*")):
        assert process.poll() is None, process.stderr.read()[-3000:]
        assert time.time() < deadline
        time.sleep(0.2)
    time.sleep(2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 143, stderr[-3000:]
    terminal = stderr.strip().splitlines()
    assert "Stopped by SIGTERM at step" in terminal[-1]
    # Said once: not also as a warning of the trainer or of the fine-tuning loop.
    assert [line for line in terminal if "stopped" in line.lower()] == terminal[-1:], terminal
    (log_file,) = out.glob("run_squad.*.INFO.*")
    assert "Training stopped at step" in log_file.read_text(encoding="utf-8")
    assert list(out.glob("ckpt-*.index"))
    for name in (
        "predictions.json",
        "nbest_predictions.json",
        "null_odds.json",
        "eval_results.txt",
    ):
        assert not (out / name).exists(), name
