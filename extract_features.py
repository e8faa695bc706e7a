"""Extracts fixed BERT features (the feature-based approach, paper Section 5.3).

Reads one example per line (`text_a` or `text_a ||| text_b`), runs the encoder and writes
one JSON object per line, as the original release's extract_features.py:

  {"linex_index": 0, "features": [{"token": "[CLS]",
      "layers": [{"index": -1, "values": [0.1, ...]}, ...]}, ...]}

Values are rounded to 6 decimals. The input is streamed in batches and the output is
written to a temporary file, renamed when complete.

  python extract_features.py --input_file=sentences.txt --output_file=features.jsonl \
      --init_checkpoint=path/to/model --layers=-1,-2,-3,-4
"""

from __future__ import annotations

import common.quiet_tensorflow  # noqa: F401  (first: TensorFlow's start-up lines hidden)

import json
import os
import re
import time
from typing import Iterator

import numpy as np
import tensorflow as tf
from absl import flags, logging

from common import cli as command_line
from common.errors import MissingFileError, UserError
from common.progress import Progress
import model_flags
import runner_flags
import runner_settings
from common import file_io
from common import run_control
from data_prep import input_pipeline
from data_prep.text import tokenization
from modeling import checkpoints, feature_based
from modeling.encoder import BertEncoder

FLAGS = flags.FLAGS

flags.DEFINE_string(
    "input_file", None, "Text file, one example per line: `text_a` or `text_a ||| text_b`."
)
flags.DEFINE_string("output_file", None, "JSON-lines output file.")
flags.DEFINE_string(
    "layers", "-1,-2,-3,-4", "Comma list of layer indexes (negative counts from the last layer)."
)
flags.DEFINE_integer("batch_size", 32, "Examples per batch.")
flags.DEFINE_bool(
    "use_one_hot_embeddings",
    False,
    "Original flag: not needed (the embedding lookup is the same on every device).",
)
runner_flags.define_model_flags(max_seq_length=128)
runner_flags.define_progress_flag()
runner_flags.define_original_flags()

_PAIR = re.compile(r"^(.*) \|\|\| (.*)$")


def read_examples(path: str) -> Iterator[tuple[int, str, str | None]]:
    """Yields (line index, text_a, text_b or None), streaming the file."""
    if not os.path.isfile(path):
        raise MissingFileError(f"--input_file not found: {path}")
    if os.path.getsize(path) == 0:
        raise UserError(f"--input_file is empty: {path}")
    with open(path, encoding="utf-8") as f:
        for index, line in enumerate(f):
            line = tokenization.convert_to_unicode(line).strip()
            match = _PAIR.match(line)
            if match:
                yield index, match.group(1), match.group(2)
            else:
                yield index, line, None


def example_to_tokens(
    tokenizer, text_a: str, text_b: str | None, max_seq_length: int
) -> tuple[list[str], list[int]]:
    """`[CLS] A [SEP] (B [SEP])` tokens and segment ids, truncated as the original."""
    tokens_a = tokenizer.tokenize(text_a)
    tokens_b = tokenizer.tokenize(text_b) if text_b is not None else None
    if tokens_b is not None:
        tokenization.truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    else:
        tokens_a = tokens_a[: max_seq_length - 2]
    tokens = ["[CLS]"] + tokens_a + ["[SEP]"]
    segments = [0] * len(tokens)
    if tokens_b is not None:
        tokens += tokens_b + ["[SEP]"]
        segments += [1] * (len(tokens_b) + 1)
    return tokens, segments


def batch_inputs(
    tokenizer,
    token_lists: list[list[str]],
    segment_lists: list[list[int]],
    length: int | None = None,
):
    """Pads a batch to `length` (default: its longest example): three int32 [B, S]
    arrays."""
    seq = length or max(len(t) for t in token_lists)
    ids = np.zeros((len(token_lists), seq), np.int32)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for row, (tokens, segments) in enumerate(zip(token_lists, segment_lists)):
        ids[row, : len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
        mask[row, : len(tokens)] = 1
        types[row, : len(tokens)] = segments
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def make_feature_fn(encoder: BertEncoder, layer_indexes: list[int]):
    """A compiled function: input dict -> float32 [len(layers), B, S, H]."""
    num_layers = encoder.config.num_hidden_layers
    for index in layer_indexes:
        if not -num_layers <= index < num_layers:
            raise UserError(
                f"--layers index {index} is out of range for a {num_layers}-layer model"
            )
    spec = tf.TensorSpec([None, None], tf.int32)

    @tf.function(
        input_signature=[{"input_word_ids": spec, "input_mask": spec, "input_type_ids": spec}],
        autograph=False,
    )
    def features(inputs):
        outputs = encoder(inputs, training=False)["encoder_outputs"]
        return tf.stack([tf.cast(outputs[i], tf.float32) for i in layer_indexes])

    return features


def format_example(
    index: int, tokens: list[str], layer_indexes: list[int], values: np.ndarray
) -> str:
    """One JSON line; values: float32 [len(layers), S, H] for this example."""
    features = []
    for position, token in enumerate(tokens):
        layers = [
            {"index": layer, "values": [round(float(x), 6) for x in values[j, position]]}
            for j, layer in enumerate(layer_indexes)
        ]
        features.append({"token": token, "layers": layers})
    return json.dumps({"linex_index": index, "features": features})


def extract(
    encoder,
    tokenizer,
    input_file: str,
    output_file: str,
    layer_indexes: list[int],
    max_seq_length: int,
    batch_size: int,
    pad_to_max_seq_length: bool = False,
    progress: Progress | None = None,
) -> int:
    """Writes the features of every line of `input_file`; returns the example count.

    Each batch is computed at the length of its longest example rounded up to one of
    a few sizes (`input_pipeline.cut_length`), or at `max_seq_length` with
    `pad_to_max_seq_length`; the values of the real tokens are the same. `progress`
    (`common.progress`) is shown the examples done.
    """
    progress = progress if progress is not None else Progress()
    if max_seq_length > encoder.config.max_position_embeddings:
        raise UserError(
            f"--max_seq_length={max_seq_length} exceeds max_position_embeddings="
            f"{encoder.config.max_position_embeddings} of the BERT config"
        )
    feature_fn = make_feature_fn(encoder, layer_indexes)
    options = (tokenizer, feature_fn, layer_indexes, max_seq_length, pad_to_max_seq_length)
    count, start = 0, time.time()
    # Nothing half-written survives: the output appears only when complete.
    total = sum(1 for _ in read_examples(input_file))
    with file_io.atomic_open(output_file) as out:
        batch = []
        for example in progress.iterate(read_examples(input_file), "features", total, "example"):
            batch.append(example)
            if len(batch) == batch_size:
                count += _write_batch(out, batch, *options)
                batch = []
                logging.log_every_n_seconds(
                    logging.INFO,
                    "%d examples, %.1f examples/s",
                    10,
                    count,
                    count / (time.time() - start),
                )
        if batch:
            count += _write_batch(out, batch, *options)
    progress.say(
        f"Wrote the features of {count} examples to {output_file} in {time.time() - start:.0f} s"
    )
    return count


def _write_batch(
    out, batch, tokenizer, feature_fn, layer_indexes, max_seq_length, pad_to_max_seq_length
):
    packed = [example_to_tokens(tokenizer, a, b, max_seq_length) for _, a, b in batch]
    longest = max(len(tokens) for tokens, _ in packed)
    length = (
        max_seq_length
        if pad_to_max_seq_length
        else input_pipeline.cut_length(longest, max_seq_length)
    )
    inputs = batch_inputs(tokenizer, [t for t, _ in packed], [s for _, s in packed], length)
    values = feature_fn(inputs).numpy()  # [layers, B, S, H]
    for row, ((index, _, _), (tokens, _)) in enumerate(zip(batch, packed)):
        out.write(format_example(index, tokens, layer_indexes, values[:, row]) + "\n")
    return len(batch)


def main(_):
    runner_settings.apply_original_flags(FLAGS)
    run_control.hold_file(FLAGS.output_file, f"--output_file={FLAGS.output_file}")
    run_control.exit_on_sigterm("extract_features")
    files = model_flags.resolve_model_files(FLAGS, max_seq_length=FLAGS.max_seq_length)
    layer_indexes = feature_based.parse_layer_numbers(
        FLAGS.layers, files.config.num_hidden_layers, "--layers"
    )
    tokenizer = files.tokenizer()
    # A left-to-right model's features keep its left-only attention.
    encoder = BertEncoder(files.config, causal_attention=files.causal_attention)
    if FLAGS.init_checkpoint:
        checkpoints.restore_model(FLAGS.init_checkpoint, encoder)
    else:
        logging.warning("No --init_checkpoint: features come from random weights.")
    extract(
        encoder,
        tokenizer,
        FLAGS.input_file,
        FLAGS.output_file,
        layer_indexes,
        FLAGS.max_seq_length,
        FLAGS.batch_size,
        bool(runner_settings.pad_to_max_seq_length(FLAGS)),
        runner_settings.terminal(),
    )


def cli():
    flags.mark_flags_as_required(["input_file", "output_file"])
    command_line.run(main)


if __name__ == "__main__":
    cli()
