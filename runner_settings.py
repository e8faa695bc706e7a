"""FLAGS -> the library's explicit arguments (the library never reads flags), and the
set-up every runner shares: the original release's TPU-era flags mapped to their
current meaning, the run's lock, devices, strategy and seeds, the progress shown on the
terminal. The flags themselves are defined in `runner_flags`.
"""

from __future__ import annotations

import os
import sys

import keras
import tensorflow as tf
from absl import app, flags, logging

from common.errors import UserError
from common.progress import TerminalProgress
from common import run_control
from modeling import distribution, finetuning, kernels, training_summary
from serving import savedmodel

FLAGS = flags.FLAGS


# ---------------------------------------------------------------------------------
# Set-up.


def given(FLAGS, name: str) -> bool:
    """Whether flag `name` exists and was given on the command line."""
    return name in FLAGS and FLAGS[name].present


def apply_original_flags(FLAGS) -> None:
    """Maps the original release's TPU-era flags given on the command line to their
    current meaning, and says so in one warning line."""
    said = []
    if given(FLAGS, "tpu_name"):
        FLAGS.tpu = FLAGS.tpu or FLAGS.tpu_name
        said.append(f"--tpu_name={FLAGS.tpu_name} -> --tpu={FLAGS.tpu}")
    if given(FLAGS, "use_tpu") and "distribution_strategy" not in FLAGS:
        said.append(f"--use_tpu={FLAGS.use_tpu}: this program runs on this machine's devices")
    elif given(FLAGS, "use_tpu"):
        if (
            FLAGS.use_tpu
            and given(FLAGS, "distribution_strategy")
            and FLAGS.distribution_strategy != "tpu"
        ):
            raise UserError(
                f"--use_tpu contradicts --distribution_strategy={FLAGS.distribution_strategy}"
            )
        if FLAGS.use_tpu:
            FLAGS.distribution_strategy = "tpu"
            FLAGS.tpu = FLAGS.tpu or FLAGS.master
        said.append(
            f"--use_tpu={FLAGS.use_tpu} -> --distribution_strategy={FLAGS.distribution_strategy}"
        )
    for name in ("tpu_zone", "gcp_project"):
        if given(FLAGS, name):
            said.append(f"--{name}={FLAGS[name].value} -> the TPU cluster resolver")
    if given(FLAGS, "master") and not (
        FLAGS.use_tpu and FLAGS["tpu"].value == FLAGS.master if "tpu" in FLAGS else False
    ):
        said.append(f"--master={FLAGS.master} is not used (no TPU)")
    if given(FLAGS, "num_tpu_cores"):
        said.append(
            f"--num_tpu_cores={FLAGS.num_tpu_cores} is not needed (TPUStrategy uses every core)"
        )
    if given(FLAGS, "iterations_per_loop"):
        if not given(FLAGS, "steps_per_loop"):
            FLAGS.steps_per_loop = FLAGS.iterations_per_loop
        said.append(
            f"--iterations_per_loop={FLAGS.iterations_per_loop} -> "
            f"--steps_per_loop={FLAGS.steps_per_loop}"
        )
    if given(FLAGS, "verbose_logging"):
        if FLAGS.verbose_logging:
            logging.set_verbosity(logging.DEBUG)
        said.append(
            f"--verbose_logging={FLAGS.verbose_logging} -> "
            f"{'debug' if FLAGS.verbose_logging else 'info'} logging"
        )
    if given(FLAGS, "bert_hub_module_handle"):
        if given(FLAGS, "hub_module_url") and FLAGS.hub_module_url != FLAGS.bert_hub_module_handle:
            raise UserError("--bert_hub_module_handle contradicts --hub_module_url")
        FLAGS.hub_module_url = FLAGS.bert_hub_module_handle
        said.append(f"--bert_hub_module_handle -> --hub_module_url={FLAGS.bert_hub_module_handle}")
    if given(FLAGS, "use_one_hot_embeddings"):
        said.append(
            "--use_one_hot_embeddings is not needed (the embedding lookup is "
            "the same on every device)"
        )
    if said:
        logging.warning("Original release flags: %s.", "; ".join(said))


def setup(FLAGS) -> tf.distribute.Strategy:
    """The original flags mapped, logical CPU devices, the distribution strategy, seeds,
    determinism and a log file in output_dir. Returns the strategy.

    The strategy is created first: MultiWorkerMirroredStrategy must configure its
    collective ops before TensorFlow runs anything. Before it, the run takes the lock of
    its output_dir (and --export_dir), and SIGTERM is set to end it with one line and
    exit code 143.
    """
    apply_original_flags(FLAGS)
    run_control.hold_run_outputs(  # Of a multi-worker run, the chief alone.
        FLAGS.output_dir,
        FLAGS.export_dir if "export_dir" in FLAGS else None,
        FLAGS.distribution_strategy == "multi_worker_mirrored",
    )
    run_control.exit_on_sigterm(os.path.basename(sys.argv[0]))
    if FLAGS.num_cpu_devices > 1:
        distribution.split_cpu(FLAGS.num_cpu_devices)
    strategy = distribution.create_strategy(
        FLAGS.distribution_strategy, FLAGS.tpu, zone=FLAGS.tpu_zone, project=FLAGS.gcp_project
    )
    if FLAGS.output_dir:
        tf.io.gfile.makedirs(FLAGS.output_dir)
        logging.get_absl_handler().use_absl_log_file(
            os.path.basename(sys.argv[0]).replace(".py", ""), FLAGS.output_dir
        )
        logging.get_absl_handler().setLevel(
            logging.DEBUG if FLAGS.verbose_logging else logging.INFO
        )
    chosen = kernels.resolve(FLAGS.kernels)
    logging.info("Kernels (--kernels=%s): %s", FLAGS.kernels, chosen)
    dtype = FLAGS.dtype
    if FLAGS.dtype == "auto":  # From here on, and in run_config.json, what runs.
        FLAGS.dtype = auto_dtype(strategy, chosen)
        dtype = f"{FLAGS.dtype} (--dtype=auto)"
    terminal().say(describe_devices(strategy, chosen.name, dtype))
    keras.utils.set_random_seed(FLAGS.seed)
    if FLAGS.deterministic:
        tf.config.experimental.enable_op_determinism()
    return strategy


def run_training(train_fn, output_dir: str) -> None:
    """`run_control.run_training`: a run stopped by SIGTERM exits 143, a lost worker 75."""
    run_control.run_training(train_fn, output_dir, training_summary.SUMMARY_FILE)


def terminal() -> TerminalProgress:
    """Progress bars (or plain lines every --progress_interval_s) and result lines on
    stderr."""
    interval = FLAGS["progress_interval_s"].value if "progress_interval_s" in FLAGS else 30.0
    return TerminalProgress(interval=interval)


def auto_dtype(strategy: tf.distribute.Strategy, chosen: kernels.Kernels) -> str:
    """--dtype=auto: mixed bfloat16 where the CPU runs it faster than float32 (bfloat16
    units: the amx and avx512_bf16 kernels) and nothing else computes; float32 on GPUs,
    TPUs and CPUs without such units (where bfloat16 matmuls are no faster)."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "float32"
    if tf.config.list_physical_devices("GPU"):
        return "float32"
    return "bfloat16" if chosen.name in kernels.BFLOAT16_UNITS else "float32"


def describe_devices(strategy: tf.distribute.Strategy, kernels_name: str, dtype: str) -> str:
    """One line: the devices, the strategy, the compute dtype and the CPU kernels."""
    gpus = tf.config.list_physical_devices("GPU")
    where = f"{len(gpus)} GPU" if gpus else f"CPU ({os.cpu_count()} cores, no GPU found)"
    replicas = strategy.num_replicas_in_sync
    return (
        f"Running on {where}: {type(strategy).__name__}, {replicas} "
        f"replica{'s' if replicas > 1 else ''}, {dtype}, kernels {kernels_name} "
        f"(TensorFlow {tf.__version__})"
    )


def pad_to_max_seq_length(FLAGS) -> bool | None:
    """--pad_to_max_seq_length as given; not given: true under
    --distribution_strategy=tpu (TPUs need static shapes), else None (cut, except where a
    task's loss sees the padding: `finetuning.Settings.pads_training`)."""
    if FLAGS.pad_to_max_seq_length is not None:
        return FLAGS.pad_to_max_seq_length
    if "distribution_strategy" in FLAGS and FLAGS.distribution_strategy == "tpu":
        return True
    return None


def profile_window(values: list[str] | None) -> tuple[int, int] | None:
    """--profile_steps as (first, last); a UserError unless two steps, first <= last."""
    if not values:
        return None
    try:
        first, last = (int(v) for v in values)
    except ValueError:
        first = last = -1
    if not 0 <= first <= last:
        raise UserError(
            f"--profile_steps={','.join(values)}: give FIRST,LAST, two training steps with "
            "FIRST <= LAST (e.g. --profile_steps=20,29)"
        )
    return first, last


def trainer_options(FLAGS) -> dict:
    """Keyword arguments of `training.Trainer` from the training flags."""
    profile = profile_window(FLAGS.profile_steps)
    return dict(
        optimizer=FLAGS.optimizer,
        lr_decay=FLAGS.lr_decay,
        weight_decay_rate=FLAGS.weight_decay_rate,
        adam_bias_correction=FLAGS.adam_bias_correction,
        adam_epsilon=FLAGS.adam_epsilon,
        dtype=FLAGS.dtype,
        steps_per_loop=FLAGS.steps_per_loop,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        gradient_accumulation_steps=FLAGS.gradient_accumulation_steps,
        enable_xla=FLAGS.enable_xla,
        max_checkpoints=FLAGS.keep_checkpoint_max,
        profile_steps=profile,
        kernels=FLAGS.kernels,
        progress=terminal(),
    )


def flag_values(FLAGS) -> dict:
    """Every flag of the project's modules and its value (run_config.json)."""
    values = {}
    for module, module_flags in FLAGS.flags_by_module_dict().items():
        if module.startswith("absl"):
            continue
        for flag in module_flags:
            values[flag.name] = flag.value
    return values


def check_finetuning_flags(FLAGS) -> None:
    """What can be checked of a fine-tuning run before reading any data."""
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
        raise app.UsageError("At least one of --do_train, --do_eval or --do_predict must be set.")
    if not FLAGS.output_dir:
        raise app.UsageError("--output_dir is required")
    check_early_stopping_flags(FLAGS)
    if FLAGS.export_xla_single_requests and not FLAGS.export_dir:
        raise app.UsageError("--export_xla_single_requests needs --export_dir (the export).")
    if FLAGS.export_dir:
        try:
            savedmodel.check_export_path(
                FLAGS.export_dir,
                FLAGS.overwrite or finetuning.owns_export(FLAGS.output_dir, FLAGS.export_dir),
            )
        except (ValueError, FileExistsError) as e:
            raise type(e)(f"--export_dir={FLAGS.export_dir}: {e}") from None


def check_early_stopping_flags(FLAGS) -> None:
    """--early_stopping_patience counts the evaluations at each epoch's end."""
    patience = FLAGS.early_stopping_patience
    if patience < 0:
        raise app.UsageError(
            f"--early_stopping_patience={patience}: give a number of evaluations >= 1 "
            f"(0: no early stopping)"
        )
    if patience and not (FLAGS.do_train and FLAGS.do_eval and FLAGS.evaluate_every_epoch):
        raise app.UsageError(
            f"--early_stopping_patience={patience} counts the evaluations at each epoch's "
            f"end: it needs --do_train, --do_eval and --evaluate_every_epoch"
        )


def finetuning_settings(FLAGS) -> finetuning.Settings:
    return finetuning.Settings(
        output_dir=FLAGS.output_dir,
        init_checkpoint=FLAGS.init_checkpoint,
        hub_module_url=FLAGS.hub_module_url,
        reinit_head=FLAGS.reinit_head,
        head_initializer=FLAGS.head_initializer,
        do_train=FLAGS.do_train,
        do_eval=FLAGS.do_eval,
        do_predict=FLAGS.do_predict,
        train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size,
        predict_batch_size=FLAGS.predict_batch_size,
        learning_rate=FLAGS.learning_rate,
        num_train_epochs=FLAGS.num_train_epochs,
        warmup_proportion=FLAGS.warmup_proportion,
        seed=FLAGS.seed,
        shuffle_buffer_size=FLAGS.shuffle_buffer_size,
        pad_to_max_seq_length=pad_to_max_seq_length(FLAGS),
        group_by_length=FLAGS.group_by_length,
        evaluate_every_epoch=FLAGS.evaluate_every_epoch,
        early_stopping_patience=FLAGS.early_stopping_patience,
        export_dir=FLAGS.export_dir,
        overwrite_export=FLAGS.overwrite,
        export_options={
            "xla_single_requests": FLAGS.export_xla_single_requests,
            "pad_to_max_seq_length": FLAGS.pad_to_max_seq_length is True,
        },
        trainer_options=trainer_options(FLAGS),
        flag_values=flag_values(FLAGS),
    )
