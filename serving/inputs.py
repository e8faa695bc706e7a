"""Raw-text inputs of the task exports: signature specs, request checks, word
tokenization and packing, in-graph as the task data writers do offline, and the
arithmetic of cutting a packed batch (`longest_input`, `cut_to_length`; the cut itself
is `model_call.ModelCall.cut`).

Shape legend: B batch, S sequence, W words, P pieces.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_text as tf_text

from data_prep.text.tf_tokenization import graph_check

# Every check of a request's inputs fails with tf.errors.InvalidArgumentError whose
# message starts with this (after TensorFlow's "assertion failed: [").
BAD_REQUEST = "bad request:"


def text_spec(name: str, rank: int = 1) -> tf.TensorSpec:
    """A tf.string TensorSpec of `rank` unknown dimensions, named `name`."""
    return tf.TensorSpec([None] * rank, tf.string, name=name)


def after_checks(checks: list, tensors: list) -> list:
    """`tensors`, each computed only once every op of `checks` has run (a failed check
    then stops the request before any op that trusts its inputs)."""
    checks = [c for c in checks if c is not None]  # None when run eagerly
    if not checks:
        return list(tensors)
    with tf.control_dependencies(checks):
        return [tf.identity(t) for t in tensors]


def checked_request(named: dict[str, tf.Tensor]) -> list[tf.Tensor]:
    """The inputs of a request (signature input name -> tensor [B, ...]) in order, once
    checked at run time.

    Each must have the rank its signature declares: a function called through
    `.signatures` (or TF Serving) checks dtypes but not shapes, so `tf.ensure_shape`
    does ("Shape of tensor text_a [2,3] is not compatible with expected shape [?]").
    All must hold the same number of rows, one entry per example; otherwise the request
    fails with tf.errors.InvalidArgumentError naming the inputs and their sizes. Every
    later op waits for these checks.
    """
    names = list(named)
    tensors = [tf.ensure_shape(named[name], named[name].shape) for name in names]
    rows = [tf.shape(t, out_type=tf.int64)[0] for t in tensors]
    first = names[0]
    checks = [
        graph_check(
            tf.equal(count, rows[0]),
            f"{BAD_REQUEST} {name} and {first} hold different numbers of entries; "
            f"send one {name} per {first} (their sizes follow: {name}, {first})",
            count,
            rows[0],
        )
        for name, count in zip(names[1:], rows[1:])
    ]
    return after_checks(checks, tensors)


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


def longest_input(inputs: dict[str, tf.Tensor]) -> tf.Tensor:
    """int32 scalar: the longest real input of packed inputs ([..., S] each), at least
    1 (for an empty batch)."""
    lengths = tf.reshape(tf.reduce_sum(tf.cast(inputs["input_mask"], tf.int32), axis=-1), [-1])
    return tf.reduce_max(tf.concat([lengths, [1]], axis=0))


def cut_to_length(inputs: dict[str, tf.Tensor], length: tf.Tensor) -> dict[str, tf.Tensor]:
    """Packed inputs ([..., S] each) cut to their first `length` positions (<= S)."""
    return {key: value[..., :length] for key, value in inputs.items()}


def word_pieces(tokenizer, words: tf.RaggedTensor) -> tf.RaggedTensor:
    """int32 RaggedTensor [Nw, (P)]: the pieces of each word of `words` ([B, (W)],
    flattened), each word tokenized on its own as the SQuAD and NER data writers do."""
    return tokenizer.tokenize(words.flat_values)


def split_words(text: tf.Tensor, separators: str) -> tf.RaggedTensor:
    """tf.string [B, (W)]: each string of `text` ([B]) split at the matches of the RE2
    pattern `separators` (which must not match "\\x01"), empty words dropped, the bytes
    of each word as sent.

    `tf_text.regex_split` alone ends a string at its first NUL byte: the words after it
    vanished from a request's answer. Here the split runs on a copy whose NUL bytes are
    \\x01 (the same byte offsets) and the words are cut out of the text itself.
    """
    _, begin, end = tf_text.regex_split_with_offsets(
        tf.strings.regex_replace(text, "\\x00", "\x01"), separators
    )
    row = begin.value_rowids()  # [sum W]
    words = tf.strings.substr(
        tf.gather(text, row), begin.flat_values, end.flat_values - begin.flat_values
    )
    return begin.with_flat_values(words)
