"""Pre-training step by step: run_pretraining.py against Hugging Face transformers'
`BertForPreTraining` trained in PyTorch, from the same weights on the same batches.

  python -m benchmarks.compare.pretraining_vs_hf [--steps=50] [--output_dir=runs/pretraining_vs_hf]

1. Shards: `sample_data/corpus/bert_paper_v1.txt` through this project's
   create_pretraining_data (the bundled uncased vocabulary, sequence 32, 5 masked
   positions, dupe factor 1).
2. Weights: transformers builds `BertForPreTraining` (2 layers, hidden 32, 4 heads,
   intermediate 37, "gelu_new": the original's tanh gelu, no dropout) from a seed and
   saves it (config.json + model.safetensors, heads included); ours reads that folder.
3. Ours: `run_pretraining.py --init_checkpoint=<that folder>` for `--steps` steps of 8
   sequences (learning rate 1e-3, warmup 10% of the steps, the original's linear decay
   to 0), one step per loop so that its TensorBoard `loss` is each step's loss.
4. PyTorch: the batches run_pretraining.py consumed (our input pipeline with its seed,
   each row checked to be a record of the shard), turned into transformers' inputs
   (`labels` -100 except at the masked positions with weight 1; `next_sentence_label`
   as in the records: 1 = the second segment is random, transformers' convention too),
   `torch.optim.AdamW` (betas 0.9 / 0.999, epsilon 1e-6, weight decay 0.01 on every
   parameter whose name has neither "bias" nor "LayerNorm"), the original's schedule
   through `LambdaLR`, `clip_grad_norm_(1.0)`; eager attention. Once in float32 and once
   in float64: the float64 run shows how far float32 rounding alone moves the losses.

Prints the losses side by side, the largest relative difference, and the largest
weight difference after the last step (ours from its checkpoint, in Hugging Face names).
"""

from __future__ import annotations

import common.quiet_tensorflow  # noqa: F401  (first: TensorFlow's start-up lines hidden)

import argparse
import glob
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf
import torch
import transformers
from tensorflow.core.util import event_pb2

from data_prep.pretraining import pretraining_data
from data_prep.pretraining import pretraining_instances as pti
from data_prep.pretraining import pretraining_records as ptr
from modeling import checkpoint_writers, checkpoints
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.models import BertPretrainer

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
SAMPLE_DATA = REPO_ROOT / "sample_data"
VOCAB = str(SAMPLE_DATA / "vocab" / "uncased_vocab.txt")
CORPUS = str(SAMPLE_DATA / "corpus" / "bert_paper_v1.txt")
SEQ, PREDS, BATCH, LEARNING_RATE, SEED = 32, 5, 8, 1e-3, 12345
MODEL = dict(
    vocab_size=30522,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    max_position_embeddings=64,
    type_vocab_size=2,
    initializer_range=0.02,
)


def make_shard(directory: str) -> str:
    path = os.path.join(directory, "shard.tfrecord")
    ptr.run(
        ptr.RunOptions(
            input_files=(CORPUS,),
            output_files=(path,),
            vocab_file=VOCAB,
            dupe_factor=1,
            random_seed=SEED,
            instance=pti.InstanceOptions(max_seq_length=SEQ),
            masking=pti.MaskingOptions(max_predictions_per_seq=PREDS),
        )
    )
    return path


def write_hf_model(directory: str, seed: int = 0) -> str:
    """A `BertForPreTraining` folder drawn by transformers from `seed`."""
    config = transformers.BertConfig(hidden_act="gelu_new", layer_norm_eps=1e-12, **MODEL)
    torch.manual_seed(seed)
    model = transformers.BertForPreTraining(config)
    path = os.path.join(directory, "hf_init")
    model.save_pretrained(path)
    return path


def original_rate(step: int, num_train_steps: int, num_warmup_steps: int) -> float:
    """The original release's learning rate at 0-based `step`, as a multiple of the
    peak: linear warmup from 0, then 1 - step / num_train_steps."""
    if num_warmup_steps and step < num_warmup_steps:
        return step / num_warmup_steps
    return 1.0 - min(step, num_train_steps) / num_train_steps


def our_args(shard, hf_dir, output_dir, steps, warmup, *extra) -> list[str]:
    return [
        f"--input_file={shard}",
        f"--init_checkpoint={hf_dir}",
        f"--output_dir={output_dir}",
        f"--max_seq_length={SEQ}",
        f"--max_predictions_per_seq={PREDS}",
        f"--train_batch_size={BATCH}",
        f"--num_train_steps={steps}",
        f"--num_warmup_steps={warmup}",
        f"--learning_rate={LEARNING_RATE}",
        "--steps_per_loop=1",
        f"--save_checkpoints_steps={steps}",
        f"--seed={SEED}",
        "--do_train",
        *extra,
    ]


def run_ours(argv: list[str]) -> float:
    """run_pretraining.py in a subprocess; returns its wall time in seconds."""
    start = time.time()
    subprocess.run(
        [sys.executable, str(REPO_ROOT / "run_pretraining.py"), *argv],
        check=True,
        cwd=REPO_ROOT,
    )
    return time.time() - start


def our_losses(output_dir: str) -> list[float]:
    """Each step's training loss from the run's TensorBoard summaries (one step per
    loop: the loop's mean loss is the step's)."""
    losses = {}
    for path in glob.glob(os.path.join(output_dir, "train", "events.out.tfevents.*")):
        for raw in tf.data.TFRecordDataset(path):
            event = event_pb2.Event.FromString(raw.numpy())
            for value in event.summary.value:
                if value.tag == "loss":
                    losses[event.step] = float(tf.make_ndarray(value.tensor))
    return [losses[step] for step in sorted(losses)]


def our_weights(checkpoint: str) -> dict:
    """{Hugging Face name: array} of our model restored from `checkpoint`."""
    config = BertConfig(hidden_act="gelu", **MODEL)
    model = BertPretrainer(BertEncoder(config), config)
    checkpoints.restore_model(checkpoint, model)
    return {k: v.astype(np.float64) for k, v in checkpoint_writers.hf_tensors(model).items()}


def runner_batches(shard: str, seq: int, preds: int, batch_size: int, seed: int, count: int):
    """The first `count` batches run_pretraining.py's training input gives on one
    replica with --seed=`seed` (the runner sets it as the global seed too, which the
    shuffles combine with their own), as NumPy arrays."""
    keras.utils.set_random_seed(seed)
    metadata = pretraining_data.shards_metadata([shard], seq, preds)
    dataset = pretraining_data.pretraining_dataset(
        [shard],
        metadata,
        batch_size,
        is_training=True,
        seed=seed,
        input_context=tf.distribute.InputContext(),
    )
    return [{k: v.numpy() for k, v in b.items()} for b in dataset.take(count)]


def training_batches(shard: str, count: int) -> list[dict]:
    """The first `count` batches of this benchmark's run, each row checked to be a
    record of the shard as read here."""
    batches = runner_batches(shard, SEQ, PREDS, BATCH, SEED, count)
    records = set()
    for raw in tf.data.TFRecordDataset(shard):
        feature = tf.train.Example.FromString(raw.numpy()).features.feature
        records.add(
            tuple(
                tuple(feature[name].int64_list.value)
                for name in ("input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids")
            )
            + (tuple(feature["next_sentence_labels"].int64_list.value),)
        )
    for batch in batches:
        for i in range(BATCH):
            # Batches are cut to their longest sequence; records are written padded.
            row = tuple(
                tuple(int(x) for x in batch[name][i])
                + ((0,) * (SEQ - batch[name].shape[1]) if name.startswith("input_") else ())
                for name in (
                    "input_word_ids",
                    "input_type_ids",
                    "masked_lm_positions",
                    "masked_lm_ids",
                    "next_sentence_labels",
                )
            )
            assert row in records, "a batch row that is no record of the shard"
    return batches


def torch_inputs(batch: dict) -> dict:
    """A batch of our records as `BertForPreTraining`'s inputs: the masked-LM labels at
    the positions with weight 1 (the rest -100, ignored: transformers' mean over the
    labelled positions is ours over masked_lm_weights)."""
    labels = np.full(batch["input_word_ids"].shape, -100, np.int64)
    for row, (positions, ids, weights) in enumerate(
        zip(batch["masked_lm_positions"], batch["masked_lm_ids"], batch["masked_lm_weights"])
    ):
        real = weights > 0
        assert len(set(positions[real])) == int(real.sum()), "a position masked twice"
        labels[row, positions[real]] = ids[real]

    def long(name):
        return torch.tensor(batch[name], dtype=torch.long)

    return dict(
        input_ids=long("input_word_ids"),
        attention_mask=long("input_mask"),
        token_type_ids=long("input_type_ids"),
        labels=torch.tensor(labels),
        next_sentence_label=long("next_sentence_labels").reshape(-1),
    )


def no_decay(name: str) -> bool:
    return "bias" in name or "LayerNorm" in name


def train_hf(hf_dir, batches, num_train_steps, num_warmup_steps, dtype=torch.float32, update=None):
    """transformers' BertForPreTraining trained on `batches` in PyTorch. Returns (the
    loss of each step, {name: final weights}).

    `update`: None for torch.optim.AdamW with clip_grad_norm_(1.0) and the original's
    schedule, or a function (named parameters with their unclipped .grad, step) that
    updates them itself."""
    model = transformers.BertForPreTraining.from_pretrained(hf_dir, attn_implementation="eager")
    model = model.to(dtype)
    model.train()
    named = list(model.named_parameters())  # each tied parameter once
    assert all(no_decay(n) == (p.dim() == 1) for n, p in named)
    optimizer = schedule = None
    if update is None:
        optimizer = torch.optim.AdamW(
            [
                {"params": [p for n, p in named if not no_decay(n)], "weight_decay": 0.01},
                {"params": [p for n, p in named if no_decay(n)], "weight_decay": 0.0},
            ],
            lr=LEARNING_RATE,
            betas=(0.9, 0.999),
            eps=1e-6,
        )
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: original_rate(step, num_train_steps, num_warmup_steps)
        )
    losses = []
    for step, batch in enumerate(batches):
        loss = model(**torch_inputs(batch)).loss
        losses.append(loss.item())
        loss.backward()
        if update is None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
        else:
            with torch.no_grad():
                update(named, step)
        model.zero_grad(set_to_none=True)
    return losses, {n: p.detach().to(torch.float64).numpy().copy() for n, p in named}


def largest_weight_difference(ours: dict, theirs: dict) -> tuple[float, str]:
    missing = sorted(set(theirs) - set(ours))
    assert not missing, f"our checkpoint lacks {missing}"
    return max((float(np.max(np.abs(ours[n] - theirs[n]))), n) for n in theirs)


def compare(output_dir: str, steps: int) -> dict:
    """Everything above; returns the figures the table prints."""
    os.makedirs(output_dir, exist_ok=True)
    warmup = max(1, steps // 10)
    shard = make_shard(output_dir)
    hf_dir = write_hf_model(output_dir)
    initial = largest_weight_difference(our_weights(hf_dir), train_hf(hf_dir, [], steps, warmup)[1])
    assert initial[0] == 0.0, f"not the same start: {initial}"
    run_dir = os.path.join(output_dir, "ours")
    wall = run_ours(our_args(shard, hf_dir, run_dir, steps, warmup))
    ours = our_losses(run_dir)
    batches = training_batches(shard, steps)
    start = time.time()
    hf32, weights32 = train_hf(hf_dir, batches, steps, warmup)
    hf_wall = time.time() - start
    hf64, weights64 = train_hf(hf_dir, batches, steps, warmup, torch.float64)
    our_final = our_weights(os.path.join(run_dir, f"ckpt-{steps}"))
    return dict(
        ours=ours,
        hf32=hf32,
        hf64=hf64,
        weights=largest_weight_difference(our_final, weights32),
        weights_32_64=largest_weight_difference(weights64, weights32),
        weights_ours_64=largest_weight_difference(our_final, weights64),
        our_wall=wall,
        hf_wall=hf_wall,
    )


def relative(a, b) -> float:
    return abs(a - b) / abs(b)


def main(argv=None):
    transformers.utils.logging.disable_progress_bar()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--output_dir", default=None, help="default: a temporary folder")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as temp:
        figures = compare(args.output_dir or temp, args.steps)
    ours, hf32, hf64 = figures["ours"], figures["hf32"], figures["hf64"]
    print("\n| step | ours | transformers float32 | relative difference | float32 vs float64 |")
    print("|---:|---:|---:|---:|---:|")
    for step, (a, b, c) in enumerate(zip(ours, hf32, hf64), 1):
        print(f"| {step} | {a:.6f} | {b:.6f} | {relative(a, b):.1e} | {relative(b, c):.1e} |")
    worst = max(range(len(ours)), key=lambda i: relative(ours[i], hf32[i]))
    print(
        f"\nlargest relative loss difference: {relative(ours[worst], hf32[worst]):.2e} "
        f"(step {worst + 1}); transformers float32 against float64 at most "
        f"{max(relative(b, c) for b, c in zip(hf32, hf64)):.2e}"
    )
    for key, what in (
        ("weights", "ours - transformers float32"),
        ("weights_32_64", "transformers float32 - float64"),
        ("weights_ours_64", "ours - transformers float64"),
    ):
        value, name = figures[key]
        print(f"largest weight difference after step {len(ours)}, {what}: {value:.2e} ({name})")
    print(
        f"wall time: run_pretraining.py {figures['our_wall']:.1f} s (start-up included), "
        f"transformers float32 loop {figures['hf_wall']:.1f} s; "
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"tensorflow {tf.__version__}"
    )


if __name__ == "__main__":
    main()
