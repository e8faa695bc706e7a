"""Task exports: a fine-tuned model as a SavedModel that answers raw text, tokenizing,
windowing and post-processing in-graph as the runner's --do_predict does, so that both
predict the same for the same checkpoint:

  classifier:      serving_default(text_a, text_b), serving_text_a(text_a) ->
                   probabilities, labels (regression: predictions)
                   (`classifier.classifier_signatures`);
  multiple_choice: serving_default(context, start, endings), serving_choices(context,
                   choices) -> probabilities, best_choice
                   (`classifier.multiple_choice_signatures`);
  squad:           serving_default(question, context) -> answer, score, null_score,
                   start_logits, end_logits (`squad.squad_signatures`);
  ner:             serving_default(text) -> tags (in the scheme the model learnt, its
                   `tag_scheme` variable), words (`ner.ner_signatures`).

Every kind cuts each request batch to its longest packed input (or window) before the
model runs, so that a short query computes only its own positions; the option
`pad_to_max_seq_length=True` keeps the original release's static [B, seq_length]
model inputs instead. The option `xla_single_requests=True` runs the model of a
request of one example (one text, one multiple-choice example, one SQuAD or NER window)
through XLA, for a lower latency one request at a time, and every other batch through
the standard graph (`model_call.ModelCall`); TensorFlow Serving runs such an export only
when started with `--xla_cpu_compilation_enabled`. A request whose inputs disagree
(batches of different sizes) fails with tf.errors.InvalidArgumentError naming them
(`inputs.BAD_REQUEST`).

Loading a task export needs `import tensorflow_text` first. Exports are written as
`savedmodel.save_atomically` writes them (a previous export is replaced only with
`overwrite=True`).
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from common.errors import UserError
from data_prep.text import tf_tokenization, tokenization
from modeling import model_kinds
from serving import classifier, ner, savedmodel, squad


# export kind (`modeling.model_kinds`: a kind's `export_kind`) -> builder(model,
# tokenizer, seq_length, labels, **options) -> {signature name: tf.function}. A new kind
# of head with a raw-text export adds its builder here; its options and their defaults
# are declared with its kind. The rest of the export is shared.
TASK_SIGNATURE_BUILDERS = {
    model_kinds.CLASSIFIER.export_kind: classifier.classifier_signatures,
    model_kinds.MULTIPLE_CHOICE.export_kind: classifier.multiple_choice_signatures,
    model_kinds.SPAN.export_kind: squad.squad_signatures,
    model_kinds.TOKEN_CLASSIFIER.export_kind: ner.ner_signatures,
}
# The options of every kind and their defaults: pad_to_max_seq_length=True pads every
# model input to seq_length (static shapes), as the original release does, instead of
# cutting each request batch to its longest input; xla_single_requests=True calls the
# model through XLA for a request of one example (`model_call.ModelCall`).
SHARED_OPTIONS = {"pad_to_max_seq_length": False, "xla_single_requests": False}
# export kind -> the options of its builder and their defaults (`ModelKind.export_options`,
# those of the runner's flags).
TASK_OPTIONS = {
    kind.export_kind: dict(kind.export_options) for kind in model_kinds.KINDS if kind.export_kind
}


class TaskModule(tf.Module):
    """Holds what a task export's signatures use: the model's variables, the tokenizer,
    the label names and the preprocessing settings (seq_length, do_lower_case,
    preserve_unused_tokens and the kind's options, e.g. max_query_length, as
    tf.Variables)."""

    def __init__(
        self, model, tokenizer, seq_length: int, labels, kind: str, options: dict | None = None
    ):
        super().__init__(name=f"bert_{kind}")
        self.model_variables, _ = savedmodel.collect_variables([model])
        self.tokenizer = tokenizer
        self.seq_length = tf.Variable(seq_length, trainable=False, name="seq_length")
        self.do_lower_case = tf.Variable(
            bool(tokenizer.do_lower_case), trainable=False, name="do_lower_case"
        )
        self.preserve_unused_tokens = tf.Variable(
            bool(tokenizer.preserve_unused_tokens), trainable=False, name="preserve_unused_tokens"
        )
        if labels is not None:
            self.labels = tf.Variable(
                [str(label) for label in labels], trainable=False, name="labels"
            )
        for name, value in (options or {}).items():
            setattr(self, name, tf.Variable(value, trainable=False, name=name))


def check_options(kind: str, options: dict) -> dict:
    """The kind's options with its defaults filled in; a clear error for an unknown
    kind or option."""
    if kind not in TASK_SIGNATURE_BUILDERS:
        raise UserError(
            f"unknown export kind {kind!r}; supported: {sorted(TASK_SIGNATURE_BUILDERS)}"
        )
    known = {**SHARED_OPTIONS, **TASK_OPTIONS[kind]}
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UserError(
            f"unknown option(s) {unknown} of a {kind} export; its options: {sorted(known)}"
        )
    return {**known, **options}


@savedmodel.standard_ops
def export_task_model(
    model,
    export_dir: str,
    vocab_file: str | tokenization.VocabFile,
    do_lower_case: bool,
    seq_length: int,
    kind: str = "classifier",
    labels: Sequence[str] | None = None,
    overwrite: bool = False,
    preserve_unused_tokens: bool = False,
    **options,
) -> str:
    """Exports a fine-tuned task model with a raw-text serving signature.

    Args:
      model: the task model (classifier: a `BertClassifier`; multiple_choice: a
        `BertMultipleChoice`; squad: a `BertSpanLabeler`; ner: a `BertTokenClassifier`
        or `BertFeatureBasedTagger`).
      export_dir: destination folder (`savedmodel.check_export_path`; written only when
        the export is complete).
      vocab_file, do_lower_case: the tokenizer the model was trained with (the
        vocabulary's path, or the file read already: `tokenization.VocabFile`).
      seq_length: the --max_seq_length the model was trained with.
      kind: one of TASK_SIGNATURE_BUILDERS.
      labels: label names in label-id order (classification, multiple choice, ner),
        None for regression and squad.
      overwrite: whether a previous export at `export_dir` may be replaced.
      preserve_unused_tokens: as the tokenizer the model was trained with.
      **options: the kind's settings (TASK_OPTIONS, e.g. squad's max_query_length,
        and SHARED_OPTIONS' pad_to_max_seq_length and xla_single_requests); pass the
        runner's flags so that the export predicts as the runner does. Each is kept in
        the export as a variable of its name.

    Returns:
      the absolute export path. See the builder of `kind` for the signatures.
    """
    options = check_options(kind, options)
    savedmodel.check_export_path(export_dir, overwrite)
    tokenizer = tf_tokenization.TFBertTokenizer(
        vocab_file, do_lower_case, preserve_unused_tokens=preserve_unused_tokens
    )
    signatures = TASK_SIGNATURE_BUILDERS[kind](model, tokenizer, seq_length, labels, **options)
    module = TaskModule(model, tokenizer, seq_length, labels, kind, options)
    return savedmodel.save_atomically(
        module, export_dir, signatures, kind=kind, overwrite=overwrite
    )


def export_fine_tuned(model, export_dir: str, files, overwrite: bool, task, shared_options) -> str:
    """The export of a fine-tuning run (`modeling.finetuning.run`'s `export`): the task
    model with its kind's raw-text signature (`task.kind.export_kind`), the tokenizer of
    `files` (a `modeling.model_files.ModelFiles`), `task.max_seq_length`, its labels
    (`task.export_labels`) and its own options (`task.export_options()`) over the run's
    `shared_options` (SHARED_OPTIONS). Returns the absolute export path."""
    return export_task_model(
        model,
        export_dir,
        files.vocab if files.vocab is not None else files.vocab_file,  # As read once.
        files.do_lower_case,
        task.max_seq_length,
        kind=task.kind.export_kind,
        labels=task.export_labels,
        overwrite=overwrite,
        preserve_unused_tokens=files.preserve_unused_tokens,
        **shared_options,
        **task.export_options(),
    )
