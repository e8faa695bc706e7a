"""Named-entity recognition on CoNLL files: fine-tuned or feature-based, scored as conlleval.

  python run_ner.py --data_dir=conll2003 --tag_scheme=auto \
      --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \
      --do_train --do_eval --do_predict --max_seq_length=128 \
      --train_batch_size=32 --learning_rate=5e-5 --num_train_epochs=3 \
      --output_dir=out/ner

--data_dir holds train.txt, dev.txt and test.txt (or give --train_file, --eval_file,
--predict_file). Files are CoNLL columns (`token ... TAG`, blank line between
sentences, -DOCSTART- lines between documents) in IOB1, IOB2 or IOBES (--tag_scheme=auto
guesses each file's scheme). A Hugging Face directory or the original release's checkpoint as
--init_checkpoint brings its config and vocab.txt.

Tag schemes. The model learns the tags in the scheme of the training file, as
Hugging Face's run_ner does; --train_tag_scheme=iob2 (or iob1, iobes) rewrites the
training chunks in another scheme first. It matters at short schedules: on IOB1 data
(CoNLL-2003) nearly every entity word is I-X, and IOB2 doubles the entity classes the
head must tell apart (README, Correctness). Predictions are read as conlleval reads
them and written in the scheme of the file they are made for; scores do not depend on
the scheme they are written in.

Words are split into word pieces; the first piece of each word carries its label
(`data_prep.ner.ner_features`). Sentences longer than --max_seq_length are cut into overlapping
windows every --doc_stride pieces and each word is predicted from the window that
gives it the most context, so every word of every sentence gets exactly one tag.

Document context (--document_context: the paper's Section 5.3, "the maximal document
context provided by the data"; off by default, as it measured worse than sentence by
sentence on the bundled WikiGold at short schedules, docs/paper_experiments.md): in a
file whose documents
are marked by -DOCSTART- lines (before or after each document), the word pieces of a
whole document are cut into those windows, so each word is tagged from the window of
its document that gives it the most context; training, evaluation and prediction cut
the same way, and the predictions files keep the file's sentences and markers. A file
without -DOCSTART- lines has its sentences tagged one by one (the run says so). A run
that does not train takes the setting its model was trained with (model_info.json),
unless the flag is given.

The label list ("O", then the labels the training file's tags have when written in
the scheme learnt, by sorted entity type in the scheme's prefix order: B-/I- or
B-/I-/E-/S-; `data_prep.ner.conll.label_list`) and its scheme are stored with the training
features (`train.tf_record.meta.json`) and in model_info.json (`labels`,
`label_scheme`) in output_dir; later runs on the same output_dir, or with
--init_checkpoint=<output_dir>, use them, and a type outside them in an evaluation
file is an error naming the file and the line. With --do_train --do_eval the model is
scored at the end of every epoch and the best one (by entity F1) is kept in
output_dir/best/ for the final outputs.

Outputs in output_dir:
  eval_results.txt      entity-level precision, recall and F1 overall and per type,
                        counted as the conlleval script does, plus eval_loss and
                        global_step (`key = value` lines);
  eval_report.txt       the conlleval report of the dev set, byte for byte;
  eval_predictions.txt  `token gold predicted` lines in the dev file's tag scheme,
                        a blank line between sentences: conlleval reads it;
  test_predictions.txt  the same for --predict_file.

Fine-tuning trains the encoder and a token-classification layer on its last layer
(--bilstm_units puts a randomly initialised BiLSTM between them, the paper's Table 5
"+ BiLSTM"; a left-to-right model keeps its left-only attention).
--feature_based is the paper's feature-based approach (Section 5.3): the encoder is
frozen and a combination of its layers (--feature_layers, --feature_combination)
feeds a two-layer BiLSTM (--lstm_units each way) and a tag classifier; only those
are trained (a higher --learning_rate suits them, e.g. 1e-3).

--hub_module_url takes the encoder from a TF Hub BERT encoder SavedModel (e.g. one
written by export_tfhub.py; `modeling.hub`) instead of a checkpoint, with its own
config, vocabulary and do_lower_case. --export_dir exports the trained model as a
SavedModel that tags raw whitespace-separated text with the labels --do_predict
predicts, in the scheme the model learnt (its `tag_scheme` variable says which;
serving/ner.py). A run restarted with the same output_dir resumes where it
stopped.
"""

from __future__ import annotations

import common.quiet_tensorflow  # noqa: F401  (first: TensorFlow's start-up lines hidden)

import dataclasses
import os

import keras
import tensorflow as tf
from absl import app, flags, logging

from common import cli as command_line
from common.errors import MissingFileError, UserError
from common.progress import format_fields
import hparam_search
import model_flags
import runner_flags
import runner_settings
from common import file_io
from data_prep.ner import ner_records, tag_schemes
from data_prep.ner.ner_splits import (
    TRAIN_RECORD,
    Labels,
    Split,
    read_split,
    to_features,
    training_labels,
    write_predictions,
    write_training_features,
)
from data_prep.input_pipeline import RecordMetadata
from evaluation import conlleval
from modeling import feature_based, finetuning, model_files, model_kinds
from modeling.config import BertConfig
from modeling.models import BertTokenClassifier
from modeling.ner_predictions import evaluate_tags, evaluation_outputs, predict_tags
from modeling.objectives import TokenClassificationObjective

FLAGS = flags.FLAGS

runner_flags.define_data_dir_flag("Folder with train.txt, dev.txt and test.txt.")
runner_flags.define_input_file_flags(
    {
        "train_file": "Training file (default: data_dir/train.txt).",
        "eval_file": "Evaluation file (default: data_dir/dev.txt).",
        "predict_file": "Prediction file (default: data_dir/test.txt).",
    }
)
flags.DEFINE_enum(
    "tag_scheme",
    "auto",
    ["auto", *tag_schemes.TAG_SCHEMES],
    "Tag scheme of the files; auto guesses it for each file. Predictions "
    "are written in the scheme of the file they are made for.",
)
flags.DEFINE_enum(
    "train_tag_scheme",
    "file",
    ["file", *tag_schemes.TAG_SCHEMES],
    "Tag scheme the model learns: file (the training file's own, as Hugging "
    "Face's run_ner), or iob1, iob2, iobes (the training chunks rewritten "
    "in it).",
)
runner_flags.define_doc_stride_flag(
    model_kinds.TOKEN_CLASSIFIER.export_options["doc_stride"],
    "Word pieces between the starts of the windows of a sentence longer than max_seq_length - 2.",
)
flags.DEFINE_bool(
    "document_context",
    False,
    "In a file that marks its documents (-DOCSTART- lines), cut each document's word "
    "pieces into windows (--max_seq_length, --doc_stride) so that every word is tagged "
    "with the context of its document (the paper's NER setup); off: each sentence alone. "
    "Without --do_train, the trained model's setting unless given.",
)
flags.DEFINE_bool(
    "feature_based",
    False,
    "Freeze the encoder and train a BiLSTM tagger "
    "on its layers (the paper's feature-based approach).",
)
flags.DEFINE_string(
    "feature_layers",
    "-1,-2,-3,-4",
    "--feature_based: encoder layers used as features, comma-separated (-1 is the last; "
    "'embeddings' is the embedding layer's output), or 'all' (every Transformer layer).",
)
flags.DEFINE_enum(
    "feature_combination",
    None,
    list(feature_based.COMBINATIONS),
    "--feature_based: how the layers are combined (default: concat, or "
    "weighted_sum for --feature_layers=all).",
)
flags.DEFINE_integer(
    "lstm_units",
    256,
    "--feature_based: units of each LSTM direction (the paper uses 768).",
    lower_bound=1,
    upper_bound=runner_flags.MAX_LSTM_UNITS,
)
runner_flags.define_common_flags(max_seq_length=128)
runner_flags.define_training_flags(value_lists=True)
runner_flags.define_finetuning_flags()
runner_flags.define_bilstm_flag()

EVAL_REPORT = "eval_report.txt"
DEFAULT_FILES = {"train": "train.txt", "eval": "dev.txt", "predict": "test.txt"}


# ----------------------------------------------------------------------------
# Data: the files, and the labels of an earlier run (data_prep.ner.ner_splits reads
# and converts the files).
# ----------------------------------------------------------------------------


def input_file(split: str, explicit: str | None, data_dir: str | None) -> str:
    """The file of a split: the explicit flag, else data_dir/<train|dev|test>.txt."""
    path = explicit or (os.path.join(data_dir, DEFAULT_FILES[split]) if data_dir else None)
    if path is None:
        raise app.UsageError(f"--do_{split} needs --{split}_file or --data_dir")
    if not tf.io.gfile.exists(path):
        raise MissingFileError(f"{split} file {path} does not exist")
    return path


def fine_tuned_labels(info: dict) -> Labels | None:
    """The labels of a fine-tuned NER model's model_info.json, None for another model.
    Models saved before the scheme was recorded learnt IOB2."""
    if not info.get("labels") or info.get("model_kind") not in (
        BertTokenClassifier.MODEL_KIND,
        feature_based.BertFeatureBasedTagger.MODEL_KIND,
    ):
        return None
    return Labels(tuple(info["labels"]), info.get("label_scheme", "iob2"))


def labels_of_earlier_run(output_dir: str, init_checkpoint: str | None, init_info: dict) -> Labels:
    """The labels of an earlier training run: of output_dir's model, else of the
    fine-tuned model of --init_checkpoint (its model_info.json `init_info`)."""
    info_file = os.path.join(output_dir, model_files.MODEL_INFO)
    if tf.io.gfile.exists(info_file):
        labels = fine_tuned_labels(file_io.read_json(info_file))
        if labels:
            return labels
    labels = fine_tuned_labels(init_info)
    if labels:
        return labels
    raise MissingFileError(
        f"No label list: {info_file} does not hold one and --init_checkpoint="
        f"{init_checkpoint} is not a fine-tuned NER model (no model_info.json with "
        f"labels). The label list comes from the training file: run with --do_train "
        f"first (or together)."
    )


def document_context_setting(
    flag_value: bool, given: bool, do_train: bool, output_dir: str, init_info: dict
) -> bool:
    """--document_context as given, or when training; otherwise the setting the model
    was trained with (output_dir's model, else --init_checkpoint's, whose
    model_info.json is `init_info`; a model from before the setting existed was trained
    sentence by sentence)."""
    if given or do_train:
        return flag_value
    info_file = os.path.join(output_dir, model_files.MODEL_INFO)
    infos = [file_io.read_json(info_file)] if tf.io.gfile.exists(info_file) else []
    for info in [*infos, init_info]:
        if fine_tuned_labels(info):
            return bool(info.get("document_context", False))
    return flag_value


def check_scheme_of_init_checkpoint(
    labels: Labels, settings: finetuning.Settings, init_info: dict
) -> None:
    """Training on from a fine-tuned NER model (its model_info.json `init_info`) keeps
    the scheme its head learnt (its labels are that scheme's: another scheme's would be
    read as them)."""
    if settings.reinit_head or not settings.init_checkpoint:
        return
    earlier = fine_tuned_labels(init_info)
    if earlier and earlier.scheme != labels.scheme:
        raise UserError(
            f"--init_checkpoint={settings.init_checkpoint} learnt its labels in "
            f"{earlier.scheme}, this run would train them in {labels.scheme}: give "
            f"--train_tag_scheme={earlier.scheme}, or --reinit_head to train a new head."
        )


@dataclasses.dataclass(frozen=True)
class FeatureBasedOptions:
    """--feature_based settings: layer spec ("all" or "-1,-2,..."), combination
    (None: the default of the spec) and LSTM units per direction."""

    layers: str
    combination: str | None
    lstm_units: int

    def resolved_combination(self) -> str:
        if self.combination:
            return self.combination
        return "weighted_sum" if self.layers.strip() == "all" else "concat"


# ----------------------------------------------------------------------------
# The task.
# ----------------------------------------------------------------------------


class NerTask:
    """run_ner's part of a fine-tuning run (`finetuning.FineTuningTask`)."""

    def __init__(
        self,
        labels: Labels,
        splits: dict[str, Split],
        train_metadata: RecordMetadata | None,
        feature_options: FeatureBasedOptions | None,
        max_seq_length: int,
        doc_stride: int,
        settings: finetuning.Settings,
        bilstm_units: int = 0,
        document_context: bool = False,
    ):
        self.labels, self.splits, self.train_metadata = labels, splits, train_metadata
        self.document_context = document_context
        self.feature_options, self.settings = feature_options, settings
        self.max_seq_length, self.doc_stride = max_seq_length, doc_stride
        if feature_options and bilstm_units:
            raise UserError(
                "--bilstm_units is the BiLSTM of a fine-tuned tagger; --feature_based has "
                "its own (--lstm_units)"
            )
        self.bilstm_units = bilstm_units
        self.kind = model_kinds.FEATURE_BASED if feature_options else model_kinds.TOKEN_CLASSIFIER
        self.model_kind = self.kind.name
        self.objective = TokenClassificationObjective()
        self._evaluation_outputs = evaluation_outputs(self.objective)
        self.num_train_examples = len(splits["train"].features) if "train" in splits else 0

    def build_model(self, encoder, config: BertConfig) -> keras.Model:
        """BertTokenClassifier (fine-tuning, with the BiLSTM of --bilstm_units) or, with
        --feature_based, the frozen-encoder BiLSTM tagger of `modeling.feature_based`."""
        options, initializer = self.feature_options, self.settings.head_initializer
        if options is None:
            return BertTokenClassifier(
                encoder,
                config,
                len(self.labels.labels),
                head_initializer=initializer,
                bilstm_units=self.bilstm_units,
            )
        layers = feature_based.parse_feature_layers(options.layers, config.num_hidden_layers)
        return feature_based.BertFeatureBasedTagger(
            encoder,
            config,
            len(self.labels.labels),
            layers,
            options.resolved_combination(),
            lstm_units=options.lstm_units,
            head_initializer=initializer,
        )

    def train_dataset(self, batch_size, seed, input_context):
        return ner_records.build_dataset(
            os.path.join(self.settings.output_dir, TRAIN_RECORD),
            self.train_metadata,
            batch_size,
            True,
            seed,
            input_context,
            **self.settings.training_input_options(self.objective),
        )

    def evaluate(self, trainer, output_dir: str, global_step: int) -> dict:
        """Tags the eval file, writes its predictions, and scores that file as conlleval.

        Writes eval_predictions.txt, eval_report.txt (the conlleval report) and
        eval_results.txt (`conlleval.eval_results` keys, eval_loss, global_step).
        """
        split, batch_size = self.splits["eval"], self.settings.eval_batch_size
        pad = self.settings.pads_inference
        # One pass: the tags and, from the same logits, the loss.
        tags, in_graph = evaluate_tags(
            trainer, split, self.labels, batch_size, pad, self._evaluation_outputs
        )
        path = write_predictions(split, tags, output_dir)
        counts = conlleval.evaluate_file(path)
        report = counts.report()
        file_io.write_text(os.path.join(output_dir, EVAL_REPORT), report)
        extra = {"eval_loss": in_graph["eval_loss"], "global_step": global_step}
        conlleval.write_eval_results(os.path.join(output_dir, file_io.EVAL_RESULTS), counts, extra)
        logging.info("conlleval on %s:\n%s", path, report)
        shown = {k: v for k, v in conlleval.eval_results(counts).items() if "_" not in k[5:]}
        trainer.progress.say(
            f"Evaluation at step {global_step}: "
            f"{format_fields(dict(shown, eval_loss=extra['eval_loss']))} "
            f"({os.path.join(output_dir, file_io.EVAL_RESULTS)})"
        )
        return {**conlleval.eval_results(counts), **extra}

    def score(self, metrics: dict) -> float:
        return metrics[model_kinds.TOKEN_CLASSIFIER.score]

    score_name = model_kinds.TOKEN_CLASSIFIER.score  # What `score` is (a search's report).

    def predict(self, trainer, output_dir: str, global_step: int) -> None:
        """Tags the predict file and writes test_predictions.txt (its gold tags beside)."""
        split = self.splits["predict"]
        path = write_predictions(
            split,
            predict_tags(
                trainer,
                split,
                self.labels,
                self.settings.predict_batch_size,
                self.settings.pads_inference,
                self._evaluation_outputs,  # The evaluation's compiled step.
            ),
            output_dir,
        )
        logging.info("conlleval on %s:\n%s", path, conlleval.evaluate_file(path).report())

    @property
    def export_labels(self) -> list[str]:
        return self.labels.labels

    def export_options(self) -> dict:
        """The export tags raw text as --do_predict does: `serving_default(text)` ->
        `words`, `tags` (the labels, in the scheme learnt), with this run's
        --doc_stride windows (serving/ner.py), and whether the model learnt from whole
        documents (its `document_context` variable: send it a document per text)."""
        return dict(
            doc_stride=self.doc_stride,
            tag_scheme=self.labels.scheme,
            document_context=self.document_context,
        )

    def model_info(self) -> dict:
        return {
            "labels": list(self.labels.labels),
            "label_scheme": self.labels.scheme,
            "max_seq_length": self.max_seq_length,
            "doc_stride": self.doc_stride,
            "bilstm_units": self.bilstm_units,
            "document_context": self.document_context,
        }


def feature_options() -> FeatureBasedOptions | None:
    if not FLAGS.feature_based:
        return None
    return FeatureBasedOptions(FLAGS.feature_layers, FLAGS.feature_combination, FLAGS.lstm_units)


def read_splits(
    files: model_files.ModelFiles, settings: finetuning.Settings, document_context: bool
) -> tuple[Labels, dict[str, Split], RecordMetadata | None]:
    """Every file the run needs, read and converted before any model is built; the
    training features written to output_dir. (labels, splits, training metadata)."""
    tokenizer = files.tokenizer()
    files_read = {}
    for name, explicit in (
        ("train", FLAGS.train_file),
        ("eval", FLAGS.eval_file),
        ("predict", FLAGS.predict_file),
    ):
        if getattr(settings, f"do_{name}"):
            path = input_file(name, explicit, FLAGS.data_dir)
            files_read[name] = (path, *read_split(name, path, FLAGS.tag_scheme))
    if settings.do_train:
        _, scheme, sentences = files_read["train"]
        labels = training_labels(sentences, scheme, FLAGS.train_tag_scheme)
        check_scheme_of_init_checkpoint(labels, settings, files.info)
    else:
        labels = labels_of_earlier_run(FLAGS.output_dir, settings.init_checkpoint, files.info)
    splits = {
        name: to_features(
            name,
            path,
            scheme,
            sentences,
            labels,
            tokenizer,
            FLAGS.max_seq_length,
            FLAGS.doc_stride,
            document_context,
            runner_settings.terminal(),
        )
        for name, (path, scheme, sentences) in files_read.items()
    }
    metadata = (
        write_training_features(
            splits["train"],
            labels,
            FLAGS.output_dir,
            tokenizer,
            FLAGS.max_seq_length,
            FLAGS.doc_stride,
        )
        if settings.do_train
        else None
    )
    return labels, splits, metadata


def main(_):
    runner_settings.check_finetuning_flags(FLAGS)
    grid = hparam_search.check(FLAGS)
    strategy = runner_settings.setup(FLAGS)
    settings = runner_settings.finetuning_settings(FLAGS)
    encoder, files = model_flags.build_encoder(FLAGS, strategy)
    document_context = document_context_setting(
        FLAGS.document_context,
        FLAGS["document_context"].present > 0,
        settings.do_train,
        FLAGS.output_dir,
        files.info,
    )
    # run_config.json records the setting used.
    settings = dataclasses.replace(
        settings, flag_values=dict(settings.flag_values, document_context=document_context)
    )
    labels, splits, train_metadata = read_splits(files, settings, document_context)
    task = NerTask(
        labels,
        splits,
        train_metadata,
        feature_options(),
        FLAGS.max_seq_length,
        FLAGS.doc_stride,
        settings,
        model_flags.bilstm_units(FLAGS, files, model_kinds.TOKEN_CLASSIFIER),
        document_context,
    )
    hparam_search.run(FLAGS, grid, task, settings, strategy, encoder, files)


def cli():
    flags.mark_flags_as_required(["output_dir"])
    command_line.run(main)


if __name__ == "__main__":
    cli()
