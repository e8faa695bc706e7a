"""Creates masked-LM / next-sentence TFRecord examples for BERT pre-training.

Input: plain text, one sentence per line, a blank line between documents.
Output: TFRecord files of `tf.train.Example`s with the features of the original
release (S = max_seq_length, P = max_predictions_per_seq):

    input_ids             int64 [S]  `[CLS] A [SEP] B [SEP]` after masking, 0-padded
    input_mask            int64 [S]  1 for real tokens, 0 for padding
    segment_ids           int64 [S]  0 for [CLS], A and its [SEP]; 1 for B and its [SEP]
    masked_lm_positions   int64 [P]  ascending positions of the predictions, 0-padded
    masked_lm_ids         int64 [P]  original ids at those positions, 0-padded
    masked_lm_weights     float [P]  1.0 per prediction, 0.0 for padding
    next_sentence_labels  int64 [1]  1 if B is a random segment, else 0

With the same input, vocabulary, flags and seed the files hold the records of the
original `create_pretraining_data.py`, in the same order and files: the same
documents, the same calls on one `random.Random` in the same order. Byte for
byte, they equal the original's records re-serialized with sorted feature keys
(`canonical_record`): the original's own bytes change from run to run, as the
protobuf runtime orders the feature map differently in every process.

Beyond the original:
  * `--num_workers N > 1`: each input file becomes its own shard, built in a pool
    of N processes exactly as the original would build it from that file alone
    (same seed). Memory is then bounded by the largest input file.
  * Instances are spilled to an unnamed temporary file while they are generated
    (the final shuffle needs all of them), so memory holds the documents only.
  * Ablations: `--mask_token_prob` / `--random_token_prob` (the 80/10/10 split)
    and `--next_sentence_prediction=false`: single-segment instances
    `[CLS] A [SEP]` filling `max_seq_length`, segment ids 0, next_sentence_labels 0.
  * Every shard is written under a temporary name and renamed when complete;
    beside it `<shard>.meta.json` (see `shard_metadata`) records the settings
    and counts, for the pre-training runner to check.
  * Progress and a final summary (instances, tokens, masked fraction) are logged.
  * Compressed input files (.gz, .bz2, .xz, ...) are read through their decompressor,
    checked to the end: a file cut short or damaged is named with the line where its
    text stops (`damage.open_decompressed`), never read as if it were whole.

Usage:
    python -m data_prep.create_pretraining_data \
        --input_file=sample_data/corpus/*.txt --output_file=output/pretrain.tfrecord \
        --vocab_file=sample_data/vocab/uncased_vocab.txt
"""

import common.quiet_tensorflow  # noqa: F401  (first: TensorFlow's start-up lines hidden)

import os
from typing import Sequence

from absl import flags
from absl import logging
import tensorflow as tf

from common import cli as command_line
from common.errors import UserError
from common.progress import TerminalProgress
from common import run_control
from data_prep import records
from data_prep.pretraining.pretraining_instances import InstanceOptions, MaskingOptions
from data_prep.pretraining.pretraining_records import RunOptions, check_no_earlier_shards, run


# ----------------------------------------------------------------------------
# Output files.
# ----------------------------------------------------------------------------


def resolve_output_files(
    output_file: str, input_files: Sequence[str], per_input_file: bool
) -> list[str]:
    """Output paths from `--output_file`.

    Pooled: the comma-separated list as is. Per input file: a comma list with
    one entry per input file, or a directory (existing, or written with a
    trailing "/") that receives `<input name without extension>.tfrecord`.

    Raises:
        ValueError: the outputs do not match the input files.
    """
    outputs = output_file.split(",")
    if not per_input_file:
        return outputs
    if len(outputs) == 1 and (output_file.endswith("/") or tf.io.gfile.isdir(output_file)):
        tf.io.gfile.makedirs(output_file)
        outputs = [
            os.path.join(output_file, os.path.splitext(os.path.basename(path))[0] + ".tfrecord")
            for path in input_files
        ]
        if len(set(outputs)) != len(outputs):
            raise UserError(
                "Input files share a name, so their shards in %s "
                "would collide: list the output files instead." % output_file
            )
        return outputs
    if len(outputs) != len(input_files):
        raise UserError(
            "With --num_workers > 1, --output_file needs one file per input file "
            "(%d given for %d input files) or a directory." % (len(outputs), len(input_files))
        )
    return outputs


def hold_outputs(output_file: str, options: RunOptions, overwrite: bool) -> None:
    """One run per output: the lock of each output file, or of the directory when
    --output_file is one. Such a directory holding an earlier run's shards that this
    run would not replace is refused (with `overwrite`, they are removed first)."""
    if options.per_input_file and "," not in output_file and tf.io.gfile.isdir(output_file):
        run_control.hold_file(output_file, "--output_file=%s" % output_file)
        check_no_earlier_shards(output_file, options.output_files, overwrite, "--overwrite")
        return
    for path in options.output_files:
        run_control.hold_file(path, "--output_file=%s" % path)


# ----------------------------------------------------------------------------
# Command line.
# ----------------------------------------------------------------------------


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """The original's flags (names and defaults) and this module's additions."""
    define = dict(flag_values=flag_values)
    flags.DEFINE_string(
        "input_file",
        None,
        "Input raw text file (or comma-separated list of files and globs): one "
        "sentence per line, a blank line between documents.",
        **define,
    )
    flags.DEFINE_string(
        "output_file",
        None,
        "Output TF example file (or comma-separated list of files; instances go "
        "round-robin across them). With --num_workers > 1: one file per input "
        "file (comma list in --input_file order), or a directory (existing or "
        "ending in '/') that receives <input name without extension>.tfrecord. "
        "Each file gets <file>.meta.json beside it.",
        **define,
    )
    flags.DEFINE_string(
        "vocab_file", None, "The vocabulary file that the BERT model was trained on.", **define
    )
    define_instance_flags(flag_values)
    flags.DEFINE_bool(
        "overwrite",
        False,
        "With a directory as --output_file: remove the shards an earlier run left "
        "there that this run would not replace (by default such a directory is "
        "refused: a glob over it would read both runs' shards).",
        **define,
    )
    flags.DEFINE_integer(
        "num_workers",
        1,
        "1: the original (all inputs pooled into one corpus). N > 1: one shard "
        "per input file, built by N processes, each byte-identical to a run on "
        "that file alone; memory is bounded by the largest file.",
        **define,
    )
    for name in ("input_file", "output_file", "vocab_file"):
        flags.mark_flag_as_required(name, flag_values=flag_values)


def define_instance_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """The flags of tokenization, instances and masking (read by
    `run_options_from_flags`), shared with the Beam pipeline."""
    define = dict(flag_values=flag_values)
    flags.DEFINE_bool(
        "do_lower_case",
        True,
        "Whether to lower case the input text. Should be True for uncased "
        "models and False for cased models.",
        **define,
    )
    flags.DEFINE_bool(
        "preserve_unused_tokens",
        False,
        "If True, Wordpiece tokenization will not be applied to words in the vocab: "
        "a word of the text that is a [unusedN] entry of the vocabulary is one token "
        "(the original's flag; recorded in each shard's metadata).",
        **define,
    )
    flags.DEFINE_bool(
        "do_whole_word_mask",
        False,
        "Whether to use whole word masking rather than per-WordPiece masking.",
        **define,
    )
    flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.", **define)
    flags.DEFINE_integer(
        "max_predictions_per_seq",
        20,
        "Maximum number of masked LM predictions per sequence.",
        **define,
    )
    flags.DEFINE_integer(
        "random_seed",
        12345,
        "Random seed for data generation (of each shard with --num_workers > 1).",
        **define,
    )
    flags.DEFINE_integer(
        "dupe_factor",
        10,
        "Number of times to duplicate the input data (with different masks).",
        **define,
    )
    flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.", **define)
    flags.DEFINE_float(
        "short_seq_prob",
        0.1,
        "Probability of creating sequences which are shorter than the maximum length.",
        **define,
    )
    flags.DEFINE_float(
        "mask_token_prob",
        0.8,
        "Probability that a chosen token becomes [MASK] (ablation; the original's 0.8).",
        **define,
    )
    flags.DEFINE_float(
        "random_token_prob",
        0.1,
        "Probability that a chosen token becomes a random word (ablation; the "
        "original's 0.1). The rest keep their token.",
        **define,
    )
    flags.DEFINE_bool(
        "next_sentence_prediction",
        True,
        "Pairs [CLS] A [SEP] B [SEP] with a random B half of the time (the "
        "original). If false: single segments [CLS] A [SEP] filling "
        "max_seq_length, segment_ids 0, next_sentence_labels always 0.",
        **define,
    )
    flags.DEFINE_float("progress_interval_s", 30.0, "Seconds between progress log lines.", **define)


def options_from_flags(flag_values: flags.FlagValues) -> RunOptions:
    """`RunOptions` from parsed flags (the only place that reads them)."""
    fv = flag_values
    if fv.num_workers < 1:
        raise UserError("--num_workers=%d must be at least 1." % fv.num_workers)
    per_input_file = fv.num_workers > 1
    # The original's order (unsorted, as the file system lists them), so that the same
    # command gives the same output.
    input_files = records.expand_globs(fv.input_file, original_order=True)
    return run_options_from_flags(
        fv,
        input_files=tuple(input_files),
        output_files=tuple(resolve_output_files(fv.output_file, input_files, per_input_file)),
        vocab_file=fv.vocab_file,
        per_input_file=per_input_file,
        num_workers=fv.num_workers,
    )


def run_options_from_flags(flag_values: flags.FlagValues, **fields) -> RunOptions:
    """`RunOptions` from the flags of `define_instance_flags` and `fields`."""
    fv = flag_values
    return RunOptions(
        do_lower_case=fv.do_lower_case,
        preserve_unused_tokens=fv.preserve_unused_tokens,
        dupe_factor=fv.dupe_factor,
        random_seed=fv.random_seed,
        instance=InstanceOptions(
            max_seq_length=fv.max_seq_length,
            short_seq_prob=fv.short_seq_prob,
            next_sentence_prediction=fv.next_sentence_prediction,
        ),
        masking=MaskingOptions(
            masked_lm_prob=fv.masked_lm_prob,
            max_predictions_per_seq=fv.max_predictions_per_seq,
            mask_token_prob=fv.mask_token_prob,
            random_token_prob=fv.random_token_prob,
            do_whole_word_mask=fv.do_whole_word_mask,
        ),
        progress_interval_s=fv.progress_interval_s,
        **fields,
    )


def main(argv):
    del argv  # Unused.
    logging.set_verbosity(logging.INFO)
    options = options_from_flags(flags.FLAGS)
    hold_outputs(flags.FLAGS.output_file, options, flags.FLAGS.overwrite)
    run_control.exit_on_sigterm(
        "create_pretraining_data",
        "no unfinished file is left under an output's name, and run_pretraining refuses "
        "the output files until every one of them is written",
    )
    logging.info("Reading %s", ", ".join(options.input_files))
    logging.info("Writing %s", ", ".join(options.output_files))
    progress = TerminalProgress(interval=flags.FLAGS.progress_interval_s)
    stats = run(options, progress)
    progress.say(
        "%d documents -> %d instances (%d tokens, masked fraction %.3f) in %s"
        % (
            stats.documents,
            stats.instances,
            stats.tokens,
            stats.summary()["masked_fraction"],
            ", ".join(options.output_files),
        )
    )
    if stats.long_lines:
        progress.say(stats.long_lines_note(options.instance.max_num_tokens))


if __name__ == "__main__":
    define_flags()
    command_line.run(main)
