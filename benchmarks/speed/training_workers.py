"""The worker side of bench_training.py: one measurement in its own process.

`worker` runs what `bench_training.py --worker` asks for and prints one JSON line:
the inner training loop on a synthetic batch (`--mode=loop`) of this project,
keras-hub or Hugging Face; a peer's training on real shards with a progress line
per loop (`--mode=e2e`; this project's side is `run_pretraining.py` itself); or the
matmul chain that gives the hardware limit (`matmul_limit`). The model shapes
(`SHAPES`) and their configuration (`bert_config`) are shared with the driver and
with bench_inference.py.

The scripts beside it import it (`from benchmarks.speed import training_workers`); run
them from the repository's root as modules, e.g. `python -m benchmarks.speed.bench_training`.
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
import time

SHAPES = {  # layers, hidden, heads, intermediate, seq
    "base-128": (12, 768, 12, 3072, 128),
    "base-512": (12, 768, 12, 3072, 512),
    "small-128": (6, 384, 12, 1536, 128),
}
VOCAB = 30522
PREDICTIONS = {128: 20, 512: 76}


def bert_config(shape) -> dict:
    layers, hidden, heads, inter, _ = SHAPES[shape]
    return dict(
        vocab_size=VOCAB,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=inter,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=512,
        type_vocab_size=2,
        initializer_range=0.02,
    )


# ------------------------------------------------------------------ worker side


def synthetic_batch(batch, seq, preds, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, VOCAB, size=(batch, seq)).astype("int32")
    positions = np.sort(
        np.stack([rng.choice(np.arange(1, seq), preds, replace=False) for _ in range(batch)]),
        axis=1,
    ).astype("int32")
    return {
        "input_word_ids": ids,
        "input_mask": np.ones_like(ids),
        "input_type_ids": np.zeros_like(ids),
        "masked_lm_positions": positions,
        "masked_lm_ids": np.take_along_axis(ids, positions, 1),
        "masked_lm_weights": np.ones(positions.shape, "float32"),
        "next_sentence_labels": rng.integers(0, 2, size=(batch, 1)).astype("int32"),
    }


def shard_dataset(args):
    """The e2e peers' input: the runner's own training pipeline over the shards."""
    from data_prep.pretraining import pretraining_data

    seq = SHAPES[args.shape][4]
    files = [args.shards]
    metadata = pretraining_data.shards_metadata(files, seq, PREDICTIONS[seq])
    return pretraining_data.pretraining_dataset(files, metadata, args.batch, is_training=True)


def progress(step):
    print(f"step {step}", flush=True)


def run_ours_loop(args):
    import tensorflow as tf
    from modeling import training
    from modeling.config import BertConfig
    from modeling.encoder import BertEncoder
    from modeling.models import BertPretrainer
    from modeling.objectives import PretrainingObjective

    config = BertConfig(**bert_config(args.shape))
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = BertPretrainer(BertEncoder(config, dtype=args.dtype, kernels=args.kernels), config)
    seq = SHAPES[args.shape][4]
    data = synthetic_batch(args.batch, seq, PREDICTIONS[seq])
    trainer = training.Trainer(
        strategy,
        model,
        PretrainingObjective(),
        tempfile.mkdtemp(),
        learning_rate=1e-4,
        num_train_steps=10**9,
        dtype=args.dtype,
        steps_per_loop=args.steps,
        enable_xla=args.xla,
        kernels=args.kernels,
    )
    dataset = strategy.distribute_datasets_from_function(
        lambda ctx: tf.data.Dataset.from_tensors(data).repeat()
    )
    iterator = iter(dataset)
    loop = trainer.train_loop()
    float(loop(iterator, tf.constant(args.warmup))[0])
    start = time.perf_counter()
    loss = float(loop(iterator, tf.constant(args.steps))[0])
    return time.perf_counter() - start, loss


def keras_hub_backbone(shape: str, dtype: str):
    """keras-hub's BertBackbone of `shape` under the Keras dtype policy of `dtype`
    (mixed_bfloat16 for bfloat16)."""
    import keras
    import keras_hub

    layers, hidden, heads, inter, _ = SHAPES[shape]
    keras.config.set_dtype_policy({"float32": "float32", "bfloat16": "mixed_bfloat16"}[dtype])
    return keras_hub.models.BertBackbone(
        vocabulary_size=VOCAB,
        num_layers=layers,
        num_heads=heads,
        hidden_dim=hidden,
        intermediate_dim=inter,
        max_sequence_length=512,
        num_segments=2,
    )


def ratio_to_best_peer(row: dict, rows: list[dict], is_peer) -> str:
    """ "N.NNx": an `ours` row's seq/s over the best peer's (is_peer(impl)) of the same
    shape and dtype; "" for a peer's row or when no peer ran."""
    peers = [
        r["seq_per_s"]
        for r in rows
        if "error" not in r
        and is_peer(r["impl"])
        and r["shape"] == row["shape"]
        and r["dtype"] == row["dtype"]
    ]
    if not peers or not row["impl"].startswith("ours"):
        return ""
    return f"{row['seq_per_s'] / max(peers):.2f}x"


def keras_hub_model(args):
    import keras
    import keras_hub

    backbone = keras_hub_backbone(args.shape, args.dtype)
    model = keras_hub.models.BertMaskedLM(backbone=backbone, preprocessor=None)
    steps_per_execution = args.steps if args.mode == "loop" else args.steps_per_loop
    model.compile(
        optimizer=keras.optimizers.AdamW(
            1e-4, weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0
        ),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[],
        jit_compile=args.xla,
        steps_per_execution=steps_per_execution,
    )
    return model


def keras_hub_inputs(features):
    x = {
        "token_ids": features["input_word_ids"],
        "padding_mask": features["input_mask"],
        "segment_ids": features["input_type_ids"],
        "mask_positions": features["masked_lm_positions"],
    }
    return x, features["masked_lm_ids"], features["masked_lm_weights"]


def run_keras_hub_loop(args):
    import tensorflow as tf

    model = keras_hub_model(args)
    seq = SHAPES[args.shape][4]
    data = synthetic_batch(args.batch, seq, PREDICTIONS[seq])
    ds = tf.data.Dataset.from_tensors(keras_hub_inputs(data)[:2]).repeat()
    model.fit(ds, steps_per_epoch=args.warmup, epochs=1, verbose=0)
    start = time.perf_counter()
    history = model.fit(ds, steps_per_epoch=args.steps, epochs=1, verbose=0)
    return time.perf_counter() - start, float(history.history["loss"][-1])


def run_keras_hub_e2e(args):
    import keras

    model = keras_hub_model(args)
    dataset = shard_dataset(args).map(keras_hub_inputs)

    class Progress(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if (batch + 1) % args.steps_per_loop == 0 or batch + 1 == args.train_steps:
                progress(batch + 1)

    model.fit(
        dataset, steps_per_epoch=args.train_steps, epochs=1, verbose=0, callbacks=[Progress()]
    )


class HfTrainer:
    """BertForPreTraining with AdamW and clipping, the same step as ours and keras-hub."""

    def __init__(self, args):
        import torch
        import transformers

        layers, hidden, heads, inter, _ = SHAPES[args.shape]
        torch.manual_seed(0)
        config = transformers.BertConfig(
            vocab_size=VOCAB,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=inter,
            max_position_embeddings=512,
        )
        self.torch, self.dtype = torch, args.dtype
        self.model = transformers.BertForPreTraining(config).train()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01
        )

    def inputs(self, data):
        torch = self.torch
        batch, seq = data["input_word_ids"].shape
        labels = torch.full((batch, seq), -100, dtype=torch.long)
        positions = torch.tensor(data["masked_lm_positions"], dtype=torch.long)
        ids = torch.tensor(data["masked_lm_ids"], dtype=torch.long)
        ids[torch.tensor(data["masked_lm_weights"]) == 0] = -100
        labels.scatter_(1, positions, ids)
        labels[:, 0] = -100  # padded masked positions point at [CLS]
        return dict(
            input_ids=torch.tensor(data["input_word_ids"], dtype=torch.long),
            attention_mask=torch.tensor(data["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(data["input_type_ids"], dtype=torch.long),
            labels=labels,
            next_sentence_label=torch.tensor(
                data["next_sentence_labels"].reshape(-1), dtype=torch.long
            ),
        )

    def step(self, inputs):
        torch = self.torch
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.dtype == "bfloat16"):
            loss = self.model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad()
        return float(loss)


def run_hf_loop(args):
    trainer = HfTrainer(args)
    seq = SHAPES[args.shape][4]
    inputs = trainer.inputs(synthetic_batch(args.batch, seq, PREDICTIONS[seq]))
    for _ in range(args.warmup):
        trainer.step(inputs)
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = trainer.step(inputs)
    return time.perf_counter() - start, loss


def run_hf_e2e(args):
    trainer = HfTrainer(args)
    batches = shard_dataset(args).as_numpy_iterator()
    for step in range(1, args.train_steps + 1):
        trainer.step(trainer.inputs(next(batches)))
        if step % args.steps_per_loop == 0 or step == args.train_steps:
            progress(step)


def matmul_limit(dtype, size=2048, reps=20):
    """GFLOP/s of a chain of size x size matmuls in TensorFlow (the hardware limit)."""
    import tensorflow as tf

    tf_dtype = {"float32": tf.float32, "bfloat16": tf.bfloat16}[dtype]
    a = tf.random.normal([size, size], dtype=tf.float32)
    a = tf.cast(a / size**0.5, tf_dtype)

    @tf.function
    def chain(x):
        for _ in range(reps):
            x = tf.matmul(x, a)
        return x

    chain(a).numpy()
    best = float("inf")
    for _ in range(3):  # the least disturbed of three
        start = time.perf_counter()
        chain(a).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 * reps / best / 1e9


def worker(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.impl == "matmul":
        print(json.dumps({"gflops": matmul_limit(args.dtype)}))
        return
    if args.mode == "e2e":
        {"keras_hub": run_keras_hub_e2e, "hf": run_hf_e2e}[args.impl](args)
        return
    fn = {"ours": run_ours_loop, "keras_hub": run_keras_hub_loop, "hf": run_hf_loop}[args.impl]
    seconds, loss = fn(args)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "loss": loss, "peak_mb": peak_mb}))
