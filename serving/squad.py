"""SQuAD answers in-graph: the task export of a `BertSpanLabeler` answers a raw question
on a raw context as run_squad.py's --do_predict does (`data_prep.squad.squad_features`,
`squad_postprocess`): the same features (`convert_examples_to_features`), windows
(`serving.windows`, the formula of `squad_features.doc_spans` / `is_max_context`), span
rules (`predict_example`) and answer text
(`candidate_text`, `get_final_text`).

Loading the export needs `import tensorflow_text` first.

Shape legend: B batch, S sequence, N windows (of every row of the batch together), W
words, D context pieces, Q question pieces.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import tensorflow as tf

from common.errors import UserError
from data_prep.squad import squad_features, squad_reader
from data_prep.text import tf_tokenization, tokenization
from serving import inputs as text_inputs
from serving import windows as serving_windows
from serving.model_call import ModelCall


def _vocab_tokens(tokenizer) -> tf.Tensor:
    """tf.string [V]: the token of every id (the inverse of the tokenizer's table)."""
    keys, values = tokenizer.vocab_table.export()
    tokens = [""] * (int(tf.reduce_max(values)) + 1)
    for key, value in zip(keys.numpy(), values.numpy()):
        if value >= 0:
            tokens[value] = key.decode("utf-8")
    return tf.constant(tokens)


def _regex_class(chars) -> str:
    """An RE2 character class matching the characters `chars`."""
    return tokenization.regex_class(tokenization.code_point_ranges(ord(c) for c in chars))


@functools.lru_cache(maxsize=1)
def _python_whitespace_class() -> str:
    """The characters `str.split()` splits on, as an RE2 class."""
    return _regex_class(chr(c) for c in range(0x110000) if chr(c).isspace())


# Characters that separate the words of a context (`squad_reader.split_context`).
CONTEXT_WHITESPACE = _regex_class(squad_reader.CONTEXT_WHITESPACE)


def final_text(tokenizer, pred_text: tf.Tensor, orig_text: tf.Tensor) -> tf.Tensor:
    """`squad_postprocess.get_final_text` in-graph: the predicted text projected onto the original.

    `orig_text` is basic-tokenized and joined with spaces (tok_text); the first
    occurrence of `pred_text` in it is mapped back, character by character, onto
    `orig_text` if both have the same number of characters other than " ". Where
    `pred_text` is empty or not found, or the counts differ, the answer is the whole
    `orig_text`, as in the original release.

    Args:
      tokenizer: the `TFBertTokenizer` (its do_lower_case is the original's).
      pred_text: tf.string [B], the predicted pieces joined, "##" removed.
      orig_text: tf.string [B], the whole words holding them, joined with " ".

    Returns:
      tf.string [B].
    """
    tok_text = tf.strings.reduce_join(tokenizer.basic_tokenize(orig_text), axis=-1, separator=" ")

    def project(args):
        pred, orig, tok = args
        before = tf.strings.split(tok, sep=pred, maxsplit=1)
        found = tf.logical_and(tf.strings.length(pred) > 0, tf.size(before) == 2)
        start = tf.strings.length(tf.concat([before, [""]], 0)[0], unit="UTF8_CHAR")
        orig_chars = tf.where(tf.strings.unicode_decode(orig, "UTF-8") != 32)[:, 0]
        tok_is_char = tf.strings.unicode_decode(tok, "UTF-8") != 32
        pred_chars = tf.reduce_sum(
            tf.cast(tf.strings.unicode_decode(pred, "UTF-8") != 32, tf.int64)
        )
        ok = tf.logical_and(
            found,
            tf.logical_and(
                tf.size(orig_chars, out_type=tf.int64)
                == tf.reduce_sum(tf.cast(tok_is_char, tf.int64)),
                pred_chars > 0,
            ),
        )
        first = tf.reduce_sum(tf.cast(tok_is_char[:start], tf.int64))
        last = first + pred_chars - 1
        # Indices kept in range where `ok` is false (the result is then `orig`).
        padded = tf.concat([orig_chars, [0]], 0)
        limit = tf.size(padded, out_type=tf.int64) - 1
        begin = tf.gather(padded, tf.clip_by_value(first, 0, limit))
        end = tf.gather(padded, tf.clip_by_value(last, 0, limit))
        answer = tf.strings.substr(orig, begin, tf.maximum(end - begin + 1, 0), unit="UTF8_CHAR")
        return tf.where(ok, answer, orig)

    return tf.map_fn(
        project, (pred_text, orig_text, tok_text), fn_output_signature=tf.TensorSpec([], tf.string)
    )


class _SpanFeatures(NamedTuple):
    """The SQuAD features of a batch of questions, and what maps them back.

    Attributes:
      words: tf.string RaggedTensor [B, (W)], the whitespace-split context.
      windows: the context windows (`serving_windows.make_windows`).
      inputs: the model inputs, int32 [N, S] each.
      token_to_word: int64 [N, S], the word (index in its row of `words`) of each
        context piece, -1 at [CLS], the question, [SEP] and padding.
      token_is_max: bool [N, S], whether the window is the one where the context piece
        there has its maximum context.

    S is the export's seq_length, or less once cut (`_cut`).
    """

    words: tf.RaggedTensor
    windows: serving_windows.Windows
    inputs: dict
    token_to_word: tf.Tensor
    token_is_max: tf.Tensor


def _span_features(
    tokenizer,
    question: tf.Tensor,
    context: tf.Tensor,
    seq_length: int,
    max_query_length: int,
    doc_stride: int,
) -> _SpanFeatures:
    """`squad_features.convert_examples_to_features` (prediction) in-graph, on tf.string [B]."""
    words = text_inputs.split_words(context, CONTEXT_WHITESPACE)
    word_pieces = text_inputs.word_pieces(tokenizer, words)  # [sum W, (P)]
    pieces = tf.RaggedTensor.from_row_splits(word_pieces, words.row_splits).merge_dims(1, 2)
    word_in_row = tf.ragged.range(words.row_lengths()).flat_values
    piece_word = tf.gather(word_in_row, word_pieces.value_rowids())  # [sum D]
    query = tokenizer.tokenize(question)[:, :max_query_length]  # [B, (Q)]
    query_length = query.row_lengths()
    windows = serving_windows.make_windows(
        pieces.row_lengths(), seq_length - query_length - 3, doc_stride
    )
    window_pieces = serving_windows.window_pieces(windows, pieces)  # [N, (length)]
    is_max, _ = serving_windows.max_context(
        windows, window_pieces, tf.shape(pieces.flat_values, out_type=tf.int64)[0]
    )
    inputs = tf_tokenization.combine_and_pad(
        [tf.gather(query, windows.row), tf.gather(pieces.flat_values, window_pieces)],
        seq_length,
        tokenizer.cls_id,
        tokenizer.sep_id,
    )
    prefix = tf.gather(query_length, windows.row) + 2  # [CLS] question [SEP]
    num_prefix = tf.reduce_sum(prefix)
    token_to_word = tf.concat(
        [
            tf.RaggedTensor.from_row_lengths(
                tf.fill([num_prefix], tf.constant(-1, tf.int64)), prefix
            ),
            tf.gather(piece_word, window_pieces),
        ],
        axis=1,
    )
    token_is_max = tf.concat(
        [tf.RaggedTensor.from_row_lengths(tf.zeros([num_prefix], tf.bool), prefix), is_max], axis=1
    )
    return _SpanFeatures(
        words,
        windows,
        inputs,
        token_to_word.to_tensor(-1, shape=[None, seq_length]),
        token_is_max.to_tensor(False, shape=[None, seq_length]),
    )


def _cut(features: _SpanFeatures, call: ModelCall) -> _SpanFeatures:
    """The features with every [N, S] tensor cut to the length the model computes
    (`ModelCall.cut`: the batch's longest window, or seq_length with
    pad_to_max_seq_length)."""
    inputs = call.cut(features.inputs)
    length = tf.shape(inputs["input_word_ids"])[1]
    return features._replace(
        inputs=inputs,
        token_to_word=features.token_to_word[:, :length],
        token_is_max=features.token_is_max[:, :length],
    )


def _best_spans(
    features: _SpanFeatures,
    start_logits: tf.Tensor,
    end_logits: tf.Tensor,
    n_best_size: int,
    max_answer_length: int,
) -> dict[str, tf.Tensor]:
    """run_squad's best non-null span of every question (`squad_postprocess.predict_example`).

    Candidates are the n_best_size highest start logits x the n_best_size highest end
    logits of every window (of its S positions, at most), in run_squad's order
    (window, start rank, end rank); valid
    ones lie on context pieces, start where the window gives its piece the maximum
    context, and have start <= end < start + max_answer_length. Scores are float64
    sums of the float32 logits, as in Python; the first best candidate wins.

    Args:
      features: from `_span_features`.
      start_logits, end_logits: float32 [N, S].

    Returns:
      has_span: bool [B]; score: float64 [B] (-inf without a span); window: int64 [B],
      the window of the span (a row's first window without one); start, end: int64 [B]
      positions in that window (end = start - 1 without a span).
    """
    top = tf.minimum(n_best_size, tf.shape(start_logits)[1])
    starts = tf.math.top_k(start_logits, top).indices  # [N, top], best first
    ends = tf.math.top_k(end_logits, top).indices
    start_at = tf.repeat(starts, top, axis=1)  # [N, top * top]
    end_at = tf.tile(ends, [1, top])
    token_to_word, token_is_max = features.token_to_word, features.token_is_max
    valid = (
        (tf.gather(token_to_word, start_at, batch_dims=1) >= 0)
        & (tf.gather(token_to_word, end_at, batch_dims=1) >= 0)
        & tf.gather(token_is_max, start_at, batch_dims=1)
        & (start_at <= end_at)
        & (end_at < start_at + max_answer_length)
    )
    scores = tf.gather(tf.cast(start_logits, tf.float64), start_at, batch_dims=1) + tf.gather(
        tf.cast(end_logits, tf.float64), end_at, batch_dims=1
    )
    scores = tf.where(valid, scores, tf.constant(-float("inf"), tf.float64))
    by_question = tf.RaggedTensor.from_row_splits(scores, features.windows.row_splits).to_tensor(
        -float("inf")
    )  # [B, n, top^2]
    by_question = tf.reshape(by_question, [tf.shape(by_question)[0], -1])
    score = tf.reduce_max(by_question, axis=1)
    has_span = score > -float("inf")
    order = tf.range(tf.shape(by_question, out_type=tf.int64)[1])
    best = tf.reduce_min(
        tf.where(tf.equal(by_question, score[:, tf.newaxis]), order, tf.int64.max), axis=1
    )
    best = tf.where(has_span, best, 0)
    candidates = tf.cast(top * top, tf.int64)  # of a window
    window = features.windows.row_splits[:-1] + best // candidates
    candidate = tf.stack([window, best % candidates], axis=1)
    start = tf.cast(tf.gather_nd(start_at, candidate), tf.int64)
    end = tf.cast(tf.gather_nd(end_at, candidate), tf.int64)
    return {
        "has_span": has_span,
        "score": score,
        "window": window,
        "start": start,
        "end": tf.where(has_span, end, start - 1),
    }


def _span_text(
    tokenizer, features: _SpanFeatures, spans: dict, vocab_tokens: tf.Tensor
) -> tf.Tensor:
    """tf.string [B]: the text of each best span, as `squad_postprocess.candidate_text` makes it
    (the pieces joined and de-"##"-ed, projected onto the whole words holding them),
    "" where there is no span."""
    window, start, end = spans["window"], spans["start"], spans["end"]
    word_ids = features.inputs["input_word_ids"]  # [N, S]
    piece_ids = tf.gather(
        tf.reshape(word_ids, [-1]),
        tf.ragged.range(start, end + 1)
        + (window * tf.shape(word_ids, out_type=tf.int64)[1])[:, tf.newaxis],
    )
    pred_text = tf.strings.reduce_join(tf.gather(vocab_tokens, piece_ids), axis=-1, separator=" ")
    pred_text = tf.strings.regex_replace(pred_text, " ##", "")
    pred_text = tf.strings.regex_replace(pred_text, "##", "")
    # " ".join(pred_text.split())
    pred_text = tf.strings.regex_replace(pred_text, _python_whitespace_class() + "+", " ")
    pred_text = tf.strings.regex_replace(pred_text, "^ | $", "")
    window_words = tf.gather(features.token_to_word, window)  # [B, S]
    first_word = tf.gather(window_words, start, batch_dims=1)
    last_word = tf.where(
        spans["has_span"], tf.gather(window_words, tf.maximum(end, 0), batch_dims=1), first_word - 1
    )
    words = features.words
    word_index = tf.ragged.range(first_word, last_word + 1) + words.row_splits[:-1][:, tf.newaxis]
    orig_text = tf.strings.reduce_join(
        tf.gather(words.flat_values, word_index), axis=-1, separator=" "
    )
    return tf.where(spans["has_span"], final_text(tokenizer, pred_text, orig_text), "")


def _mask_padding(logits: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """float32 [N, S] logits with -inf where `mask` is 0 (padding)."""
    return tf.where(tf.cast(mask, tf.bool), logits, tf.constant(-float("inf"), logits.dtype))


def _pad_to(logits: tf.Tensor, seq_length: int) -> tf.Tensor:
    """float32 [B, S] logits padded with -inf to [B, seq_length] (S <= seq_length)."""
    missing = seq_length - tf.shape(logits)[1]
    padded = tf.pad(logits, [[0, 0], [0, missing]], constant_values=-float("inf"))
    return tf.ensure_shape(padded, [None, seq_length])


def squad_signatures(
    model,
    tokenizer,
    seq_length: int,
    labels,
    *,
    max_query_length: int,
    max_answer_length: int,
    n_best_size: int,
    doc_stride: int,
    pad_to_max_seq_length: bool = False,
    xla_single_requests: bool = False,
) -> dict:
    """Signatures of a `BertSpanLabeler` export, predicting as run_squad.py does.

    serving_default(question: tf.string [B], context: tf.string [B]) ->
      answer: tf.string [B], run_squad's best non-null answer: the text of the best
        span, mapped back onto the context's words as the original's
        `get_final_text` does; "" if no span is valid;
      score: float32 [B], that span's start + end logit (-inf if none);
      null_score: float32 [B], the lowest [CLS] start + end logit over the windows.
        SQuAD 2.0: run_squad predicts "" where null_score - score (null_odds.json)
        exceeds --null_score_diff_threshold, else `answer`;
      start_logits, end_logits: float32 [B, S] of the window holding the answer (the
        first window if there is none); S is seq_length. Past the window's tokens
        (padding) they hold -inf, unless `pad_to_max_seq_length`.

    question and context hold one entry per example; batches of other sizes fail with
    tf.errors.InvalidArgumentError naming both.

    The windows of a request are cut to the longest of them (`model_call.ModelCall.cut`)
    and the best span is chosen among the window's tokens only. With
    `pad_to_max_seq_length`, every window is padded to seq_length and, as in the
    original release, the n_best_size highest logits of a window may include padding
    positions (never valid spans): where these crowd out a valid span, the padded
    export can answer with a lower-scoring span than the cut one. With
    `xla_single_requests`, a request whose windows are one (one question on a context
    that fits one window) runs the model through XLA (`model_call.ModelCall`).

    The features are those of `squad_features.convert_examples_to_features`: the context split
    on whitespace into words, each word tokenized on its own; `[CLS] question [SEP]
    window [SEP]` with the question cut to max_query_length pieces and a long context
    cut into windows every doc_stride pieces; the best span is chosen over all windows
    (`_best_spans`). A context without word pieces has no answer (run_squad: "" with
    null odds `squad_postprocess.NO_SPAN_NULL_ODDS`).

    Args:
      model: a `BertSpanLabeler` (start_logits, end_logits [N, S]).
      tokenizer: the `TFBertTokenizer` it was trained with.
      seq_length: --max_seq_length.
      labels: must be None.
      max_query_length, max_answer_length, n_best_size, doc_stride: as run_squad's
        flags of the same names.
      pad_to_max_seq_length: pad every window to seq_length (static shapes).
      xla_single_requests: the XLA call for a request of one window.
    """
    if labels is not None:
        raise UserError(f"a SQuAD export has no labels, got {list(labels)}")
    squad_features.check_lengths(seq_length, doc_stride, max_query_length)
    for name, value in (("max_answer_length", max_answer_length), ("n_best_size", n_best_size)):
        if value < 1:
            raise UserError(f"{name} must be at least 1, got {value}")
    vocab_tokens = _vocab_tokens(tokenizer)
    call = ModelCall(
        model,
        seq_length,
        pad_to_max_seq_length=pad_to_max_seq_length,
        xla_single_requests=xla_single_requests,
    )

    def predict(question, context):
        question, context = text_inputs.checked_request({"question": question, "context": context})
        features = _span_features(
            tokenizer, question, context, seq_length, max_query_length, doc_stride
        )
        features = _cut(features, call)
        outputs = call(features.inputs)
        start_logits = tf.cast(outputs["start_logits"], tf.float32)  # [N, S]
        end_logits = tf.cast(outputs["end_logits"], tf.float32)
        if not pad_to_max_seq_length:
            start_logits, end_logits = (
                _mask_padding(logits, features.inputs["input_mask"])
                for logits in (start_logits, end_logits)
            )
        spans = _best_spans(features, start_logits, end_logits, n_best_size, max_answer_length)
        null_scores = tf.cast(start_logits[:, 0], tf.float64) + tf.cast(
            end_logits[:, 0], tf.float64
        )
        null_score = tf.reduce_min(
            tf.RaggedTensor.from_row_splits(null_scores, features.windows.row_splits), axis=1
        )
        return {
            "answer": _span_text(tokenizer, features, spans, vocab_tokens),
            "score": tf.cast(spans["score"], tf.float32),
            "null_score": tf.cast(null_score, tf.float32),
            "start_logits": _pad_to(tf.gather(start_logits, spans["window"]), seq_length),
            "end_logits": _pad_to(tf.gather(end_logits, spans["window"]), seq_length),
        }

    serve = tf.function(
        predict,
        input_signature=[text_inputs.text_spec("question"), text_inputs.text_spec("context")],
        autograph=False,
    )
    return {"serving_default": serve}
