"""Converts a BERT checkpoint between the original TF1, Hugging Face and our TF2 formats.

  python convert_checkpoint.py --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \
      --output_format=hf --output_dir=bert-base-uncased-hf

Reads any format --init_checkpoint accepts (an original TF1 checkpoint, a Hugging Face
directory, a TF2 checkpoint or output_dir of this project) and writes a folder in one of:
  tf1  bert_model.ckpt under the original release's names, bert_config.json, vocab.txt;
  hf   config.json, model.safetensors, vocab.txt, tokenizer_config.json, which
       `transformers` loads with AutoModel and the task class;
  tf2  our TF2 checkpoint (ckpt-0, as the training loop writes it), bert_config.json,
       vocab.txt.
Each folder also gets model_info.json (model kind, labels, case).

A left-to-right model (run_pretraining.py --objective=ltr, and what is fine-tuned from
it) keeps its left-only attention: model_info.json says `causal_attention`, and a
Hugging Face folder gets `is_decoder: true`, so that transformers runs it as a causal
BERT (a pre-trainer as BertLMHeadModel) with our outputs; the TF1 bert_config.json
cannot say it (a warning says so). A left-to-right classifier (or multiple choice
model) reads the last real token, transformers' and the original release's classifiers
the first; it and a task model with a BiLSTM (--bilstm_units), which has no TF1 or
Hugging Face names, convert to tf2 only (their encoder, with --model_kind=encoder, to
any).

The task head travels too: its kind and label count are read from the checkpoint
(model_info.json, Hugging Face's architectures, the variable names and shapes). An
original-format head named `output_weights` is written by run_classifier.py and by TF1
NER code alike: without a model_info.json beside it, say which with --model_kind.
--bert_config_file, --vocab_file and --do_lower_case default to what sits beside the
input.
"""

from __future__ import annotations

import time

import common.quiet_tensorflow  # noqa: F401  (first: TensorFlow's start-up lines hidden)

from absl import flags, logging

from common import cli as command_line
from common import file_io
from common.errors import UserError
import model_flags
import runner_flags
import runner_settings
from common import run_control
from modeling import checkpoint_names as names
from modeling import checkpoint_readers, checkpoint_writers, checkpoints, model_files, model_kinds
from modeling.config import BertConfig
from modeling.encoder import BertEncoder

FORMATS = ("tf1", "hf", "tf2")
# The feature-based tagger's BiLSTM head exists only in our TF2 format, which holds it
# as it is: nothing to convert.
CONVERTIBLE_KINDS = tuple(k.name for k in model_kinds.KINDS if k is not model_kinds.FEATURE_BASED)

FLAGS = flags.FLAGS

runner_flags.define_model_flags(max_seq_length=None)
runner_flags.define_output_dir_flag(
    "The folder to write. It must not exist, be empty, or "
    "hold an earlier conversion (replaced with "
    "--overwrite)."
)
runner_flags.define_overwrite_flag("Replace an earlier conversion in --output_dir.")
flags.DEFINE_enum(
    "output_format",
    None,
    list(FORMATS),
    "tf1: the original release's "
    "names; hf: a Hugging Face directory; tf2: this project's checkpoint.",
)
flags.DEFINE_enum(
    "model_kind",
    None,
    list(CONVERTIBLE_KINDS),
    "The model the checkpoint holds (default: detected). 'encoder' converts the encoder alone.",
)

WRITERS = {
    "tf1": checkpoint_writers.write_original_directory,
    "hf": checkpoint_writers.write_hf_directory,
    "tf2": checkpoint_writers.write_tf2_directory,
}


def build_model(
    kind: str,
    config: BertConfig,
    num_labels: int | None,
    causal_attention: bool = False,
    bilstm_units: int = 0,
    multi_label: bool = False,
):
    """A float32 model of `kind` (`model_kinds.ModelKind.build`) on a new encoder,
    left-to-right with `causal_attention`, with the BiLSTM of `bilstm_units` (a
    classifier's, span labeler's or token classifier's), multi-label (a classifier)."""
    if kind not in CONVERTIBLE_KINDS:
        raise UserError(
            f"cannot convert a {kind} model: the feature-based tagger's BiLSTM "
            f"head exists only in this project's TF2 format "
            f"(--model_kind=encoder converts its encoder)"
        )
    encoder = BertEncoder(config, dtype="float32", causal_attention=causal_attention)
    return model_kinds.get(kind).build(
        encoder,
        config,
        num_labels,
        bilstm_units=bilstm_units,
        objective="ltr" if causal_attention else "mlm",
        multi_label=multi_label,
    )


def stored_multi_label(input_checkpoint: str, kind: str) -> bool:
    """Whether the classifier at `input_checkpoint` is multi-label: its
    model_info.json says so, or a Hugging Face config.json's problem_type."""
    if not model_kinds.get(kind).multi_label:
        return False
    stored = model_files.read_model_info(input_checkpoint)
    if stored.get("model_kind") == kind:
        return bool(stored.get("multi_label"))
    path = checkpoint_readers.find_side_file(model_files.side_dirs(input_checkpoint), "config.json")
    config = file_io.read_json(path) if path else {}
    return config.get("problem_type") == "multi_label_classification"


def choose_kind(info: dict, model_kind: str | None) -> str:
    """The model kind to convert: `model_kind` if given (and the checkpoint holds that
    head), else the detected one."""
    if model_kind is None:
        if info["model_kind"] is None:
            raise UserError(
                f"checkpoint {info['path']} has a head that fits several kinds of model "
                f"({', '.join(info['candidates'])}) and no model_info.json says which: pass "
                f"--model_kind"
            )
        return info["model_kind"]
    if model_kind != names.ENCODER and model_kind not in info["candidates"]:
        raise UserError(
            f"--model_kind={model_kind}: checkpoint {info['path']} has no "
            f"{model_kind} head (its variables fit: "
            f"{', '.join(info['candidates'])})"
        )
    return model_kind


def convert(
    input_checkpoint: str,
    output_dir: str,
    output_format: str,
    *,
    bert_config_file: str | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    model_kind: str | None = None,
    overwrite: bool = False,
    preserve_unused_tokens: bool | None = None,
    allow_vocab_mismatch: bool = False,
) -> str:
    """Reads `input_checkpoint` and writes it to `output_dir` in `output_format`.

    Returns what the writer returns (the checkpoint prefix, or the Hugging Face folder).
    Raises FileNotFoundError for a missing input, CheckpointMismatchError (naming the
    variable and both shapes) for a config that does not fit, ValueError when the
    model kind or the case is ambiguous or contradicted.
    """
    # Before any work: a folder the writer would refuse.
    checkpoint_writers.check_destination(output_dir, WRITERS[output_format].__name__, overwrite)
    info = checkpoints.inspect_checkpoint(input_checkpoint)
    kind = choose_kind(info, model_kind)
    files = model_files.resolve(
        bert_config_file,
        vocab_file,
        input_checkpoint,
        do_lower_case,
        preserve_unused_tokens=preserve_unused_tokens,
        allow_vocab_mismatch=allow_vocab_mismatch,
    )
    bilstm_units = 0
    if model_kinds.get(kind).bilstm:
        stored = model_files.read_model_info(input_checkpoint)
        if stored.get("model_kind") == kind:
            bilstm_units = int(stored.get("bilstm_units") or 0)
    model = build_model(
        kind,
        files.config,
        info["num_labels"],
        files.causal_attention,
        bilstm_units,
        multi_label=stored_multi_label(input_checkpoint, kind),
    )
    restored = checkpoints.restore_model(input_checkpoint, model)
    if "pooler" in restored["fresh"]:
        logging.warning(
            "Checkpoint %s has no pooler (a %s does not use it): the output's pooler is untrained.",
            input_checkpoint,
            kind,
        )
    missing = [part for part in restored["fresh"] if part != "pooler"]
    if missing:
        raise UserError(
            f"checkpoint {input_checkpoint} has no {', '.join(missing)} for a "
            f"{kind} model: nothing to convert there (--model_kind=encoder "
            f"converts the encoder alone)"
        )
    labels = info["labels"]
    if labels is not None and len(labels) != (info["num_labels"] or 0):
        labels = None
    return WRITERS[output_format](
        output_dir,
        model,
        files.vocab_file,
        files.do_lower_case,
        labels if model_kinds.get(kind).labelled else None,
        overwrite=overwrite,
        preserve_unused_tokens=files.preserve_unused_tokens,
    )


def main(_):
    run_control.hold_file(FLAGS.output_dir, f"--output_dir={FLAGS.output_dir}")
    run_control.exit_on_sigterm("convert_checkpoint")
    terminal, start = runner_settings.terminal(), time.monotonic()
    terminal.say(f"Converting {FLAGS.init_checkpoint} to {FLAGS.output_format}")
    path = convert(
        FLAGS.init_checkpoint,
        FLAGS.output_dir,
        FLAGS.output_format,
        bert_config_file=FLAGS.bert_config_file,
        vocab_file=FLAGS.vocab_file,
        do_lower_case=model_flags.do_lower_case_flag(FLAGS),
        model_kind=FLAGS.model_kind,
        overwrite=FLAGS.overwrite,
        preserve_unused_tokens=model_flags.preserve_unused_tokens_flag(FLAGS),
        allow_vocab_mismatch=FLAGS.allow_vocab_mismatch,
    )
    terminal.say(f"Wrote {path} ({FLAGS.output_format}) in {time.monotonic() - start:.0f} s")


def cli():
    flags.mark_flags_as_required(["init_checkpoint", "output_dir", "output_format"])
    command_line.run(main)


if __name__ == "__main__":
    cli()
