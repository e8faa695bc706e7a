"""The Trainer's checkpoints: saved to output_dir, resumed from, and another run's
training state continued (`training.Trainer` holds one `TrainingCheckpoints`).

A checkpoint holds the model, the optimizer, the global step, the dropout seed states
(so that a resumed run draws the same masks as an uninterrupted one) and, for float16,
the loss scale. A checkpoint that could not be written whole is removed; a killed save's
temporary folder is removed when the next run starts. Under MultiWorkerMirrored every
worker saves (the save is collective) and only the chief's checkpoint is kept.
"""

from __future__ import annotations

import os
from typing import Callable

import tensorflow as tf
from absl import logging

from common import file_io
from common.errors import UserError
from modeling import checkpoint_readers, distribution

GLOBAL_STEP_KEY = "global_step/.ATTRIBUTES/VARIABLE_VALUE"


def training_state_step(path: str) -> tuple[str, int]:
    """(checkpoint prefix, global step) of the Trainer checkpoint at `path`: a prefix,
    or a run's output_dir (its latest checkpoint). Anything else (another format, a
    model saved without its optimizer) is a UserError."""
    kind, prefix = checkpoint_readers.resolve_checkpoint(path)
    stored = dict(tf.train.list_variables(prefix)) if kind == "tf2" else {}
    if GLOBAL_STEP_KEY not in stored or not any(n.startswith("optimizer/") for n in stored):
        raise UserError(
            f"{path} holds no training state (global step and optimizer moments): "
            f"--restore_training_state continues a run of this project from its "
            f"output_dir or one of its ckpt-N prefixes; without the flag "
            f"--init_checkpoint restores the weights alone"
        )
    return prefix, int(tf.train.load_checkpoint(prefix).get_tensor(GLOBAL_STEP_KEY))


class TrainingCheckpoints:
    """The checkpoints of one Trainer in `output_dir`, at most `max_to_keep` of them.

    `objects` are what a checkpoint holds, by name: `model`, `optimizer`, `global_step`
    (a tf.Variable), `rng_states` and, when present, `loss_scale`.
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        output_dir: str,
        objects: dict,
        max_to_keep: int,
    ):
        self.strategy, self.output_dir = strategy, output_dir
        self.model, self.optimizer = objects["model"], objects["optimizer"]
        self.global_step = objects["global_step"]
        self.checkpoint = tf.train.Checkpoint(**objects)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint,
            self.directory(),
            max_to_keep=max_to_keep,
            checkpoint_name="ckpt",
        )
        self._saved = None  # (step, path) of the checkpoint last saved or resumed from.

    def is_chief(self) -> bool:
        return distribution.is_chief(self.strategy)

    def directory(self) -> str:
        # Under MultiWorkerMirrored every worker must save (the save is collective);
        # only the chief writes to output_dir.
        if self.is_chief():
            return self.output_dir
        return distribution.worker_scratch_dir(self.strategy, self.output_dir)

    def restore_or_initialize(self, initialize: Callable[[], None] | None = None) -> bool:
        """Resumes from the latest checkpoint in output_dir, else calls `initialize`
        (which loads --init_checkpoint). Returns whether it resumed."""
        if self.is_chief():  # A killed save's folder, never used.
            for leftover in tf.io.gfile.glob(os.path.join(self.output_dir, "ckpt-*_temp*")):
                tf.io.gfile.rmtree(leftover)
        latest = tf.train.latest_checkpoint(self.output_dir)
        if latest:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
            self._saved = (int(self.global_step.numpy()), latest)
            logging.info("Resumed from %s at step %d", latest, int(self.global_step.numpy()))
            return True
        if initialize is not None:
            initialize()
        return False

    def restore_training_state(self, path: str) -> int:
        """Restores another run's training state: the model's weights, the optimizer's
        moments and step count (Adam's bias correction) and the global step (the
        learning-rate schedule), from `path`, a Trainer checkpoint prefix or the
        output_dir holding one (`training_state_step`). Returns the global step."""
        prefix, step = training_state_step(path)
        checkpoint = tf.train.Checkpoint(
            model=self.model, optimizer=self.optimizer, global_step=self.global_step
        )
        try:
            checkpoint.restore(prefix).assert_existing_objects_matched().expect_partial()
        except AssertionError as error:
            raise UserError(
                f"{prefix} does not hold this model's training state (another model or "
                f"optimizer?): {error}"
            ) from error
        logging.info("Continued the training state of %s at step %d", prefix, step)
        return step

    def save(self) -> str:
        """Saves a checkpoint at the global step (none if one was saved or resumed
        there); returns its path."""
        step = int(self.global_step.numpy())
        if self._saved is not None and self._saved[0] == step:  # Saved (or resumed) here.
            return self._saved[1]
        try:
            path = self.manager.save(checkpoint_number=self.global_step)
        except BaseException as e:
            self._remove_unfinished(step)
            if isinstance(e, (OSError, tf.errors.OpError)):  # No space or no permission.
                raise file_io.cannot_write(self.output_dir, e) or e
            raise
        if not self.is_chief():
            tf.io.gfile.rmtree(self.directory())
        self._saved = (step, path)
        logging.info("Saved checkpoint %s", path)
        return path

    def _remove_unfinished(self, step: int) -> None:
        """The files of a save of `step` that failed: its temporary folder and what
        it may have written of the checkpoint (the state file does not name it)."""
        prefix = os.path.join(self.directory(), f"ckpt-{step}")
        for path in tf.io.gfile.glob(prefix + "_temp*") + tf.io.gfile.glob(prefix + ".*"):
            try:
                if tf.io.gfile.isdir(path):
                    tf.io.gfile.rmtree(path)
                else:
                    tf.io.gfile.remove(path)
            except (OSError, tf.errors.OpError):
                logging.warning("Could not remove %s, of an unfinished checkpoint.", path)
