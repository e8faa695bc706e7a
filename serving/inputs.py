"""Raw-text inputs of the task exports: signature specs, word tokenization and packing,
in-graph as the task data writers do offline.

Shape legend: B batch, S sequence, W words, P pieces.
"""

from __future__ import annotations

import tensorflow as tf


def text_spec(name: str, rank: int = 1) -> tf.TensorSpec:
    """A tf.string TensorSpec of `rank` unknown dimensions, named `name`."""
    return tf.TensorSpec([None] * rank, tf.string, name=name)


def pack_text(
    tokenizer, seq_length: int, text_a: tf.Tensor, text_b: tf.Tensor | None = None
) -> dict[str, tf.Tensor]:
    """Tokenizes and packs raw text in-graph, as the task data writers do offline.

    Args:
      tokenizer: a `TFBertTokenizer`.
      seq_length: int, length of the packed sequences.
      text_a: tf.string [B].
      text_b: tf.string [B] or None. A row whose text_b is the empty string is packed
        as a single segment (the original `convert_single_example` tests
        `if example.text_b`).

    Returns:
      dict of int32 [B, seq_length] input_word_ids, input_mask, input_type_ids.
    """
    ids_a = tokenizer.tokenize(text_a)
    single = tokenizer.bert_pack_inputs([ids_a], seq_length)
    if text_b is None:
        return single
    pair = tokenizer.bert_pack_inputs([ids_a, tokenizer.tokenize(text_b)], seq_length)
    has_b = (tf.strings.length(text_b) > 0)[:, tf.newaxis]  # [B, 1]
    return {k: tf.where(has_b, pair[k], single[k]) for k in single}


def word_pieces(tokenizer, words: tf.RaggedTensor) -> tf.RaggedTensor:
    """int32 RaggedTensor [Nw, (P)]: the pieces of each word of `words` ([B, (W)],
    flattened), each word tokenized on its own as the SQuAD and NER data writers do."""
    return tokenizer.tokenize(words.flat_values)
