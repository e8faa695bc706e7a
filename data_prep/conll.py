"""CoNLL named-entity files -> BERT token-classification features, and back.

Files. One token per line, fields separated by spaces or tabs, the tag in the
last field: `token TAG`, or CoNLL-2003's `token POS chunk TAG`. A blank line ends
a sentence; `-DOCSTART-` lines are skipped. UTF-8 (a leading BOM is ignored),
LF or CRLF line ends.

Tag schemes. "iob1", "iob2" or "iobes" (`data_prep.tag_schemes`);
`detect_file_tag_scheme` guesses a file's. Sentences hold IOB2 tags whatever the
file's scheme: the chunks are those that conlleval reads in the tags
(`tag_schemes.get_chunks`), so an I- that starts a chunk in an "iob2" file becomes
B-. `write_predictions` converts back (`tag_schemes.from_iob2`).

Labels. `label_list`: "O", then B-<type> and I-<type> for every entity type of
the training sentences, types sorted by code point; I-<type> is listed even if
it never occurs, so that the model can continue any chunk.

Features. Every word is split into word pieces by `tokenization.FullTokenizer`;
a word left without pieces (one the tokenizer drops whole, such as a control
character) becomes [UNK], so that every word gets a prediction. A sequence is
`[CLS] pieces [SEP]` with segment ids 0, zero padded. The first piece of a word
carries the word's label id; every other position ([CLS], [SEP], the following
pieces of a word, padding) carries LABEL_IGNORE_ID (-1), which the loss and
the metrics mask out (`label_ids >= 0`).

Long sentences. A sentence of more than max_seq_length - 2 pieces is cut into
overlapping windows, as SQuAD cuts documents: windows of max_seq_length - 2
pieces starting every doc_stride pieces, the last one ending at the last piece.
A word is labelled in every window holding its first piece (all of them train)
and predicted from one: the window where min(left context, right context) +
0.01 * window length, taken at the first piece, is highest (the first one on
ties). `InputFeatures.token_is_max_context` marks it and `predictions_to_tags`
reassembles one tag per word from those positions.

Files written, each under a temporary name and then renamed: TFRecords
(`write_tfrecord`: int64 input_ids, input_mask, segment_ids, label_ids
[max_seq_length] and unique_ids [1]), the metadata JSON beside them
(`NerMetadata`), and predictions as `token gold guess` lines that conlleval
reads (`write_predictions`).

Shape legend: F features, S max_seq_length, L labels.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from data_prep import tag_schemes, tokenization

LABEL_IGNORE_ID = -1
DOCSTART = "-DOCSTART-"
_FIELD_SEPARATOR = re.compile(r"[ \t]+")


# ----------------------------------------------------------------------------
# Reading CoNLL files.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sentence:
    """One sentence of a CoNLL file.

    Attributes:
        words: the tokens (first field of each line).
        tags: one IOB2 tag per word.
        line_numbers: the 1-based line of each word in `path`.
        path: the file it was read from, for error messages.
    """
    words: tuple[str, ...]
    tags: tuple[str, ...]
    line_numbers: tuple[int, ...]
    path: str = "<string>"


def read_conll(path: str, tag_scheme: str = "iob2",
               missing_tag: str | None = None) -> list[Sentence]:
    """Reads a CoNLL file into sentences with IOB2 tags.

    Args:
        path: the file (UTF-8).
        tag_scheme: "iob1", "iob2" or "iobes" (`detect_file_tag_scheme` guesses it).
        missing_tag: tag given to a line that has a token but no tag; None (the
            default) makes such a line an error.

    Returns:
        The sentences, in file order.

    Raises:
        ValueError: naming the file and the line, for a line without a tag, a tag
            outside the scheme, text that is not UTF-8, or a file without sentences.
    """
    return parse_conll(_read_text(path), path=str(path), tag_scheme=tag_scheme,
                       missing_tag=missing_tag)


def detect_file_tag_scheme(path: str, missing_tag: str | None = None) -> str:
    """Guesses the tag scheme of a CoNLL file with `detect_tag_scheme`.

    Raises:
        ValueError: as `read_conll`, for a tag that is in none of the schemes.
    """
    groups = _split_sentences(_read_text(path), str(path), "iobes", missing_tag)
    return tag_schemes.detect_tag_scheme([[tag for _, tag, _ in group]
                                          for group in groups])


def _read_text(path: str) -> str:
    """The text of a UTF-8 file; undecodable bytes are an error naming their line."""
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line_number = data.count(b"\n", 0, error.start) + 1
        raise ValueError(f"{path}:{line_number}: not UTF-8 text ({error.reason} at "
                         f"byte {error.start})") from None


def _split_sentences(text: str, path: str, tag_scheme: str, missing_tag: str | None
                     ) -> list[list[tuple[str, str, int]]]:
    """Groups the (word, tag, line number) of each line into sentences.

    Tags are checked against `tag_scheme` but not converted.
    """
    sentences, current = [], []
    for line_number, line in enumerate(text.split("\n"), start=1):
        line = line.strip(" \t\r")
        fields = _FIELD_SEPARATOR.split(line) if line else []
        if not fields or fields[0] == DOCSTART:
            if current:
                sentences.append(current)
                current = []
            continue
        if len(fields) == 1:
            if missing_tag is None:
                raise ValueError(f"{path}:{line_number}: missing tag: expected "
                                 f"'token ... TAG', got only {line!r}")
            fields.append(missing_tag)
        error = tag_schemes.tag_error(fields[-1], tag_scheme)
        if error:
            raise ValueError(f"{path}:{line_number}: {error}")
        current.append((fields[0], fields[-1], line_number))
    if current:
        sentences.append(current)
    if not sentences:
        raise ValueError(f"{path}:{line_number}: no sentence in the file (it is empty "
                         "or holds only blank and -DOCSTART- lines)")
    return sentences


def parse_conll(text: str, path: str = "<string>", tag_scheme: str = "iob2",
                missing_tag: str | None = None) -> list[Sentence]:
    """Parses the text of a CoNLL file; see `read_conll`. `path` names it in errors."""
    tag_schemes.check_scheme(tag_scheme)
    groups = _split_sentences(text, path, tag_scheme, missing_tag)
    sentences = []
    for group in groups:
        words, tags, line_numbers = zip(*group)
        sentences.append(Sentence(words=words,
                                  tags=tuple(tag_schemes.to_iob2(tags)),
                                  line_numbers=line_numbers, path=path))
    return sentences


def label_list(sentences: Sequence[Sentence]) -> list[str]:
    """The label list of training sentences: "O", then B-<type>, I-<type> per sorted type."""
    types = sorted({tag_schemes.split_tag(tag)[1] for sentence in sentences
                    for tag in sentence.tags if tag != tag_schemes.OUTSIDE})
    return [tag_schemes.OUTSIDE] + [f"{prefix}-{chunk_type}" for chunk_type in types
                        for prefix in ("B", "I")]


# ----------------------------------------------------------------------------
# Word pieces and windows.
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class InputFeatures:
    """One window of one sentence, ready for the model.

    Attributes:
        unique_id: index of this feature among all features written together.
        sentence_index: index of its sentence.
        window_index: index of this window among its sentence's windows.
        input_ids: int [S] `[CLS] pieces [SEP]`, zero padded.
        input_mask: int [S] 1 for real tokens, 0 for padding.
        segment_ids: int [S] all 0.
        label_ids: int [S] label id at the first piece of each word,
            LABEL_IGNORE_ID elsewhere.
        token_to_word: int [S] index of the word whose first piece is at this
            position, -1 elsewhere.
        token_is_max_context: bool [S] True where `token_to_word` >= 0 and this
            window is the one the word is predicted from.
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


def tokenize_words(words: Sequence[str], tokenizer: tokenization.FullTokenizer
                   ) -> tuple[list[str], list[int]]:
    """Word pieces of the words, and the index of each word's first piece.

    A word without pieces becomes [UNK].
    """
    pieces, word_starts = [], []
    for word in words:
        word_starts.append(len(pieces))
        pieces.extend(tokenizer.tokenize(word) or [tokenization.UNK_TOKEN])
    return pieces, word_starts


def make_windows(num_pieces: int, max_pieces: int, doc_stride: int
                 ) -> list[tuple[int, int]]:
    """(start, length) of the windows covering `num_pieces` pieces, as SQuAD doc spans."""
    windows, start = [], 0
    while True:
        length = min(num_pieces - start, max_pieces)
        windows.append((start, length))
        if start + length >= num_pieces:
            return windows
        start += min(length, doc_stride)


def max_context_windows(positions: Sequence[int], windows: Sequence[tuple[int, int]]
                        ) -> list[int]:
    """For each piece position, the window that gives it the most context.

    Score of a window holding the position: min(pieces to its left, pieces to its
    right) + 0.01 * window length; the first window with the highest score wins.
    """
    best = []
    for position in positions:
        best_index, best_score = -1, -1.0
        for index, (start, length) in enumerate(windows):
            end = start + length - 1
            if start <= position <= end:
                score = min(position - start, end - position) + 0.01 * length
                if score > best_score:
                    best_index, best_score = index, score
        if best_index < 0:
            raise ValueError(f"piece position {position} is in no window")
        best.append(best_index)
    return best


def _label_ids(sentence: Sentence, label_map: dict[str, int]) -> list[int]:
    ids = []
    for tag, line_number in zip(sentence.tags, sentence.line_numbers):
        if tag not in label_map:
            raise ValueError(
                f"{sentence.path}:{line_number}: tag {tag!r} (IOB2 form) is not in "
                f"the training label list {list(label_map)}")
        ids.append(label_map[tag])
    return ids


def _pad(values: list, length: int, value) -> list:
    return values + [value] * (length - len(values))


def convert_sentences_to_features(sentences: Sequence[Sentence], labels: Sequence[str],
                                  tokenizer: tokenization.FullTokenizer,
                                  max_seq_length: int, doc_stride: int
                                  ) -> list[InputFeatures]:
    """Tokenizes sentences and cuts them into windows of `max_seq_length` tokens.

    Args:
        sentences: sentences with IOB2 tags.
        labels: the label list of the training sentences (`label_list`).
        tokenizer: the WordPiece tokenizer.
        max_seq_length: S, length of every sequence ([CLS] and [SEP] included).
        doc_stride: pieces between the starts of consecutive windows of a long
            sentence.

    Returns:
        The features, sentence by sentence, window by window.

    Raises:
        ValueError: bad lengths, or a tag missing from `labels` (naming the file
            and line of the word).
    """
    if max_seq_length < 3:
        raise ValueError(f"max_seq_length must be at least 3, got {max_seq_length}")
    if doc_stride < 1:
        raise ValueError(f"doc_stride must be at least 1, got {doc_stride}")
    label_map = {label: index for index, label in enumerate(labels)}
    cls_id, sep_id = tokenizer.convert_tokens_to_ids(
        [tokenization.CLS_TOKEN, tokenization.SEP_TOKEN])
    features = []
    for sentence_index, sentence in enumerate(sentences):
        word_labels = _label_ids(sentence, label_map)
        pieces, word_starts = tokenize_words(sentence.words, tokenizer)
        piece_ids = tokenizer.convert_tokens_to_ids(pieces)
        piece_word = [-1] * len(pieces)
        for word, start in enumerate(word_starts):
            piece_word[start] = word
        windows = make_windows(len(pieces), max_seq_length - 2, doc_stride)
        best_window = max_context_windows(word_starts, windows)
        for window_index, (start, length) in enumerate(windows):
            token_to_word = [-1] + piece_word[start:start + length] + [-1]
            input_ids = [cls_id] + piece_ids[start:start + length] + [sep_id]
            features.append(InputFeatures(
                unique_id=len(features),
                sentence_index=sentence_index,
                window_index=window_index,
                input_ids=_pad(input_ids, max_seq_length, 0),
                input_mask=_pad([1] * len(input_ids), max_seq_length, 0),
                segment_ids=[0] * max_seq_length,
                label_ids=_pad([word_labels[w] if w >= 0 else LABEL_IGNORE_ID
                                for w in token_to_word], max_seq_length,
                               LABEL_IGNORE_ID),
                token_to_word=_pad(token_to_word, max_seq_length, -1),
                token_is_max_context=_pad([w >= 0 and best_window[w] == window_index
                                           for w in token_to_word], max_seq_length,
                                          False)))
    return features


def predictions_to_tags(predictions, features: Sequence[InputFeatures],
                        sentences: Sequence[Sentence], labels: Sequence[str]
                        ) -> list[list[str]]:
    """One predicted tag per word, each taken from the word's max-context window.

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
        raise ValueError(f"predictions must be [F={len(features)}, S] or [F, S, L], "
                         f"got shape {np.shape(predictions)}")
    tags = [[None] * len(sentence.words) for sentence in sentences]
    for row, feature in zip(predictions, features):
        if len(row) != len(feature.token_to_word):
            raise ValueError(f"predictions have {len(row)} positions per feature, "
                             f"features {len(feature.token_to_word)}")
        sentence_tags = tags[feature.sentence_index]
        for position, word in enumerate(feature.token_to_word):
            if not feature.token_is_max_context[position]:
                continue
            label_id = int(row[position])
            if not 0 <= label_id < len(labels):
                raise ValueError(f"feature {feature.unique_id}, position {position}: "
                                 f"label id {label_id} is not in [0, {len(labels)})")
            if sentence_tags[word] is not None:
                raise ValueError(f"sentence {feature.sentence_index}, word {word}: "
                                 "predicted by more than one window")
            sentence_tags[word] = labels[label_id]
    for sentence_index, sentence_tags in enumerate(tags):
        if None in sentence_tags:
            word = sentence_tags.index(None)
            raise ValueError(f"sentence {sentence_index}, word {word}: no prediction "
                             "(the features do not cover it)")
    return tags


# ----------------------------------------------------------------------------
# Files.
# ----------------------------------------------------------------------------


def _write_atomically(path: str, write: Callable[[str], None]) -> None:
    """Calls `write(temporary_path)`, then renames the temporary file to `path`."""
    path = os.fspath(path)
    directory = os.path.dirname(path)
    if directory:
        tf.io.gfile.makedirs(directory)
    temp_path = f"{path}.tmp-{os.getpid()}"
    try:
        write(temp_path)
        tf.io.gfile.rename(temp_path, path, overwrite=True)
    except BaseException:
        if tf.io.gfile.exists(temp_path):
            tf.io.gfile.remove(temp_path)
        raise


def _write_text(path: str, text: str) -> None:
    def write(temp_path):
        with tf.io.gfile.GFile(temp_path, "w") as f:
            f.write(text)
    _write_atomically(path, write)


def _int_feature(values) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def write_tfrecord(features: Sequence[InputFeatures], path: str) -> None:
    """Writes the features as tf.train.Examples (fields in the module docstring)."""
    def write(temp_path):
        with tf.io.TFRecordWriter(temp_path) as writer:
            for feature in features:
                example = tf.train.Example(features=tf.train.Features(feature={
                    "input_ids": _int_feature(feature.input_ids),
                    "input_mask": _int_feature(feature.input_mask),
                    "segment_ids": _int_feature(feature.segment_ids),
                    "label_ids": _int_feature(feature.label_ids),
                    "unique_ids": _int_feature([feature.unique_id]),
                }))
                writer.write(example.SerializeToString())
    _write_atomically(path, write)


def parse_example(serialized: tf.Tensor, max_seq_length: int):
    """Parses one serialized example written by `write_tfrecord`.

    Args:
        serialized: string scalar.
        max_seq_length: S.

    Returns:
        (inputs, label_ids): inputs is a dict of int32 [S] tensors
        `input_word_ids`, `input_mask`, `input_type_ids`; label_ids is int32 [S]
        with LABEL_IGNORE_ID at positions that carry no label.
    """
    spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64)
            for name in ("input_ids", "input_mask", "segment_ids", "label_ids")}
    example = tf.io.parse_single_example(serialized, spec)
    inputs = {
        "input_word_ids": tf.cast(example["input_ids"], tf.int32),
        "input_mask": tf.cast(example["input_mask"], tf.int32),
        "input_type_ids": tf.cast(example["segment_ids"], tf.int32),
    }
    return inputs, tf.cast(example["label_ids"], tf.int32)


def load_dataset(path: str, max_seq_length: int) -> tf.data.Dataset:
    """The (inputs, label_ids) pairs of a TFRecord file, in file order, unbatched."""
    return tf.data.TFRecordDataset(path).map(
        lambda record: parse_example(record, max_seq_length),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


@dataclasses.dataclass(frozen=True)
class NerMetadata:
    """What a runner needs to know about features, stored as JSON beside them.

    Attributes:
        labels: the label list; label id i is labels[i].
        tag_scheme: the scheme of the source files (sentences are IOB2).
        max_seq_length, doc_stride, do_lower_case: how the features were made.
        vocab_size: size of the WordPiece vocabulary used.
        num_sentences, num_words, num_features: counts.
        label_ignore_id: label id of positions without a label.
    """
    labels: tuple[str, ...]
    tag_scheme: str
    max_seq_length: int
    doc_stride: int
    do_lower_case: bool
    vocab_size: int
    num_sentences: int
    num_words: int
    num_features: int
    label_ignore_id: int = LABEL_IGNORE_ID

    @classmethod
    def describe(cls, sentences: Sequence[Sentence], features: Sequence[InputFeatures],
                 labels: Sequence[str], tag_scheme: str, max_seq_length: int,
                 doc_stride: int, do_lower_case: bool, vocab_size: int) -> NerMetadata:
        """The metadata of `features`, made from `sentences`."""
        return cls(labels=tuple(labels), tag_scheme=tag_scheme,
                   max_seq_length=max_seq_length, doc_stride=doc_stride,
                   do_lower_case=do_lower_case, vocab_size=vocab_size,
                   num_sentences=len(sentences),
                   num_words=sum(len(s.words) for s in sentences),
                   num_features=len(features))

    def to_json_file(self, path: str) -> None:
        data = dataclasses.asdict(self)
        data["labels"] = list(self.labels)
        _write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def from_json_file(cls, path: str) -> NerMetadata:
        """Reads the JSON file; a missing or unknown key is an error naming the file."""
        with tf.io.gfile.GFile(path, "r") as f:
            data = json.load(f)
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        required = {field.name for field in dataclasses.fields(cls)
                    if field.default is dataclasses.MISSING}
        missing = sorted(required - set(data))
        if unknown or missing:
            raise ValueError(f"{path}: bad NER metadata: unknown keys {unknown}, "
                             f"missing keys {missing}")
        data["labels"] = tuple(data["labels"])
        return cls(**data)


def write_predictions(path: str, sentences: Sequence[Sentence],
                      predicted_tags: Sequence[Sequence[str]],
                      tag_scheme: str = "iob2") -> None:
    """Writes `token gold guess` lines, a blank line after each sentence, for conlleval.

    Args:
        path: output file (UTF-8), written atomically.
        sentences: the sentences, with their gold IOB2 tags.
        predicted_tags: one IOB2 tag per word of each sentence.
        tag_scheme: scheme of the written tags. "iob2" writes the tags as they are;
            "iob1" and "iobes" rewrite the chunks of both columns with `from_iob2`.
    """
    tag_schemes.check_scheme(tag_scheme)
    if len(sentences) != len(predicted_tags):
        raise ValueError(f"{len(sentences)} sentences but {len(predicted_tags)} "
                         "predicted tag lists")
    lines = []
    for index, (sentence, guessed) in enumerate(zip(sentences, predicted_tags)):
        if len(guessed) != len(sentence.words):
            raise ValueError(f"sentence {index}: {len(sentence.words)} words but "
                             f"{len(guessed)} predicted tags")
        gold = sentence.tags
        if tag_scheme != "iob2":
            gold = tag_schemes.from_iob2(gold, tag_scheme)
            guessed = tag_schemes.from_iob2(guessed, tag_scheme)
        lines.extend(f"{word} {gold_tag} {guessed_tag}\n"
                     for word, gold_tag, guessed_tag in zip(sentence.words, gold, guessed))
        lines.append("\n")
    _write_text(path, "".join(lines))
