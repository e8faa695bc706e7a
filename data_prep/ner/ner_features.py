"""CoNLL sentences -> BERT token-classification features, TFRecords and tf.data, and
the model's predictions back to one tag per word.

Features. Every word is split into word pieces by `tokenization.FullTokenizer`;
a word left without pieces (one the tokenizer drops whole, such as a control
character) becomes [UNK], so that every word gets a prediction. A sequence is
`[CLS] pieces [SEP]` with segment ids 0, zero padded. The first piece of a word
carries the word's label id; every other position ([CLS], [SEP], the following
pieces of a word, padding) carries LABEL_IGNORE_ID (-1), which the loss and
the metrics mask out (`label_ids >= 0`), as Hugging Face's token classification
examples do by default.

Label scheme. The model learns its labels in one tag scheme (`label_scheme`:
"iob1", "iob2" or "iobes"; run_ner.py's default is the training file's own): each
sentence's chunks are written in it (`tag_schemes.from_iob2`) before the tags become
label ids, and `predictions_to_tags` returns tags in it, which
`conll.write_predictions` rewrites in any file's scheme. On IOB1 data (CoNLL-2003)
nearly every entity word is I-X; learning IOB2 instead doubles the entity classes a
short fine-tuning must tell apart.

Long sentences. A sentence of more than max_seq_length - 2 pieces is cut into
overlapping windows, as SQuAD cuts documents: windows of max_seq_length - 2
pieces starting every doc_stride pieces, the last one ending at the last piece.
A word is labelled in every window holding its first piece (all of them train)
and predicted from one: the window where min(left context, right context) +
0.01 * window length, taken at the first piece, is highest (the first one on
ties). `InputFeatures.token_is_max_context` marks it and `predictions_to_tags`
reassembles one tag per word from those positions.

Document context. With `document_context`, the unit cut into windows is a document
(the sentences of one `Sentence.document`, in order) instead of a sentence: the word
pieces of all its sentences follow each other, with no separator, and are cut into
windows as above, so a word sees the sentences around it (the paper's "maximal document
context", Section 5.3); each word is still labelled in every window holding its first
piece and predicted from the one where it has the most context. Training, evaluation
and prediction cut the same way. `InputFeatures.token_to_sentence` says which sentence
each position's word belongs to.

Records and datasets of these features: `ner_records` (written, described, read back
as the Trainer takes them).

Shape legend: B batch, F features, S max_seq_length, L labels.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
from absl import logging

from common.progress import Progress
from common.errors import UserError
from data_prep import context_windows
from data_prep.ner import tag_schemes
from data_prep.text import tokenization
from data_prep.ner.conll import Sentence
from data_prep.ner.ner_records import LABEL_IGNORE_ID


# ----------------------------------------------------------------------------
# Word pieces and windows.
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class InputFeatures:
    """One window of one sentence (or, with document context, of one document), ready
    for the model.

    Attributes:
        unique_id: index of this feature among all features written together.
        sentence_index: index of its sentence (with document context: of its
            document's first sentence).
        window_index: index of this window among its sentence's (document's) windows.
        input_ids: int [S] `[CLS] pieces [SEP]`, zero padded.
        input_mask: int [S] 1 for real tokens, 0 for padding.
        segment_ids: int [S] all 0.
        label_ids: int [S] label id at the first piece of each word,
            LABEL_IGNORE_ID elsewhere.
        token_to_word: int [S] index (in its sentence) of the word whose first piece
            is at this position, -1 elsewhere.
        token_is_max_context: bool [S] True where `token_to_word` >= 0 and this
            window is the one the word is predicted from.
        token_to_sentence: int [S] index of the sentence of that word, -1 where
            `token_to_word` is.
    """

    unique_id: int
    sentence_index: int
    window_index: int
    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    label_ids: list[int]
    token_to_word: list[int]
    token_is_max_context: list[bool]
    token_to_sentence: list[int]


def tokenize_words(
    words: Sequence[str], tokenizer: tokenization.FullTokenizer
) -> tuple[list[str], list[int]]:
    """Word pieces of the words, and the index of each word's first piece.

    A word without pieces becomes [UNK].
    """
    pieces, word_starts = [], []
    for word in words:
        word_starts.append(len(pieces))
        pieces.extend(tokenizer.tokenize(word) or [tokenization.UNK_TOKEN])
    return pieces, word_starts


def make_windows(num_pieces: int, max_pieces: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of the windows covering `num_pieces` pieces, as SQuAD doc spans
    (`context_windows.windows`); an empty sentence gets one empty window."""
    return context_windows.windows(num_pieces, max_pieces, doc_stride)


def max_context_windows(positions: Sequence[int], windows: Sequence[tuple[int, int]]) -> list[int]:
    """For each piece position, the window that gives it the most context.

    Score of a window holding the position: min(pieces to its left, pieces to its
    right) + 0.01 * window length; the first window with the highest score wins
    (`context_windows.max_context_window`).
    """
    best = []
    for position in positions:
        index = context_windows.max_context_window(position, windows)
        if index is None:
            raise ValueError(f"piece position {position} is in no window")
        best.append(index)
    return best


def _label_ids(
    sentence: Sentence, label_map: dict[str, int], label_scheme: str, unlearnt: list
) -> list[int]:
    """Label ids of a sentence's words; LABEL_IGNORE_ID for a tag of a known type whose
    label training never had (appended to `unlearnt` as (path, line, tag))."""
    known_types = {tag_schemes.split_tag(label)[1] for label in label_map}
    ids = []
    tags = tag_schemes.from_iob2(sentence.tags, label_scheme)
    for tag, line_number in zip(tags, sentence.line_numbers):
        if tag in label_map:
            ids.append(label_map[tag])
        elif tag_schemes.split_tag(tag)[1] in known_types:
            unlearnt.append((sentence.path, line_number, tag))
            ids.append(LABEL_IGNORE_ID)
        else:
            raise UserError(
                f"{sentence.path}:{line_number}: tag {tag!r} ({label_scheme} form) is "
                f"not in the training label list {list(label_map)}"
            )
    return ids


def _pad(values: list, length: int, value) -> list:
    return values + [value] * (length - len(values))


def context_units(sentences: Sequence[Sentence], document_context: bool) -> list[range]:
    """The runs of sentence indices cut into windows together: each document's
    sentences (consecutive sentences of one `Sentence.document`) with
    `document_context`, else each sentence alone."""
    if not document_context:
        return [range(i, i + 1) for i in range(len(sentences))]
    units, start = [], 0
    for index in range(1, len(sentences) + 1):
        if index == len(sentences) or sentences[index].document != sentences[start].document:
            units.append(range(start, index))
            start = index
    return units


def convert_sentences_to_features(
    sentences: Sequence[Sentence],
    labels: Sequence[str],
    tokenizer: tokenization.FullTokenizer,
    max_seq_length: int,
    doc_stride: int,
    label_scheme: str = "iob2",
    progress: Progress | None = None,
    document_context: bool = False,
) -> list[InputFeatures]:
    """Tokenizes sentences (or documents) and cuts them into windows of
    `max_seq_length` tokens.

    Args:
        sentences: sentences with IOB2 tags.
        labels: the label list of the training sentences (`conll.label_list`), in
            `label_scheme`.
        tokenizer: the WordPiece tokenizer.
        max_seq_length: S, length of every sequence ([CLS] and [SEP] included).
        doc_stride: pieces between the starts of consecutive windows of a long
            sentence.
        label_scheme: the tag scheme the labels are in ("iob1", "iob2", "iobes"):
            each sentence's tags are rewritten in it before they become label ids.
        progress: shown the sentences done (`common.progress`).
        document_context: cut each document's sentences together (`context_units`;
            the module docstring), not each sentence alone.

    Returns:
        The features, sentence (document) by sentence, window by window. A tag of a type in
        `labels` whose label is not (IOB1's rare B- when training had none) carries
        LABEL_IGNORE_ID, with one warning naming how many and the first one.

    Raises:
        ValueError: bad lengths, or a tag of a type missing from `labels` (naming
            the file and line of the word).
    """
    if max_seq_length < 3:
        raise UserError(f"max_seq_length must be at least 3, got {max_seq_length}")
    if doc_stride < 1:
        raise UserError(f"doc_stride must be at least 1, got {doc_stride}")
    tag_schemes.check_scheme(label_scheme)
    label_map = {label: index for index, label in enumerate(labels)}
    cls_id, sep_id = tokenizer.convert_tokens_to_ids(
        [tokenization.CLS_TOKEN, tokenization.SEP_TOKEN]
    )
    features, unlearnt = [], []
    progress = progress if progress is not None else Progress()
    units = context_units(sentences, document_context)
    unit_name = "document" if document_context else "sentence"
    done = progress.iterate(units, "features", len(units), unit_name)
    for unit in done:
        # Per piece of the unit: its word's label id, index in its sentence and the
        # sentence's index, at the word's first piece (-1 elsewhere).
        piece_ids, piece_label, piece_word, piece_sentence, word_starts = [], [], [], [], []
        for sentence_index in unit:
            sentence = sentences[sentence_index]
            word_labels = _label_ids(sentence, label_map, label_scheme, unlearnt)
            pieces, starts = tokenize_words(sentence.words, tokenizer)
            offset = len(piece_ids)
            piece_ids.extend(tokenizer.convert_tokens_to_ids(pieces))
            piece_label.extend([LABEL_IGNORE_ID] * len(pieces))
            piece_word.extend([-1] * len(pieces))
            piece_sentence.extend([-1] * len(pieces))
            for word, start in enumerate(starts):
                piece_label[offset + start] = word_labels[word]
                piece_word[offset + start] = word
                piece_sentence[offset + start] = sentence_index
            word_starts.extend(offset + start for start in starts)
        windows = make_windows(len(piece_ids), max_seq_length - 2, doc_stride)
        best_window = dict(zip(word_starts, max_context_windows(word_starts, windows)))
        for window_index, (start, length) in enumerate(windows):
            positions = range(start, start + length)
            input_ids = [cls_id] + piece_ids[start : start + length] + [sep_id]
            features.append(
                InputFeatures(
                    unique_id=len(features),
                    sentence_index=unit.start,
                    window_index=window_index,
                    input_ids=_pad(input_ids, max_seq_length, 0),
                    input_mask=_pad([1] * len(input_ids), max_seq_length, 0),
                    segment_ids=[0] * max_seq_length,
                    label_ids=_pad(
                        [LABEL_IGNORE_ID] + piece_label[start : start + length],
                        max_seq_length,
                        LABEL_IGNORE_ID,
                    ),
                    token_to_word=_pad(
                        [-1] + piece_word[start : start + length], max_seq_length, -1
                    ),
                    token_is_max_context=_pad(
                        [False] + [best_window.get(p) == window_index for p in positions] + [False],
                        max_seq_length,
                        False,
                    ),
                    token_to_sentence=_pad(
                        [-1] + piece_sentence[start : start + length], max_seq_length, -1
                    ),
                )
            )
    if unlearnt:
        path, line_number, tag = unlearnt[0]
        logging.warning(
            "%d tags have a label training never had, left out of the loss (the model "
            "cannot predict them); the first: %s:%d %r",
            len(unlearnt),
            path,
            line_number,
            tag,
        )
    return features


def predictions_to_tags(
    predictions,
    features: Sequence[InputFeatures],
    sentences: Sequence[Sentence],
    labels: Sequence[str],
) -> list[list[str]]:
    """One predicted tag per word, each taken from the word's max-context window.

    The tags are labels, in the scheme the model learnt (`label_scheme` of
    `convert_sentences_to_features`); `conll.write_predictions` writes them in a
    file's scheme.

    Args:
        predictions: int [F, S] label ids, or float [F, S, L] logits (or
            probabilities), one row per feature in `features` order.
        features: the features the predictions were made for.
        sentences: the sentences the features were made from.
        labels: the label list.

    Returns:
        For every sentence, one tag per word.

    Raises:
        ValueError: shapes that do not match, a label id outside [0, L), or a word
            with no prediction or more than one (features from other sentences).
    """
    predictions = np.asarray(predictions)
    if predictions.ndim == 3:
        predictions = np.argmax(predictions, axis=-1)
    if predictions.ndim != 2 or predictions.shape[0] != len(features):
        raise UserError(
            f"predictions must be [F={len(features)}, S] or [F, S, L], "
            f"got shape {np.shape(predictions)}"
        )
    tags = [[None] * len(sentence.words) for sentence in sentences]
    for row, feature in zip(predictions, features):
        if len(row) != len(feature.token_to_word):
            raise UserError(
                f"predictions have {len(row)} positions per feature, "
                f"features {len(feature.token_to_word)}"
            )
        for position, word in enumerate(feature.token_to_word):
            if not feature.token_is_max_context[position]:
                continue
            sentence_index = feature.token_to_sentence[position]
            sentence_tags = tags[sentence_index]
            label_id = int(row[position])
            if not 0 <= label_id < len(labels):
                raise UserError(
                    f"feature {feature.unique_id}, position {position}: "
                    f"label id {label_id} is not in [0, {len(labels)})"
                )
            if sentence_tags[word] is not None:
                raise UserError(
                    f"sentence {sentence_index}, word {word}: predicted by more than one window"
                )
            sentence_tags[word] = labels[label_id]
    for sentence_index, sentence_tags in enumerate(tags):
        if None in sentence_tags:
            word = sentence_tags.index(None)
            raise UserError(
                f"sentence {sentence_index}, word {word}: no prediction "
                "(the features do not cover it)"
            )
    return tags
