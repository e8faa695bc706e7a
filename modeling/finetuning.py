"""The one fine-tuning core: what run_classifier, run_squad and run_ner share.

A runner reads its task's data and hands this module a `FineTuningTask` (its model,
loss, datasets, metrics and outputs) with the run's `Settings`; `run` does the rest,
the same way for every task:

  1. builds the model on the encoder and a `training.Trainer` for it;
  2. makes output_dir self-contained (bert_config.json, vocab.txt, model_info.json,
     run_config.json);
  3. resumes from output_dir's latest checkpoint, or restores --init_checkpoint: the
     encoder always, and the task head too when the checkpoint holds one for this
     kind of model (a fine-tuned checkpoint predicts with its own head);
  4. trains, evaluating at the end of every epoch (with --do_eval) and keeping the
     best model by the task's score in output_dir/best/;
  5. evaluates, predicts and exports the best model (or the last one without
     per-epoch evaluation): the evaluation of a model that an epoch's evaluation in
     this process scored already is that evaluation's files, copied
     (`EpochEvaluator.reuse`); output_dir/export.json names the export, so that the
     same command run again after a kill replaces it without --overwrite.

A run stopped by SIGTERM or Ctrl-C saves a checkpoint and ends before step 5 (`run`
returns False; the runners then exit with code 143 or 130); the same command resumes it.

Under MultiWorkerMirrored every worker runs these steps (training, evaluation and
saves are collective), and the chief alone writes output_dir's files and the export:
another worker writes its best model, evaluations, predictions and export into a
folder of its own in output_dir (`distribution.worker_scratch_dir`), removed at the end.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Protocol

import keras
import tensorflow as tf
from absl import logging

from common.errors import UserError
from common import file_io
from common import run_control
from data_prep import input_pipeline
from modeling import checkpoints, distribution, model_files, training, training_summary
from modeling import model_kinds
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.epoch_evaluation import (  # noqa: F401  (BEST_DIR, EVAL_HISTORY: the runs' names)
    BEST_DIR,
    EVAL_HISTORY,
    BestCheckpoint,
    EpochEvaluator,
    early_stop,
    write_eval_summaries,
)

RUN_CONFIG = run_control.RUN_CONFIG
# Where a run's output_dir records the export it writes: a rerun of the same command
# after a kill replaces that export without --overwrite.
EXPORT_RECORD = "export.json"
# A patience changed on resume would stop it elsewhere than the run it continues.
RESUME_SETTINGS = run_control.RESUME_SETTINGS + ("early_stopping_patience",)


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a fine-tuning run does, from the runner's flags.

    `trainer_options` are keyword arguments of `training.Trainer` (optimizer,
    weight_decay_rate, dtype, steps_per_loop, save_checkpoints_steps, ...);
    `shuffle_buffer_size`, `pad_to_max_seq_length` and `group_by_length` say how a
    task's datasets are read (`data_prep.input_pipeline`): pad_to_max_seq_length None
    (the default) cuts every batch to its longest example, except the training batches
    of an objective whose loss sees the padding (`loss_sees_padding`, SQuAD's span
    loss), which stay padded so that training computes what the original release does;
    True pads every batch, False cuts every batch;
    `early_stopping_patience` N > 0 ends training after N epoch evaluations in a row
    that do not beat the best score (0: train every epoch); `head_initializer` is how
    a task model draws its new head (`modeling.layers.INITIALIZERS`); `export_options`
    are the options of the raw-text export every task passes on
    (`serving.exports.SHARED_OPTIONS`, e.g. xla_single_requests).
    """

    output_dir: str
    init_checkpoint: str | None = None
    hub_module_url: str | None = None
    reinit_head: bool = False
    head_initializer: str = "truncated_normal"
    do_train: bool = False
    do_eval: bool = False
    do_predict: bool = False
    train_batch_size: int = 32
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    learning_rate: float = 5e-5
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    seed: int = input_pipeline.DEFAULT_SEED
    shuffle_buffer_size: int = input_pipeline.DEFAULT_SHUFFLE_BUFFER_SIZE
    pad_to_max_seq_length: bool | None = None
    group_by_length: bool = False
    evaluate_every_epoch: bool = True
    early_stopping_patience: int = 0
    export_dir: str | None = None
    overwrite_export: bool = False
    export_options: dict = dataclasses.field(default_factory=dict)
    trainer_options: dict = dataclasses.field(default_factory=dict)
    flag_values: dict = dataclasses.field(default_factory=dict)

    def pads_training(self, objective=None) -> bool:
        """Whether the training batches of `objective` are padded to max_seq_length."""
        if self.pad_to_max_seq_length is not None:
            return self.pad_to_max_seq_length
        return bool(getattr(objective, "loss_sees_padding", False))

    @property
    def pads_inference(self) -> bool:
        """Whether evaluation and prediction batches are padded to max_seq_length (the
        real positions' outputs are the same either way)."""
        return bool(self.pad_to_max_seq_length)

    def training_input_options(self, objective=None) -> dict:
        """Keyword arguments of a task's training dataset builder (shuffling, padding,
        length grouping), as `data_prep.input_pipeline.batched_records` takes them."""
        return dict(
            shuffle_buffer_size=self.shuffle_buffer_size,
            pad_to_max_seq_length=self.pads_training(objective),
            group_by_length=self.group_by_length,
        )


class FineTuningTask(Protocol):
    """A task's part of a fine-tuning run. Its data is read before `run` starts, so
    bad input fails before any model is built.

    Attributes:
      kind: the kind of model (its `modeling.model_kinds` declaration).
      model_kind: its name (`kind.name`).
      objective: the loss and evaluation sums (`training.Objective`).
      num_train_examples: training examples (windows, features) per epoch.
      max_seq_length: the sequence length the model is trained and exported with.
      export_labels: the label names its export answers with (None: regression, spans).
    """

    kind: model_kinds.ModelKind
    model_kind: str
    objective: training.Objective
    num_train_examples: int
    max_seq_length: int
    export_labels: list[str] | None

    def build_model(self, encoder, config: BertConfig) -> keras.Model: ...

    def train_dataset(
        self, batch_size: int, seed: int, input_context: tf.distribute.InputContext | None
    ) -> tf.data.Dataset: ...

    def evaluate(self, trainer: training.Trainer, output_dir: str, global_step: int) -> dict:
        """Metrics of the dev data, written to output_dir (eval_results.txt and the
        task's files); `global_step` is the step of the weights evaluated."""

    def score(self, metrics: dict) -> float:
        """The number the best model is chosen by (higher is better)."""

    def predict(self, trainer: training.Trainer, output_dir: str, global_step: int) -> None:
        """Predictions of the test data, written to output_dir."""

    def export_options(self) -> dict:
        """The options of its kind's raw-text export that are the task's own
        (`serving.exports.TASK_OPTIONS`), so that the export answers as --do_predict does."""

    def model_info(self) -> dict:
        """What a later run needs besides the weights (labels, settings)."""


# ---------------------------------------------------------------------------------
# The schedule.


def train_schedule(
    num_examples: int, batch_size: int, num_epochs: float, warmup_proportion: float
) -> tuple[int, int]:
    """(num_train_steps, num_warmup_steps), computed as the original release does."""
    num_train_steps = int(num_examples / batch_size * num_epochs)
    if num_train_steps < 1:
        raise UserError(
            f"{num_examples} training examples at --train_batch_size={batch_size} for "
            f"--num_train_epochs={num_epochs} make no training step"
        )
    return num_train_steps, int(num_train_steps * warmup_proportion)


def epoch_end_steps(num_examples: int, batch_size: int, num_train_steps: int) -> list[int]:
    """The global step at which each epoch ends; the last is always num_train_steps."""
    ends, epoch = [], 1
    while (step := int(num_examples * epoch / batch_size)) < num_train_steps:
        if not ends or step > ends[-1]:
            ends.append(step)
        epoch += 1
    return ends + [num_train_steps]


def train(
    task: FineTuningTask, trainer: training.Trainer, settings: Settings, on_epoch_end=None
) -> bool:
    """Trains to num_train_steps, calling on_epoch_end(step) at each epoch's end.

    The Trainer runs --steps_per_loop steps per compiled loop, a loop shortened so
    that one ends exactly at every epoch's end (`loop_ends`).

    Returns:
      Whether training is complete (False: stopped early by SIGTERM or Ctrl-C,
      checkpointed).
    """

    def dataset_fn(context=None):
        return task.train_dataset(settings.train_batch_size, settings.seed, context)

    ends = epoch_end_steps(
        task.num_train_examples, settings.train_batch_size, trainer.num_train_steps
    )

    def stop_early(step: int) -> bool:
        """Asks the trainer to stop when the history up to `step` says so."""
        history = getattr(on_epoch_end, "history", None)
        if not settings.early_stopping_patience or history is None:
            return False
        stop = early_stop(
            [h for h in history if h["global_step"] <= step], settings.early_stopping_patience
        )
        if stop is None or step >= trainer.num_train_steps:
            return False
        stop["global_step"] = step
        trainer.request_stop("early_stopping", stop)
        message = f"Stopped early at step {step} of {trainer.num_train_steps}: {stop['reason']}"
        logging.info(message)
        trainer.progress.say(message)
        return True

    def after_loop(step: int) -> None:
        if on_epoch_end is not None and step in ends:
            on_epoch_end(step)
            stop_early(step)

    start = int(trainer.global_step.numpy())
    # A run killed after the checkpoint at an epoch's end but before that epoch's
    # evaluation was recorded resumes at that very step: evaluate it first.
    evaluated = getattr(on_epoch_end, "evaluated", None)
    if start in ends and evaluated is not None and not evaluated(start):
        on_epoch_end(start)
    if start < trainer.num_train_steps and stop_early(start):
        # It had stopped early here (or a kill came after the evaluation that stops it):
        # its train_summary.json stays, else the trainer writes it without training.
        summary_path = os.path.join(settings.output_dir, training_summary.SUMMARY_FILE)
        if (
            tf.io.gfile.exists(summary_path)
            and file_io.read_json(summary_path).get("stopped_by") == "early_stopping"
        ):
            return True
    summary = trainer.train(
        dataset_fn, settings.train_batch_size, after_loop=after_loop, loop_ends=ends
    )
    return bool(summary["complete"])


# ---------------------------------------------------------------------------------
# The run.


def restore_initial_weights(model, settings: Settings, files: model_files.ModelFiles) -> None:
    """--init_checkpoint into a new model: the encoder, and the head when the
    checkpoint has this model's head. A TF Hub encoder comes with its weights. The
    checkpoint is opened from what `files` resolved and read of it."""
    if settings.hub_module_url:
        return
    if not settings.init_checkpoint:
        logging.warning("No --init_checkpoint: the encoder starts from random weights.")
        return
    reader = files.open_checkpoint() if files.checkpoint else None
    checkpoints.restore_model(
        settings.init_checkpoint, model, reinit_head=settings.reinit_head, reader=reader
    )


def check_labels(task: FineTuningTask, settings: Settings, files: model_files.ModelFiles) -> None:
    """A fine-tuned --init_checkpoint of this kind must have this run's labels, in
    this order: its head's outputs mean those labels (unless --reinit_head)."""
    if settings.reinit_head or settings.hub_module_url or not settings.init_checkpoint:
        return
    info = files.fine_tuned(task.kind)
    wanted = task.model_info().get("labels")
    if (
        info.get("labels") is not None
        and wanted is not None
        and list(info["labels"]) != list(wanted)
    ):
        raise UserError(
            f"--init_checkpoint={settings.init_checkpoint} was fine-tuned on the labels "
            f"{list(info['labels'])}, this run has {list(wanted)}: its head's outputs "
            f"would mean other labels. Give the same labels, or --reinit_head to train "
            f"a new head."
        )


def fine_tuned_bilstm_units(init_checkpoint: str, model_kind: str, info=None) -> int:
    """The `bilstm_units` a fine-tuned checkpoint of `model_kind` was trained with (its
    model_info.json; `info` when read already), 0 for any other checkpoint: predicting
    with it rebuilds its head."""
    info = model_files.read_model_info(init_checkpoint) if info is None else info
    units = int(info.get("bilstm_units") or 0) if info.get("model_kind") == model_kind else 0
    if units:
        logging.info("bilstm_units=%d, as %s was fine-tuned with", units, init_checkpoint)
    return units


def build_trainer(task: FineTuningTask, model, strategy, settings: Settings) -> training.Trainer:
    if settings.do_train:
        input_pipeline.warn_if_batch_exceeds_data(
            task.num_train_examples, settings.train_batch_size, "--train_batch_size"
        )
    num_train_steps, num_warmup_steps = (
        train_schedule(
            task.num_train_examples,
            settings.train_batch_size,
            settings.num_train_epochs,
            settings.warmup_proportion,
        )
        if settings.do_train
        else (0, 0)
    )
    return training.Trainer(
        strategy,
        model,
        task.objective,
        settings.output_dir,
        learning_rate=settings.learning_rate,
        num_train_steps=num_train_steps,
        num_warmup_steps=num_warmup_steps,
        **settings.trainer_options,
    )


def write_run_files(
    task: FineTuningTask,
    trainer: training.Trainer,
    files: model_files.ModelFiles,
    settings: Settings,
) -> None:
    """The self-contained output_dir, and every setting of the run (run_config.json)."""
    info = task.model_info()
    model_files.write_model_files(settings.output_dir, files, task.model_kind, **info)
    values = dict(info, **settings.flag_values)  # A flag's value as given wins.
    values.update(
        resolved_vocab_file=files.vocab_file,
        resolved_do_lower_case=files.do_lower_case,
        pad_to_max_seq_length=settings.pads_inference,
        padded_training_batches=settings.pads_training(task.objective),
        model_kind=task.model_kind,
        num_train_steps=trainer.num_train_steps,
        num_warmup_steps=trainer.num_warmup_steps,
    )
    run_control.write_run_config(
        os.path.join(settings.output_dir, RUN_CONFIG),
        values,
        RESUME_SETTINGS if settings.do_train else (),
        resumes=tf.train.latest_checkpoint(settings.output_dir),
    )


def run(
    task: FineTuningTask,
    settings: Settings,
    strategy: tf.distribute.Strategy,
    encoder,
    files: model_files.ModelFiles,
    export=None,
) -> bool:
    """Trains, evaluates, predicts and exports as `settings` ask.

    `export(model, export_dir, files, overwrite, task, shared_options)` writes the
    export (`serving.exports.export_fine_tuned`, which this floor cannot import: the
    program passes it); needed with `settings.export_dir`.

    Returns:
      False when training stopped early (SIGTERM, Ctrl-C): nothing was evaluated, predicted
      or exported from the unfinished model; a rerun resumes.
    """
    # The head's initial weights and dropout seeds depend on --seed alone, not on how
    # many random draws building the encoder took: a TF Hub encoder and a checkpoint
    # of the same weights fine-tune to the same model.
    check_labels(task, settings, files)
    keras.utils.set_random_seed(settings.seed)
    with strategy.scope():
        model = task.build_model(encoder, files.config)
    trainer = build_trainer(task, model, strategy, settings)
    chief = distribution.is_chief(strategy)
    # Where this process writes: output_dir, or a worker's own folder (removed at the end).
    out = settings.output_dir
    if chief:
        write_run_files(task, trainer, files, settings)
    else:
        out = distribution.worker_scratch_dir(strategy, settings.output_dir, "outputs")
        if tf.io.gfile.exists(out):  # A killed run's.
            tf.io.gfile.rmtree(out)
    trainer.restore_or_initialize(lambda: restore_initial_weights(model, settings, files))
    best = BestCheckpoint(os.path.join(out, BEST_DIR), model)
    chiefs_best = tf.train.latest_checkpoint(os.path.join(settings.output_dir, BEST_DIR))
    if not chief and chiefs_best:
        best.read_score(chiefs_best)
    try:
        return _train_and_finish(task, settings, trainer, model, files, best, chief, out, export)
    finally:
        if not chief and tf.io.gfile.exists(out):
            tf.io.gfile.rmtree(out)


def _train_and_finish(task, settings, trainer, model, files, best, chief, out, export) -> bool:
    """`run`'s training, evaluation, prediction and export; `out` is where this
    process writes them (output_dir, or the folder of a worker that is not the chief)."""
    on_epoch_end = None
    if settings.do_train:
        if settings.do_eval and settings.evaluate_every_epoch:
            on_epoch_end = EpochEvaluator(
                task, trainer, best, settings.output_dir, None if chief else out
            )
        if not train(task, trainer, settings, on_epoch_end):
            # For the log file: the program's last line says that it stopped and how
            # to resume (run_control.run_training).
            logging.info(
                "Training stopped at step %d of %d; run again with the same "
                "--output_dir to resume it. Nothing evaluated, predicted or exported.",
                int(trainer.global_step.numpy()),
                trainer.num_train_steps,
            )
            return False
        if trainer.stop_signal is not None:
            # SIGTERM or Ctrl-C during the last epoch's evaluation: training is done and
            # saved; the rest is not begun (the same command does it).
            step = int(trainer.global_step.numpy())
            logging.info("%s after the last training step (%d).", trainer.stop_signal, step)
            raise run_control.StoppedAfterTraining(trainer.stop_signal, step)
    step = best.restore() if best.exists else int(trainer.global_step.numpy())
    if best.exists and settings.do_train:
        # What the score is (e.g. "mean of eval_accuracy and eval_f1"): a task's own
        # `score_name`, else its kind's score metric.
        name = getattr(task, "score_name", None) or task.kind.score
        trainer.progress.say(
            f"The best model is that of step {step} (score {float(best.score.numpy()):.4g}"
            f"{f' = {name}' if name else ''}): {best.directory}"
        )
    if settings.do_eval:
        evaluate(task, trainer, best, settings.output_dir, out, step, on_epoch_end, chief)
    if settings.do_predict:
        task.predict(trainer, out, step)
    if not settings.export_dir:
        return True
    if chief:
        export_dir = settings.export_dir
        overwrite = settings.overwrite_export or owns_export(settings.output_dir, export_dir)
        file_io.write_json(
            os.path.join(settings.output_dir, EXPORT_RECORD),
            {"export_dir": os.path.abspath(export_dir)},
        )
    else:  # Every worker saves; into its own folder.
        export_dir, overwrite = os.path.join(out, "export"), True
    exported = float32_model(task, model, files)
    path = export(exported, export_dir, files, overwrite, task, settings.export_options)
    trainer.progress.say(f"Exported the model to {path} (it answers raw text)")
    return True


def float32_model(task: FineTuningTask, model, files: model_files.ModelFiles):
    """The model an export holds: `model` when it computes in float32, else (a run in
    bfloat16 or float16) a float32 model of the same kind holding its weights. An
    export computes in float32 whatever --dtype trained it, so that it serves on any
    machine (bfloat16 runs slowly on a CPU without bfloat16 units, and not at all on
    some GPUs); a TF Hub encoder computes in its own dtype."""
    encoder = model.encoder
    if model.dtype_policy.compute_dtype == "float32" or not isinstance(encoder, BertEncoder):
        return model
    twin_encoder = BertEncoder(
        files.config,
        dtype="float32",
        kernels=encoder.kernels,
        causal_attention=encoder.causal_attention,
    )
    twin = task.build_model(twin_encoder, files.config)
    if len(twin.weights) != len(model.weights):  # Built at construction, as the model.
        raise AssertionError(
            f"{len(twin.weights)} weights in the float32 copy, {len(model.weights)} in the model"
        )
    for copy, weight in zip(twin.weights, model.weights):
        copy.assign(weight)
    return twin


def evaluate(task, trainer, best, output_dir, out, step, epoch_evaluator, chief) -> dict:
    """The final evaluation, of the model of `step`, into `out`: the files of the
    evaluation that `epoch_evaluator` (None without per-epoch evaluation) made of that
    very model in this process when it has them (the last epoch's, or the best's),
    else a pass over the dev data."""
    reused = epoch_evaluator.reuse(step, out) if epoch_evaluator is not None else None
    if reused is not None:
        path = os.path.join(out, file_io.EVAL_RESULTS)
        trainer.progress.say(f"Evaluation at step {step}: as above ({path})")
        return reused
    metrics = task.evaluate(trainer, out, step)
    history = EpochEvaluator(task, trainer, best, output_dir)
    if chief and not history.evaluated(step):  # Else in TensorBoard already.
        write_eval_summaries(output_dir, metrics, step)
    return metrics


def owns_export(output_dir: str, export_dir: str) -> bool:
    """Whether a run of `output_dir` wrote (or began to write) the export at
    `export_dir`: its rerun may then replace it without --overwrite. The record is
    written only after the export path was checked (new, empty, or --overwrite), and
    the run holds the export path's lock while it writes it."""
    path = os.path.join(output_dir, EXPORT_RECORD)
    if not tf.io.gfile.exists(path):
        return False
    try:
        recorded = file_io.read_json(path).get("export_dir")
    except (ValueError, AttributeError):
        return False
    return recorded == os.path.abspath(export_dir)
