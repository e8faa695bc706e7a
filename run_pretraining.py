"""Masked-LM and next-sentence pre-training from create_pretraining_data shards.

  python run_pretraining.py --input_file='shards/*.tfrecord' --output_dir=out \
      --bert_config_file=bert_config.json --do_train --do_eval \
      --train_batch_size=32 --max_seq_length=128 --max_predictions_per_seq=20 \
      --num_train_steps=10000 --num_warmup_steps=1000 --learning_rate=1e-4

The paper's two phases (docs/pretraining_procedure.md): phase 2 (sequence length 512,
shards made at 512) runs in a new output_dir with --init_checkpoint=phase1_dir. As in
the original, that restores the weights alone: the global step restarts at 0 with a new
warmup and fresh optimizer moments. --restore_training_state continues phase 1's global
step, schedule and moments instead (phase 1 stopped with --stop_at_step).

--objective=ltr trains a left-to-right language model instead (the paper's "LTR & No
NSP" ablation, Section 5.1): causal self-attention, every position predicting the next
token through the masked LM's tied output layer, no next-sentence loss. It reads the
same shards: the clean text is the input with each masked position given back its
original id. Its output_dir records the left-only constraint (model_info.json
`causal_attention`), which every later use of the model keeps (fine-tuning,
extract_features.py, exports, conversion); eval_results.txt holds
next_token_accuracy, next_token_loss and perplexity.
"""

from __future__ import annotations

import common.quiet_tensorflow  # noqa: F401  (first: TensorFlow's start-up lines hidden)

import dataclasses
import os

import tensorflow as tf
from absl import app, flags, logging

from common import cli as command_line
from common.progress import format_fields
import model_flags
import runner_flags
import runner_settings
from common.errors import UserError
from common import file_io
from common import run_control
from data_prep import damage, input_pipeline
from data_prep.pretraining import pretraining_data
from data_prep.input_pipeline import RecordMetadata
from modeling import checkpoints, distribution, model_files, training, training_checkpoints
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.models import OBJECTIVES, BertPretrainer
from modeling.objectives import LanguageModelObjective, PretrainingObjective

FLAGS = flags.FLAGS

flags.DEFINE_string("input_file", None, "Comma-separated globs of TFRecord shards.")
flags.DEFINE_string(
    "eval_input_file", None, "Shards for --do_eval (default: --input_file, as the original)."
)
flags.DEFINE_integer(
    "max_predictions_per_seq", 20, "Masked positions per sequence; must match the shards."
)
flags.DEFINE_integer("num_train_steps", 100000, "Training steps.")
flags.DEFINE_integer("num_warmup_steps", 10000, "Linear warmup steps.")
flags.DEFINE_integer("max_eval_steps", 100, "Maximum evaluation batches.")
flags.DEFINE_bool(
    "use_next_sentence_loss",
    True,
    "Train the next-sentence head (False is the paper's No-NSP ablation).",
)
flags.DEFINE_bool(
    "restore_training_state",
    False,
    "With --init_checkpoint = an earlier run's output_dir (or its ckpt-N): continue its "
    "global step, learning-rate schedule (over this run's --num_train_steps, counting "
    "both runs' steps) and optimizer moments, on this run's shards from their start. "
    "False (the original's --init_checkpoint): the weights alone; step 0, a new warmup "
    "and fresh moments.",
)
flags.DEFINE_integer(
    "stop_at_step",
    None,
    "Stop (with a checkpoint) at this global step while the learning-rate schedule "
    "runs over --num_train_steps: phase 1 of a two-phase run with one schedule, e.g. "
    "--stop_at_step=900000 --num_train_steps=1000000 (default: --num_train_steps).",
)
flags.DEFINE_enum(
    "objective",
    "mlm",
    list(OBJECTIVES),
    "mlm: masked LM (+ next sentence), as the original. ltr: a left-to-right LM (causal "
    "attention, next-token prediction at every position, no next-sentence loss) on the "
    "same shards, the paper's LTR ablation; the model keeps its left-only attention "
    "wherever it is used afterwards.",
)
runner_flags.define_common_flags(max_seq_length=128, dtype="float32")
runner_flags.define_training_flags()

EVAL_RESULTS = file_io.EVAL_RESULTS
# What a resumed run must share with the run it resumes (else a warning names both).
RESUME_SETTINGS = run_control.RESUME_SETTINGS + ("max_predictions_per_seq", "input_files")


@dataclasses.dataclass(frozen=True)
class PretrainingSettings:
    """A pre-training run, from its flags once (`pretraining_settings`): what the
    helpers below take instead of reading flags."""

    output_dir: str
    input_file: str
    eval_input_file: str | None
    do_train: bool
    do_eval: bool
    objective: str  # "mlm" or "ltr" (OBJECTIVES)
    use_next_sentence_loss: bool
    max_seq_length: int
    max_predictions_per_seq: int
    train_batch_size: int
    eval_batch_size: int
    max_eval_steps: int
    learning_rate: float
    num_train_steps: int
    num_warmup_steps: int
    stop_at_step: int | None
    init_checkpoint: str | None
    restore_training_state: bool
    seed: int
    dtype: str
    kernels: str
    pad_to_max_seq_length: bool
    preserve_unused_tokens: bool | None  # the flag as given; None: not given
    trainer_options: dict  # keyword arguments of training.Trainer
    flag_values: dict  # every flag, for run_config.json

    @property
    def causal_attention(self) -> bool:
        """Whether the model attends left-only (--objective=ltr)."""
        return self.objective == "ltr"


def pretraining_settings(FLAGS) -> PretrainingSettings:
    """The run's settings from its flags, once the original flags are mapped
    (`runner_settings.setup`)."""
    return PretrainingSettings(
        output_dir=FLAGS.output_dir,
        input_file=FLAGS.input_file,
        eval_input_file=FLAGS.eval_input_file,
        do_train=FLAGS.do_train,
        do_eval=FLAGS.do_eval,
        objective=FLAGS.objective,
        use_next_sentence_loss=FLAGS.use_next_sentence_loss,
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size,
        max_eval_steps=FLAGS.max_eval_steps,
        learning_rate=FLAGS.learning_rate,
        num_train_steps=FLAGS.num_train_steps,
        num_warmup_steps=FLAGS.num_warmup_steps,
        stop_at_step=FLAGS.stop_at_step,
        init_checkpoint=FLAGS.init_checkpoint,
        restore_training_state=FLAGS.restore_training_state,
        seed=FLAGS.seed,
        dtype=FLAGS.dtype,
        kernels=FLAGS.kernels,
        pad_to_max_seq_length=pads_batches(runner_settings.pad_to_max_seq_length(FLAGS)),
        preserve_unused_tokens=model_flags.preserve_unused_tokens_flag(FLAGS),
        trainer_options=runner_settings.trainer_options(FLAGS),
        flag_values=runner_settings.flag_values(FLAGS),
    )


def pads_batches(given: bool | None) -> bool:
    """Whether pre-training batches are computed at --max_seq_length: as given, else
    yes. Pre-training instances fill --max_seq_length by construction (only the
    --short_seq_prob share, 10%, is shorter), so a batch is almost never shorter than
    that, while cutting makes the step's sequence length dynamic: measured against
    keras-hub on BERT-base, padded steps ran 1.13-1.34x its speed, cut ones 0.67-1.06x
    (docs/performance.md). --nopad_to_max_seq_length cuts (a corpus of short instances).
    """
    return True if given is None else bool(given)


def build_model(
    config: BertConfig, dtype: str, kernels: str = "auto", objective: str = "mlm"
) -> BertPretrainer:
    """The pre-trainer of `objective`: "ltr" builds a causal (left-to-right) encoder."""
    encoder = BertEncoder(config, dtype=dtype, kernels=kernels, causal_attention=objective == "ltr")
    return BertPretrainer(encoder, config, objective)


def make_dataset_fn(
    files: list[str],
    metadata: RecordMetadata,
    batch_size: int,
    is_training: bool,
    settings: PretrainingSettings,
):
    """The dataset function of the shards `files` (with its input context under a
    distribution strategy): `settings`' seed, padding and objective."""

    def dataset_fn(context=None):
        dataset = pretraining_data.pretraining_dataset(
            files,
            metadata,
            batch_size,
            is_training,
            settings.seed,
            context,
            pad_to_max_seq_length=settings.pad_to_max_seq_length,
        )
        if settings.causal_attention:  # The clean text, from the masked LM's shards.
            dataset = dataset.map(
                input_pipeline.as_written(pretraining_data.restore_masked_tokens),
                num_parallel_calls=tf.data.AUTOTUNE,
            )
        return dataset

    return dataset_fn


def with_shards_preserve_setting(
    files: model_files.ModelFiles,
    shards: list[str],
    preserve_unused_tokens: bool | None,
    init_checkpoint: str | None,
) -> model_files.ModelFiles:
    """--preserve_unused_tokens when given (`preserve_unused_tokens`), else the shards'
    record of it (they were tokenized with it), else `init_checkpoint`'s: what
    model_info.json records."""
    if preserve_unused_tokens is not None:
        return files  # the flag, already checked against the model's record
    recorded = pretraining_data.recorded_setting(shards, "preserve_unused_tokens", bool)
    if recorded is None:
        return files
    preserve = model_files.resolve_preserve_unused_tokens(recorded, init_checkpoint)
    return dataclasses.replace(files, preserve_unused_tokens=preserve)


def check_shards(
    shards: list[str],
    files: model_files.ModelFiles,
    max_seq_length: int,
    max_predictions_per_seq: int,
) -> RecordMetadata:
    """The shards against the run, before any work: that they are what finished runs
    left (`pretraining_data.check_shard_runs`), their framing, and their metadata
    (sequence length, masked positions, vocabulary, case, preserve_unused_tokens), or
    every record of a shard without metadata (`pretraining_data.shards_metadata`)."""
    pretraining_data.check_shard_runs(shards)
    return pretraining_data.shards_metadata(
        shards,
        max_seq_length,
        max_predictions_per_seq,
        files.config.vocab_size,
        files.do_lower_case if files.vocab_file else None,
        files.preserve_unused_tokens,
    )


def evaluate(
    trainer: training.Trainer,
    files: list[str],
    metadata: RecordMetadata,
    settings: PretrainingSettings,
) -> dict:
    """At most `settings.max_eval_steps` batches of `files`; the chief writes
    eval_results.txt in the output_dir."""
    dataset = make_dataset_fn(files, metadata, settings.eval_batch_size, False, settings)()
    results = trainer.evaluate(dataset, max_steps=settings.max_eval_steps, summary_name="eval")
    output = os.path.join(settings.output_dir, EVAL_RESULTS)
    if distribution.is_chief(trainer.strategy):  # Every worker evaluates; one writes.
        file_io.write_results(output, results)
    trainer.progress.say(
        f"Evaluation at step {results['global_step']}: "
        f"{format_fields({k: v for k, v in results.items() if k != 'global_step'})} ({output})"
    )
    return results


def input_shards(input_file: str, eval_input_file: str | None) -> tuple[list[str], list[str]]:
    """(training shards, evaluation shards): --input_file's, and --eval_input_file's
    (default: the same)."""
    shards = pretraining_data.expand_input_files(input_file)
    if not eval_input_file:
        return shards, shards
    return shards, pretraining_data.expand_input_files(eval_input_file, "--eval_input_file")


def check_objective(objective: str, next_sentence_loss: bool | None, output_dir: str) -> None:
    """--objective=ltr has no next-sentence loss (`next_sentence_loss`: the flag as
    given, None when not given); an output_dir keeps one objective (a resumed run must
    not mix a left-to-right model with a bidirectional one)."""
    if objective == "ltr" and next_sentence_loss:
        raise UserError("--objective=ltr has no next-sentence loss: drop --use_next_sentence_loss")
    causal = objective == "ltr"
    info_file = os.path.join(output_dir, model_files.MODEL_INFO)
    if tf.train.latest_checkpoint(output_dir) and tf.io.gfile.exists(info_file):
        earlier = bool(file_io.read_json(info_file).get("causal_attention", False))
        if earlier != causal:
            was = "ltr" if earlier else "mlm"
            raise UserError(
                f"--output_dir={output_dir} holds a run of --objective={was}, this "
                f"run is --objective={objective}: use a new --output_dir (or "
                f"--init_checkpoint={output_dir} there to start from its weights)"
            )


def build_trainer(strategy, model, settings: PretrainingSettings) -> training.Trainer:
    """The Trainer of the objective's losses (masked LM and next sentence, or next
    token), with the settings' schedule."""
    task = (
        LanguageModelObjective()
        if settings.causal_attention
        else PretrainingObjective(settings.use_next_sentence_loss)
    )
    return training.Trainer(
        strategy,
        model,
        task,
        settings.output_dir,
        learning_rate=settings.learning_rate,
        num_train_steps=settings.num_train_steps,
        num_warmup_steps=settings.num_warmup_steps,
        **settings.trainer_options,
    )


def check_phase_settings(settings: PretrainingSettings) -> int:
    """The step --restore_training_state continues from (0 without it), with the
    checks of --stop_at_step and --restore_training_state against the schedule."""
    first_step = 0
    init_checkpoint, num_train_steps = settings.init_checkpoint, settings.num_train_steps
    if settings.restore_training_state:
        if not init_checkpoint:
            raise UserError("--restore_training_state needs --init_checkpoint")
        _, first_step = training_checkpoints.training_state_step(init_checkpoint)
        if settings.do_train and first_step >= num_train_steps:
            raise UserError(
                f"--init_checkpoint {init_checkpoint} is at global step "
                f"{first_step} but --num_train_steps={num_train_steps}: with "
                f"--restore_training_state it counts the steps of both runs"
            )
    stop_at_step = settings.stop_at_step
    if stop_at_step is not None and not (first_step < stop_at_step <= num_train_steps):
        raise UserError(
            f"--stop_at_step={stop_at_step} must be after the first step "
            f"({first_step}) and at most --num_train_steps={num_train_steps}"
        )
    return first_step


def warn_other_attention(init_checkpoint: str, objective: str) -> None:
    """A checkpoint trained with the other attention still loads (same variables)."""
    if model_files.resolve_causal_attention(init_checkpoint) != (objective == "ltr"):
        logging.warning(
            "--init_checkpoint=%s was trained with the other attention (left-to-right vs "
            "bidirectional); this run trains it with --objective=%s.",
            init_checkpoint,
            objective,
        )


def main(_):
    if not FLAGS.do_train and not FLAGS.do_eval:
        raise app.UsageError("At least one of --do_train or --do_eval must be set.")
    given = FLAGS["use_next_sentence_loss"].present
    check_objective(
        FLAGS.objective, FLAGS.use_next_sentence_loss if given else None, FLAGS.output_dir
    )
    strategy = runner_settings.setup(FLAGS)
    settings = pretraining_settings(FLAGS)
    first_step = check_phase_settings(settings)
    # The config (flag or beside --init_checkpoint) and, when known, the vocabulary the
    # shards were made with: the output_dir then carries both, and the objective's
    # left-only constraint.
    files = model_flags.resolve_model_files(
        FLAGS, vocab_required=False, max_seq_length=FLAGS.max_seq_length
    )
    files = dataclasses.replace(files, causal_attention=settings.causal_attention)
    shards, eval_shards = input_shards(settings.input_file, settings.eval_input_file)
    files = with_shards_preserve_setting(
        files, shards + eval_shards, settings.preserve_unused_tokens, settings.init_checkpoint
    )
    lengths = (settings.max_seq_length, settings.max_predictions_per_seq)
    metadata = check_shards(shards, files, *lengths)
    eval_metadata = (
        check_shards(eval_shards, files, *lengths) if eval_shards != shards else metadata
    )
    if settings.do_train:
        input_pipeline.warn_if_batch_exceeds_data(
            metadata.num_records, settings.train_batch_size, "--train_batch_size"
        )
    with strategy.scope():
        model = build_model(files.config, settings.dtype, settings.kernels, settings.objective)
    trainer = build_trainer(strategy, model, settings)
    if distribution.is_chief(strategy):  # Of a multi-worker run, the chief alone writes.
        model_files.write_model_files(
            settings.output_dir,
            files,
            BertPretrainer.MODEL_KIND,
            pretraining_objective=settings.objective,
        )
        run_control.write_run_config(
            os.path.join(settings.output_dir, run_control.RUN_CONFIG),
            dict(
                settings.flag_values,
                input_files=shards,
                padded_batches=settings.pad_to_max_seq_length,
            ),
            RESUME_SETTINGS if settings.do_train else (),
            resumes=tf.train.latest_checkpoint(settings.output_dir),
        )
    init_checkpoint = settings.init_checkpoint

    def initialize():
        if init_checkpoint:
            warn_other_attention(init_checkpoint, settings.objective)
        if settings.restore_training_state:  # Weights, moments, global step.
            trainer.restore_training_state(init_checkpoint)
        elif init_checkpoint:  # The encoder, and the heads when the checkpoint has them.
            checkpoints.restore_model(init_checkpoint, model)

    trainer.restore_or_initialize(initialize)
    if settings.do_train:
        with damage.naming_damaged_records(shards):  # A record damaged inside, named.
            runner_settings.run_training(
                lambda: trainer.train(
                    make_dataset_fn(shards, metadata, settings.train_batch_size, True, settings),
                    settings.train_batch_size,
                    first_step=first_step,
                    stop_at_step=settings.stop_at_step,
                )["complete"],
                settings.output_dir,
            )
    if settings.do_eval:
        with damage.naming_damaged_records(eval_shards):
            evaluate(trainer, eval_shards, eval_metadata, settings)


def cli():
    flags.mark_flags_as_required(["input_file", "output_dir"])
    command_line.run(main)


if __name__ == "__main__":
    cli()
