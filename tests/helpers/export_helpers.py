"""What test_export.py, test_export_tfhub.py and test_task_exports.py share: comparing
encoder outputs, the bundled MRPC text and its offline packing, running a command
line's main in this process (export_tfhub.py, extract_features.py), recording the
sequence length a served model computes.
"""

import csv
import signal

import keras
import numpy as np
import tensorflow as tf

from data_prep.text import tokenization

ATOL = 1e-5


def assert_encoder_outputs_equal(got, want, num_layers, atol=ATOL, rtol=2e-5):
    # An export traces plain TF ops where the in-memory model runs fused XLA kernels
    # (GELU, LayerNorm): float32 rounding differs by a few ulps, hence rtol as well.
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(
            np.asarray(got[key]), np.asarray(want[key]), atol=atol, rtol=rtol, err_msg=key
        )
    assert len(got["encoder_outputs"]) == num_layers
    for g, w in zip(got["encoder_outputs"], want["encoder_outputs"]):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=atol, rtol=rtol)


def mrpc_pairs(sample_data, split="dev.tsv", count=None):
    with open(sample_data / "glue" / "MRPC" / split, encoding="utf-8-sig") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [(r[3], r[4]) for r in rows[:count]]


def python_pack(tokenizer, pairs, seq_length):
    """The offline packing (Python tokenizer + tokenization.pack_inputs) as arrays."""
    rows = []
    for a, b in pairs:
        ids_a = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(a))
        ids_b = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(b)) if b else None
        rows.append(
            tokenization.pack_inputs(
                ids_a, ids_b, seq_length, tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
            )
        )
    return {k: np.array([r[k] for r in rows], np.int32) for k in rows[0]}


def main_in_this_process(program, argv: list[str]) -> None:
    """Runs a command line's `main` in this process: its flags parsed from `argv` (as
    the command line parses them), and this process's SIGTERM and Ctrl-C handling
    restored afterwards (main sets its own)."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    program.FLAGS.unparse_flags()
    program.FLAGS([f"{program.__name__}.py", *argv])
    try:
        program.main([])
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


class SeenLength(keras.Model):
    """A task model that records the sequence length of the inputs it is called with
    (in its variable `seen_length`, saved with an export), then answers as `model`."""

    def __init__(self, model, **kwargs):
        super().__init__(**kwargs)
        self.model = model
        if hasattr(model, "num_labels"):
            self.num_labels = model.num_labels
        self.seen_length = self.add_weight(
            shape=(), dtype="int32", initializer="zeros", trainable=False, name="seen_length"
        )

    def call(self, inputs, training=False):
        self.seen_length.assign(tf.shape(inputs["input_word_ids"])[-1])
        return self.model(inputs, training=training)


def seen_length(loaded) -> int:
    """The `SeenLength.seen_length` of a loaded task export (after a request)."""
    (variable,) = [v for v in loaded.model_variables if "seen_length" in v.name]
    return int(variable.numpy())
