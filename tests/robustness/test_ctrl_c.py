"""Ctrl-C (SIGINT) during training: a checkpoint at the end of the current loop, one
line saying where it stopped and how to resume, exit status 130; the same command
again finishes with the outputs of an uninterrupted run, byte for byte, the final
checkpoint included (`--deterministic`; the harness: tests/helpers/kill_helpers.py).
In the training loop itself: Ctrl-C is said at once, a second one ends the program at
once, and a save that fails for want of space leaves no unfinished checkpoint."""

import os
import re
import resource
import signal
import subprocess
import sys
import textwrap
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from common import run_control
from common.errors import CannotWriteError
from modeling import finetuning, models, training, training_summary
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.objectives import ClassificationObjective
from tests.conftest import REPO_ROOT, tiny_config
from tests.helpers import kill_helpers
from tests.helpers import repo_pythonpath


@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint_and_the_same_command_resumes(tmp_path):
    """Pre-training (fine-tuning: test_kill_resume.py, on its job's uninterrupted run)."""
    job = kill_helpers.JOBS["run_pretraining"]
    ref, _ = kill_helpers.reference(job, tmp_path)
    result = kill_helpers.interrupt(job, tmp_path, ref, "ckpt-3.index")
    kill_helpers.check_ctrl_c(result, tmp_path / "run", 12)


# ---------------------------------------------------------------------------- in the loop


def _trainer(output_dir, steps=6, save_every=100):
    keras.utils.set_random_seed(7)
    config = BertConfig(**tiny_config(0.0, vocab_size=99))
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = models.BertClassifier(BertEncoder(config), config, 2)
    trainer = training.Trainer(
        strategy,
        model,
        ClassificationObjective(),
        str(output_dir),
        learning_rate=1e-3,
        num_train_steps=steps,
        num_warmup_steps=0,
        steps_per_loop=2,
        save_checkpoints_steps=save_every,
    )
    trainer.restore_or_initialize()
    return trainer


def _dataset(context=None):
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 99, size=(64, 8)).astype(np.int32)
    features = {
        "input_word_ids": ids,
        "input_mask": np.ones_like(ids),
        "input_type_ids": np.zeros_like(ids),
        "label_ids": rng.integers(0, 2, size=64).astype(np.int32),
    }
    return tf.data.Dataset.from_tensor_slices(features).repeat().batch(8)


def test_ctrl_c_is_said_at_once_and_stops_at_the_end_of_the_loop(tmp_path, capfd):
    trainer = _trainer(tmp_path / "out")
    before = signal.getsignal(signal.SIGINT)
    said = {}

    def after_loop(step):
        if step == 2:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C during the first loop.
            time.sleep(1)
            said["at once"] = capfd.readouterr().err

    summary = trainer.train(_dataset, 8, after_loop=after_loop)
    assert said["at once"].strip().splitlines()[-1] == (
        "Ctrl-C: stopping with a checkpoint at the end of this loop (Ctrl-C again stops at "
        "once, losing the steps since the last checkpoint)."
    )
    assert summary["global_step"] == 2 and not summary["complete"]
    assert summary["stopped_by"] == "SIGINT"
    assert tf.train.latest_checkpoint(str(tmp_path / "out")).endswith("ckpt-2")
    assert signal.getsignal(signal.SIGINT) is before  # Given back after training.


def test_a_second_ctrl_c_ends_the_program_at_once():
    """Even while the main thread cannot run Python (here: its handler does nothing,
    as if it waited for a compiled loop), a second Ctrl-C ends the program."""
    program = textwrap.dedent("""
        import os, signal, time
        from common import run_control
        signal.signal(signal.SIGINT, lambda signum, frame: None)
        with run_control.second_ctrl_c_ends_at_once("first", "second"):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(60)
        print("not stopped")
    """)
    result = subprocess.run(
        [sys.executable, "-c", program],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=repo_pythonpath(), TF_CPP_MIN_LOG_LEVEL="3"),
        timeout=50,
    )
    assert result.returncode == 130
    assert result.stderr.strip().splitlines()[-2:] == ["first", "second"]
    assert "not stopped" not in result.stdout


def test_a_save_that_fails_for_want_of_space_leaves_no_unfinished_checkpoint(tmp_path):
    """A file size limit makes the checkpoint's data file fail as a full disk would
    (EFBIG, "File too large"): the error says so in one line, and neither the save's
    temporary folder nor a part of the checkpoint is left."""
    out = tmp_path / "out"
    trainer = _trainer(out, steps=2)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        with pytest.raises(CannotWriteError) as caught:
            trainer.train(_dataset, 8)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    message = str(caught.value)
    assert message.startswith(f"cannot write {out}: File too large. Nothing unfinished")
    assert "free some space" in message
    assert not [name for name in os.listdir(out) if re.match(r"ckpt-", name)]
    assert not (out / "train_summary.json").exists()  # It would say the run is complete.
    assert tf.train.latest_checkpoint(str(out)) is None
    # With room again, the same step is saved whole.
    assert trainer.save().endswith("ckpt-2")
    assert sorted(n for n in os.listdir(out) if n.startswith("ckpt-")) == [
        "ckpt-2.data-00000-of-00001",
        "ckpt-2.index",
    ]


def test_ctrl_c_after_the_last_step_ends_before_the_final_evaluation(tmp_path, capfd, monkeypatch):
    """Ctrl-C during the last epoch's evaluation (the last loop's after_loop): training
    completes (its summary and final checkpoint), the trainer keeps the signal, the
    fine-tuning core stops before the final evaluation, prediction and export, and the
    program ends with one line saying training had finished, exit status 130."""
    out = tmp_path / "out"
    trainer = _trainer(out, steps=4)

    def after_loop(step):
        if step == 4:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)

    summary = trainer.train(_dataset, 8, after_loop=after_loop)
    assert summary["complete"] and summary["global_step"] == 4
    assert trainer.stop_signal == "SIGINT"
    assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-4")

    class Task:
        def evaluate(self, *args):
            raise AssertionError("evaluated after Ctrl-C")

        predict = export = evaluate

    settings = finetuning.Settings(
        output_dir=str(out),
        do_train=True,
        do_eval=True,
        do_predict=True,
        evaluate_every_epoch=False,
    )
    monkeypatch.setattr(finetuning, "train", lambda *args: True)

    def train_fn():
        return finetuning._train_and_finish(
            Task(), settings, trainer, None, None, None, True, str(out), Task().export
        )

    capfd.readouterr()
    with pytest.raises(SystemExit) as stopped:
        run_control.run_training(train_fn, str(out), training_summary.SUMMARY_FILE)
    assert stopped.value.code == 130
    assert capfd.readouterr().err.splitlines()[-1] == (
        f"Stopped by Ctrl-C (SIGINT) after the last training step (4): training is complete, "
        f"its checkpoint in {out}; nothing was evaluated, predicted or exported after it. "
        "Run the same command again to do them."
    )
