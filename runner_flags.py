"""Every flag that more than one runner takes, defined once: the model and its files,
the run (output, devices, strategy, seeds), training, fine-tuning and export, and the
original release's TPU-era flags.

Flag names and defaults follow the original release. Its TPU-era flags (`--use_tpu`,
`--tpu_name`, `--iterations_per_loop`, ...) are accepted so that its command lines run
unchanged; `apply_original_flags` maps each to its current meaning and says so in one
warning line. Turning FLAGS into the library's explicit arguments (the library never
reads flags) is `runner_settings`'s, which the runners call.
"""

from __future__ import annotations

from absl import flags

from data_prep import input_pipeline
from modeling import distribution, kernels

FLAGS = flags.FLAGS


def define_model_flags(max_seq_length: int | None, flag_values=FLAGS) -> None:
    """The model and its files: config, vocabulary, checkpoint, case, sequence length."""
    f = flag_values
    flags.DEFINE_string(
        "bert_config_file",
        None,
        "bert_config.json of the model (default: the one beside --init_checkpoint).",
        flag_values=f,
    )
    flags.DEFINE_string(
        "vocab_file",
        None,
        "WordPiece vocabulary (default: vocab.txt beside --init_checkpoint).",
        flag_values=f,
    )
    flags.DEFINE_string(
        "init_checkpoint",
        None,
        "Original TF1 checkpoint, Hugging Face directory, or TF2 checkpoint or output_dir "
        "of this project. A fine-tuned checkpoint brings its task head too.",
        flag_values=f,
    )
    flags.DEFINE_bool(
        "do_lower_case",
        True,
        "Lower-case the input (uncased models). When not given, the checkpoint's own "
        "setting; a contradiction is an error.",
        flag_values=f,
    )
    flags.DEFINE_bool(
        "preserve_unused_tokens",
        False,
        "Keep a word of the input that is a [unusedN] entry of the vocabulary whole (one "
        "token, e.g. markers put into those slots) instead of splitting it on its "
        "brackets, as the original's flag. When not given, the model's own setting "
        "(its model_info.json), else false; recorded in the run's model_info.json.",
        flag_values=f,
    )
    flags.DEFINE_bool(
        "allow_vocab_mismatch",
        False,
        "Use --vocab_file even where it differs from the vocabulary that comes with "
        "--init_checkpoint (its vocab.txt, or the fingerprint in its model_info.json); "
        "by default that is an error naming the first line that differs.",
        flag_values=f,
    )
    if max_seq_length is not None:
        flags.DEFINE_integer(
            "max_seq_length",
            max_seq_length,
            "Maximum total input length in WordPiece tokens, after packing.",
            flag_values=f,
        )
        flags.DEFINE_bool(
            "pad_to_max_seq_length",
            None,
            "Compute every batch at --max_seq_length, as the original release does "
            "(static shapes, for TPUs and for comparisons with it), instead of cutting "
            "each batch to its longest example (rounded up to one of a few lengths; "
            "docs/padding.md). Default: true under --distribution_strategy=tpu; "
            "else every batch is cut, except run_squad.py's training batches (its span "
            "loss counts the padding positions, so cutting them would change training) "
            "and run_pretraining.py's (its instances fill --max_seq_length). "
            "Given explicitly, it also pads the --export_dir export's requests.",
            flag_values=f,
        )


def define_common_flags(max_seq_length: int, flag_values=FLAGS, dtype: str = "auto") -> None:
    """The model, its files, the output folder, devices and numerics (`dtype`: the
    --dtype default; pre-training keeps float32 until its learning in bfloat16 is
    measured against float32, as fine-tuning's is on every task kind)."""
    f = flag_values
    define_model_flags(max_seq_length, f)
    define_output_dir_flag("Checkpoints, summaries and results go here.", f)
    flags.DEFINE_enum(
        "distribution_strategy",
        "one_device",
        list(distribution.STRATEGIES),
        "tf.distribute strategy.",
        flag_values=f,
    )
    flags.DEFINE_string(
        "tpu", None, "TPU name or address for --distribution_strategy=tpu.", flag_values=f
    )
    flags.DEFINE_integer(
        "num_cpu_devices",
        0,
        "Split the CPU into this many logical devices (with "
        "--distribution_strategy=mirrored on a machine without GPUs).",
        flag_values=f,
    )
    flags.DEFINE_enum(
        "dtype",
        dtype,
        ["float32", "bfloat16", "float16", "auto"],
        "Compute dtype of training, evaluation and prediction; variables stay float32 "
        "and exports compute in float32. float16 adds loss scaling. auto: mixed "
        "bfloat16 on a CPU with bfloat16 units (AMX or AVX512-BF16, the kernels "
        "--kernels picks) and no GPU or TPU, float32 elsewhere.",
        flag_values=f,
    )
    flags.DEFINE_bool("enable_xla", False, "Compile the training step with XLA.", flag_values=f)
    flags.DEFINE_enum(
        "kernels",
        "auto",
        list(kernels.NAMES),
        "CPU kernel choices (modeling/kernels.py): auto picks them from the CPU's "
        "instruction sets (amx, avx512_bf16 or avx2); plain compiles nothing.",
        flag_values=f,
    )
    flags.DEFINE_integer(
        "seed",
        input_pipeline.DEFAULT_SEED,
        "Random seed of initialisation, dropout and shuffling.",
        flag_values=f,
    )
    flags.DEFINE_bool(
        "deterministic",
        False,
        "Enable TensorFlow op determinism (bitwise reproducible runs, slower).",
        flag_values=f,
    )
    define_progress_flag(f)
    define_original_flags(f)


def define_progress_flag(flag_values=FLAGS) -> None:
    flags.DEFINE_float(
        "progress_interval_s",
        30.0,
        "Seconds between progress lines on stderr when it is not a terminal (a CI log, "
        "nohup, a file); a terminal shows a live bar. The log file in --output_dir "
        "has a line for every training loop.",
        flag_values=flag_values,
    )


def define_original_flags(flag_values=FLAGS) -> None:
    """The original release's TPU-era flags; `apply_original_flags` maps them."""
    f = flag_values
    flags.DEFINE_bool(
        "use_tpu", False, "Original flag: --use_tpu is --distribution_strategy=tpu.", flag_values=f
    )
    flags.DEFINE_string("tpu_name", None, "Original flag: the TPU, as --tpu.", flag_values=f)
    flags.DEFINE_string(
        "tpu_zone",
        None,
        "Original flag: GCE zone of the TPU (for the TPU cluster resolver).",
        flag_values=f,
    )
    flags.DEFINE_string(
        "gcp_project",
        None,
        "Original flag: GCP project of the TPU (for the TPU cluster resolver).",
        flag_values=f,
    )
    flags.DEFINE_string(
        "master",
        None,
        "Original flag: TensorFlow master address; with --use_tpu and no --tpu_name, the TPU's.",
        flag_values=f,
    )
    flags.DEFINE_integer(
        "num_tpu_cores",
        8,
        "Original flag: TPUStrategy uses every core of the TPU, so this is not needed.",
        flag_values=f,
    )
    flags.DEFINE_bool(
        "verbose_logging",
        False,
        "Original flag: debug logging (e.g. SQuAD answers that cannot be mapped back "
        "onto the context).",
        flag_values=f,
    )


def define_training_flags(
    flag_values=FLAGS, learning_rate: float = 5e-5, value_lists: bool = False
) -> None:
    """What to run, batch sizes and the optimizer, for every trained model.

    `value_lists`: --train_batch_size and --learning_rate also take comma-separated
    values, a grid of the fine-tuning runners' search (hparam_search.py)."""
    f = flag_values
    flags.DEFINE_bool("do_train", False, "Run training.", flag_values=f)
    flags.DEFINE_bool("do_eval", False, "Evaluate on the dev data.", flag_values=f)
    if value_lists:
        define_values_flag(
            "train_batch_size", 32, int, "Global training batch size", f, integer=True
        )
        define_values_flag(
            "learning_rate", learning_rate, float, "Peak learning rate", f, zero_allowed=True
        )
    else:
        flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.", flag_values=f)
        flags.DEFINE_float("learning_rate", learning_rate, "Peak learning rate.", flag_values=f)
    flags.DEFINE_integer("eval_batch_size", 8, "Global evaluation batch size.", flag_values=f)
    flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "Optimizer.", flag_values=f)
    flags.DEFINE_enum(
        "lr_decay",
        "original",
        ["original", "after_warmup"],
        "The linear decay to 0 after warmup. original: measured from step 0, as the "
        "original release (a warmup of a tenth of the steps ends at 0.9 x the peak rate). "
        "after_warmup: from the peak over the remaining steps, as Hugging Face's Trainer.",
        flag_values=f,
    )
    flags.DEFINE_float(
        "weight_decay_rate",
        0.01,
        "Decoupled weight decay (not on LayerNorm and bias).",
        flag_values=f,
    )
    flags.DEFINE_bool(
        "adam_bias_correction",
        True,
        "Bias-correct Adam's moments (as Adam, TF Model Garden and PyTorch do). "
        "--noadam_bias_correction is the original release's AdamWeightDecayOptimizer "
        "exactly; its larger early updates can destabilise fine-tuning at high learning rates.",
        flag_values=f,
    )
    flags.DEFINE_float(
        "adam_epsilon",
        1e-6,
        "Epsilon of Adam's denominator (AdamW and LAMB): 1e-6 as the original release; "
        "Hugging Face's Trainer uses 1e-8.",
        flag_values=f,
    )
    flags.DEFINE_integer(
        "gradient_accumulation_steps",
        1,
        "Micro-batches per step: the per-replica batch is split into this many parts.",
        flag_values=f,
    )
    flags.DEFINE_integer(
        "steps_per_loop",
        10,
        "Training steps per compiled loop (and per progress line).",
        flag_values=f,
    )
    flags.DEFINE_integer(
        "iterations_per_loop", 1000, "Original flag: --steps_per_loop.", flag_values=f
    )
    flags.DEFINE_integer(
        "save_checkpoints_steps", 1000, "Checkpoint every this many steps.", flag_values=f
    )
    flags.DEFINE_integer(
        "keep_checkpoint_max", 5, "Checkpoints kept in --output_dir.", flag_values=f
    )
    flags.DEFINE_list(
        "profile_steps",
        None,
        "FIRST,LAST: write a TensorBoard profile of the training loops (--steps_per_loop "
        "steps each) that hold these steps to output_dir/profile.",
        flag_values=f,
    )


def define_finetuning_flags(flag_values=FLAGS) -> None:
    """What run_classifier, run_squad and run_ner share besides training."""
    f = flag_values
    flags.DEFINE_bool("do_predict", False, "Predict the test data.", flag_values=f)
    flags.DEFINE_integer("predict_batch_size", 8, "Global prediction batch size.", flag_values=f)
    define_values_flag("num_train_epochs", 3.0, float, "Training epochs (may be fractional)", f)
    flags.DEFINE_integer(
        "restarts",
        1,
        "Random restarts of every configuration of the search grid (each restart its "
        "own seed: data order, head initialisation, dropout); the trial with the best "
        "dev score becomes output_dir's model (docs/hyperparameter_search.md).",
        lower_bound=1,
        flag_values=f,
    )
    flags.DEFINE_enum(
        "select",
        "best_trial",
        ["best_trial", "best_mean"],
        "Of a search: the trial with the best dev score (the paper's random restarts), "
        "or the configuration with the best mean over its restarts, then its best trial.",
        flag_values=f,
    )
    flags.DEFINE_float(
        "warmup_proportion",
        0.1,
        "Fraction of training with a linear learning-rate warmup.",
        flag_values=f,
    )
    flags.DEFINE_integer(
        "shuffle_buffer_size",
        input_pipeline.DEFAULT_SHUFFLE_BUFFER_SIZE,
        "Training examples in the shuffle "
        "buffer (at most the training set). The original uses 100, which "
        "mixes a file sorted by label or length poorly.",
        flag_values=f,
    )
    flags.DEFINE_bool(
        "group_by_length",
        False,
        "Training batches of examples of similar lengths, in a seeded random order "
        "(as Hugging Face's group_by_length): less padding, so faster, but it "
        "changes which examples share a batch. Holds the training records in "
        "memory (docs/padding.md).",
        flag_values=f,
    )
    flags.DEFINE_bool(
        "evaluate_every_epoch",
        True,
        "With --do_train --do_eval: evaluate at "
        "the end of every epoch and keep the best model in output_dir/best "
        "(the one evaluated, predicted and exported at the end).",
        flag_values=f,
    )
    flags.DEFINE_integer(
        "early_stopping_patience",
        0,
        "If positive: stop training after this many epoch evaluations in a row that do "
        "not beat the best dev score (needs --do_train --do_eval); the best model is "
        "evaluated, predicted and exported as usual, and train_summary.json says where "
        "and why training stopped. 0: train every epoch.",
        flag_values=f,
    )
    flags.DEFINE_string(
        "hub_module_url",
        None,
        "A TF Hub BERT encoder to fine-tune instead "
        "of --init_checkpoint: a SavedModel folder, or a tfhub.dev / Kaggle "
        "handle (resolved through tensorflow_hub's cache). Its vocabulary, "
        "do_lower_case and config are used unless given.",
        flag_values=f,
    )
    flags.DEFINE_string(
        "bert_hub_module_handle", None, "Original flag: --hub_module_url.", flag_values=f
    )
    flags.DEFINE_bool(
        "reinit_head",
        False,
        "Start the task head from its initializer even "
        "when --init_checkpoint holds one (e.g. to fine-tune a fine-tuned "
        "model on other labels).",
        flag_values=f,
    )
    flags.DEFINE_enum(
        "head_initializer",
        "truncated_normal",
        ["truncated_normal", "normal"],
        "How a new task head's kernel is drawn (stddev initializer_range): "
        "the original release's truncated normal, or a plain normal as "
        "Hugging Face draws its heads.",
        flag_values=f,
    )
    flags.DEFINE_string(
        "export_dir",
        None,
        "Export the fine-tuned model (the best one with "
        "--do_eval) as a SavedModel that answers raw text.",
        flag_values=f,
    )
    flags.DEFINE_bool(
        "export_xla_single_requests",
        False,
        "Lower latency for one request at a time: the export runs a request of one example "
        "through XLA (TensorFlow Serving must be started with --xla_cpu_compilation_enabled); "
        "batches of more than one take the standard path (docs/serving.md).",
        flag_values=f,
    )
    define_overwrite_flag("Let --export_dir replace a previous export.", f)


class _ValuesParser(flags.ArgumentParser):
    """A positive number, or comma-separated positive numbers (a search grid). One
    value parses to the number itself, several to a tuple of them."""

    def __init__(self, number: type, integer: bool, zero_allowed: bool):
        super().__init__()
        self.number, self.integer, self.zero_allowed = number, integer, zero_allowed
        sign = "non-negative" if zero_allowed else "positive"
        kind = "integer" if integer else "number"
        self.syntactic_help = f"a {sign} {kind}, or a comma-separated list of them"

    def _one(self, text: str):
        try:
            value = self.number(text.strip())
        except ValueError:
            kind = "an integer" if self.integer else "a number"
            raise ValueError(f"{text.strip()!r} is not {kind}") from None
        if not (value >= 0 if self.zero_allowed else value > 0) or value == float("inf"):
            sign = "non-negative" if self.zero_allowed else "positive"
            raise ValueError(f"{text.strip()} is not {sign} and finite")
        return value

    def parse(self, argument):
        if isinstance(argument, (int, float)) and not isinstance(argument, bool):
            return self._one(str(argument))
        if isinstance(argument, (tuple, list)):
            argument = ",".join(str(a) for a in argument)
        parts = str(argument).split(",")
        if any(not part.strip() for part in parts):
            raise ValueError(f"{argument!r}: an empty value in the list")
        values = tuple(self._one(part) for part in parts)
        if len(set(values)) != len(values):
            raise ValueError(f"{argument!r}: a value given twice")
        return values[0] if len(values) == 1 else values

    def flag_type(self) -> str:
        return ("int" if self.integer else "float") + " or list"


class _ValuesSerializer(flags.ArgumentSerializer):
    def serialize(self, value) -> str:
        if isinstance(value, tuple):
            return ",".join(str(v) for v in value)
        return str(value)


def define_values_flag(
    name: str,
    default,
    number: type,
    help_text: str,
    flag_values=FLAGS,
    integer: bool = False,
    zero_allowed: bool = False,
) -> None:
    """A numeric flag that also takes comma-separated values, the grid of a search:
    `FLAGS.<name>` is the number when one is given (as before), a tuple when several."""
    flags.DEFINE(
        _ValuesParser(number, integer, zero_allowed),
        name,
        default,
        f"{help_text}; comma-separated values make a grid, searched with --restarts "
        f"(docs/hyperparameter_search.md).",
        flag_values=flag_values,
        serializer=_ValuesSerializer(),
    )


def define_output_dir_flag(help_text: str, flag_values=FLAGS) -> None:
    flags.DEFINE_string("output_dir", None, help_text, flag_values=flag_values)


def define_overwrite_flag(help_text: str, flag_values=FLAGS) -> None:
    flags.DEFINE_bool("overwrite", False, help_text, flag_values=flag_values)


def define_data_dir_flag(help_text: str, flag_values=FLAGS) -> None:
    flags.DEFINE_string("data_dir", None, help_text, flag_values=flag_values)


def define_doc_stride_flag(default: int, help_text: str, flag_values=FLAGS) -> None:
    flags.DEFINE_integer("doc_stride", default, help_text, flag_values=flag_values)


# The most units an LSTM flag takes: 4096 each way on BERT-large (H 1024) is 168M
# weights, 2.7 GB of float32 with Adam's two slots; the paper's BiLSTMs have 768.
MAX_LSTM_UNITS = 4096


def define_bilstm_flag(flag_values=FLAGS) -> None:
    """--bilstm_units: the paper's Table 5 "+ BiLSTM" (run_classifier, run_squad)."""
    flags.DEFINE_integer(
        "bilstm_units",
        0,
        "If positive: a randomly initialised bidirectional LSTM of this many units each "
        "way between the encoder and the task head (the paper's Table 5 '+ BiLSTM'); 0: "
        "none. Default: what a fine-tuned --init_checkpoint of this task was trained with.",
        lower_bound=0,
        upper_bound=MAX_LSTM_UNITS,
        flag_values=flag_values,
    )


def define_input_file_flags(help_texts: dict[str, str], flag_values=FLAGS) -> None:
    """--train_file, --eval_file, --predict_file: those named in `help_texts`."""
    for name, help_text in help_texts.items():
        flags.DEFINE_string(name, None, help_text, flag_values=flag_values)
