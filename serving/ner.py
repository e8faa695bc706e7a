"""NER tags in-graph: the task export of a token classifier tags raw text as run_ner.py's
--do_predict does (`data_prep.ner.ner_features`): the same word pieces (`tokenize_words`), windows
(`serving.windows`, the formula of `ner_features.make_windows` / `max_context_windows`) and one
tag per word from the window where its first piece has the most context
(`predictions_to_tags`).

Loading the export needs `import tensorflow_text` first.

Shape legend: B batch, S sequence, N windows (of every row of the batch together), W
words, L labels.
"""

from __future__ import annotations

import tensorflow as tf

from common.errors import UserError
from data_prep.ner import tag_schemes
from data_prep.text import tf_tokenization, tokenization
from serving import inputs as text_inputs
from serving import windows as serving_windows
from serving.model_call import ModelCall

# Characters that separate the words of an NER input (a CoNLL word never holds one).
NER_WORD_SEPARATORS = "[ \t\r\n]+"


def ner_signatures(
    model,
    tokenizer,
    seq_length: int,
    labels,
    *,
    doc_stride: int,
    tag_scheme: str,
    document_context: bool = False,
    pad_to_max_seq_length: bool = False,
    xla_single_requests: bool = False,
) -> dict:
    """Signatures of a token-classification export, tagging as run_ner.py does.

    serving_default(text: tf.string [B]) -> each text's words (split on spaces, tabs
    and newlines) and one tag per word:
      words: tf.string [B, W], padded with "";
      tags: tf.string [B, W], the label of the word's first piece, padded with "".

    The tags are the model's labels, in the scheme it learnt (`tag_scheme`, kept in
    the export's `tag_scheme` variable): IOB1 tags for a model trained on IOB1 data.
    They are what run_ner.py's --do_predict predicts before writing a file; read them
    with `tag_schemes.get_chunks` (conlleval's rules) or rewrite them in another
    scheme with `tag_schemes.from_iob2`.

    The features are those of `ner_features.convert_sentences_to_features`: each word tokenized
    on its own ([UNK] if it has no piece), `[CLS] pieces [SEP]` windows of
    seq_length - 2 pieces every doc_stride pieces, each word tagged from the window
    where its first piece has the most context; so every word gets a tag.

    A text is one sequence of words, cut into windows as run_ner.py cuts a document
    with --document_context (the words of its sentences follow each other, line breaks
    are spaces): a model trained with the document context tags a text holding a whole
    document as --do_predict tags that document's sentences. A model trained
    sentence by sentence (--nodocument_context, or data without -DOCSTART- lines)
    is best sent one sentence per text: several sentences in one text are tagged
    together, where --do_predict would tag each alone. Which of the two the model
    learnt is the export's `document_context` variable (True: send whole documents);
    it does not change how a text is tagged. The windows
    of a request are cut to the longest of them (`model_call.ModelCall.cut`) unless
    `pad_to_max_seq_length`. With `xla_single_requests`, a request of one window (one
    text of at most seq_length - 2 pieces) runs the model through XLA
    (`model_call.ModelCall`).

    Args:
      model: a `BertTokenClassifier` or `BertFeatureBasedTagger` (logits [N, S, L]).
      tokenizer: the `TFBertTokenizer` it was trained with.
      seq_length: --max_seq_length.
      labels: the label names, in label-id order (the training label list).
      doc_stride: run_ner's --doc_stride.
      tag_scheme: the scheme of the labels ("iob1", "iob2" or "iobes").
      document_context: whether the model was trained with run_ner's
        --document_context (kept in the export's variable of that name for clients).
      pad_to_max_seq_length: pad every window to seq_length (static shapes).
      xla_single_requests: the XLA call for a request of one window.
    """
    del document_context  # Kept as the export's variable (exports.TaskModule); same graph.
    if labels is None:
        raise UserError("a token-classification export needs the label list")
    tag_schemes.check_scheme(tag_scheme)
    wrong = [label for label in labels if tag_schemes.tag_error(str(label), tag_scheme)]
    if wrong:
        raise UserError(f"labels {wrong} are not {tag_scheme} tags")
    num_labels = getattr(model, "num_labels", len(labels))
    if len(labels) != num_labels:
        raise UserError(
            f"{len(labels)} labels {list(labels)} for a tagger with {num_labels} outputs"
        )
    if seq_length < 3:
        raise UserError(f"seq_length must be at least 3, got {seq_length}")
    if doc_stride < 1:
        raise UserError(f"doc_stride must be at least 1, got {doc_stride}")
    label_names = tf.constant([str(label) for label in labels])
    unk_id = int(tokenizer.vocab_table.lookup(tf.constant(tokenization.UNK_TOKEN)))
    cls_id, sep_id = tokenizer.cls_id, tokenizer.sep_id
    call = ModelCall(
        model,
        seq_length,
        pad_to_max_seq_length=pad_to_max_seq_length,
        xla_single_requests=xla_single_requests,
    )

    def tag(text):
        (text,) = text_inputs.checked_request({"text": text})
        words = text_inputs.split_words(text, NER_WORD_SEPARATORS)  # [B, (W)]
        word_pieces = text_inputs.word_pieces(tokenizer, words)  # [sum W, (P)]
        no_piece = tf.cast(word_pieces.row_lengths() == 0, tf.int64)
        word_pieces = tf.concat(
            [
                word_pieces,
                tf.RaggedTensor.from_row_lengths(
                    tf.fill([tf.reduce_sum(no_piece)], unk_id), no_piece
                ),
            ],
            axis=1,
        )
        first_piece = word_pieces.row_splits[:-1]  # [sum W], over the batch's pieces
        pieces = tf.RaggedTensor.from_row_splits(word_pieces, words.row_splits).merge_dims(1, 2)
        num_pieces = pieces.row_lengths()
        max_pieces = tf.fill(tf.shape(num_pieces), tf.cast(seq_length - 2, tf.int64))
        windows = serving_windows.make_windows(num_pieces, max_pieces, doc_stride)
        window_pieces = serving_windows.window_pieces(windows, pieces)
        _, best = serving_windows.max_context(
            windows, window_pieces, tf.shape(pieces.flat_values, out_type=tf.int64)[0]
        )
        inputs = tf_tokenization.combine_and_pad(
            [tf.gather(pieces.flat_values, window_pieces)], seq_length, cls_id, sep_id
        )
        inputs = call.cut(inputs)
        logits = call(inputs)["logits"]  # [N, S, L]
        label_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
        window = tf.gather(best, first_piece)  # [sum W]
        window_first = tf.gather(pieces.row_splits, tf.gather(windows.row, window)) + tf.gather(
            windows.start, window
        )  # its first piece
        position = 1 + first_piece - window_first  # after [CLS]
        word_labels = tf.gather_nd(label_ids, tf.stack([window, position], axis=1))
        tags = words.with_flat_values(tf.gather(label_names, word_labels))
        return {"tags": tags.to_tensor(""), "words": words.to_tensor("")}

    serve = tf.function(tag, input_signature=[text_inputs.text_spec("text")], autograph=False)
    return {"serving_default": serve}
