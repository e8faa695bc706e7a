"""The keras-hub system of `compare_squad_hf`: SQuAD fine-tuning as a keras-hub user
writes it. keras-hub has no BERT question-answering model, so the span head is this
benchmark's: keras-hub's `BertBackbone` with the checkpoint's weights
(`keras_hub_port`), one `Dense(2)` on its sequence output drawn as keras-hub draws its
BERT heads (`bert_kernel_initializer`: a truncated normal, stddev 0.02), split into
start and end logits, and the loss of Hugging Face's `BertForQuestionAnswering` and the
original release: the mean of the start and end cross-entropies. It trains with
`model.fit` (Keras' own jit_compile choice) on the features Hugging Face trains on
(this project's windows, each padded to --max_seq_length as keras-hub's preprocessors
pad), in a tf.data stream shuffled anew each epoch, with the comparisons' recipe
(`keras_hub_port.recipe_optimizer`); its logits are scored as Hugging Face's.

Imported by `compare_squad_hf` (run it with --systems=keras_hub); keras, keras-hub and
TensorFlow are imported only when it runs.
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.compare import finetune_compare as common

# The head's outputs, as Hugging Face names them; also the keys of the labels.
OUTPUTS = ("start_logits", "end_logits")


def span_model(backbone):
    """`backbone` with the span head: a Dense(2) on its sequence output, drawn as
    keras-hub draws its BERT heads, split into start and end logits (float32, for the
    loss, under a mixed policy)."""
    import keras
    from keras_hub.src.models.bert.bert_backbone import bert_kernel_initializer

    inputs = backbone.input
    logits = keras.layers.Dense(
        2,
        kernel_initializer=bert_kernel_initializer(),
        dtype=backbone.dtype_policy,
        name="span_logits",
    )(backbone(inputs)["sequence_output"])
    logits = keras.ops.cast(logits, "float32")
    return keras.Model(
        inputs, {name: logits[..., i] for i, name in enumerate(OUTPUTS)}, name="bert_span"
    )


def backbone_inputs(features) -> dict[str, np.ndarray]:
    """The features as `BertBackbone` takes them (every window is padded already)."""
    return {
        "token_ids": np.array([f.input_ids for f in features], dtype="int32"),
        "segment_ids": np.array([f.segment_ids for f in features], dtype="int32"),
        "padding_mask": np.array([f.input_mask for f in features], dtype="int32"),
    }


def compile_span_model(model, optimizer) -> None:
    """The mean of the start and end sparse cross-entropies over the window positions."""
    import keras

    model.compile(
        optimizer=optimizer,
        loss={
            name: keras.losses.SparseCategoricalCrossentropy(from_logits=True) for name in OUTPUTS
        },
        loss_weights={name: 0.5 for name in OUTPUTS},
    )


def step_losses():
    """A Keras callback whose `losses` fills with the loss of every training step, from
    the running mean fit logs (its batches all hold --batch_size windows)."""
    import keras

    class StepLosses(keras.callbacks.Callback):
        async_safe = True  # As common.keras_progress: keeps Keras' async dispatch.

        def __init__(self):
            super().__init__()
            self.means = {}

        def on_train_batch_end(self, batch, logs=None):
            self.means[batch + 1] = float((logs or {}).get("loss", float("nan")))

        @property
        def losses(self) -> list[float]:
            means = [self.means[n] for n in sorted(self.means)]
            # Step n's loss: n times the mean after it less n - 1 times the mean before.
            return [
                n * after - (n - 1) * before
                for n, before, after in zip(range(1, len(means) + 1), [0.0, *means], means)
            ]

    return StepLosses()


def run_keras_hub(args, seed: int, run_dir: str, train_file: str, eval_file: str) -> dict:
    start = time.time()
    import keras
    import keras_hub
    import tensorflow as tf

    from benchmarks.compare import compare_squad_hf as squad
    from benchmarks.compare import keras_hub_port

    keras.utils.set_random_seed(seed)
    keras.mixed_precision.set_global_policy(
        "mixed_bfloat16" if args.dtype == "bfloat16" else "float32"
    )
    _, train_features = squad.make_features(args, train_file, is_training=True)
    # The checkpoint's dropout (0 with --no_dropout, whose copy of it has none).
    backbone = keras_hub.models.BertBackbone(**keras_hub_port.backbone_config(args.checkpoint))
    keras_hub_port.load_backbone(backbone, args.checkpoint)
    model = span_model(backbone)
    num_features = len(train_features)
    total, warmup = common.train_schedule(num_features, args)
    compile_span_model(model, keras_hub_port.recipe_optimizer(args, warmup, total))
    labels = {
        name: np.array([getattr(f, position) for f in train_features], dtype="int32")
        for name, position in zip(OUTPUTS, ("start_position", "end_position"))
    }
    # The training stream: a new permutation each epoch, batches across epoch ends.
    stream = (
        tf.data.Dataset.from_tensor_slices((backbone_inputs(train_features), labels))
        .shuffle(num_features, seed=seed, reshuffle_each_iteration=True)
        .repeat()
        .batch(args.batch_size)
    )
    # A "keras_hub seed S step n/total" line every step (SQuAD's take seconds), from which
    # the parent times the first step.
    progress = common.keras_progress(f"keras_hub seed {seed}", total, every=1)
    losses = step_losses()
    model.fit(stream.take(total), epochs=1, verbose=2, callbacks=[progress, losses])

    examples, features = squad.make_features(args, eval_file, is_training=False)
    logits = model.predict(backbone_inputs(features), batch_size=args.predict_batch_size, verbose=0)
    return {
        "wall_s": time.time() - start,
        "results": squad.score_logits(
            args, eval_file, examples, features, zip(*(logits[name] for name in OUTPUTS)), run_dir
        ),
        "num_train_features": num_features,
        "steps": total,
        "losses": losses.losses,
        "curve": [],
        "jit_compile": bool(model.jit_compile),
    }
