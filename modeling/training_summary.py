"""What a training run says of itself (`training.Trainer` holds one `TrainingSummary`):
a log line and TensorBoard scalars every loop, train_summary.json at the end, the
weights' checksum across replicas and the profiler's window.

train_summary.json (`SUMMARY_FILE`; `train_summary_worker_<i>.json` on a worker that
is not the chief) says the step reached, whether training is complete (`"complete":
false` and `"stopped_by"` after a signal; a stop the caller asked for says
`"complete": true`, `"stopped_by"` and its details), the last loop's loss and the
weights' checksum.
"""

from __future__ import annotations

import os
import time

import numpy as np
import tensorflow as tf
from absl import logging

from common import file_io
from modeling import distribution

SUMMARY_FILE = "train_summary.json"


def _tf_value(variable):
    """The tf (possibly distributed) variable behind a Keras variable."""
    return variable.value if hasattr(variable, "path") else variable


class TrainingSummary:
    """The reports of one Trainer in `output_dir` on its `variables` (the trainable
    ones); `profile_steps`: (first, last) global steps the TensorFlow profiler records
    (output_dir/profile), or None."""

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        output_dir: str,
        variables: list,
        profile_steps: tuple[int, int] | None = None,
    ):
        self.strategy, self.output_dir = strategy, output_dir
        self.variables = variables
        self.profile_steps = profile_steps
        self._profiling = False

    def writer(self, name: str):
        """TensorBoard's writer of output_dir/`name`; none on a worker that is not the
        chief (it would add a second event file of the same run)."""
        if not distribution.is_chief(self.strategy):
            return tf.summary.create_noop_writer()
        return tf.summary.create_file_writer(os.path.join(self.output_dir, name))

    def path(self) -> str:
        name = SUMMARY_FILE
        if not distribution.is_chief(self.strategy):
            name = f"train_summary_worker_{self.strategy.cluster_resolver.task_id}.json"
        return os.path.join(self.output_dir, name)

    def remove(self) -> None:
        """Removes train_summary.json: an earlier run's, or one that must not say a
        step is done."""
        if tf.io.gfile.exists(self.path()):
            tf.io.gfile.remove(self.path())

    def write(
        self,
        step: int,
        loss: float,
        num_train_steps: int,
        end_step: int,
        stop: tuple | None,
        stop_requested: str | None,
    ) -> dict:
        """train_summary.json: the step reached, whether training is complete (it
        reached `end_step`: `num_train_steps`, or --stop_at_step; else what stopped it:
        `stop`, (reason, details) of a stop the caller asked for, or the signal
        `stop_requested` names), the last loop's loss and the weights' checksum."""
        summary = {
            "global_step": step,
            "num_train_steps": num_train_steps,
            "complete": step >= end_step,
            "loss": loss,
            **self.replica_report(),
        }
        if end_step < num_train_steps:
            summary["stop_at_step"] = end_step
        if stop is not None and not summary["complete"]:
            reason, details = stop
            summary.update({"complete": True, "stopped_by": reason, reason: details})
        elif not summary["complete"]:
            summary["stopped_by"] = stop_requested or "SIGTERM"
        file_io.write_json(self.path(), summary)
        return summary

    def replica_report(self) -> dict:
        """A checksum of the weights and the largest difference between local replicas.

        Every replica must hold the same weights; workers of a multi-worker job compare
        their checksums (train_summary*.json).
        """
        max_diff, checksum = 0.0, 0.0
        for variable in self.variables:
            locals_ = [
                v.numpy() for v in self.strategy.experimental_local_results(_tf_value(variable))
            ]
            checksum += float(np.sum(np.abs(locals_[0].astype(np.float64))))
            for other in locals_[1:]:
                max_diff = max(max_diff, float(np.max(np.abs(other - locals_[0]))))
        return {
            "weights_checksum": checksum,
            "replica_max_diff": max_diff,
            "num_replicas": self.strategy.num_replicas_in_sync,
        }

    def maybe_profile(self, step: int, num: int, loop_done: bool, end_step: int) -> None:
        """Starts the profiler before the first loop (of `num` steps from `step`) that
        holds steps of the window, and stops it after (`loop_done`) the loop that holds
        its last step or ends the training at `end_step`. A loop runs as one call: the
        profile holds the whole loops the window touches."""
        if not self.profile_steps:
            return
        first, last = self.profile_steps
        if not loop_done and not self._profiling and step <= last and first < step + num:
            tf.profiler.experimental.start(os.path.join(self.output_dir, "profile"))
            self._profiling = True
        elif loop_done and self._profiling and (last < step + num or step + num >= end_step):
            tf.profiler.experimental.stop()
            self._profiling = False

    def log_loop(
        self,
        writer,
        step: int,
        start_step: int,
        num_train_steps: int,
        loss: float,
        norm: float,
        lr: float,
        examples_per_sec: float,
        start_time: float,
        end_step: int,
        loss_scale: float | None,
    ) -> None:
        """One loop's log line and TensorBoard scalars (`loss_scale`: float16's)."""
        done = step - start_step
        eta = (time.time() - start_time) / max(done, 1) * (end_step - step)
        logging.info(
            "step %d/%d  loss %.4f  lr %.3g  grad_norm %.3f  %.1f examples/s  ETA %s",
            step,
            num_train_steps,
            loss,
            lr,
            norm,
            examples_per_sec,
            time.strftime("%H:%M:%S", time.gmtime(eta)),
        )
        with writer.as_default(step=step):
            tf.summary.scalar("loss", loss)
            tf.summary.scalar("learning_rate", lr)
            tf.summary.scalar("grad_norm", norm)
            tf.summary.scalar("examples_per_second", examples_per_sec)
            if loss_scale is not None:
                tf.summary.scalar("loss_scale", loss_scale)
