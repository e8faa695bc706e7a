"""Fine-tuning and prediction on SQuAD v1.1 and v2.0, scored by the official rules.

  python run_squad.py --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \
      --bert_config_file=uncased_L-12_H-768_A-12/bert_config.json \
      --vocab_file=uncased_L-12_H-768_A-12/vocab.txt \
      --do_train --train_file=train-v2.0.json \
      --do_predict --predict_file=dev-v2.0.json --do_eval \
      --version_2_with_negative --max_seq_length=384 --doc_stride=128 \
      --train_batch_size=32 --learning_rate=3e-5 --num_train_epochs=2 \
      --output_dir=out/squad2

A Hugging Face directory as --init_checkpoint brings its config.json and vocab.txt.

Training: the questions are read (a training answer whose text cannot be found at
its offset is skipped and counted, as in the original), shuffled, cut into windows
of the context and written to output_dir/train.tf_record (with a metadata JSON; a
rerun with the same inputs and settings reuses it). The number of training steps
is features / batch size x epochs: a long context gives several windows, each a
training example. A run restarted with the same output_dir resumes where it stopped.

Prediction writes the original release's predictions.json, nbest_predictions.json
and (v2.0) null_odds.json. --do_eval scores predictions.json (and null_odds.json)
against --predict_file as the official evaluate-v1.1.py / evaluate-v2.0.py (with
--na-prob-file null_odds.json) do and writes eval_results.txt; on its own (without
--do_predict) it scores the prediction files already in output_dir.
With --do_train --do_eval the model is scored at the end of every epoch and the best
one (by F1) is kept in output_dir/best/: the final predictions come from it. For v2.0,
rerun --do_predict (--do_train=False, the same output_dir) with
--null_score_diff_threshold=<best_f1_thresh> to predict with the best threshold, as
the original README advises.

--export_dir exports the fine-tuned model as a SavedModel that answers raw questions
on raw contexts with the answers --do_predict gives (serving/squad.py).

A left-to-right model (run_pretraining.py --objective=ltr) is fine-tuned with its
left-only attention; --bilstm_units adds a randomly initialised BiLSTM between the
encoder and the span head (the paper's Table 5 "+ BiLSTM").
"""

from __future__ import annotations

import common.quiet_tensorflow  # noqa: F401  (first: TensorFlow's start-up lines hidden)

import dataclasses
import os

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags

from common import cli as command_line
from common.errors import MissingFileError, UserError
from common.progress import format_fields
import hparam_search
import model_flags
import runner_flags
import runner_settings
from common import file_io
from data_prep import input_pipeline
from data_prep.squad import squad_features, squad_postprocess, squad_reader
from data_prep.squad import squad_records
from evaluation import squad_eval
from modeling import finetuning, model_files, model_kinds, training
from modeling.config import BertConfig
from modeling.models import BertSpanLabeler
from modeling.objectives import SpanObjective

FLAGS = flags.FLAGS

runner_flags.define_input_file_flags(
    {
        "train_file": "SQuAD JSON for training, e.g. train-v1.1.json.",
        "predict_file": "SQuAD JSON to predict (and, with --do_eval, the gold answers), "
        "e.g. dev-v1.1.json.",
    }
)
flags.DEFINE_bool("version_2_with_negative", False, "SQuAD 2.0: questions may have no answer.")
# Defaults of the flags a raw-text export keeps (`model_kinds.SPAN.export_options`).
_EXPORT_DEFAULTS = model_kinds.SPAN.export_options
runner_flags.define_doc_stride_flag(
    _EXPORT_DEFAULTS["doc_stride"],
    "Word pieces between the starts of consecutive windows of a long context.",
)
flags.DEFINE_integer(
    "max_query_length",
    _EXPORT_DEFAULTS["max_query_length"],
    "Questions are cut to this many word pieces.",
)
flags.DEFINE_integer(
    "n_best_size",
    _EXPORT_DEFAULTS["n_best_size"],
    "Start and end positions considered per window, "
    "and answers kept per question in nbest_predictions.json.",
)
flags.DEFINE_integer(
    "max_answer_length", _EXPORT_DEFAULTS["max_answer_length"], "Longest answer, in word pieces."
)
flags.DEFINE_float(
    "null_score_diff_threshold",
    0.0,
    "v2.0: predict no answer when the null score exceeds the best span's score by more than this.",
)
runner_flags.define_common_flags(max_seq_length=384)
runner_flags.define_training_flags(value_lists=True)
runner_flags.define_finetuning_flags()
runner_flags.define_bilstm_flag()

TRAIN_RECORD = "train.tf_record"
PREDICT_RECORD = "eval.tf_record"
PREDICTIONS = "predictions.json"
NBEST_PREDICTIONS = "nbest_predictions.json"
NULL_ODDS = "null_odds.json"


def _span_outputs(features: dict, outputs: dict) -> dict:
    """Trainer.predict output_fn: unique_ids int [B], start/end_logits float32 [B, S]."""
    return {
        "unique_ids": features["unique_ids"],
        "start_logits": tf.cast(outputs["start_logits"], tf.float32),
        "end_logits": tf.cast(outputs["end_logits"], tf.float32),
    }


def predict_logits(
    trainer: training.Trainer,
    data: squad_records.PredictData,
    batch_size: int,
    pad_to_max_seq_length: bool,
) -> list[squad_postprocess.RawResult]:
    """The model's start and end logits of every feature, [S] each.

    Positions past a batch's cut (padding of every window in it) get the lowest
    float32, so they never rank among the n best (`docs/padding.md`).
    """
    dataset = squad_records.build_dataset(
        data.file,
        data.metadata,
        batch_size,
        is_training=False,
        pad_to_max_seq_length=pad_to_max_seq_length,
    )
    outputs = trainer.predict(dataset, _span_outputs)
    lowest = np.finfo(np.float32).min
    for name in ("start_logits", "end_logits"):
        if name in outputs:
            outputs[name] = input_pipeline.pad_to_length(
                outputs[name], data.metadata.max_seq_length, value=lowest
            )
    if len(outputs.get("unique_ids", [])) != len(data.features):
        raise RuntimeError(
            f"predicted {len(outputs.get('unique_ids', []))} of "
            f"{len(data.features)} features of {data.file}"
        )
    return [
        squad_postprocess.RawResult(int(uid), start, end)
        for uid, start, end in zip(
            outputs["unique_ids"], outputs["start_logits"], outputs["end_logits"]
        )
    ]


def evaluate(gold_file: str, output_dir: str, version_2_with_negative: bool) -> dict:
    """Scores output_dir's predictions.json (+ null_odds.json) by the official rules.

    As `evaluate-v1.1.py` (exact_match, f1) or `evaluate-v2.0.py --na-prob-file
    null_odds.json` (exact, f1, HasAns_*, NoAns_*, best_exact, best_f1 and their
    thresholds); written to output_dir/eval_results.txt.
    """
    predictions = squad_eval.read_predictions(os.path.join(output_dir, PREDICTIONS))
    null_odds = None
    null_odds_file = os.path.join(output_dir, NULL_ODDS)
    if version_2_with_negative and os.path.isfile(null_odds_file):
        null_odds = squad_eval.read_null_odds(null_odds_file)
    results = squad_eval.evaluate_file(gold_file, predictions, null_odds, version_2_with_negative)
    path = os.path.join(output_dir, file_io.EVAL_RESULTS)
    file_io.write_results(path, results)
    shown = {k: v for k, v in results.items() if not k.endswith("_thresh")}
    runner_settings.terminal().say(f"Evaluation: {format_fields(shown)} ({path})")
    return results


def check_gold_file(gold_file: str, version_2_with_negative: bool) -> None:
    """Fails early (not after training) if the gold file cannot be scored as asked."""
    dataset = squad_reader.read_squad_json(gold_file)
    if not version_2_with_negative and squad_eval.is_version_2(dataset):
        raise UserError(
            f"{gold_file} is SQuAD 2.0 (it has unanswerable questions or "
            f"says version 2): set --version_2_with_negative"
        )


@dataclasses.dataclass(frozen=True)
class SquadOptions:
    """The SQuAD settings of a run, from its flags (same names)."""

    predict_file: str | None
    version_2_with_negative: bool
    max_seq_length: int
    doc_stride: int
    max_query_length: int
    n_best_size: int
    max_answer_length: int
    null_score_diff_threshold: float

    @classmethod
    def from_flags(cls, flag_values) -> SquadOptions:
        """The options of parsed flags (absl `FlagValues`)."""
        return cls(
            **{field.name: getattr(flag_values, field.name) for field in dataclasses.fields(cls)}
        )


class SquadTask:
    """run_squad's part of a fine-tuning run (`finetuning.FineTuningTask`).

    `evaluate` is `predict` followed by scoring the files it wrote. The weights of one
    global step are predicted once per run: `predict` after `evaluate` at the same step
    (`finetuning.run` with --do_eval --do_predict; the evaluation may be the best
    epoch's, in its own folder) finds the files written and copies them if need be.
    """

    kind = model_kinds.SPAN
    model_kind = kind.name

    def __init__(
        self,
        train_data: squad_records.TrainData | None,
        predict_data: squad_records.PredictData | None,
        options: SquadOptions,
        settings: finetuning.Settings,
        do_lower_case: bool,
        bilstm_units: int = 0,
    ):
        self.train_data, self.predict_data = train_data, predict_data
        self.options, self.settings, self.do_lower_case = options, settings, do_lower_case
        self.bilstm_units = bilstm_units
        self.objective = SpanObjective()
        self.num_train_examples = train_data.num_features if train_data else 0
        # global_step -> the folder its prediction files were written to last.
        self._written: dict[int, str] = {}

    def build_model(self, encoder, config: BertConfig) -> keras.Model:
        return BertSpanLabeler(
            encoder,
            config,
            head_initializer=self.settings.head_initializer,
            bilstm_units=self.bilstm_units,
        )

    def train_dataset(self, batch_size, seed, input_context):
        data = self.train_data
        return squad_records.build_dataset(
            data.file,
            data.metadata,
            batch_size,
            True,
            seed,
            input_context,
            **self.settings.training_input_options(self.objective),
        )

    def predict(self, trainer, output_dir: str, global_step: int) -> None:
        """predictions.json, nbest_predictions.json and, for v2.0, null_odds.json; says
        where."""
        count = self._write_predictions(trainer, output_dir, global_step)
        path = os.path.join(output_dir, PREDICTIONS)
        trainer.progress.say(f"Wrote the answers to {count} questions to {path}")

    def _prediction_files(self) -> list[str]:
        names = [PREDICTIONS, NBEST_PREDICTIONS]
        return names + [NULL_ODDS] if self.options.version_2_with_negative else names

    def _write_predictions(self, trainer, output_dir: str, global_step: int) -> int:
        """`predict`'s files, unless written from these very weights already (by
        `evaluate`, in this folder or in an epoch's evaluation folder, whence they are
        copied); returns the number of questions answered."""
        options = self.options
        output_dir = os.path.abspath(output_dir)
        written = self._written.get(global_step)
        names = self._prediction_files()
        if written is not None and all(
            tf.io.gfile.exists(os.path.join(written, name)) for name in names
        ):
            if written != output_dir:
                for name in names:
                    file_io.copy_file(os.path.join(written, name), os.path.join(output_dir, name))
            return len(self.predict_data.examples)
        results = predict_logits(
            trainer,
            self.predict_data,
            self.settings.predict_batch_size,
            self.settings.pads_inference,
        )
        predictions = squad_postprocess.compute_predictions(
            self.predict_data.examples,
            self.predict_data.features,
            results,
            n_best_size=options.n_best_size,
            max_answer_length=options.max_answer_length,
            do_lower_case=self.do_lower_case,
            version_2_with_negative=options.version_2_with_negative,
            null_score_diff_threshold=options.null_score_diff_threshold,
        )
        squad_postprocess.write_predictions(
            predictions,
            os.path.join(output_dir, PREDICTIONS),
            os.path.join(output_dir, NBEST_PREDICTIONS),
            os.path.join(output_dir, NULL_ODDS) if options.version_2_with_negative else None,
        )
        self._written[global_step] = output_dir
        return len(predictions.predictions)

    def evaluate(self, trainer, output_dir: str, global_step: int) -> dict:
        """Predicts --predict_file into output_dir and scores it by the official rules."""
        options = self.options
        self._write_predictions(trainer, output_dir, global_step)
        return dict(
            evaluate(options.predict_file, output_dir, options.version_2_with_negative),
            global_step=global_step,
        )

    def score(self, metrics: dict) -> float:
        return metrics[model_kinds.SPAN.score]

    score_name = model_kinds.SPAN.score  # What `score` is (a search's report).

    export_labels = None

    @property
    def max_seq_length(self) -> int:
        return self.options.max_seq_length

    def export_options(self) -> dict:
        """The export answers raw questions on raw contexts as --do_predict does.

        `serving_default(question, context)` -> answer, score, null_score, start_logits,
        end_logits (serving/squad.py), with this run's --max_query_length, --doc_stride,
        --max_answer_length and --n_best_size. For v2.0, the answer is "" where
        null_score - score > --null_score_diff_threshold.
        """
        options = self.options
        return dict(
            max_query_length=options.max_query_length,
            max_answer_length=options.max_answer_length,
            n_best_size=options.n_best_size,
            doc_stride=options.doc_stride,
        )

    def model_info(self) -> dict:
        options = self.options
        return {
            "labels": None,
            "max_seq_length": options.max_seq_length,
            "doc_stride": options.doc_stride,
            "max_query_length": options.max_query_length,
            "version_2_with_negative": options.version_2_with_negative,
            "bilstm_units": self.bilstm_units,
        }


def _require_file(path: str | None, flag: str, needed_by: str) -> None:
    if not path:
        raise app.UsageError(f"{needed_by} needs --{flag}.")
    if not tf.io.gfile.exists(path):
        raise MissingFileError(f"--{flag}={path} does not exist")


def check_flags() -> None:
    """Everything that can be checked before reading data or building a model."""
    runner_settings.check_finetuning_flags(FLAGS)
    if FLAGS.do_train:
        _require_file(FLAGS.train_file, "train_file", "--do_train")
    if FLAGS.do_predict or FLAGS.do_eval:
        _require_file(FLAGS.predict_file, "predict_file", "--do_predict / --do_eval")
    if FLAGS.do_eval and not (FLAGS.do_predict or FLAGS.do_train):
        predictions = os.path.join(FLAGS.output_dir, PREDICTIONS)
        if not os.path.isfile(predictions):
            raise MissingFileError(
                f"--do_eval without --do_predict scores {predictions}, which does not exist"
            )
    squad_features.check_lengths(FLAGS.max_seq_length, FLAGS.doc_stride, FLAGS.max_query_length)
    if FLAGS.do_eval:
        check_gold_file(FLAGS.predict_file, FLAGS.version_2_with_negative)


def build_features(files: model_files.ModelFiles, settings: finetuning.Settings):
    """The training and prediction features; both files are read before any model is
    built, so bad input fails early."""
    tokenizer = files.tokenizer()
    feature_settings = squad_records.FeatureSettings(
        FLAGS.max_seq_length,
        FLAGS.doc_stride,
        FLAGS.max_query_length,
        files.do_lower_case,
        FLAGS.version_2_with_negative,
        files.preserve_unused_tokens,
    )
    predict_data = (
        squad_records.build_predict_features(
            FLAGS.predict_file,
            os.path.join(FLAGS.output_dir, PREDICT_RECORD),
            tokenizer,
            feature_settings,
            runner_settings.terminal(),
        )
        if settings.do_predict or settings.do_eval
        else None
    )
    train_data = (
        squad_records.build_train_features(
            FLAGS.train_file,
            os.path.join(FLAGS.output_dir, TRAIN_RECORD),
            tokenizer,
            feature_settings,
            settings.seed,
            runner_settings.terminal(),
        )
        if settings.do_train
        else None
    )
    return train_data, predict_data


def main(_):
    check_flags()
    grid = hparam_search.check(FLAGS)
    strategy = runner_settings.setup(FLAGS)
    if FLAGS.do_eval and not (FLAGS.do_predict or FLAGS.do_train):
        evaluate(FLAGS.predict_file, FLAGS.output_dir, FLAGS.version_2_with_negative)
        return  # Scores the predictions already in output_dir; no model needed.
    settings = runner_settings.finetuning_settings(FLAGS)
    encoder, files = model_flags.build_encoder(FLAGS, strategy)
    train_data, predict_data = build_features(files, settings)
    task = SquadTask(
        train_data,
        predict_data,
        SquadOptions.from_flags(FLAGS),
        settings,
        files.do_lower_case,
        model_flags.bilstm_units(FLAGS, files, model_kinds.SPAN),
    )
    hparam_search.run(FLAGS, grid, task, settings, strategy, encoder, files)


def cli():
    flags.mark_flags_as_required(["output_dir"])
    command_line.run(main)


if __name__ == "__main__":
    cli()
