"""The Trainer's evaluation and prediction loops (`training.Trainer` holds one
`EvalLoop`): a model's metrics from its objective's evaluation sums, and its outputs in
dataset order.

The compiled steps are made once and reused by every call (per-epoch evaluation, the
final one, prediction): tracing BERT-base's graph takes seconds on CPU.
"""

from __future__ import annotations

from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from common.errors import UserError
from common.progress import Progress


def _num_batches(dataset: tf.data.Dataset) -> int | None:
    """The dataset's batch count when tf.data knows it, else None."""
    count = int(dataset.cardinality())
    return count if count >= 0 else None


def _concatenate(arrays: list[np.ndarray]) -> np.ndarray:
    """`arrays` joined along axis 0, each padded with zeros to the largest size of
    every other axis."""
    shape = np.max([a.shape for a in arrays], axis=0)
    return np.concatenate(
        [np.pad(a, [(0, 0)] + [(0, m - n) for m, n in zip(shape[1:], a.shape[1:])]) for a in arrays]
    )


def _batch_signature(batches) -> dict | None:
    """The signature every batch of a distributed dataset has, when it is plain tensors
    (one replica): batch dimension of any size unless the dataset drops its remainder,
    and sequence dimension of any size where batches are cut to their longest row.
    None with several replicas (per-replica values)."""
    spec = batches.element_spec
    leaves = tf.nest.flatten(spec)
    return spec if all(type(leaf) is tf.TensorSpec for leaf in leaves) else None


def _signature_key(element_spec) -> str | None:
    """What tells apart the signatures of two datasets (a dict of specs is unhashable)."""
    return None if element_spec is None else repr(element_spec)


def _compiled(step: Callable, element_spec) -> Callable:
    """`step` as a tf.function traced once for every batch of `element_spec`. Without
    a spec (several replicas), reduce_retracing: a smaller last batch makes one more
    trace, of a batch dimension of any size, instead of one per size seen. No
    AutoGraph: the model's and the objective's branches are on Python values, so the
    graph is the same without its rewriting of every function called."""
    if element_spec is None:
        return tf.function(step, reduce_retracing=True, autograph=False)
    return tf.function(step, input_signature=[element_spec], autograph=False)


# The prefix of the evaluation sums among a prediction's outputs (`with_eval_sums`).
EVAL_SUM = "sum/"


def with_eval_sums(output_fn: Callable[[dict, dict], dict], objective) -> Callable:
    """A `Trainer.predict` output_fn: `output_fn`'s outputs and, under `EVAL_SUM`
    names, `objective.eval_sums` of each batch ([1] each), so that one pass over a dev
    split gives both the predictions and the loss that training minimises. Make it
    once per objective: the compiled step is kept per function."""

    def outputs_and_sums(features: dict, outputs: dict) -> dict:
        sums = objective.eval_sums(features, outputs)
        return dict(
            output_fn(features, outputs),
            **{EVAL_SUM + name: tf.reshape(value, [1]) for name, value in sums.items()},
        )

    return outputs_and_sums


def pop_eval_sums(outputs: dict) -> dict[str, np.ndarray]:
    """The `with_eval_sums` sums of a prediction's outputs, taken out of `outputs`:
    name -> float [batches] (one value per batch and replica, in dataset order)."""
    names = [name for name in outputs if name.startswith(EVAL_SUM)]
    return {name.removeprefix(EVAL_SUM): outputs.pop(name) for name in names}


def add_up(sums: dict[str, np.ndarray]) -> dict[str, float]:
    """Each name's per-batch sums added one after the other in float64, as
    `EvalLoop.evaluate` adds them: on one replica the totals of an evaluation pass,
    bit for bit."""
    totals = {}
    for name, values in sums.items():
        totals[name] = 0.0  # 0.0 + x is x: the first batch's sum, as EvalLoop starts.
        for value in values:
            totals[name] += float(value)
    return totals


class EvalLoop:
    """Evaluates and predicts with `model` under `strategy`.

    `objective` (`training.Objective`) gives the evaluation sums and their metrics;
    `global_step` (a tf.Variable) is the step the metrics are reported at;
    `summary_writer(name)` gives TensorBoard's writer of output_dir/name; `progress` is
    told of every batch.
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        model: keras.Model,
        objective,
        global_step: tf.Variable,
        summary_writer: Callable,
        progress: Progress,
    ):
        self.strategy, self.model, self.objective = strategy, model, objective
        self.global_step = global_step
        self.summary_writer = summary_writer
        self.progress = progress
        self._eval_steps = {}
        self._predict_steps = {}

    def evaluation_step(self, element_spec=None):
        """The compiled step: a global batch -> the objective's evaluation sums over it.

        `element_spec` is the distributed dataset's (`_batch_signature`)."""
        key = _signature_key(element_spec)
        if key not in self._eval_steps:

            def step(batch):
                def replica(features):
                    sums = self.objective.eval_sums(features, self.model(features, training=False))
                    # Summed in the replica context, as the gradients are: the same
                    # collective on one machine and across workers.
                    context = tf.distribute.get_replica_context()
                    return context.all_reduce(tf.distribute.ReduceOp.SUM, sums)

                sums = self.strategy.run(replica, args=(batch,))
                return self.strategy.experimental_local_results(sums)[0]

            self._eval_steps[key] = _compiled(step, element_spec)
        return self._eval_steps[key]

    def prediction_step(self, output_fn, element_spec=None):
        """The compiled step of `output_fn`: a global batch -> its per-replica outputs."""
        key = (output_fn, _signature_key(element_spec))
        if key not in self._predict_steps:

            def step(batch):
                def replica(features):
                    return output_fn(features, self.model(features, training=False))

                return self.strategy.run(replica, args=(batch,))

            self._predict_steps[key] = _compiled(step, element_spec)
        return self._predict_steps[key]

    def evaluate(
        self,
        dataset: tf.data.Dataset,
        max_steps: int | None = None,
        summary_name: str | None = None,
    ) -> dict:
        """Metrics over a batched dataset (global batches), from the task's eval sums.

        With `summary_name`, they also go to TensorBoard (output_dir/`summary_name`) at
        the global step. Fine-tuning leaves it out: it writes each evaluation's metrics
        once itself (`finetuning.write_eval_summaries`).
        """
        totals = None
        total = _num_batches(dataset)
        if max_steps is not None:
            total = max_steps if total is None else min(total, max_steps)
        # Workers share every global batch (DATA sharding): sharding by file fails on
        # fewer files than workers, and the sums do not depend on who read what.
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        batches = self.strategy.experimental_distribute_dataset(dataset.with_options(options))
        step = self.evaluation_step(_batch_signature(batches))
        with self.progress.task("eval", total=total, unit="batch", leave=False) as bar:
            for i, batch in enumerate(batches):
                if max_steps is not None and i >= max_steps:
                    break
                sums = {k: float(v) for k, v in step(batch).items()}
                totals = sums if totals is None else {k: totals[k] + sums[k] for k in totals}
                bar.update(i + 1)
        if totals is None:
            raise UserError("the evaluation dataset is empty")
        metrics = dict(self.objective.finalize_eval(totals))
        metrics["global_step"] = int(self.global_step.numpy())
        if summary_name is not None:
            writer = self.summary_writer(summary_name)
            with writer.as_default(step=metrics["global_step"]):
                for k, v in metrics.items():
                    if k != "global_step":
                        tf.summary.scalar(k, v)
            writer.close()
        return metrics

    def predict(
        self,
        dataset: tf.data.Dataset,
        output_fn: Callable[[dict, dict], dict],
        description: str = "predict",
    ) -> dict:
        """Concatenated numpy arrays of output_fn(features, outputs), in dataset order.

        Outputs of batches cut to different lengths (`data_prep.input_pipeline`) are
        padded with zeros to the longest along their other axes. The compiled step is
        kept per `output_fn`: pass the same function (a module-level one, not a new
        lambda) to reuse it. `description` names the job in the progress shown (e.g.
        "evaluate" when predictions are scored).
        """
        batches = self.strategy.experimental_distribute_dataset(dataset)
        step = self.prediction_step(output_fn, _batch_signature(batches))
        pieces = []
        total = _num_batches(dataset)
        with self.progress.task(description, total=total, unit="batch", leave=False) as bar:
            for i, batch in enumerate(batches):
                result = step(batch)
                for local in self.strategy.experimental_local_results(result):
                    pieces.append({k: v.numpy() for k, v in local.items()})
                bar.update(i + 1)
        if not pieces:
            return {}
        return {k: _concatenate([p[k] for p in pieces]) for k in pieces[0]}
