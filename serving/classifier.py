"""Sentence (pair) classification, regression and multiple-choice signatures: raw text
in, the probabilities run_classifier.py's --do_predict writes (`test_results.tsv`) out,
tokenized and packed in-graph as `data_prep.classifier.classifier_features.convert_example` does.

Loading the export needs `import tensorflow_text` first.

Shape legend: B batch, C choices, S sequence.
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from common.errors import UserError
from serving.inputs import (
    BAD_REQUEST,
    after_checks,
    pack_text,
    checked_request,
    text_spec,
)
from data_prep.text.tf_tokenization import combine_and_pad, graph_check
from serving import windows as serving_windows
from serving.model_call import ModelCall


def classifier_signatures(
    model,
    tokenizer,
    seq_length: int,
    labels,
    *,
    multi_label_threshold: float = 0.5,
    label_separator: str = ",",
    pad_to_max_seq_length: bool = False,
    xla_single_requests: bool = False,
    long_input: str = "truncate",
    doc_stride: int = 0,
    window_pooling: str = "mean",
    max_windows_per_text: int = 16,
) -> dict:
    """Signatures of a `BertClassifier` export.

    serving_default(text_a, text_b) and serving_text_a(text_a), each tf.string [B] ->
      classification: `probabilities` float32 [B, num_labels], `labels` tf.string [B]
        (the most probable label);
      multi-label (the model's `multi_label`): `probabilities` float32 [B, num_labels]
        (a sigmoid each), `predicted` bool [B, num_labels] (probability above
        `multi_label_threshold`) and `labels` tf.string [B], the predicted labels
        joined by `label_separator` ("" for none), as test_results.tsv's last column;
      regression (labels None and one output): `predictions` float32 [B].
    text_a and text_b hold one entry per example (text_b "" for a single sentence);
    batches of other sizes fail with tf.errors.InvalidArgumentError naming both.

    Each request batch is cut to its longest packed input (`model_call.ModelCall.cut`),
    unless `pad_to_max_seq_length`: then every input is padded to seq_length. With
    `xla_single_requests`, a request of one text runs the model through XLA
    (`model_call.ModelCall`).

    With long_input="windows", a text longer than a window is read as
    run_classifier.py --long_input=windows reads it (`window_logits`): its windows'
    logits joined by `window_pooling`, at most `max_windows_per_text` windows.
    """
    is_regression = labels is None
    if is_regression and model.num_labels != 1:
        raise UserError(
            f"labels are required for a classifier with {model.num_labels} "
            f"outputs (labels=None means regression, one output)"
        )
    if not is_regression and len(labels) != model.num_labels:
        raise UserError(
            f"{len(labels)} labels {list(labels)} for a classifier with {model.num_labels} outputs"
        )
    label_names = None if is_regression else tf.constant([str(label) for label in labels])
    multi_label = bool(getattr(model, "multi_label", False))
    call = ModelCall(
        model,
        seq_length,
        pad_to_max_seq_length=pad_to_max_seq_length,
        xla_single_requests=xla_single_requests,
    )

    def predict(text_a, text_b):
        if text_b is None:
            (text_a,) = checked_request({"text_a": text_a})
        else:
            text_a, text_b = checked_request({"text_a": text_a, "text_b": text_b})
        if long_input == "windows":
            logits = window_logits(
                call,
                tokenizer,
                seq_length,
                text_a,
                text_b,
                doc_stride,
                window_pooling,
                max_windows_per_text,
            )
        else:
            inputs = call.cut(pack_text(tokenizer, seq_length, text_a, text_b))
            logits = call(inputs)["logits"]
        if is_regression:
            return {"predictions": logits[:, 0]}
        if multi_label:
            return multi_label_answer(logits, label_names, multi_label_threshold, label_separator)
        probabilities = tf.nn.softmax(logits, axis=-1)
        return {
            "probabilities": probabilities,
            "labels": tf.gather(label_names, tf.argmax(probabilities, axis=-1)),
        }

    pair = tf.function(
        predict, input_signature=[text_spec("text_a"), text_spec("text_b")], autograph=False
    )
    single = tf.function(
        lambda text_a: predict(text_a, None),
        input_signature=[text_spec("text_a")],
        autograph=False,
    )
    return {"serving_default": pair, "serving_text_a": single}


def window_logits(
    call: ModelCall,
    tokenizer,
    seq_length: int,
    text_a: tf.Tensor,
    text_b: tf.Tensor | None,
    doc_stride: int,
    pooling: str,
    max_windows: int,
) -> tf.Tensor:
    """float32 [B, K]: each text's logits joined over its windows (the mean, or the
    maximum with pooling "max"), the windows cut as
    `data_prep.classifier.classifier_windows.window_pieces` cuts them: of a single
    text, windows of seq_length - 2 pieces; of a pair (text_b not ""), windows over the
    longer text with the shorter (at most (seq_length - 3) // 2 pieces) whole in its
    place; the first `max_windows` windows of each text.

    Args:
      text_a, text_b: tf.string [B] (text_b None: single texts).
    """
    ids_a = tf.cast(tokenizer.tokenize(text_a), tf.int64)  # [B, (P)]
    rows = tf.shape(text_a, out_type=tf.int64)[0]
    if text_b is None:
        has_b = tf.zeros([rows], tf.bool)
        ids_b = ids_a[:, :0]
    else:
        has_b = tf.strings.length(text_b) > 0  # "" tokenizes to no pieces
        ids_b = tf.cast(tokenizer.tokenize(text_b), tf.int64)
    a_is_long = ids_a.row_lengths() >= ids_b.row_lengths()  # [B]
    both = tf.concat([ids_a, ids_b], axis=0)  # [2B, (P)]
    index = tf.range(rows)
    long = tf.gather(both, tf.where(a_is_long, index, index + rows))  # [B, (L)]
    short = tf.gather(both, tf.where(a_is_long, index + rows, index))[:, : (seq_length - 3) // 2]
    room = tf.where(has_b, seq_length - 3 - short.row_lengths(), seq_length - 2)  # [B]
    windows = serving_windows.make_windows(long.row_lengths(), room, doc_stride)
    in_row = tf.range(tf.size(windows.row, out_type=tf.int64)) - tf.gather(
        windows.row_splits, windows.row
    )
    kept = in_row < max_windows
    windows = serving_windows.Windows(
        tf.boolean_mask(windows.row, kept),
        windows.row_splits,  # (not used below)
        tf.boolean_mask(windows.start, kept),
        tf.boolean_mask(windows.length, kept),
    )
    piece = tf.gather(long.flat_values, serving_windows.window_pieces(windows, long))  # [N, (W)]
    other = tf.gather(short, windows.row)  # [N, (Q)]
    first_long = tf.gather(a_is_long, windows.row)[:, None]  # [N, 1]
    single = combine_and_pad([piece], seq_length, tokenizer.cls_id, tokenizer.sep_id)
    long_a = combine_and_pad([piece, other], seq_length, tokenizer.cls_id, tokenizer.sep_id)
    long_b = combine_and_pad([other, piece], seq_length, tokenizer.cls_id, tokenizer.sep_id)
    pair = tf.gather(has_b, windows.row)[:, None]
    inputs = {
        k: tf.where(pair, tf.where(first_long, long_a[k], long_b[k]), single[k]) for k in single
    }
    logits = tf.cast(call(call.cut(inputs))["logits"], tf.float32)  # [N, K]
    join = tf.math.segment_max if pooling == "max" else tf.math.segment_mean
    return join(logits, windows.row)


def multi_label_answer(logits, label_names, threshold: float, separator: str) -> dict:
    """A multi-label classifier's answer: float32 probabilities [B, L], bool predicted
    [B, L], and the predicted labels joined by `separator`, tf.string [B].

    Args:
      logits: [B, L].
      label_names: tf.string [L].
    """
    probabilities = tf.sigmoid(tf.cast(logits, tf.float32))
    predicted = probabilities > threshold
    names = tf.where(predicted, tf.broadcast_to(label_names, tf.shape(predicted)), "")
    chosen = tf.ragged.boolean_mask(names, predicted)  # [B, (labels)]
    joined = tf.strings.reduce_join(chosen, axis=-1, separator=separator)
    return {"probabilities": probabilities, "predicted": predicted, "labels": joined}


def join_start_and_ending(start: tf.Tensor, endings: tf.Tensor) -> tf.Tensor:
    """tf.string [B, C]: each choice as `SwagProcessor` makes it from the CSV's `sent2`
    (the start of the continuation) and `ending{i}`: "start ending", or the ending
    alone where the start is blank.

    Args:
      start: tf.string [B].
      endings: tf.string [B, C].
    """
    start = tf.strings.strip(start)[:, tf.newaxis]  # [B, 1]
    joined = tf.strings.join([tf.broadcast_to(start, tf.shape(endings)), endings], separator=" ")
    return tf.where(tf.strings.length(start) > 0, joined, endings)


def multiple_choice_signatures(
    model,
    tokenizer,
    seq_length: int,
    labels: Sequence[str] | None,
    *,
    pad_to_max_seq_length: bool = False,
    xla_single_requests: bool = False,
) -> dict:
    """Signatures of a `BertMultipleChoice` export (SWAG), scoring as run_classifier.py
    does.

    serving_default(context: [B], start: [B], endings: [B, C]), tf.string, the SWAG
      CSV's `sent1`, `sent2` and `ending0`..`ending{C-1}` (`join_start_and_ending`);
    serving_choices(context: [B], choices: [B, C]), each choice's whole text;
    each ->
      probabilities: float32 [B, C], the softmax over the choices (the runner's
        test_results.tsv row);
      best_choice: int64 [B], the index of the most probable choice (the label).

    Every choice is packed with the context as `[CLS] context [SEP] choice [SEP]`
    (an empty choice too), the longer segment truncated first. The inputs hold one
    row per example (context [B], start [B], endings or choices [B, C], C >= 1);
    others fail with tf.errors.InvalidArgumentError naming them. Each request batch is
    cut to its longest packed choice (`model_call.ModelCall.cut`), unless
    `pad_to_max_seq_length`. With `xla_single_requests`, a request of one example (its
    C choices) runs the model through XLA (`model_call.ModelCall`).

    Args:
      model: a `BertMultipleChoice` (logits [B, C] from inputs [B, C, S]).
      tokenizer: the `TFBertTokenizer` it was trained with.
      seq_length: --max_seq_length.
      labels: the choice labels "0".."C-1" of the task (fixing C), or None (any C).
      pad_to_max_seq_length: pad every choice to seq_length (static shapes).
      xla_single_requests: the XLA call for one example.
    """
    call = ModelCall(
        model,
        seq_length,
        pad_to_max_seq_length=pad_to_max_seq_length,
        xla_single_requests=xla_single_requests,
    )
    num_choices = None
    if labels is not None:
        num_choices = len(labels)
        if list(labels) != [str(i) for i in range(num_choices)]:
            raise UserError(
                f"multiple-choice labels must be the choice indices "
                f"{[str(i) for i in range(num_choices)]}, got {list(labels)}"
            )

    def predict(context, choices, choices_name):
        shape = tf.shape(choices, out_type=tf.int64)  # [B, C]
        check = graph_check(
            shape[1] > 0, f"{BAD_REQUEST} {choices_name} holds no choice for each example"
        )
        context, choices = after_checks([check], [context, choices])
        contexts = tf.repeat(context, shape[1])  # [B * C]: each row C times, as choices
        packed = tokenizer.bert_pack_inputs(
            [tokenizer.tokenize(contexts), tokenizer.tokenize(tf.reshape(choices, [-1]))],
            seq_length,
        )
        packed = call.cut(packed, examples=shape[0])
        inputs = {
            k: tf.reshape(v, [-1, shape[1], tf.shape(v, out_type=tf.int64)[1]])  # [B, C, S]
            for k, v in packed.items()
        }
        probabilities = tf.nn.softmax(tf.cast(call(inputs)["logits"], tf.float32), axis=-1)
        return {"probabilities": probabilities, "best_choice": tf.argmax(probabilities, axis=-1)}

    def predict_parts(context, start, endings):
        context, start, endings = checked_request(
            {"context": context, "start": start, "endings": endings}
        )
        return predict(context, join_start_and_ending(start, endings), "endings")

    def choices_spec(name):
        return tf.TensorSpec([None, num_choices], tf.string, name=name)

    by_parts = tf.function(
        predict_parts,
        input_signature=[text_spec("context"), text_spec("start"), choices_spec("endings")],
        autograph=False,
    )

    def predict_choices(context, choices):
        context, choices = checked_request({"context": context, "choices": choices})
        return predict(context, choices, "choices")

    whole = tf.function(
        predict_choices,
        input_signature=[text_spec("context"), choices_spec("choices")],
        autograph=False,
    )
    return {"serving_default": by_parts, "serving_choices": whole}
