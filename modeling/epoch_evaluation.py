"""The best model of a fine-tuning run and its per-epoch evaluation: at the end of
every epoch the task's dev data is evaluated, the history kept (eval_history.json,
TensorBoard eval/), the best model by the task's score saved in output_dir/best/, and
training stopped early when the history says so (`early_stop`).
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf
from absl import logging

from common import file_io
from modeling import checkpoint_readers, training

BEST_DIR = checkpoint_readers.BEST_DIR
EVAL_HISTORY = "eval_history.json"
EPOCH_EVALUATION_DIR = ".epoch_evaluation"


class BestCheckpoint:
    """The best model so far, with its step and score, in `directory`.

    One TF checkpoint holds the model and two scalars (step, score), so the score
    always describes the weights saved with it; the CheckpointManager writes it under
    temporary names and then updates its `checkpoint` state file.
    """

    def __init__(self, directory: str, model):
        self.directory = directory
        # A save killed midway leaves TensorFlow's temporary folder, never used.
        for leftover in tf.io.gfile.glob(os.path.join(directory, "best-*_temp*")):
            tf.io.gfile.rmtree(leftover)
        self.step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="step")
        self.score = tf.Variable(-np.inf, dtype=tf.float64, trainable=False, name="score")
        self.checkpoint = tf.train.Checkpoint(model=model, step=self.step, score=self.score)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, directory, max_to_keep=1, checkpoint_name="best"
        )
        if self.manager.latest_checkpoint:
            self.read_score(self.manager.latest_checkpoint)

    def read_score(self, path: str) -> None:
        """The step and score of the best model saved at `path` (a worker that is not
        the chief starts from the chief's, to choose the same steps)."""
        scalars = tf.train.Checkpoint(step=self.step, score=self.score)
        scalars.read(path).expect_partial()

    @property
    def exists(self) -> bool:
        return self.manager.latest_checkpoint is not None

    def update(self, step: int, score: float) -> bool:
        """Saves the model if `score` beats the best so far; returns whether it did."""
        if self.exists and score <= float(self.score.numpy()):
            return False
        self.step.assign(step)
        self.score.assign(score)
        self.manager.save(checkpoint_number=step)
        logging.info("New best model at step %d (score %.4f) in %s", step, score, self.directory)
        return True

    def restore(self) -> int:
        """Loads the best weights into the model; returns their step."""
        # expect_partial: its save counter, which a new Checkpoint object (a run that
        # did not save this best model itself) does not track.
        status = self.checkpoint.read(self.manager.latest_checkpoint)
        status.assert_existing_objects_matched().expect_partial()
        logging.info(
            "Using the best model: step %d, score %.4f",
            int(self.step.numpy()),
            float(self.score.numpy()),
        )
        return int(self.step.numpy())


def write_eval_summaries(output_dir: str, metrics: dict, step: int) -> None:
    """An evaluation's metrics in TensorBoard (output_dir/eval), once per evaluation."""
    writer = tf.summary.create_file_writer(os.path.join(output_dir, "eval"))
    with writer.as_default(step=step):
        for key, value in metrics.items():
            if key != "global_step" and isinstance(value, (int, float)):
                tf.summary.scalar(key, value)
    writer.close()


class EpochEvaluator:
    """`after_loop` of a training run: at each epoch's end, evaluates, logs the
    history (eval_history.json, TensorBoard eval/) and keeps the best model.

    The files an epoch's evaluation writes (eval_results.txt, a task's predictions)
    go to the hidden `output_dir/.epoch_evaluation/<step>`: under output_dir's own
    names they would look like the run's final results until the end replaces them.
    The folders of the best model's evaluation and of the latest are kept, so that the
    final evaluation of a model this process evaluated already is that evaluation's
    files, copied (`reuse`), not a second pass over the dev data.
    """

    def __init__(
        self,
        task,
        trainer: training.Trainer,
        best: BestCheckpoint,
        output_dir: str,
        scratch: str | None = None,
    ):
        """`task`: a `finetuning.FineTuningTask` (its `evaluate` and `score`);
        `scratch`: the folder whose `.epoch_evaluation` the evaluations' files go to
        (default output_dir); a worker that is not the chief gives its own and writes
        nothing else."""
        self.task, self.trainer, self.best, self.output_dir = task, trainer, best, output_dir
        self.chief = scratch is None
        self.scratch = os.path.join(scratch or output_dir, EPOCH_EVALUATION_DIR)
        self.history_path = os.path.join(output_dir, EVAL_HISTORY)
        self.history = (
            file_io.read_json(self.history_path) if tf.io.gfile.exists(self.history_path) else []
        )
        # step -> metrics of the evaluations this process made: the same task on the
        # same dev data, with these settings (an earlier process's may have had others).
        self.made: dict[int, dict] = {}

    def evaluated(self, step: int) -> bool:
        """Whether the evaluation at `step` is in the history (and so its best model
        kept: the history is written after it)."""
        return any(entry.get("global_step") == step for entry in self.history)

    def folder(self, step: int) -> str:
        """Where the evaluation at `step` writes its files."""
        return os.path.join(self.scratch, str(step))

    def __call__(self, step: int) -> None:
        folder = self.folder(step)
        if tf.io.gfile.exists(folder):  # A killed run's: none of its files may stay.
            tf.io.gfile.rmtree(folder)
        tf.io.gfile.makedirs(folder)
        metrics = self.task.evaluate(self.trainer, folder, step)
        score = self.task.score(metrics)
        logging.info("Evaluation at step %d: score %.4f, %s", step, score, metrics)
        self.best.update(step, score)
        # A run killed after an evaluation but before its next checkpoint evaluates
        # that epoch again when it resumes: the new entry replaces the old one.
        self.history = [h for h in self.history if h.get("global_step", -1) < step]
        self.history.append(dict(metrics, global_step=step, score=score))
        if self.chief:
            write_eval_summaries(self.output_dir, metrics, step)
            file_io.write_json(self.history_path, self.history)
        self.made[step] = metrics
        self._remove_folders(keep={str(step), str(int(self.best.step.numpy()))})

    def _remove_folders(self, keep: set[str]) -> None:
        """Every evaluation's folder but `keep` (and what older runs left)."""
        for name in tf.io.gfile.listdir(self.scratch):
            path = os.path.join(self.scratch, name.rstrip("/"))
            if name.rstrip("/") in keep:
                continue
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            else:
                tf.io.gfile.remove(path)
        self.made = {step: m for step, m in self.made.items() if str(step) in keep}

    def reuse(self, step: int, output_dir: str) -> dict | None:
        """The metrics of this process's evaluation at `step`, its files copied into
        `output_dir` (eval_results.txt last); None when this process made none (or did
        not keep its files), and the model must be evaluated."""
        folder = self.folder(step)
        if step not in self.made or not tf.io.gfile.isdir(folder):
            return None
        names = sorted(
            name
            for name in tf.io.gfile.listdir(folder)
            if not file_io.is_temp_name(name) and not tf.io.gfile.isdir(os.path.join(folder, name))
        )
        names.sort(key=lambda name: name == file_io.EVAL_RESULTS)
        tf.io.gfile.makedirs(output_dir)
        for name in names:
            file_io.copy_file(os.path.join(folder, name), os.path.join(output_dir, name))
        return self.made[step]


def early_stop(history: list[dict], patience: int) -> dict | None:
    """Whether `patience` evaluations in a row of `history` (eval_history.json's
    entries, in step order) failed to beat the best score before them, and so training
    stops at the last of them: its step, the best's step and score, and why; else None.

    A function of the history alone, so a resumed run stops where an uninterrupted one
    does."""
    if patience <= 0:
        return None
    best, since = None, []
    for entry in history:
        if best is None or entry["score"] > best["score"]:
            best, since = entry, []
            continue
        since.append(entry["global_step"])
        if len(since) >= patience:
            steps = ", ".join(str(s) for s in since)
            return {
                "global_step": entry["global_step"],
                "best_step": best["global_step"],
                "best_score": best["score"],
                "patience": patience,
                "reason": (
                    f"the dev score did not beat {best['score']:.4g} (step "
                    f"{best['global_step']}) in {len(since)} evaluations (steps {steps}); "
                    f"--early_stopping_patience={patience}"
                ),
            }
    return None
