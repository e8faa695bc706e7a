"""Masked-LM and next-sentence pre-training from create_pretraining_data shards.

  python run_pretraining.py --input_file='shards/*.tfrecord' --output_dir=out \
      --bert_config_file=bert_config.json --do_train --do_eval \
      --train_batch_size=32 --max_seq_length=128 --max_predictions_per_seq=20 \
      --num_train_steps=10000 --num_warmup_steps=1000 --learning_rate=1e-4

Phase 2 (sequence length 512) starts from a phase-1 checkpoint with
--init_checkpoint=phase1_dir --max_seq_length=512 and shards made at 512.
"""

from __future__ import annotations

import os

from absl import app, flags, logging

import runner_flags
from data_prep import damage, pretraining_data, records
from modeling import checkpoint_readers, checkpoints, model_files, training
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.models import BertPretrainer
from modeling.tasks import PretrainingTask

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
runner_flags.define_common_flags(max_seq_length=128)
runner_flags.define_training_flags()

EVAL_RESULTS = "eval_results.txt"


def build_model(config: BertConfig, dtype: str, kernels: str = "auto") -> BertPretrainer:
    encoder = BertEncoder(config, dtype=dtype, kernels=kernels)
    return BertPretrainer(encoder, config)


def make_dataset_fn(files, batch_size, is_training, seed):
    def dataset_fn(context=None):
        per_replica = context.get_per_replica_batch_size(batch_size) if context else batch_size
        return pretraining_data.pretraining_dataset(
            files,
            per_replica,
            FLAGS.max_seq_length,
            FLAGS.max_predictions_per_seq,
            is_training=is_training,
            input_context=context,
            seed=seed,
        )

    return dataset_fn


def resolve_model_files() -> model_files.ModelFiles:
    """The config (flag or beside --init_checkpoint) and, when known, the vocabulary
    the shards were made with: the output_dir then carries both."""
    runner_flags.check_init_checkpoint(FLAGS)
    config = model_files.resolve_config(FLAGS.bert_config_file, FLAGS.init_checkpoint)
    runner_flags.check_max_seq_length(FLAGS.max_seq_length, config)
    vocab_file = FLAGS.vocab_file or checkpoint_readers.find_side_file(
        model_files.side_dirs(FLAGS.init_checkpoint), model_files.VOCAB_FILE
    )
    do_lower_case = runner_flags.do_lower_case_flag(FLAGS)
    if vocab_file:
        model_files.check_vocab_fits_config(vocab_file, config)
        do_lower_case = model_files.resolve_case(do_lower_case, FLAGS.init_checkpoint, vocab_file)
    return model_files.ModelFiles(
        config, vocab_file, bool(FLAGS.do_lower_case if do_lower_case is None else do_lower_case)
    )


def check_shards(shards: list[str], files: model_files.ModelFiles) -> int:
    """The shards against the run, before any work (`pretraining_data.check_shards`:
    framing, metadata, or every record of a shard without metadata); their records."""
    return pretraining_data.check_shards(
        shards,
        FLAGS.max_seq_length,
        FLAGS.max_predictions_per_seq,
        files.config.vocab_size,
        files.do_lower_case if files.vocab_file else None,
    )


def evaluate(trainer: training.Trainer, files: list[str]) -> dict:
    dataset = make_dataset_fn(files, FLAGS.eval_batch_size, False, FLAGS.seed)()
    results = trainer.evaluate(dataset, max_steps=FLAGS.max_eval_steps)
    output = os.path.join(FLAGS.output_dir, EVAL_RESULTS)
    records.write_results(output, results)
    logging.info("Eval results (%s): %s", output, results)
    return results


def input_shards() -> tuple[list[str], list[str]]:
    """(training shards, evaluation shards): --input_file's, and --eval_input_file's
    (default: the same)."""
    shards = pretraining_data.expand_input_files(FLAGS.input_file)
    if not FLAGS.eval_input_file:
        return shards, shards
    return shards, pretraining_data.expand_input_files(FLAGS.eval_input_file, "--eval_input_file")


def build_trainer(strategy, model) -> training.Trainer:
    """The Trainer of the masked-LM (and next-sentence) losses, with the flags' schedule."""
    return training.Trainer(
        strategy,
        model,
        PretrainingTask(FLAGS.use_next_sentence_loss),
        FLAGS.output_dir,
        learning_rate=FLAGS.learning_rate,
        num_train_steps=FLAGS.num_train_steps,
        num_warmup_steps=FLAGS.num_warmup_steps,
        **runner_flags.trainer_options(FLAGS),
    )


def main(_):
    if not FLAGS.do_train and not FLAGS.do_eval:
        raise app.UsageError("At least one of --do_train or --do_eval must be set.")
    strategy = runner_flags.setup(FLAGS)
    files = resolve_model_files()
    shards, eval_shards = input_shards()
    num_records = check_shards(shards, files)
    if set(eval_shards) - set(shards):
        check_shards([path for path in eval_shards if path not in shards], files)
    if FLAGS.do_train:
        records.warn_if_batch_exceeds_data(
            num_records, FLAGS.train_batch_size, "--train_batch_size"
        )
    with strategy.scope():
        model = build_model(files.config, FLAGS.dtype, FLAGS.kernels)
    trainer = build_trainer(strategy, model)
    model_files.write_model_files(FLAGS.output_dir, files, BertPretrainer.MODEL_KIND)
    records.write_json(
        os.path.join(FLAGS.output_dir, "run_config.json"),
        dict(runner_flags.flag_values(FLAGS), input_files=shards),
    )

    def initialize():
        if FLAGS.init_checkpoint:  # The encoder, and the heads when the checkpoint has them.
            checkpoints.restore_model(FLAGS.init_checkpoint, model)

    trainer.restore_or_initialize(initialize)
    if FLAGS.do_train:
        with damage.naming_damaged_records(shards):
            trainer.train(
                make_dataset_fn(shards, FLAGS.train_batch_size, True, FLAGS.seed),
                FLAGS.train_batch_size,
            )
    if FLAGS.do_eval:
        with damage.naming_damaged_records(eval_shards):
            evaluate(trainer, eval_shards)


def cli():
    flags.mark_flags_as_required(["input_file", "output_dir"])
    app.run(main)


if __name__ == "__main__":
    cli()
