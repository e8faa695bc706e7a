"""The one training loop every runner uses: custom `strategy.run` steps.

A task supplies the model and its objective (`Objective`): functions of its features
and outputs:

  loss_weights(features) -> {name: scalar}   denominators of the loss terms, from the
                                             inputs alone (examples, masked-LM weights)
  loss_sums(features, outputs) -> {name: scalar}   numerators
  eval_sums(features, outputs) -> {name: scalar}   sums that `finalize_eval` turns into
                                                   metrics

The loss is sum_k loss_sums[k] / W_k with W_k the loss weight summed over the whole
global batch (all replicas and micro-batches), so one device, several replicas and
gradient accumulation all compute the same loss and gradient for the same global batch.

Gradients are all-reduced once, then clipped by global norm (1.0, as the original) and
applied by `modeling.optimization`. Checkpoints go to `output_dir` every
`save_checkpoints_steps`, at the end and on SIGTERM or Ctrl-C (SIGINT: a second one ends
the program at once); a restarted run resumes from the latest one, skipping the batches
it had already consumed. A checkpoint that could not be written whole is removed.
`train_summary.json` says whether training is complete (`"complete": false` and
`"stopped_by"` after a signal; a stop the caller asks for, `request_stop`, ends training
early and says why). Under
MultiWorkerMirrored, a lost worker is a `LostWorkerError` naming it
(`distribution.lost_worker_message`). `restore_training_state` continues another
run's training state (weights, optimizer moments and step count, global step) on new
data: phase 2 of the paper's pre-training.

The Trainer holds the steps and the loop; three collaborators hold the rest: its
checkpoints (`training_checkpoints`: save, resume, continue a training state), what it
reports (`training_summary`: log lines, TensorBoard, train_summary.json, the replicas'
checksum, the profiler) and its evaluation and prediction loops (`training_eval`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from typing import Callable, Protocol, Sequence

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from common.errors import LostWorkerError, UserError
from common.progress import Progress
from common import run_control
from modeling import distribution
from modeling import kernels as kernel_choices
from modeling import optimization, training_checkpoints, training_eval, training_summary


class Objective(Protocol):
    """A model's loss and evaluation sums (modeling/objectives.py has one per kind)."""

    def loss_weights(self, features: dict) -> dict: ...

    def loss_sums(self, features: dict, outputs: dict) -> dict: ...

    def eval_sums(self, features: dict, outputs: dict) -> dict: ...

    def finalize_eval(self, sums: dict) -> dict: ...


class DynamicLossScale(tf.Module):
    """Loss scaling for float16: halve on overflow, double after 2000 finite steps."""

    def __init__(self, initial: float = 2.0**15, growth_interval: int = 2000):
        super().__init__(name="loss_scale")
        self.scale = tf.Variable(initial, dtype=tf.float32, trainable=False, name="scale")
        self.good_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="good_steps")
        self.growth_interval = growth_interval

    def update(self, finite):
        def merged(strategy, finite):
            def step(scale, good, finite):
                good_next = tf.where(finite, good + 1, tf.zeros_like(good))
                grow = good_next >= self.growth_interval
                scale_next = tf.where(finite, tf.where(grow, scale * 2.0, scale), scale / 2.0)
                return tf.group(
                    scale.assign(tf.maximum(scale_next, 1.0)),
                    good.assign(tf.where(grow, tf.zeros_like(good), good_next)),
                )

            strategy.extended.update(
                self.scale,
                lambda s, g, f: step(s, g, f),
                args=(self.good_steps, finite),
                group=False,
            )

        context = tf.distribute.get_replica_context()
        if context is None:
            merged(tf.distribute.get_strategy(), finite)
        else:
            context.merge_call(merged, args=(finite,))


def _split(features: dict, parts: int, index):
    """The `index`-th of `parts` equal slices of every feature along the batch axis."""

    def take(t):
        size = tf.shape(t)[0] // parts
        return t[index * size : (index + 1) * size]

    return tf.nest.map_structure(take, features)


@dataclasses.dataclass
class _TrainingSpan:
    """The steps one `Trainer.train` call runs, and how far it got."""

    start_step: int
    end_step: int  # `num_train_steps`, or the `stop_at_step` before it
    global_batch_size: int
    step: int  # the global step reached
    loss: float = float("nan")  # the last loop's mean loss
    start_time: float = 0.0
    summary: dict | None = None  # train_summary.json's contents, once written


class Trainer:
    """Runs training, evaluation and prediction of one model under one strategy.

    Build the model under `strategy.scope()` before creating the Trainer; the Trainer
    creates the optimizer and the checkpoint (model, optimizer, global step) itself.
    `kernels` (`modeling.kernels`; None: for this CPU) says whether the optimizer step
    is compiled. `progress` (`common.progress`) is told of every loop, evaluation batch
    and prediction batch (the default shows nothing); every loop is also logged.
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        model: keras.Model,
        objective: Objective,
        output_dir: str,
        *,
        learning_rate: float,
        num_train_steps: int,
        num_warmup_steps: int = 0,
        lr_decay: str = "original",
        optimizer: str = "adamw",
        weight_decay_rate: float = 0.01,
        adam_bias_correction: bool = True,
        adam_epsilon: float = 1e-6,
        clip_norm: float = 1.0,
        dtype: str = "float32",
        steps_per_loop: int = 1,
        save_checkpoints_steps: int = 1000,
        gradient_accumulation_steps: int = 1,
        enable_xla: bool = False,
        max_checkpoints: int = 5,
        profile_steps: tuple[int, int] | None = None,
        kernels=None,
        progress: Progress | None = None,
    ):
        if gradient_accumulation_steps < 1:
            raise UserError("--gradient_accumulation_steps must be >= 1")
        self.strategy, self.model, self.objective = strategy, model, objective
        self.output_dir = output_dir
        self.learning_rate, self.num_train_steps = learning_rate, num_train_steps
        self.num_warmup_steps, self.lr_decay = num_warmup_steps, lr_decay
        self.clip_norm, self.dtype = clip_norm, dtype
        self.steps_per_loop = max(1, steps_per_loop)
        self.save_checkpoints_steps = max(1, save_checkpoints_steps)
        self.accumulation = gradient_accumulation_steps
        self.enable_xla = enable_xla
        self.progress = progress if progress is not None else Progress()
        os.makedirs(output_dir, exist_ok=True)
        with strategy.scope():
            self.variables = list(model.trainable_variables)
            self.optimizer = optimization.create_optimizer(
                optimizer,
                self.variables,
                weight_decay_rate,
                adam_bias_correction,
                epsilon=adam_epsilon,
                fused=kernel_choices.resolve(kernels).fused_optimizer,
            )
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            self.loss_scale = DynamicLossScale() if dtype == "float16" else None
        self.checkpoints = training_checkpoints.TrainingCheckpoints(
            strategy, output_dir, self._checkpointed(), max_checkpoints
        )
        self.summary = training_summary.TrainingSummary(
            strategy, output_dir, self.variables, profile_steps
        )
        # Compiled once per Trainer and reused by every train / evaluate / predict call
        # (per-epoch evaluation, a resumed loop, the shorter loop before a checkpoint or
        # an epoch's end): tracing and optimising BERT-base's training graph takes tens
        # of seconds on CPU.
        self._train_loop = None
        self.eval_loop = training_eval.EvalLoop(
            strategy, model, objective, self.global_step, self.summary.writer, self.progress
        )
        # The name of the signal (or the reason of `request_stop`) that asked to stop.
        self._stop_requested = None
        # A stop the caller asked for (`request_stop`): (reason, details); it ends
        # training, where a signal pauses it.
        self._stop = None

    # ---------------------------------------------------------------- checkpoints

    def _checkpointed(self) -> dict:
        """What a checkpoint holds: the model, the optimizer, the global step, the
        dropout seed states (so that a resumed run draws the same masks as an
        uninterrupted one) and, for float16, the loss scale."""
        rng_states = [v for v in self.model.non_trainable_variables if "seed_generator" in v.path]
        objects = dict(
            model=self.model,
            optimizer=self.optimizer,
            global_step=self.global_step,
            rng_states=rng_states,
        )
        if self.loss_scale is not None:
            objects["loss_scale"] = self.loss_scale
        return objects

    def restore_or_initialize(self, initialize: Callable[[], None] | None = None) -> bool:
        """Resumes from the latest checkpoint in output_dir, else calls `initialize`
        (which loads --init_checkpoint). Returns whether it resumed."""
        return self.checkpoints.restore_or_initialize(initialize)

    def restore_training_state(self, path: str) -> int:
        """Restores another run's training state (weights, optimizer moments and step
        count, global step) from `path`: `TrainingCheckpoints.restore_training_state`.
        Returns the global step."""
        return self.checkpoints.restore_training_state(path)

    def save(self) -> str:
        """Saves a checkpoint at the global step (`TrainingCheckpoints.save`)."""
        return self.checkpoints.save()

    # ---------------------------------------------------------------- steps

    def _current_lr(self):
        return optimization.learning_rate_schedule(
            self.global_step,
            self.learning_rate,
            self.num_train_steps,
            self.num_warmup_steps,
            self.lr_decay,
        )

    def _local_loss_and_grads(self, features, weights):
        """Loss contribution and gradients of this replica's batch (micro-batched)."""
        scale = self.loss_scale.scale if self.loss_scale is not None else None

        def loss_and_grads(batch):
            with tf.GradientTape() as tape:
                outputs = self.model(batch, training=True)
                sums = self.objective.loss_sums(batch, outputs)
                loss = tf.add_n([tf.cast(sums[k], tf.float32) / weights[k] for k in sums])
                scaled = loss * scale if scale is not None else loss
            grads = tape.gradient(scaled, self.variables)
            grads = [
                tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                for g, v in zip(grads, self.variables)
            ]
            return loss, grads

        if self.accumulation == 1:
            return loss_and_grads(features)

        def add_micro_batch(i, loss, grads):
            micro_loss, micro_grads = loss_and_grads(_split(features, self.accumulation, i))
            return i + 1, loss + micro_loss, [a + b for a, b in zip(grads, micro_grads)]

        # A graph loop (one micro-batch's activations at a time), written as one: the
        # step is traced without AutoGraph (`_make_train_loop`).
        loss, grads = loss_and_grads(_split(features, self.accumulation, 0))
        _, loss, grads = tf.while_loop(
            lambda i, loss, grads: i < self.accumulation,
            add_micro_batch,
            (tf.constant(1), loss, grads),
        )
        return loss, grads

    def _replica_train_step(self, features):
        context = tf.distribute.get_replica_context()
        weights = {
            k: tf.cast(w, tf.float32) for k, w in self.objective.loss_weights(features).items()
        }
        weights = context.all_reduce(tf.distribute.ReduceOp.SUM, weights)
        weights = {k: tf.maximum(w, 1e-5) for k, w in weights.items()}
        loss, grads = self._local_loss_and_grads(features, weights)
        grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        finite = True  # a Python True: plain steps are never skipped
        if self.loss_scale is not None:
            grads = [g / self.loss_scale.scale for g in grads]
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
            grads = [tf.where(finite, g, tf.zeros_like(g)) for g in grads]
        # tf.clip_by_global_norm's factor (NaN when the norm is not finite), applied
        # inside the optimizer's compiled update instead of one more pass over every
        # gradient.
        norm = tf.linalg.global_norm(grads)
        clip = self.clip_norm / tf.maximum(norm, self.clip_norm) + (norm - norm)
        self.optimizer.apply(grads, self._current_lr(), finite, grad_scale=clip)
        if self.loss_scale is not None:
            self.loss_scale.update(finite)
        return loss, norm

    def train_loop(self):
        """The compiled loop `(iterator, num_steps) -> (mean loss, last grad norm)`.

        `num_steps` is an int32 scalar tensor, so loops of any length share one trace.
        """
        if self._train_loop is None:
            self._train_loop = self._make_train_loop()
        return self._train_loop

    def _make_train_loop(self):
        # Traced as written, without AutoGraph: its rewriting of the step and of every
        # function of the model it calls gives the same graph (their branches are on
        # Python values) and took about a quarter of a small run, and parsing the loop's
        # own source for its `for` over tf.range took half a second more. The loop is
        # the tf.while_loop that `for` became.
        if self.enable_xla:
            step_fn = tf.function(self._replica_train_step, jit_compile=True, autograph=False)
        else:
            step_fn = tf.autograph.experimental.do_not_convert(self._replica_train_step)

        def loop(iterator, num_steps):
            def body(i, total, norm):
                loss, norm = self.strategy.run(step_fn, args=(next(iterator),))
                total += self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
                norm = self.strategy.reduce(tf.distribute.ReduceOp.MEAN, norm, axis=None)
                self.global_step.assign_add(1)
                return i + 1, total, norm

            _, total, norm = tf.while_loop(
                lambda i, total, norm: i < num_steps,
                body,
                (tf.constant(0), tf.constant(0.0), tf.constant(0.0)),
            )
            return total / tf.cast(num_steps, tf.float32), norm

        return tf.function(loop, autograph=False)

    # ---------------------------------------------------------------- training

    def request_stop(self, reason: str, details: dict) -> None:
        """Ends training at the end of the current loop (or before the first, if asked
        before `train`): a checkpoint is saved there and train_summary.json says
        `"complete": true`, `"stopped_by": reason` and `reason: details`. Unlike a
        signal, nothing is left to resume (e.g. early stopping)."""
        self._stop = (reason, details)
        self._stop_requested = self._stop_requested or reason

    @property
    def stop_signal(self) -> str | None:
        """The signal ("SIGTERM" or "SIGINT") that asked training to stop, if one came;
        it may have come after the last step, e.g. during the last epoch's evaluation."""
        return self._stop_requested if self._stop_requested in run_control.STOP_SIGNALS else None

    @contextlib.contextmanager
    def _stop_signals(self):
        """In this block SIGTERM and Ctrl-C (SIGINT) stop training with a checkpoint at
        the end of this loop; a second Ctrl-C ends the program at once (the watch of
        `run_control.second_ctrl_c_ends_at_once`, else the default action)."""
        with run_control.second_ctrl_c_ends_at_once(
            "Ctrl-C: stopping with a checkpoint at the end of this loop (Ctrl-C again "
            "stops at once, losing the steps since the last checkpoint).",
            "Stopped at once by a second Ctrl-C: run the same command again to resume "
            f"from the last checkpoint in {self.output_dir} (the steps since are lost).",
        ) as watched:

            def handler(signum, frame):
                del frame
                name = signal.Signals(signum).name
                # The program says once that it stopped, when it ends
                # (run_control.run_training).
                logging.info("%s: saving a checkpoint at the end of this loop", name)
                self._stop_requested = self._stop_requested or name
                if signum == signal.SIGINT and not watched:
                    signal.signal(signum, signal.SIG_DFL)

            previous = {}
            for signum in (signal.SIGTERM, signal.SIGINT):
                try:
                    previous[signum] = signal.signal(signum, handler)
                except ValueError:  # not the main thread
                    break
            try:
                yield
            finally:
                for signum, before in previous.items():
                    if before is not None:
                        signal.signal(signum, before)

    def train(
        self,
        dataset_fn: Callable,
        global_batch_size: int,
        after_loop: Callable[[int], None] | None = None,
        *,
        first_step: int = 0,
        stop_at_step: int | None = None,
        loop_ends: Sequence[int] = (),
    ) -> dict:
        """Trains until `num_train_steps` (or `stop_at_step`).

        Args:
          dataset_fn: (tf.distribute.InputContext) -> tf.data.Dataset of feature dicts
            batched at the per-replica batch size, repeated, deterministic order.
          global_batch_size: examples per step over all replicas and micro-batches.
          after_loop: optional callback(step) after each loop, e.g. an evaluation.
          first_step: the global step `dataset_fn`'s first batch is for: 0, or the
            step of a training state continued on new data (`restore_training_state`).
            A resumed run skips the batches consumed since.
          stop_at_step: stop (with a checkpoint) at this global step, the schedule
            still running over `num_train_steps` (phase 1 of a two-phase run).
          loop_ends: global steps a loop must end at (e.g. every epoch's end, for
            `after_loop` to evaluate there): a loop that would run past one is
            shortened to end at it.
        """
        start_step = int(self.global_step.numpy())
        end_step = min(stop_at_step or self.num_train_steps, self.num_train_steps)
        if start_step >= end_step:
            logging.info("Already trained %d steps; nothing to do.", start_step)
            return dict(global_step=start_step, num_train_steps=self.num_train_steps, complete=True)
        # An earlier run's summary (or one written just before a kill) is not this one's.
        self.summary.remove()
        iterator = self._train_iterator(dataset_fn, skip=max(start_step - first_step, 0))
        span = _TrainingSpan(start_step, end_step, global_batch_size, step=start_step)
        self._run_loops(span, iterator, after_loop, loop_ends)
        if span.step < end_step:
            span.summary = self._write_summary(span.step, span.loss, end_step)
        return span.summary

    def _train_iterator(self, dataset_fn: Callable, skip: int):
        """The distributed batches of `dataset_fn`, its first `skip` batches (those a
        resumed run consumed before) passed over."""

        def skipping_dataset_fn(context):
            return dataset_fn(context).skip(skip)

        return iter(self.strategy.distribute_datasets_from_function(skipping_dataset_fn))

    def _run_loops(self, span: _TrainingSpan, iterator, after_loop, loop_ends) -> None:
        """Loops until the span's end or a stop, SIGTERM and Ctrl-C watched, with a
        checkpoint where one is due (and at a stop); a lost worker of a multi-worker run
        is a `LostWorkerError`."""
        loop = self.train_loop()
        writer = self.summary.writer("train")
        stop_signals = contextlib.ExitStack()
        stop_signals.enter_context(self._stop_signals())
        span.start_time = time.time()
        bar = self.progress.task("train", total=span.end_step, unit="step", initial=span.step)
        try:
            while span.step < span.end_step and not self._stop_requested:
                examples_per_s = self._run_loop(span, loop, iterator, loop_ends, writer)
                if span.step >= span.end_step:
                    # Written before the final checkpoint: a run killed between the
                    # two resumes from the one before, trains the same last steps and
                    # writes the same summary again.
                    span.summary = self._write_summary(span.step, span.loss, span.end_step)
                bar.update(span.step, loss=span.loss, **{"examples/s": examples_per_s})
                self._save_when_due(span)
                if after_loop is not None:
                    after_loop(span.step)
            if self._stop_requested and span.step < span.end_step:
                self.save()
                logging.info("%s: checkpoint saved at step %d.", self._stop_requested, span.step)
        except distribution.PEER_ERRORS as e:
            if distribution.num_workers(self.strategy) < 2:
                raise
            raise self._lost_worker_error(e, span.step) from e
        finally:
            bar.close()
            stop_signals.close()
            writer.close()

    def _loop_length(self, span: _TrainingSpan, loop_ends: Sequence[int]) -> int:
        """Steps of the next loop: at most steps_per_loop, ending at the next
        checkpoint, the next of `loop_ends` or the span's end, whichever comes first."""
        step = span.step
        to_save = self.save_checkpoints_steps - step % self.save_checkpoints_steps
        to_end = min((end - step for end in loop_ends if end > step), default=span.end_step - step)
        return min(self.steps_per_loop, span.end_step - step, to_save, to_end)

    def _run_loop(self, span: _TrainingSpan, loop, iterator, loop_ends, writer) -> float:
        """Runs the next loop, moves `span` past it and logs it (`TrainingSummary.log_loop`);
        returns its examples per second. A loss that is not finite (without a loss
        scale to skip such a step) is a FloatingPointError."""
        num = self._loop_length(span, loop_ends)
        self.summary.maybe_profile(span.step, num, False, span.end_step)
        loop_start = time.time()
        loss_t, norm_t = loop(iterator, tf.constant(num, tf.int32))
        loss, norm = float(loss_t), float(norm_t)
        self.summary.maybe_profile(span.step, num, True, span.end_step)
        if not np.isfinite(loss) and self.loss_scale is None:
            raise FloatingPointError(f"training loss is {loss} at step {span.step + num}")
        span.step, span.loss = int(self.global_step.numpy()), loss
        examples_per_s = num * span.global_batch_size / max(time.time() - loop_start, 1e-9)
        self.summary.log_loop(
            writer,
            span.step,
            span.start_step,
            self.num_train_steps,
            loss,
            norm,
            float(self._current_lr()),
            examples_per_s,
            span.start_time,
            span.end_step,
            None if self.loss_scale is None else float(self.loss_scale.scale.numpy()),
        )
        return examples_per_s

    def _save_when_due(self, span: _TrainingSpan) -> None:
        """A checkpoint every save_checkpoints_steps and at the span's end. When the last
        one fails, the summary written just before goes: it must not say a lost step is
        done."""
        last = span.step >= span.end_step
        if span.step % self.save_checkpoints_steps == 0 or last:
            try:
                self.save()
            except BaseException:
                if last:
                    self.summary.remove()
                raise

    def _lost_worker_error(self, error: Exception, step: int) -> LostWorkerError:
        """A lost worker of a multi-worker run (`distribution.lost_worker_message`)."""
        latest = (
            tf.train.latest_checkpoint(self.output_dir)
            if distribution.is_chief(self.strategy)
            else None
        )
        return LostWorkerError(distribution.lost_worker_message(self.strategy, error, step, latest))

    def _write_summary(self, step: int, loss: float, end_step: int) -> dict:
        """train_summary.json (`TrainingSummary.write`) of training stopped at `step`."""
        return self.summary.write(
            step, loss, self.num_train_steps, end_step, self._stop, self._stop_requested
        )

    def replica_report(self) -> dict:
        """A checksum of the weights and the largest difference between local replicas
        (`TrainingSummary.replica_report`)."""
        return self.summary.replica_report()

    # ---------------------------------------------------------------- eval / predict

    def evaluate(self, dataset, max_steps=None, summary_name=None) -> dict:
        """Metrics over a batched dataset, from the task's eval sums (`EvalLoop.evaluate`)."""
        return self.eval_loop.evaluate(dataset, max_steps, summary_name)

    def predict(self, dataset, output_fn, description="predict") -> dict:
        """output_fn(features, outputs) over a dataset, in order (`EvalLoop.predict`)."""
        return self.eval_loop.predict(dataset, output_fn, description)
