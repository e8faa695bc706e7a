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
import sys

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402

from data_prep import pretraining_data, records  # noqa: E402
from modeling import checkpoints  # noqa: E402
from modeling.config import BertConfig  # noqa: E402
from modeling.encoder import BertEncoder  # noqa: E402
from modeling.models import BertPretrainer  # noqa: E402
from modeling.tasks import PretrainingTask  # noqa: E402
import runner_flags  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("input_file", None, "Comma-separated globs of TFRecord shards.")
flags.DEFINE_string("eval_input_file", None, "Shards for --do_eval (default: --input_file, "
                    "as the original).")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per sequence; must "
                     "match the shards.")
flags.DEFINE_bool("do_train", False, "Run training.")
flags.DEFINE_bool("do_eval", False, "Run evaluation.")
flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.")
flags.DEFINE_integer("eval_batch_size", 8, "Global evaluation batch size.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
flags.DEFINE_integer("num_train_steps", 100000, "Training steps.")
flags.DEFINE_integer("num_warmup_steps", 10000, "Linear warmup steps.")
flags.DEFINE_integer("max_eval_steps", 100, "Maximum evaluation batches.")
flags.DEFINE_bool("use_next_sentence_loss", True, "Train the next-sentence head (False is "
                  "the paper's No-NSP ablation).")
runner_flags.define_common_flags(max_seq_length=128)
runner_flags.define_training_flags()


def build_model(config: BertConfig, dtype: str) -> BertPretrainer:
    encoder = BertEncoder(config, dtype=dtype)
    return BertPretrainer(encoder, config)


def make_dataset_fn(files, batch_size, is_training, seed):
    def dataset_fn(context=None):
        per_replica = (context.get_per_replica_batch_size(batch_size) if context
                       else batch_size)
        return pretraining_data.pretraining_dataset(
            files, per_replica, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq,
            is_training=is_training, input_context=context, seed=seed)
    return dataset_fn


def main(_):
    if not FLAGS.do_train and not FLAGS.do_eval:
        raise app.UsageError("At least one of --do_train or --do_eval must be set.")
    strategy = runner_flags.setup(FLAGS)
    config = BertConfig.from_json_file(FLAGS.bert_config_file) if FLAGS.bert_config_file \
        else checkpoints.resolve_config_and_vocab(None, None, FLAGS.init_checkpoint)[0]
    runner_flags.check_max_seq_length(FLAGS.max_seq_length, config)
    files = pretraining_data.expand_input_files(FLAGS.input_file)
    pretraining_data.check_shard_shapes(files, FLAGS.max_seq_length,
                                        FLAGS.max_predictions_per_seq)
    with strategy.scope():
        model = build_model(config, FLAGS.dtype)
    trainer = runner_flags.make_trainer(FLAGS, strategy, model, PretrainingTask(
        FLAGS.use_next_sentence_loss), FLAGS.learning_rate, FLAGS.num_train_steps,
        FLAGS.num_warmup_steps)
    runner_flags.write_resolved_config(FLAGS, config, extra={"input_files": files})

    def initialize():
        if FLAGS.init_checkpoint:  # The encoder, and the heads when the checkpoint has them.
            checkpoints.restore_model(FLAGS.init_checkpoint, model)

    trainer.restore_or_initialize(initialize)
    if FLAGS.do_train:
        trainer.train(make_dataset_fn(files, FLAGS.train_batch_size, True, FLAGS.seed),
                      FLAGS.train_batch_size)
    if FLAGS.do_eval:
        eval_files = (pretraining_data.expand_input_files(FLAGS.eval_input_file)
                      if FLAGS.eval_input_file else files)
        dataset = make_dataset_fn(eval_files, FLAGS.eval_batch_size, False, FLAGS.seed)()
        results = trainer.evaluate(dataset, max_steps=FLAGS.max_eval_steps)
        output = os.path.join(FLAGS.output_dir, "eval_results.txt")
        records.write_results(output, results)
        logging.info("Eval results (%s): %s", output, results)


if __name__ == "__main__":
    flags.mark_flags_as_required(["input_file", "output_dir"])
    app.run(main)
