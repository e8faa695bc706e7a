"""SavedModel exports: TF Hub encoders, the preprocessing model, text-in task models.

Every export goes through `save_atomically`: the SavedModel is written to a temporary
folder beside the destination and renamed onto it only once complete, so a half-written
export (an exception, a kill) never sits at the destination and a failed export leaves
an existing one untouched.

The encoder (`EncoderModule`) is a TF2 reusable SavedModel laid out as the official TF
Hub BERT encoders:
  obj(inputs, training=False): `inputs` a dict of int32 [B, S] `input_word_ids`,
    `input_mask`, `input_type_ids` (any B, S <= max_position_embeddings). Returns a dict
    of float32 `sequence_output` [B, S, H], `pooled_output` [B, H], `default` (=
    pooled_output) and `encoder_outputs` (L tensors [B, S, H]). Traced for training=True
    (dropout on) and training=False.
  obj.variables, obj.trainable_variables, obj.regularization_losses: what
    `hub.KerasLayer(..., trainable=True)` fine-tunes.
  obj.vocab_file (tf.saved_model.Asset), obj.do_lower_case (bool tf.Variable),
    obj.bert_config_file (Asset, this project's addition: the exact config).
  obj.mlm (with the masked-LM head only): the same call with an extra int32 [B, P]
    `masked_lm_positions`; adds float32 `mlm_logits` [B, P, V].
  Signatures `serving_default` (and `mlm`), for `saved_model_cli` and TF Serving; their
  outputs are flat: `encoder_outputs` becomes `encoder_outputs_0` ... `_{L-1}`.

The preprocessing model (`PreprocessingModule`) follows `bert_en_uncased_preprocess`:
  obj(strings [B]) -> the three int32 [B, seq_length] id tensors;
  obj.tokenize(strings [B]) -> int32 RaggedTensor [B, (words), (pieces)];
  obj.bert_pack_inputs(segments, seq_length=...) -> the three id tensors, one or two
    segments (ragged [B, (T)] or [B, (W), (P)]) packed as `[CLS] A [SEP] (B [SEP])`.
  Loading it needs `import tensorflow_text` first (it registers the ops).

Task exports (`export_task_model`) answer raw text, tokenizing in-graph with the same
tokenizer, packing and windowing as the runner's data writer, so that they predict what
the runner's --do_predict predicts for the same checkpoint:
  classifier: `serving_default(text_a, text_b)` and `serving_text_a(text_a)` ->
    `probabilities`, `labels` (`_classifier_signatures`);
  squad: `serving_default(question, context)` -> `answer`, `score`, `null_score`,
    `start_logits`, `end_logits` (`_squad_signatures`);
  ner: `serving_default(text)` -> `tags`, `words` (`_ner_signatures`).
Loading a task export needs `import tensorflow_text` first.

Shape legend: B batch, S sequence, H hidden, L layers, P predictions, V vocab, W words,
N windows (of every row of the batch together).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import shutil
import tempfile
from typing import Callable, NamedTuple, Sequence

import tensorflow as tf
import tensorflow_text as tf_text
from absl import logging

from data_prep import squad_features, squad_reader, tf_tokenization, tokenization
from modeling import layers as bert_layers
from modeling.encoder import INPUT_KEYS

# Outputs of the encoder's __call__: the names of the official TF Hub BERT encoders.
ENCODER_OUTPUT_KEYS = ("sequence_output", "pooled_output", "encoder_outputs", "default")
MLM_POSITIONS_KEY = "masked_lm_positions"
# The preprocessing model's bert_pack_inputs is traced for these many segments.
PACK_SEGMENT_COUNTS = (1, 2)


# ---------------------------------------------------------------------------------
# Atomic export.


def _check_local(export_path: str) -> None:
    if "://" in export_path:
        raise ValueError(f"export path {export_path!r}: only local paths can be exported "
                         f"atomically; export locally, then copy the folder")


def _replace_directory(source: str, target: str) -> None:
    """Renames `source` onto `target`, replacing an existing `target` folder.

    The old folder is first moved aside (a rename, atomic on one file system), then
    put back if the new one cannot be moved in, so `target` holds either the old or the
    new export, never a mixture.
    """
    if not os.path.lexists(target):
        os.rename(source, target)
        return
    if not os.path.isdir(target):
        raise FileExistsError(f"export path {target} exists and is not a folder")
    backup = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.old-",
                              dir=os.path.dirname(target))
    os.rmdir(backup)
    os.rename(target, backup)
    try:
        os.rename(source, target)
    except BaseException:
        os.rename(backup, target)
        raise
    shutil.rmtree(backup, ignore_errors=True)


@contextlib.contextmanager
def atomic_directory(export_path: str):
    """Yields a fresh temporary folder that becomes `export_path` on success.

    The folder is created beside `export_path` (same file system, so the final rename
    is atomic) with a hidden name `.NAME.tmp-*`. On any exception it is deleted and
    `export_path` is left as it was; a process killed midway leaves only the hidden
    folder behind.
    """
    _check_local(export_path)
    export_path = os.path.abspath(export_path)
    parent = os.path.dirname(export_path)
    os.makedirs(parent, exist_ok=True)
    temp = tempfile.mkdtemp(prefix=f".{os.path.basename(export_path)}.tmp-", dir=parent)
    try:
        yield temp
        _replace_directory(temp, export_path)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def standard_ops(export):
    """Decorates an export function: what it traces holds only standard TensorFlow ops
    (`modeling.layers.plain_ops`; training fuses element-wise chains with XLA)."""

    @functools.wraps(export)
    def wrapped(*args, **kwargs):
        with bert_layers.plain_ops():
            return export(*args, **kwargs)

    return wrapped


def save_atomically(module: tf.Module, export_path: str,
                    signatures: dict | None = None) -> str:
    """`tf.saved_model.save(module, export_path, signatures)` via `atomic_directory`.

    Returns:
      the absolute export path.
    """
    with atomic_directory(export_path) as temp:
        tf.saved_model.save(module, temp, signatures=signatures)
    logging.info("Exported SavedModel to %s", export_path)
    return os.path.abspath(export_path)


# ---------------------------------------------------------------------------------
# The TF Hub encoder.


def _tf_variable(variable) -> tf.Variable:
    """The tf.Variable behind a Keras 3 variable (what traced functions capture)."""
    return getattr(variable, "value", variable) if hasattr(variable, "path") else variable


def _collect_variables(keras_layers: Sequence) -> tuple[list, list]:
    """(all variables, trainable variables) of the layers, as tf.Variables, deduplicated."""
    everything, trainable, seen = [], [], set()
    for layer in keras_layers:
        for variable in layer.variables:
            tf_variable = _tf_variable(variable)
            if id(tf_variable) in seen:
                continue
            seen.add(id(tf_variable))
            everything.append(tf_variable)
            if variable.trainable:
                trainable.append(tf_variable)
    return everything, trainable


def id_specs(keys: Sequence[str] = INPUT_KEYS) -> dict[str, tf.TensorSpec]:
    """int32 [B, S] TensorSpecs keyed (and named) by `keys`."""
    return {k: tf.TensorSpec([None, None], tf.int32, name=k) for k in keys}


class ReusableModule(tf.Module):
    """A tf.Module saved with the attributes of a TF2 reusable SavedModel.

    `variables`, `trainable_variables` and `regularization_losses` are plain lists
    saved with the object (tf.Module computes the first two, and they would not be
    saved); `__call__` is a tf.function traced for training=True and training=False.
    """

    # Class attributes shadow tf.Module's computed properties, so that __init__ can
    # store the lists as ordinary (saved) attributes.
    variables = None
    trainable_variables = None
    regularization_losses = None

    def __init__(self, keras_layers: Sequence, call_fn: Callable, input_specs: dict,
                 name: str):
        """Args:
          keras_layers: the Keras layers whose variables the calls use.
          call_fn: (inputs dict, training bool) -> outputs dict.
          input_specs: TensorSpecs of the inputs dict.
          name: module name.
        """
        super().__init__(name=name)
        self.variables, self.trainable_variables = _collect_variables(keras_layers)
        self.regularization_losses = []

        @tf.function
        def call(inputs, training=False):
            return call_fn(inputs, training)

        for training in (False, True):
            call.get_concrete_function(input_specs, training=training)
        self.__call__ = call


def encoder_outputs(encoder, inputs: dict, training: bool) -> dict:
    """The TF Hub output dict of `encoder` on `inputs`, in float32.

    Returns:
      sequence_output [B, S, H], pooled_output [B, H], default [B, H] (a copy of
      pooled_output), encoder_outputs: list of L [B, S, H].
    """
    # A loaded function is specialised to each call's shapes; hiding the static shape
    # lets the encoder's own check name a too-long input (max_position_embeddings)
    # instead of failing shape inference deep inside the embeddings.
    inputs = {k: tf.compat.v1.placeholder_with_default(inputs[k], [None, None])
              for k in INPUT_KEYS}
    outputs = encoder(inputs, training=training)
    pooled = tf.cast(outputs["pooled_output"], tf.float32)
    return {"sequence_output": tf.cast(outputs["sequence_output"], tf.float32),
            "pooled_output": pooled,
            "default": tf.identity(pooled, name="default"),
            "encoder_outputs": [tf.cast(x, tf.float32) for x in outputs["encoder_outputs"]]}


def masked_lm_outputs(encoder, masked_lm, inputs: dict, training: bool) -> dict:
    """encoder_outputs plus float32 `mlm_logits` [B, P, V] at `masked_lm_positions`."""
    outputs = encoder_outputs(encoder, inputs, training)
    outputs["mlm_logits"] = masked_lm(outputs["sequence_output"], inputs[MLM_POSITIONS_KEY],
                                      encoder.word_embeddings)
    return outputs


def flatten_outputs(outputs: dict) -> dict:
    """Signature outputs must be flat: encoder_outputs -> encoder_outputs_{i}."""
    flat = {k: v for k, v in outputs.items() if k != "encoder_outputs"}
    for i, x in enumerate(outputs["encoder_outputs"]):
        flat[f"encoder_outputs_{i}"] = x
    return flat


class EncoderModule(ReusableModule):
    """The TF Hub encoder SavedModel object (see the module docstring).

    Attributes:
      vocab_file: tf.saved_model.Asset of the WordPiece vocabulary.
      do_lower_case: bool tf.Variable (not trainable).
      bert_config_file: tf.saved_model.Asset of the `bert_config.json`, or absent.
      mlm: a ReusableModule with the masked-LM head, or absent.
    """

    def __init__(self, encoder, vocab_file: str, do_lower_case: bool,
                 bert_config_file: str | None = None, masked_lm=None):
        """Args:
          encoder: a `BertEncoder` (float32 outputs are exported whatever its policy).
          vocab_file: path of the vocabulary the encoder was trained with.
          do_lower_case: whether that vocabulary is uncased.
          bert_config_file: path of the encoder's `bert_config.json`, saved as an asset.
          masked_lm: the pre-trainer's `MaskedLMHead`, exported as `mlm`.
        """
        if not tf.io.gfile.exists(vocab_file):
            raise FileNotFoundError(f"vocab file not found: {vocab_file}")
        super().__init__([encoder], lambda x, t: encoder_outputs(encoder, x, t), id_specs(),
                         name="bert_encoder")
        self.vocab_file = tf.saved_model.Asset(vocab_file)
        self.do_lower_case = tf.Variable(bool(do_lower_case), trainable=False,
                                         name="do_lower_case")
        if bert_config_file:
            self.bert_config_file = tf.saved_model.Asset(bert_config_file)
        if masked_lm is not None:
            self.mlm = ReusableModule(
                [encoder, masked_lm], lambda x, t: masked_lm_outputs(encoder, masked_lm, x, t),
                id_specs(INPUT_KEYS + (MLM_POSITIONS_KEY,)), name="mlm")


def _signature(call, keys: Sequence[str]):
    """A signature function: keyword int32 [B, S] inputs, `call(..., training=False)`
    with flat outputs (a call op on the traced function, not a second trace)."""
    inference = call.get_concrete_function(id_specs(keys), training=False)

    @tf.function(input_signature=list(id_specs(keys).values()))
    def serve(*tensors):
        return flatten_outputs(inference(dict(zip(keys, tensors)), training=False))

    return serve


def encoder_signatures(module: EncoderModule) -> dict:
    """`serving_default` (and `mlm`), for saved_model_cli and TF Serving."""
    signatures = {"serving_default": _signature(module.__call__, INPUT_KEYS)}
    if hasattr(module, "mlm"):
        signatures["mlm"] = _signature(module.mlm.__call__, INPUT_KEYS + (MLM_POSITIONS_KEY,))
    return signatures


@standard_ops
def export_encoder(encoder, export_path: str, vocab_file: str, do_lower_case: bool,
                   masked_lm=None) -> str:
    """Exports `encoder` (and optionally its masked-LM head) as a TF Hub SavedModel.

    Args:
      encoder: a built `BertEncoder` holding the weights to export.
      export_path: destination folder (replaced only when the export is complete).
      vocab_file: vocabulary to bundle as the `vocab_file` asset.
      do_lower_case: stored as the `do_lower_case` variable.
      masked_lm: a `MaskedLMHead` (e.g. `BertPretrainer.masked_lm`) for `mlm`.

    Returns:
      the absolute export path.
    """
    with tempfile.TemporaryDirectory() as staging:
        config_file = os.path.join(staging, "bert_config.json")
        encoder.config.to_json_file(config_file)
        module = EncoderModule(encoder, vocab_file, do_lower_case, config_file, masked_lm)
        return save_atomically(module, export_path, encoder_signatures(module))


# ---------------------------------------------------------------------------------
# The preprocessing model.


def pack_inputs(segments, seq_length, cls_id: int, sep_id: int) -> dict[str, tf.Tensor]:
    """`tf_tokenization.bert_pack_inputs`, with the segment count checked here."""
    if len(segments) not in PACK_SEGMENT_COUNTS:
        raise ValueError(f"bert_pack_inputs takes 1 or 2 segments, got {len(segments)}")
    return tf_tokenization.bert_pack_inputs(segments, seq_length, cls_id, sep_id)


class PackInputsModule(tf.Module):
    """`bert_pack_inputs(segments, seq_length=default)` as a saved callable.

    Traced for a list of 1 or 2 segments, each an int32 RaggedTensor [B, (T)] or
    [B, (W), (P)], with `seq_length` a scalar int32 (a Python int works too after
    loading).
    """

    def __init__(self, cls_id: int, sep_id: int, default_seq_length: int):
        super().__init__(name="bert_pack_inputs")
        self.default_seq_length = default_seq_length

        @tf.function
        def pack(segments, seq_length=default_seq_length):
            return pack_inputs(list(segments), seq_length, cls_id, sep_id)

        seq_length = tf.TensorSpec([], tf.int32, name="seq_length")
        by_rank = [tf.RaggedTensorSpec([None] * rank, tf.int32, ragged_rank=rank - 1)
                   for rank in (2, 3)]
        for num_segments in PACK_SEGMENT_COUNTS:
            for segments in itertools.product(by_rank, repeat=num_segments):
                pack.get_concrete_function(list(segments), seq_length=seq_length)
        self.__call__ = pack


class PreprocessingModule(tf.Module):
    """The preprocessing SavedModel object (see the module docstring).

    Attributes:
      tokenizer: the `TFBertTokenizer` (vocabulary table and asset).
      vocab_file: tf.saved_model.Asset of the vocabulary.
      do_lower_case: bool tf.Variable.
      tokenize: tf.function strings [B] -> int32 RaggedTensor [B, (W), (P)].
      bert_pack_inputs: a `PackInputsModule`.
      seq_length: the sequence length of __call__.
    """

    def __init__(self, vocab_file: str, do_lower_case: bool, seq_length: int = 128):
        super().__init__(name="bert_preprocess")
        if seq_length < 2:
            raise ValueError(f"seq_length={seq_length} leaves no room for [CLS] and [SEP]")
        tokenizer = tf_tokenization.TFBertTokenizer(vocab_file, do_lower_case)
        self.tokenizer = tokenizer
        self.vocab_file = tokenizer.vocab_file or tf.saved_model.Asset(vocab_file)
        self.do_lower_case = tf.Variable(bool(do_lower_case), trainable=False,
                                         name="do_lower_case")
        self.seq_length = seq_length
        self.bert_pack_inputs = PackInputsModule(tokenizer.cls_id, tokenizer.sep_id,
                                                 seq_length)
        text = tf.TensorSpec([None], tf.string, name="inputs")
        self.tokenize = tf.function(tokenizer.tokenize_words, input_signature=[text])

        @tf.function(input_signature=[text])
        def call(inputs):
            return tokenizer.bert_pack_inputs([tokenizer.tokenize_words(inputs)], seq_length)

        self.__call__ = call


@standard_ops
def export_preprocessing(export_path: str, vocab_file: str, do_lower_case: bool,
                         seq_length: int = 128) -> str:
    """Exports the text -> BERT inputs preprocessing model. Returns the export path."""
    module = PreprocessingModule(vocab_file, do_lower_case, seq_length)
    return save_atomically(module, export_path, {"serving_default": module.__call__})


# ---------------------------------------------------------------------------------
# Task models with a raw-text serving signature.


def pack_text(tokenizer, seq_length: int, text_a: tf.Tensor,
              text_b: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
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


def _text_spec(name: str) -> tf.TensorSpec:
    return tf.TensorSpec([None], tf.string, name=name)


def _classifier_signatures(model, tokenizer, seq_length: int, labels) -> dict:
    """Signatures of a `BertClassifier` export.

    serving_default(text_a, text_b) and serving_text_a(text_a), each tf.string [B] ->
      classification: `probabilities` float32 [B, num_labels], `labels` tf.string [B]
        (the most probable label);
      regression (labels None and one output): `predictions` float32 [B].
    """
    is_regression = labels is None
    if is_regression and model.num_labels != 1:
        raise ValueError(f"labels are required for a classifier with {model.num_labels} "
                         f"outputs (labels=None means regression, one output)")
    if not is_regression and len(labels) != model.num_labels:
        raise ValueError(f"{len(labels)} labels {list(labels)} for a classifier with "
                         f"{model.num_labels} outputs")
    label_names = None if is_regression else tf.constant([str(l) for l in labels])

    def predict(text_a, text_b):
        logits = model(pack_text(tokenizer, seq_length, text_a, text_b),
                       training=False)["logits"]
        if is_regression:
            return {"predictions": logits[:, 0]}
        probabilities = tf.nn.softmax(logits, axis=-1)
        return {"probabilities": probabilities,
                "labels": tf.gather(label_names, tf.argmax(probabilities, axis=-1))}

    pair = tf.function(predict, input_signature=[_text_spec("text_a"), _text_spec("text_b")])
    single = tf.function(lambda text_a: predict(text_a, None),
                         input_signature=[_text_spec("text_a")])
    return {"serving_default": pair, "serving_text_a": single}


# ---------------------------------------------------------------------------------
# Windows over long inputs, in-graph (SQuAD contexts, NER sentences).


class _Windows(NamedTuple):
    """Windows over the word pieces of every row of a batch, flattened over the batch.

    Attributes:
      row: int64 [N], the batch row of each window.
      row_splits: int64 [B + 1]; the windows of row b are row_splits[b]:row_splits[b+1].
      start: int64 [N], index of the window's first piece among its row's pieces.
      length: int64 [N], pieces in the window.
    """
    row: tf.Tensor
    row_splits: tf.Tensor
    start: tf.Tensor
    length: tf.Tensor


def _make_windows(num_pieces: tf.Tensor, max_pieces: tf.Tensor,
                  doc_stride: int) -> _Windows:
    """The windows of `squad.doc_spans` / `conll.make_windows`, for every row at once.

    Windows of at most max_pieces pieces start every min(max_pieces, doc_stride) pieces
    until one reaches the row's end. A row without pieces gets one empty window (where
    `doc_spans` has none), so that every row has a model input.

    Args:
      num_pieces: int64 [B], pieces of each row.
      max_pieces: int64 [B], the window size of each row (>= 1).
      doc_stride: int >= 1.
    """
    step = tf.minimum(max_pieces, doc_stride)
    excess = num_pieces - max_pieces
    count = tf.where(excess > 0, (excess + step - 1) // step + 1, tf.ones_like(excess))
    index = tf.ragged.range(count)  # [B, (windows)]: k, the window's index in its row
    row = index.value_rowids()
    start = index.flat_values * tf.gather(step, row)
    length = tf.minimum(tf.gather(num_pieces, row) - start, tf.gather(max_pieces, row))
    return _Windows(row, index.row_splits, start, length)


def _window_pieces(windows: _Windows, pieces: tf.RaggedTensor) -> tf.RaggedTensor:
    """int64 RaggedTensor [N, (length)]: the index in `pieces.flat_values` of every
    piece of every window (`pieces`: [B, (D)])."""
    first = tf.gather(pieces.row_splits, windows.row) + windows.start
    return tf.ragged.range(first, first + windows.length)


def _max_context(windows: _Windows, window_pieces: tf.RaggedTensor,
                 num_pieces: tf.Tensor) -> tuple[tf.RaggedTensor, tf.Tensor]:
    """The window that gives each piece the most context, as `squad.is_max_context`
    and `conll.max_context_windows` choose it.

    A piece's score in a window holding it is min(pieces to its left, pieces to its
    right) + 0.01 x the window's length (float64, so equal to the Python score); the
    first window with the highest score wins.

    Args:
      windows: from `_make_windows`.
      window_pieces: from `_window_pieces`.
      num_pieces: scalar, the number of pieces of the whole batch.

    Returns:
      (is_max: bool RaggedTensor [N, (length)], whether the window is its piece's best;
       best: int64 [num_pieces], the best window of every piece of the batch).
    """
    window = window_pieces.value_rowids()
    position = (tf.range(tf.size(window, out_type=tf.int64))
                - tf.gather(window_pieces.row_splits, window))
    length = tf.gather(windows.length, window)
    score = (tf.cast(tf.minimum(position, length - 1 - position), tf.float64)
             + 0.01 * tf.cast(length, tf.float64))
    piece = window_pieces.flat_values
    best_score = tf.math.unsorted_segment_max(score, piece, num_pieces)
    never = tf.shape(windows.row, out_type=tf.int64)[0]
    best = tf.math.unsorted_segment_min(
        tf.where(tf.equal(score, tf.gather(best_score, piece)), window, never), piece,
        num_pieces)
    return window_pieces.with_flat_values(tf.equal(window, tf.gather(best, piece))), best


def _tokenize_words(tokenizer, words: tf.RaggedTensor) -> tf.RaggedTensor:
    """int32 RaggedTensor [Nw, (P)]: the pieces of each word of `words` ([B, (W)],
    flattened), each word tokenized on its own as the data writers do."""
    return tokenizer.tokenize(words.flat_values)


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


# ---------------------------------------------------------------------------------
# SQuAD.

# Characters that separate the words of a context (`squad.split_context`).
# pylint: disable-next=protected-access
SQUAD_CONTEXT_WHITESPACE = _regex_class(squad_reader.CONTEXT_WHITESPACE)


def _basic_tokens(tokenizer, text: tf.Tensor) -> tf.RaggedTensor:
    """tf.string [B, (T)]: `tokenization.BasicTokenizer(do_lower_case).tokenize` of
    each string (cleaned, lower-cased and stripped of accents if uncased, split on
    whitespace and punctuation; unlike `split_words`, long words are kept)."""
    # pylint: disable=protected-access
    return tf_text.regex_split(tokenizer.normalize(text), tokenizer._split_delimiters,
                               tokenizer._split_keep)


def final_text(tokenizer, pred_text: tf.Tensor, orig_text: tf.Tensor) -> tf.Tensor:
    """`squad.get_final_text` in-graph: the predicted text projected onto the original.

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
    tok_text = tf.strings.reduce_join(_basic_tokens(tokenizer, orig_text), axis=-1,
                                      separator=" ")

    def project(args):
        pred, orig, tok = args
        before = tf.strings.split(tok, sep=pred, maxsplit=1)
        found = tf.logical_and(tf.strings.length(pred) > 0, tf.size(before) == 2)
        start = tf.strings.length(tf.concat([before, [""]], 0)[0], unit="UTF8_CHAR")
        orig_chars = tf.where(tf.strings.unicode_decode(orig, "UTF-8") != 32)[:, 0]
        tok_is_char = tf.strings.unicode_decode(tok, "UTF-8") != 32
        pred_chars = tf.reduce_sum(tf.cast(
            tf.strings.unicode_decode(pred, "UTF-8") != 32, tf.int64))
        ok = tf.logical_and(found, tf.logical_and(
            tf.size(orig_chars, out_type=tf.int64) == tf.reduce_sum(
                tf.cast(tok_is_char, tf.int64)), pred_chars > 0))
        first = tf.reduce_sum(tf.cast(tok_is_char[:start], tf.int64))
        last = first + pred_chars - 1
        # Indices kept in range where `ok` is false (the result is then `orig`).
        padded = tf.concat([orig_chars, [0]], 0)
        limit = tf.size(padded, out_type=tf.int64) - 1
        begin = tf.gather(padded, tf.clip_by_value(first, 0, limit))
        end = tf.gather(padded, tf.clip_by_value(last, 0, limit))
        answer = tf.strings.substr(orig, begin, tf.maximum(end - begin + 1, 0),
                                   unit="UTF8_CHAR")
        return tf.where(ok, answer, orig)

    return tf.map_fn(project, (pred_text, orig_text, tok_text),
                     fn_output_signature=tf.TensorSpec([], tf.string))


class _SpanFeatures(NamedTuple):
    """The SQuAD features of a batch of questions, and what maps them back.

    Attributes:
      words: tf.string RaggedTensor [B, (W)], the whitespace-split context.
      windows: the context windows (`_make_windows`).
      inputs: the model inputs, int32 [N, S] each.
      token_to_word: int64 [N, S], the word (index in its row of `words`) of each
        context piece, -1 at [CLS], the question, [SEP] and padding.
      token_is_max: bool [N, S], whether the window is the one where the context piece
        there has its maximum context.
      seq_length: S.
    """
    words: tf.RaggedTensor
    windows: _Windows
    inputs: dict
    token_to_word: tf.Tensor
    token_is_max: tf.Tensor
    seq_length: int


def _span_features(tokenizer, question: tf.Tensor, context: tf.Tensor, seq_length: int,
                   max_query_length: int, doc_stride: int) -> _SpanFeatures:
    """`squad.convert_examples_to_features` (prediction) in-graph, on tf.string [B]."""
    words = tf_text.regex_split(context, SQUAD_CONTEXT_WHITESPACE)
    word_pieces = _tokenize_words(tokenizer, words)  # [sum W, (P)]
    pieces = tf.RaggedTensor.from_row_splits(word_pieces, words.row_splits).merge_dims(1, 2)
    word_in_row = tf.ragged.range(words.row_lengths()).flat_values
    piece_word = tf.gather(word_in_row, word_pieces.value_rowids())  # [sum D]
    query = tokenizer.tokenize(question)[:, :max_query_length]  # [B, (Q)]
    query_length = query.row_lengths()
    windows = _make_windows(pieces.row_lengths(), seq_length - query_length - 3,
                            doc_stride)
    window_pieces = _window_pieces(windows, pieces)  # [N, (length)]
    is_max, _ = _max_context(windows, window_pieces,
                             tf.shape(pieces.flat_values, out_type=tf.int64)[0])
    inputs = tf_tokenization.combine_and_pad(
        [tf.gather(query, windows.row), tf.gather(pieces.flat_values, window_pieces)],
        seq_length, tokenizer.cls_id, tokenizer.sep_id)
    prefix = tf.gather(query_length, windows.row) + 2  # [CLS] question [SEP]
    num_prefix = tf.reduce_sum(prefix)
    token_to_word = tf.concat([
        tf.RaggedTensor.from_row_lengths(tf.fill([num_prefix], tf.constant(-1, tf.int64)),
                                         prefix),
        tf.gather(piece_word, window_pieces)], axis=1)
    token_is_max = tf.concat([
        tf.RaggedTensor.from_row_lengths(tf.zeros([num_prefix], tf.bool), prefix),
        is_max], axis=1)
    return _SpanFeatures(words, windows, inputs,
                         token_to_word.to_tensor(-1, shape=[None, seq_length]),
                         token_is_max.to_tensor(False, shape=[None, seq_length]),
                         seq_length)


def _best_spans(features: _SpanFeatures, start_logits: tf.Tensor, end_logits: tf.Tensor,
                n_best_size: int, max_answer_length: int) -> dict[str, tf.Tensor]:
    """run_squad's best non-null span of every question (`squad.predict_example`).

    Candidates are the n_best_size highest start logits x the n_best_size highest end
    logits of every window, in run_squad's order (window, start rank, end rank); valid
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
    top = min(n_best_size, features.seq_length)
    starts = tf.math.top_k(start_logits, top).indices  # [N, top], best first
    ends = tf.math.top_k(end_logits, top).indices
    start_at = tf.repeat(starts, top, axis=1)  # [N, top * top]
    end_at = tf.tile(ends, [1, top])
    token_to_word, token_is_max = features.token_to_word, features.token_is_max
    valid = ((tf.gather(token_to_word, start_at, batch_dims=1) >= 0)
             & (tf.gather(token_to_word, end_at, batch_dims=1) >= 0)
             & tf.gather(token_is_max, start_at, batch_dims=1)
             & (start_at <= end_at) & (end_at < start_at + max_answer_length))
    scores = (tf.gather(tf.cast(start_logits, tf.float64), start_at, batch_dims=1)
              + tf.gather(tf.cast(end_logits, tf.float64), end_at, batch_dims=1))
    scores = tf.where(valid, scores, tf.constant(-float("inf"), tf.float64))
    by_question = tf.RaggedTensor.from_row_splits(
        scores, features.windows.row_splits).to_tensor(-float("inf"))  # [B, n, top^2]
    by_question = tf.reshape(by_question, [tf.shape(by_question)[0], -1])
    score = tf.reduce_max(by_question, axis=1)
    has_span = score > -float("inf")
    order = tf.range(tf.shape(by_question, out_type=tf.int64)[1])
    best = tf.reduce_min(tf.where(tf.equal(by_question, score[:, tf.newaxis]), order,
                                  tf.int64.max), axis=1)
    best = tf.where(has_span, best, 0)
    window = features.windows.row_splits[:-1] + best // (top * top)
    candidate = tf.stack([window, best % (top * top)], axis=1)
    start = tf.cast(tf.gather_nd(start_at, candidate), tf.int64)
    end = tf.cast(tf.gather_nd(end_at, candidate), tf.int64)
    return {"has_span": has_span, "score": score, "window": window, "start": start,
            "end": tf.where(has_span, end, start - 1)}


def _span_text(tokenizer, features: _SpanFeatures, spans: dict,
               vocab_tokens: tf.Tensor) -> tf.Tensor:
    """tf.string [B]: the text of each best span, as `squad.candidate_text` makes it
    (the pieces joined and de-"##"-ed, projected onto the whole words holding them),
    "" where there is no span."""
    window, start, end = spans["window"], spans["start"], spans["end"]
    piece_ids = tf.gather(tf.reshape(features.inputs["input_word_ids"], [-1]),
                          tf.ragged.range(start, end + 1)
                          + (window * features.seq_length)[:, tf.newaxis])
    pred_text = tf.strings.reduce_join(tf.gather(vocab_tokens, piece_ids), axis=-1,
                                       separator=" ")
    pred_text = tf.strings.regex_replace(pred_text, " ##", "")
    pred_text = tf.strings.regex_replace(pred_text, "##", "")
    # " ".join(pred_text.split())
    pred_text = tf.strings.regex_replace(pred_text, _python_whitespace_class() + "+", " ")
    pred_text = tf.strings.regex_replace(pred_text, "^ | $", "")
    window_words = tf.gather(features.token_to_word, window)  # [B, S]
    first_word = tf.gather(window_words, start, batch_dims=1)
    last_word = tf.where(spans["has_span"],
                         tf.gather(window_words, tf.maximum(end, 0), batch_dims=1),
                         first_word - 1)
    words = features.words
    word_index = (tf.ragged.range(first_word, last_word + 1)
                  + words.row_splits[:-1][:, tf.newaxis])
    orig_text = tf.strings.reduce_join(tf.gather(words.flat_values, word_index), axis=-1,
                                       separator=" ")
    return tf.where(spans["has_span"], final_text(tokenizer, pred_text, orig_text), "")


def _squad_signatures(model, tokenizer, seq_length: int, labels, *, max_query_length: int,
                      max_answer_length: int, n_best_size: int, doc_stride: int) -> dict:
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
        first window if there is none).

    The features are those of `squad.convert_examples_to_features`: the context split
    on whitespace into words, each word tokenized on its own; `[CLS] question [SEP]
    window [SEP]` with the question cut to max_query_length pieces and a long context
    cut into windows every doc_stride pieces; the best span is chosen over all windows
    (`_best_spans`). A context without word pieces has no answer (run_squad: "" with
    null odds `squad.NO_SPAN_NULL_ODDS`).

    Args:
      model: a `BertSpanLabeler` (start_logits, end_logits [N, S]).
      tokenizer: the `TFBertTokenizer` it was trained with.
      seq_length: --max_seq_length.
      labels: must be None.
      max_query_length, max_answer_length, n_best_size, doc_stride: as run_squad's
        flags of the same names.
    """
    if labels is not None:
        raise ValueError(f"a SQuAD export has no labels, got {list(labels)}")
    squad_features.check_lengths(seq_length, doc_stride, max_query_length)
    for name, value in (("max_answer_length", max_answer_length),
                        ("n_best_size", n_best_size)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    vocab_tokens = _vocab_tokens(tokenizer)

    def predict(question, context):
        features = _span_features(tokenizer, question, context, seq_length,
                                  max_query_length, doc_stride)
        outputs = model(features.inputs, training=False)
        start_logits = tf.cast(outputs["start_logits"], tf.float32)  # [N, S]
        end_logits = tf.cast(outputs["end_logits"], tf.float32)
        spans = _best_spans(features, start_logits, end_logits, n_best_size,
                            max_answer_length)
        null_scores = (tf.cast(start_logits[:, 0], tf.float64)
                       + tf.cast(end_logits[:, 0], tf.float64))
        null_score = tf.reduce_min(tf.RaggedTensor.from_row_splits(
            null_scores, features.windows.row_splits), axis=1)
        return {"answer": _span_text(tokenizer, features, spans, vocab_tokens),
                "score": tf.cast(spans["score"], tf.float32),
                "null_score": tf.cast(null_score, tf.float32),
                "start_logits": tf.gather(start_logits, spans["window"]),
                "end_logits": tf.gather(end_logits, spans["window"])}

    serve = tf.function(predict, input_signature=[_text_spec("question"),
                                                   _text_spec("context")])
    return {"serving_default": serve}


# ---------------------------------------------------------------------------------
# Token classification (NER).

# Characters that separate the words of an NER input (a CoNLL word never holds one).
NER_WORD_SEPARATORS = "[ \t\r\n]+"


def _ner_signatures(model, tokenizer, seq_length: int, labels, *, doc_stride: int) -> dict:
    """Signatures of a token-classification export, tagging as run_ner.py does.

    serving_default(text: tf.string [B]) -> each text's words (split on spaces, tabs
    and newlines) and one IOB2 tag per word:
      words: tf.string [B, W], padded with "";
      tags: tf.string [B, W], the label of the word's first piece, padded with "".

    The features are those of `conll.convert_sentences_to_features`: each word tokenized
    on its own ([UNK] if it has no piece), `[CLS] pieces [SEP]` windows of
    seq_length - 2 pieces every doc_stride pieces, each word tagged from the window
    where its first piece has the most context; so every word gets a tag.

    Args:
      model: a `BertTokenClassifier` or `BertFeatureBasedTagger` (logits [N, S, L]).
      tokenizer: the `TFBertTokenizer` it was trained with.
      seq_length: --max_seq_length.
      labels: the label names, in label-id order (the training label list).
      doc_stride: run_ner's --doc_stride.
    """
    if labels is None:
        raise ValueError("a token-classification export needs the label list")
    num_labels = getattr(model, "num_labels", len(labels))
    if len(labels) != num_labels:
        raise ValueError(f"{len(labels)} labels {list(labels)} for a tagger with "
                         f"{num_labels} outputs")
    if seq_length < 3:
        raise ValueError(f"seq_length must be at least 3, got {seq_length}")
    if doc_stride < 1:
        raise ValueError(f"doc_stride must be at least 1, got {doc_stride}")
    label_names = tf.constant([str(l) for l in labels])
    unk_id = int(tokenizer.vocab_table.lookup(tf.constant(tokenization.UNK_TOKEN)))
    cls_id, sep_id = tokenizer.cls_id, tokenizer.sep_id

    def tag(text):
        words = tf_text.regex_split(text, NER_WORD_SEPARATORS)  # [B, (W)]
        word_pieces = _tokenize_words(tokenizer, words)  # [sum W, (P)]
        no_piece = tf.cast(word_pieces.row_lengths() == 0, tf.int64)
        word_pieces = tf.concat([word_pieces, tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(no_piece)], unk_id), no_piece)], axis=1)
        first_piece = word_pieces.row_splits[:-1]  # [sum W], over the batch's pieces
        pieces = tf.RaggedTensor.from_row_splits(word_pieces,
                                                 words.row_splits).merge_dims(1, 2)
        num_pieces = pieces.row_lengths()
        windows = _make_windows(num_pieces, tf.fill(tf.shape(num_pieces), tf.cast(
            seq_length - 2, tf.int64)), doc_stride)
        window_pieces = _window_pieces(windows, pieces)
        _, best = _max_context(windows, window_pieces,
                               tf.shape(pieces.flat_values, out_type=tf.int64)[0])
        inputs = tf_tokenization.combine_and_pad(
            [tf.gather(pieces.flat_values, window_pieces)], seq_length, cls_id, sep_id)
        logits = model(inputs, training=False)["logits"]  # [N, S, L]
        label_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
        window = tf.gather(best, first_piece)  # [sum W]
        window_first = (tf.gather(pieces.row_splits, tf.gather(windows.row, window))
                        + tf.gather(windows.start, window))  # its first piece
        position = 1 + first_piece - window_first  # after [CLS]
        word_labels = tf.gather_nd(label_ids, tf.stack([window, position], axis=1))
        tags = words.with_flat_values(tf.gather(label_names, word_labels))
        return {"tags": tags.to_tensor(""), "words": words.to_tensor("")}

    return {"serving_default": tf.function(tag, input_signature=[_text_spec("text")])}


# kind -> builder(model, tokenizer, seq_length, labels, **options) -> {signature name:
# tf.function}. A new task adds its builder here (and its options to TASK_OPTIONS); the
# rest of the export is shared.
TASK_SIGNATURE_BUILDERS = {"classifier": _classifier_signatures,
                           "squad": _squad_signatures,
                           "ner": _ner_signatures}
# kind -> the options of its builder and their defaults (those of the runner's flags).
TASK_OPTIONS = {"classifier": {},
                "squad": {"max_query_length": 64, "max_answer_length": 30,
                          "n_best_size": 20, "doc_stride": 128},
                "ner": {"doc_stride": 64}}


class TaskModule(tf.Module):
    """Holds what a task export's signatures use: the model's variables, the tokenizer,
    the label names and the preprocessing settings (seq_length, do_lower_case and the
    kind's options, e.g. max_query_length, as int tf.Variables)."""

    def __init__(self, model, tokenizer, seq_length: int, labels, kind: str,
                 options: dict | None = None):
        super().__init__(name=f"bert_{kind}")
        self.model_variables, _ = _collect_variables([model])
        self.tokenizer = tokenizer
        self.seq_length = tf.Variable(seq_length, trainable=False, name="seq_length")
        self.do_lower_case = tf.Variable(bool(tokenizer.do_lower_case), trainable=False,
                                         name="do_lower_case")
        if labels is not None:
            self.labels = tf.Variable([str(l) for l in labels], trainable=False,
                                      name="labels")
        for name, value in (options or {}).items():
            setattr(self, name, tf.Variable(value, trainable=False, name=name))


def check_export_path(export_dir: str) -> None:
    """Fails (before any work) where `export_task_model` could not write `export_dir`."""
    _check_local(export_dir)
    if os.path.lexists(export_dir) and not os.path.isdir(export_dir):
        raise FileExistsError(f"export path {export_dir} exists and is not a folder")


@standard_ops
def export_task_model(model, export_dir: str, vocab_file: str, do_lower_case: bool,
                      seq_length: int, kind: str = "classifier",
                      labels: Sequence[str] | None = None, **options) -> str:
    """Exports a fine-tuned task model with a raw-text serving signature.

    Args:
      model: the task model (classifier: a `BertClassifier`; squad: a
        `BertSpanLabeler`; ner: a `BertTokenClassifier` or `BertFeatureBasedTagger`).
      export_dir: destination folder (replaced only when the export is complete).
      vocab_file, do_lower_case: the tokenizer the model was trained with.
      seq_length: the --max_seq_length the model was trained with.
      kind: one of TASK_SIGNATURE_BUILDERS.
      labels: label names in label-id order (classification, ner), None for
        regression and squad.
      **options: the kind's settings (TASK_OPTIONS, e.g. squad's max_query_length);
        pass the runner's flags so that the export predicts as the runner does.

    Returns:
      the absolute export path. See the builder of `kind` for the signatures.
    """
    if kind not in TASK_SIGNATURE_BUILDERS:
        raise ValueError(f"unknown export kind {kind!r}; supported: "
                         f"{sorted(TASK_SIGNATURE_BUILDERS)}")
    unknown = sorted(set(options) - set(TASK_OPTIONS[kind]))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} of a {kind} export; its options: "
                         f"{sorted(TASK_OPTIONS[kind])}")
    options = {**TASK_OPTIONS[kind], **options}
    tokenizer = tf_tokenization.TFBertTokenizer(vocab_file, do_lower_case)
    signatures = TASK_SIGNATURE_BUILDERS[kind](model, tokenizer, seq_length, labels,
                                               **options)
    module = TaskModule(model, tokenizer, seq_length, labels, kind, options)
    return save_atomically(module, export_dir, signatures)
