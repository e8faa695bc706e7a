"""Flags and set-up shared by the runners (run_pretraining, run_classifier, run_squad,
run_ner). Flag names and defaults follow the original release; the TF1-only TPU flags
become --distribution_strategy and --tpu."""

from __future__ import annotations

import os
import sys

import keras
import tensorflow as tf
from absl import flags, logging

from data_prep import records
from modeling import checkpoints, distribution, training
from modeling.config import BertConfig


def define_common_flags(max_seq_length: int) -> None:
    flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model (default: "
                        "the one beside --init_checkpoint).")
    flags.DEFINE_string("vocab_file", None, "WordPiece vocabulary (default: vocab.txt "
                        "beside --init_checkpoint).")
    flags.DEFINE_string("init_checkpoint", None, "Original TF1 checkpoint, Hugging Face "
                        "directory, or TF2 checkpoint of this project.")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (uncased models).")
    flags.DEFINE_integer("max_seq_length", max_seq_length, "Maximum total input length in "
                         "WordPiece tokens, after packing.")
    flags.DEFINE_string("output_dir", None, "Checkpoints, summaries and results go here.")
    flags.DEFINE_enum("distribution_strategy", "one_device", list(distribution.STRATEGIES),
                      "tf.distribute strategy.")
    flags.DEFINE_string("tpu", None, "TPU name or address for --distribution_strategy=tpu.")
    flags.DEFINE_integer("num_cpu_devices", 0, "Split the CPU into this many logical devices "
                         "(with --distribution_strategy=mirrored on a machine without GPUs).")
    flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16", "float16"],
                      "Compute dtype; variables stay float32. float16 adds loss scaling.")
    flags.DEFINE_bool("enable_xla", False, "Compile the training step with XLA.")
    flags.DEFINE_integer("seed", 12345, "Random seed of initialisation, dropout and shuffling.")
    flags.DEFINE_bool("deterministic", False, "Enable TensorFlow op determinism (bitwise "
                      "reproducible runs, slower).")
    define_original_tpu_flags()


def apply_original_flags(FLAGS) -> None:
    """Maps the original release's TPU-era flags given on the command line to their
    current meaning, and says so in one warning line."""
    said = []

    def given(name):
        return name in FLAGS and FLAGS[name].present

    if given("tpu_name"):
        FLAGS.tpu = FLAGS.tpu or FLAGS.tpu_name
        said.append(f"--tpu_name={FLAGS.tpu_name} -> --tpu={FLAGS.tpu}")
    if given("use_tpu"):
        wanted = "tpu" if FLAGS.use_tpu else FLAGS.distribution_strategy
        if FLAGS.use_tpu and given("distribution_strategy") and \
                FLAGS.distribution_strategy != "tpu":
            raise ValueError(f"--use_tpu contradicts --distribution_strategy="
                             f"{FLAGS.distribution_strategy}")
        FLAGS.distribution_strategy = wanted
        if FLAGS.use_tpu and not FLAGS.tpu and FLAGS.master:
            FLAGS.tpu = FLAGS.master
        said.append(f"--use_tpu={FLAGS.use_tpu} -> --distribution_strategy={wanted}")
    for name in ("tpu_zone", "gcp_project"):
        if given(name):
            said.append(f"--{name}={FLAGS[name].value} -> the TPU cluster resolver")
    if given("master") and not (FLAGS.use_tpu and FLAGS.tpu == FLAGS.master):
        said.append(f"--master={FLAGS.master} is not used (no TPU)")
    if given("num_tpu_cores"):
        said.append(f"--num_tpu_cores={FLAGS.num_tpu_cores} is not needed "
                    f"(TPUStrategy uses every core)")
    if given("iterations_per_loop"):
        if not given("steps_per_loop"):
            FLAGS.steps_per_loop = FLAGS.iterations_per_loop
        said.append(f"--iterations_per_loop={FLAGS.iterations_per_loop} -> "
                    f"--steps_per_loop={FLAGS.steps_per_loop}")
    if given("verbose_logging"):
        if FLAGS.verbose_logging:
            logging.set_verbosity(logging.DEBUG)
        said.append(f"--verbose_logging={FLAGS.verbose_logging} -> "
                    f"{'debug' if FLAGS.verbose_logging else 'info'} logging")
    if given("bert_hub_module_handle"):
        if given("hub_module_url") and FLAGS.hub_module_url != FLAGS.bert_hub_module_handle:
            raise ValueError("--bert_hub_module_handle contradicts --hub_module_url")
        FLAGS.hub_module_url = FLAGS.bert_hub_module_handle
        said.append(f"--bert_hub_module_handle -> --hub_module_url="
                    f"{FLAGS.bert_hub_module_handle}")
    if given("use_one_hot_embeddings"):
        said.append("--use_one_hot_embeddings is not needed (the embedding lookup is "
                    "the same on every device)")
    if said:
        logging.warning("Original release flags: %s.", "; ".join(said))


def define_original_tpu_flags() -> None:
    """The original release's TPU-era flags, accepted so that its command lines run
    unchanged; `apply_original_flags` maps each to its current meaning."""
    flags.DEFINE_bool("use_tpu", False, "Original flag: --use_tpu is "
                      "--distribution_strategy=tpu.")
    flags.DEFINE_string("tpu_name", None, "Original flag: the TPU, as --tpu.")
    flags.DEFINE_string("tpu_zone", None, "Original flag: GCE zone of the TPU (for the TPU "
                        "cluster resolver).")
    flags.DEFINE_string("gcp_project", None, "Original flag: GCP project of the TPU (for "
                        "the TPU cluster resolver).")
    flags.DEFINE_string("master", None, "Original flag: TensorFlow master address; with "
                        "--use_tpu and no --tpu_name, the TPU's address.")
    flags.DEFINE_integer("num_tpu_cores", 8, "Original flag: TPUStrategy uses every core "
                         "of the TPU, so this is not needed.")


def define_training_flags() -> None:
    flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "Optimizer.")
    flags.DEFINE_float("weight_decay_rate", 0.01, "Decoupled weight decay (not on LayerNorm "
                       "and bias).")
    flags.DEFINE_bool("adam_bias_correction", True, "Bias-correct Adam's moments (as Adam, "
                      "TF Model Garden and PyTorch do). --noadam_bias_correction is the "
                      "original release's AdamWeightDecayOptimizer exactly; its larger "
                      "early updates can destabilise fine-tuning at high learning rates.")
    flags.DEFINE_integer("gradient_accumulation_steps", 1, "Micro-batches per step: the "
                         "per-replica batch is split into this many parts.")
    flags.DEFINE_integer("steps_per_loop", 10, "Training steps per compiled loop (and per "
                         "progress line).")
    flags.DEFINE_integer("iterations_per_loop", 1000, "Original flag: --steps_per_loop.")
    flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every this many steps.")
    flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept in --output_dir.")
    flags.DEFINE_list("profile_steps", None, "FIRST,LAST: write a TensorBoard profile of "
                      "these training steps to output_dir/profile.")


def setup(FLAGS) -> tf.distribute.Strategy:
    """Logical CPU devices, the distribution strategy, seeds, determinism and a log file
    in output_dir. Returns the strategy.

    The strategy is created first: MultiWorkerMirroredStrategy must configure its
    collective ops before TensorFlow runs anything.
    """
    apply_original_flags(FLAGS)
    if FLAGS.num_cpu_devices > 1:
        distribution.split_cpu(FLAGS.num_cpu_devices)
    strategy = distribution.create_strategy(FLAGS.distribution_strategy, FLAGS.tpu,
                                             zone=FLAGS.tpu_zone, project=FLAGS.gcp_project)
    keras.utils.set_random_seed(FLAGS.seed)
    if FLAGS.deterministic:
        tf.config.experimental.enable_op_determinism()
    if FLAGS.output_dir:
        os.makedirs(FLAGS.output_dir, exist_ok=True)
        logging.get_absl_handler().use_absl_log_file(
            os.path.basename(sys.argv[0]).replace(".py", ""), FLAGS.output_dir)
        logging.get_absl_handler().setLevel(logging.INFO)
    return strategy


def check_max_seq_length(max_seq_length: int, config: BertConfig) -> None:
    if max_seq_length > config.max_position_embeddings:
        raise ValueError(f"--max_seq_length={max_seq_length} is larger than the model's "
                         f"max_position_embeddings={config.max_position_embeddings}")


def make_trainer(FLAGS, strategy, model, task, learning_rate, num_train_steps,
                 num_warmup_steps) -> training.Trainer:
    profile = None
    if FLAGS.profile_steps:
        first, last = (int(x) for x in FLAGS.profile_steps)
        profile = (first, last)
    return training.Trainer(
        strategy, model, task, FLAGS.output_dir, learning_rate=learning_rate,
        num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps,
        optimizer=FLAGS.optimizer, weight_decay_rate=FLAGS.weight_decay_rate,
        adam_bias_correction=FLAGS.adam_bias_correction,
        dtype=FLAGS.dtype, steps_per_loop=FLAGS.steps_per_loop,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        gradient_accumulation_steps=FLAGS.gradient_accumulation_steps,
        enable_xla=FLAGS.enable_xla, max_checkpoints=FLAGS.keep_checkpoint_max,
        profile_steps=profile)


def write_resolved_config(FLAGS, config: BertConfig, extra: dict | None = None) -> None:
    """Writes the BERT config and every flag value to output_dir, to reproduce the run."""
    config.to_json_file(os.path.join(FLAGS.output_dir, "bert_config.json"))
    values = {}
    for module, module_flags in FLAGS.flags_by_module_dict().items():
        if module.startswith("absl"):
            continue
        for flag in module_flags:
            values[flag.name] = flag.value
    values.update(extra or {})
    records.write_json(os.path.join(FLAGS.output_dir, "run_config.json"), values)


def initialize_from(model, init_checkpoint: str | None, hub_module_url: str | None) -> None:
    """Loads the pre-trained encoder of a task model; the head keeps its initializer."""
    if hub_module_url:
        return  # The TF Hub encoder comes with its weights.
    if init_checkpoint:
        checkpoints.load_checkpoint(init_checkpoint, model.encoder)
    else:
        logging.warning("No --init_checkpoint: the encoder starts from random weights.")


def train_schedule(num_examples: int, batch_size: int, num_epochs: float,
                   warmup_proportion: float) -> tuple[int, int]:
    """(num_train_steps, num_warmup_steps), computed as the original release does."""
    num_train_steps = int(num_examples / batch_size * num_epochs)
    if num_train_steps < 1:
        raise ValueError(
            f"{num_examples} training examples at --train_batch_size={batch_size} for "
            f"--num_train_epochs={num_epochs} make no training step")
    return num_train_steps, int(num_train_steps * warmup_proportion)
