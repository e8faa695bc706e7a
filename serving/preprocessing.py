"""The TF Hub preprocessing SavedModel, as `bert_en_uncased_preprocess`:

  obj(strings [B]) -> the three int32 [B, seq_length] id tensors;
  obj.tokenize(strings [B]) -> int32 RaggedTensor [B, (words), (pieces)];
  obj.bert_pack_inputs(segments, seq_length=...) -> the three id tensors, one or two
    segments (ragged [B, (T)] or [B, (W), (P)]) packed as `[CLS] A [SEP] (B [SEP])`.

Segments of different batch sizes, malformed RaggedTensors and a seq_length too short
for the special tokens fail with tf.errors.InvalidArgumentError naming the segment
(`tf_tokenization.bert_pack_inputs`), never a crash. Loading it needs `import
tensorflow_text` first (it registers the ops).
"""

from __future__ import annotations

import itertools

import tensorflow as tf

from common.errors import UserError
from data_prep.text import tf_tokenization, tokenization
from serving import savedmodel
from serving.inputs import checked_request

# bert_pack_inputs is traced for these many segments.
PACK_SEGMENT_COUNTS = (1, 2)


def pack_inputs(segments, seq_length, cls_id: int, sep_id: int) -> dict[str, tf.Tensor]:
    """`tf_tokenization.bert_pack_inputs`, with the segment count checked here."""
    if len(segments) not in PACK_SEGMENT_COUNTS:
        raise UserError(f"bert_pack_inputs takes 1 or 2 segments, got {len(segments)}")
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

        @tf.function(autograph=False)
        def pack(segments, seq_length=default_seq_length):
            return pack_inputs(list(segments), seq_length, cls_id, sep_id)

        seq_length = tf.TensorSpec([], tf.int32, name="seq_length")
        by_rank = [
            tf.RaggedTensorSpec([None] * rank, tf.int32, ragged_rank=rank - 1) for rank in (2, 3)
        ]
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
      preserve_unused_tokens: bool tf.Variable: `[unusedN]` words stay whole.
      tokenize: tf.function strings [B] -> int32 RaggedTensor [B, (W), (P)].
      bert_pack_inputs: a `PackInputsModule`.
      seq_length: the sequence length of __call__.
    """

    def __init__(
        self,
        vocab_file: str | tokenization.VocabFile,
        do_lower_case: bool,
        seq_length: int = 128,
        preserve_unused_tokens: bool = False,
    ):
        super().__init__(name="bert_preprocess")
        if seq_length < 2:
            raise UserError(f"seq_length={seq_length} leaves no room for [CLS] and [SEP]")
        tokenizer = tf_tokenization.TFBertTokenizer(
            vocab_file, do_lower_case, preserve_unused_tokens=preserve_unused_tokens
        )
        self.tokenizer = tokenizer
        self.vocab_file = tokenizer.vocab_file or tf.saved_model.Asset(
            vocab_file.path if isinstance(vocab_file, tokenization.VocabFile) else vocab_file
        )
        self.do_lower_case = tf.Variable(bool(do_lower_case), trainable=False, name="do_lower_case")
        self.preserve_unused_tokens = tf.Variable(
            bool(preserve_unused_tokens), trainable=False, name="preserve_unused_tokens"
        )
        self.seq_length = seq_length
        self.bert_pack_inputs = PackInputsModule(tokenizer.cls_id, tokenizer.sep_id, seq_length)
        text = tf.TensorSpec([None], tf.string, name="inputs")

        @tf.function(input_signature=[text], autograph=False)
        def tokenize(inputs):
            (inputs,) = checked_request({"inputs": inputs})
            return tokenizer.tokenize_words(inputs)

        @tf.function(input_signature=[text], autograph=False)
        def call(inputs):
            (inputs,) = checked_request({"inputs": inputs})
            return tokenizer.bert_pack_inputs([tokenizer.tokenize_words(inputs)], seq_length)

        self.tokenize = tokenize

        self.__call__ = call


@savedmodel.standard_ops
def export_preprocessing(
    export_path: str,
    vocab_file: str | tokenization.VocabFile,
    do_lower_case: bool,
    seq_length: int = 128,
    overwrite: bool = False,
    preserve_unused_tokens: bool = False,
) -> str:
    """Exports the text -> BERT inputs preprocessing model. Returns the export path.

    `vocab_file`: the vocabulary's path, or the file read already
    (`tokenization.VocabFile`); `export_path` and `overwrite`: as
    `savedmodel.save_atomically`;
    `preserve_unused_tokens`: as the model's tokenizer (`[unusedN]` words whole).
    """
    savedmodel.check_export_path(export_path, overwrite)
    module = PreprocessingModule(vocab_file, do_lower_case, seq_length, preserve_unused_tokens)
    return savedmodel.save_atomically(
        module,
        export_path,
        {"serving_default": module.__call__},
        kind="preprocessing",
        overwrite=overwrite,
    )
