"""Tests of data_prep/ner/conll.py and ner_features.py: reading CoNLL files, features,
windows, records."""

import collections
import dataclasses
import itertools
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from data_prep.ner import conll
from data_prep.ner import ner_features, ner_records
from common import file_io
from data_prep import context_windows, records
from data_prep.ner import tag_schemes
from data_prep.text import tokenization
from evaluation import conlleval

IGNORE = ner_records.LABEL_IGNORE_ID


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
    return tokenization.FullTokenizer(vocab_file, do_lower_case=True)


def _write(tmp_path, name, content):
    path = tmp_path / name
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return str(path)


# ----------------------------------------------------------------------------
# Reading.
# ----------------------------------------------------------------------------


def test_read_two_column_file(tmp_path):
    path = _write(tmp_path, "two.txt", "Jim B-PER\nHenson\tI-PER\n  was O  \n\n\nin O\nGävle B-LOC")
    sentences = conll.read_conll(path)
    assert sentences == [
        conll.Sentence(
            words=("Jim", "Henson", "was"),
            tags=("B-PER", "I-PER", "O"),
            line_numbers=(1, 2, 3),
            path=path,
        ),
        conll.Sentence(words=("in", "Gävle"), tags=("O", "B-LOC"), line_numbers=(6, 7), path=path),
    ]


CONLL2003 = (
    "\ufeff-DOCSTART- -X- -X- O\r\n"
    "\r\n"
    "EU NNP B-NP I-ORG\r\n"
    "rejects VBZ B-VP O\r\n"
    "German JJ B-NP I-MISC\r\n"
    "call NN I-NP O\r\n"
    "to TO B-VP O\r\n"
    "boycott VB I-VP O\r\n"
    "British JJ B-NP I-MISC\r\n"
    "lamb NN I-NP O\r\n"
    ". . O O\r\n"
    "\r\n"
    "-DOCSTART- -X- -X- O\r\n"
    "\r\n"
    "Peter NNP B-NP I-PER\r\n"
    "Blackburn NNP I-NP I-PER\r\n"
    "Kermit NNP I-NP B-PER\r\n"
    "\r\n"
)


def test_read_conll2003_layout_iob1_docstart_crlf(tmp_path):
    path = _write(tmp_path, "eng.train", CONLL2003)
    assert conll.detect_file_tag_scheme(path) == "iob1"
    sentences = conll.read_conll(path, tag_scheme="iob1")
    assert [s.words for s in sentences] == [
        ("EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."),
        ("Peter", "Blackburn", "Kermit"),
    ]
    assert [s.tags for s in sentences] == [
        ("B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"),
        ("B-PER", "I-PER", "B-PER"),
    ]
    assert sentences[0].line_numbers == tuple(range(3, 12))
    assert sentences[1].line_numbers == (15, 16, 17)
    # The labels that occur, in the scheme the model learns: IOB2 here has no I-MISC.
    assert conll.label_list(sentences) == ["O", "B-MISC", "B-ORG", "B-PER", "I-PER"]
    # In IOB1 a chunk starts with I- unless it follows one of its type.
    assert conll.label_list(sentences, "iob1") == ["O", "I-MISC", "I-ORG", "B-PER", "I-PER"]
    assert conll.label_list(sentences[1:], "iobes") == ["O", "B-PER", "E-PER", "S-PER"]


def test_eval_tag_with_a_label_training_never_had_is_left_out_of_the_loss(tokenizer, caplog):
    train = conll.parse_conll("Jim I-PER\nHenson I-PER\n", path="train.txt", tag_scheme="iob1")
    labels = conll.label_list(train, "iob1")
    assert labels == ["O", "I-PER"]
    dev = conll.parse_conll("Ann I-PER\nBob B-PER\n", path="dev.txt", tag_scheme="iob1")
    [feature] = ner_features.convert_sentences_to_features(
        dev, labels, tokenizer, 16, 8, label_scheme="iob1"
    )
    # Ann's first piece carries I-PER; Bob's B-PER has no label id, so no position does.
    assert [i for i in feature.label_ids if i != ner_records.LABEL_IGNORE_ID] == [1]
    assert "dev.txt:2 'B-PER'" in caplog.text


def test_read_iobes_file(tmp_path):
    path = _write(
        tmp_path,
        "iobes.txt",
        "Jim B-PER\nHenson E-PER\nKermit S-PER\nin O\nNew B-LOC\nYork I-LOC\nCity E-LOC\n",
    )
    assert conll.detect_file_tag_scheme(path) == "iobes"
    [sentence] = conll.read_conll(path, tag_scheme="iobes")
    assert sentence.tags == ("B-PER", "I-PER", "B-PER", "O", "B-LOC", "I-LOC", "I-LOC")


BAD_INPUTS = {
    "missing tag": ("Jim B-PER\nHenson\n", "iob2", 2, "missing tag"),
    "unknown prefix": ("Jim X-PER\n", "iob2", 1, "not an iob2 tag"),
    "underscore": ("a O\nJim B_PER\n", "iob2", 2, "'B_PER' is not an iob2 tag"),
    "E- in BIO": ("a O\n\nJim E-PER\n", "iob2", 3, "'E-PER' is not an iob2 tag"),
    "S- in IOB1": ("Jim S-PER\n", "iob1", 1, "not an iob1 tag"),
    "empty type": ("Jim B-\n", "iob2", 1, "'B-' is not"),
    "bare prefix": ("Jim B\n", "iobes", 1, "'B' is not an iobes tag"),
    "type 0": ("Jim O\nB I-0\n", "iob1", 2, "'I-0' is not an iob1 tag"),
    "empty file": ("", "iob2", 1, "no sentence"),
    "only DOCSTART": ("-DOCSTART- -X- O O\n\n", "iob2", 3, "no sentence"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_names_file_and_line(tmp_path, name):
    text, scheme, line, message = BAD_INPUTS[name]
    path = _write(tmp_path, "bad.txt", text)
    with pytest.raises(ValueError) as error:
        conll.read_conll(path, tag_scheme=scheme)
    assert f"{path}:{line}: " in str(error.value)
    assert message in str(error.value)


def test_bad_utf8_and_bad_scheme(tmp_path):
    path = _write(tmp_path, "latin1.txt", b"Jim B-PER\n\xe9t\xe9 O\n")
    with pytest.raises(ValueError, match=r"latin1\.txt:2: not UTF-8"):
        conll.read_conll(path)
    with pytest.raises(ValueError, match="tag_scheme"):
        conll.parse_conll("a O\n", tag_scheme="bio")


def test_missing_tag_filled_when_asked(tmp_path):
    path = _write(tmp_path, "holes.txt", "Appendix O\nA;\n")
    [sentence] = conll.read_conll(path, missing_tag="O")
    assert sentence.words == ("Appendix", "A;") and sentence.tags == ("O", "O")


def test_unknown_tag_at_eval_time_names_file_and_line(tmp_path, tokenizer):
    train = conll.parse_conll("Jim B-PER\nHenson I-PER\n", path="train.txt")
    labels = conll.label_list(train)
    assert labels == ["O", "B-PER", "I-PER"]
    path = _write(tmp_path, "dev.txt", "Jim B-PER\n\nin O\nParis B-LOC\n")
    dev = conll.read_conll(path)
    with pytest.raises(ValueError) as error:
        ner_features.convert_sentences_to_features(dev, labels, tokenizer, 16, 8)
    assert f"{path}:4: tag 'B-LOC'" in str(error.value)
    assert "not in the training label list" in str(error.value)


def test_sciner_files(sample_data, tokenizer):
    train = conll.read_conll(str(sample_data / "sciner" / "train.txt"))
    # dev.txt line 170 ("A;") has no tag; read it as O.
    dev = conll.read_conll(str(sample_data / "sciner" / "dev.txt"), missing_tag="O")
    assert (len(train), len(dev)) == (449, 113)
    assert sum(len(s.words) for s in train) == 8261
    assert sum(len(s.words) for s in dev) == 2640
    assert conll.detect_file_tag_scheme(str(sample_data / "sciner" / "train.txt")) == "iob2"
    types = [
        "DatasetName",
        "HyperparameterName",
        "HyperparameterValue",
        "MethodName",
        "MetricName",
        "MetricValue",
        "TaskName",
    ]
    labels = conll.label_list(train)
    # Every type's B- and I-, but I-HyperparameterValue: no such value spans two words.
    assert labels == ["O"] + [
        f"{p}-{t}" for t in types for p in "BI" if f"{p}-{t}" != "I-HyperparameterValue"
    ]
    assert len(labels) == 14
    assert train[0].words[:4] == ("BERT", ":", "Pre", "-")
    assert train[0].tags[:4] == ("B-MethodName", "O", "B-MethodName", "I-MethodName")
    assert sum(len(tag_schemes.get_chunks(s.tags)) for s in dev) == 134
    # No sentence needs windows at 128; every dev tag is a training label.
    features = ner_features.convert_sentences_to_features(dev, labels, tokenizer, 128, 64)
    assert len(features) == len(dev)


# ----------------------------------------------------------------------------
# Features.
# ----------------------------------------------------------------------------

# jim henson was a puppet ##eer in ga ##v ##le [UNK]: "\u200b" (a format
# character) has no word piece and becomes [UNK].
HAND_TEXT = "Jim B-PER\nHenson I-PER\nwas O\na O\npuppeteer O\nin O\nGävle B-LOC\n\u200b O\n"
HAND_IDS = [3958, 27227, 2001, 1037, 13997, 11510, 1999, 11721, 2615, 2571, 100]
CLS, SEP = 101, 102


@pytest.fixture()
def hand_sentences(tmp_path):
    return conll.read_conll(_write(tmp_path, "hand.txt", HAND_TEXT))


def test_alignment_of_a_hand_made_sentence(hand_sentences, tokenizer):
    assert conll.label_list(hand_sentences) == ["O", "B-LOC", "B-PER", "I-PER"]
    labels = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]  # any list holding them will do
    pieces, starts = ner_features.tokenize_words(hand_sentences[0].words, tokenizer)
    assert pieces == [
        "jim",
        "henson",
        "was",
        "a",
        "puppet",
        "##eer",
        "in",
        "ga",
        "##v",
        "##le",
        "[UNK]",
    ]
    assert starts == [0, 1, 2, 3, 4, 6, 7, 10]
    [feature] = ner_features.convert_sentences_to_features(
        hand_sentences, labels, tokenizer, max_seq_length=16, doc_stride=8
    )
    assert feature.input_ids == [CLS] + HAND_IDS + [SEP, 0, 0, 0]
    assert feature.input_mask == [1] * 13 + [0] * 3
    assert feature.segment_ids == [0] * 16
    assert feature.label_ids == [
        IGNORE,
        3,
        4,
        0,
        0,
        0,
        IGNORE,
        0,
        1,
        IGNORE,
        IGNORE,
        0,
        IGNORE,
        IGNORE,
        IGNORE,
        IGNORE,
    ]
    assert feature.token_to_word == [-1, 0, 1, 2, 3, 4, -1, 5, 6, -1, -1, 7, -1, -1, -1, -1]
    assert feature.token_is_max_context == [w >= 0 for w in feature.token_to_word]
    assert (feature.unique_id, feature.sentence_index, feature.window_index) == (0, 0, 0)


def test_windows_and_max_context_by_hand():
    assert ner_features.make_windows(10, 6, 2) == [(0, 6), (2, 6), (4, 6)]
    assert ner_features.max_context_windows(range(10), [(0, 6), (2, 6), (4, 6)]) == [
        0,
        0,
        0,
        0,
        1,
        1,
        2,
        2,
        2,
        2,
    ]
    # Position 3 scores min(3, 1) + 0.05 in both windows: the first one wins.
    assert ner_features.make_windows(7, 5, 2) == [(0, 5), (2, 5)]
    assert ner_features.max_context_windows(range(7), [(0, 5), (2, 5)]) == [0, 0, 0, 0, 1, 1, 1]
    # Position 4: min(4, 1) + 0.06 against min(1, 3) + 0.05: the longer window wins.
    assert ner_features.make_windows(8, 6, 3) == [(0, 6), (3, 5)]
    assert ner_features.max_context_windows(range(8), [(0, 6), (3, 5)]) == [0, 0, 0, 0, 0, 1, 1, 1]
    # Position 299: min(299, 0) + 3.00 in window 0 beats min(1, 148) + 1.50 in the
    # short last window: the length term matters when lengths differ by > 100.
    windows = ner_features.make_windows(448, 300, 298)
    assert windows == [(0, 300), (298, 150)]
    assert ner_features.max_context_windows([297, 298, 299, 300], windows) == [0, 0, 0, 1]
    # A stride longer than a window leaves no gap; a short input is one window.
    assert ner_features.make_windows(10, 4, 7) == [(0, 4), (4, 4), (8, 2)]
    assert ner_features.make_windows(3, 6, 2) == [(0, 3)]


def test_windows_of_a_hand_made_sentence(hand_sentences, tokenizer):
    labels = conll.label_list(hand_sentences)
    # 11 pieces, 6 per window, stride 2: windows at pieces 0, 2, 4 and 6.
    features = ner_features.convert_sentences_to_features(
        hand_sentences, labels, tokenizer, max_seq_length=8, doc_stride=2
    )
    assert [f.window_index for f in features] == [0, 1, 2, 3]
    assert [f.unique_id for f in features] == [0, 1, 2, 3]
    assert [f.input_ids for f in features] == [
        [CLS] + HAND_IDS[0:6] + [SEP],
        [CLS] + HAND_IDS[2:8] + [SEP],
        [CLS] + HAND_IDS[4:10] + [SEP],
        [CLS] + HAND_IDS[6:11] + [SEP, 0],
    ]
    assert features[3].input_mask == [1] * 7 + [0]
    assert features[2].token_to_word == [-1, 4, -1, 5, 6, -1, -1, -1]
    assert features[2].label_ids == [IGNORE, 0, IGNORE, 0, 1, IGNORE, IGNORE, IGNORE]
    assert features[3].label_ids == [IGNORE, 0, 1, IGNORE, IGNORE, 0, IGNORE, IGNORE]
    # Words 0-3 from window 0, "puppeteer" from 1, "in" and "Gävle" from 2, the
    # [UNK] word from 3.
    assert [[i for i, m in enumerate(f.token_is_max_context) if m] for f in features] == [
        [1, 2, 3, 4],
        [3],
        [3, 4],
        [5],
    ]
    # Stride 5: the second window starts with "##eer", which carries no label.
    features = ner_features.convert_sentences_to_features(
        hand_sentences, labels, tokenizer, max_seq_length=8, doc_stride=5
    )
    assert features[1].input_ids == [CLS] + HAND_IDS[5:11] + [SEP]
    assert features[1].token_to_word == [-1, -1, 5, 6, -1, -1, 7, -1]
    assert features[1].label_ids == [IGNORE, IGNORE, 0, 1, IGNORE, IGNORE, 0, IGNORE]
    assert features[1].token_is_max_context == [False, False, True, True, False, False, True, False]


def test_600_word_sentence_every_word_predicted_once_from_max_context(tokenizer):
    cycle = ["the", "puppeteer", "Gävle", "\u200b", "a", "fine-tuning", "BERT"]
    words = tuple(itertools.islice(itertools.cycle(cycle), 600))
    sentence = conll.Sentence(words=words, tags=("O",) * 600, line_numbers=tuple(range(1, 601)))
    max_seq_length, doc_stride = 64, 24
    features = ner_features.convert_sentences_to_features(
        [sentence], ["O"], tokenizer, max_seq_length, doc_stride
    )
    # Expected windows and max-context windows, by brute force.
    lengths = [len(tokenizer.tokenize(w)) or 1 for w in words]
    first_piece = np.cumsum([0] + lengths[:-1])
    num_pieces, per_window = sum(lengths), max_seq_length - 2
    starts = [0]
    while starts[-1] + per_window < num_pieces:
        starts.append(starts[-1] + doc_stride)
    windows = [(s, min(per_window, num_pieces - s)) for s in starts]
    assert len(features) == len(windows) > 20

    def score(window, position):
        start, length = window
        return min(position - start, start + length - 1 - position) + 0.01 * length

    expected_window = [
        max(
            (i for i, (s, n) in enumerate(windows) if s <= p < s + n),
            key=lambda i: (score(windows[i], p), -i),
        )
        for p in first_piece
    ]
    # Synthetic predictions: at every word's first piece, in every window, the
    # label id encodes (word, window).
    num_features = len(features)
    labels = [str(i) for i in range(600 * num_features)]
    predictions = np.zeros([num_features, max_seq_length], np.int64)
    for f, feature in enumerate(features):
        for position, word in enumerate(feature.token_to_word):
            if word >= 0:
                predictions[f, position] = word * num_features + f
    [tags] = ner_features.predictions_to_tags(predictions, features, [sentence], labels)
    decoded = [divmod(int(tag), num_features) for tag in tags]
    assert [word for word, _ in decoded] == list(range(600))
    assert [window for _, window in decoded] == expected_window
    assert sum(sum(f.token_is_max_context) for f in features) == 600
    # Words are labelled in every window holding their first piece.
    labelled = sum(sum(label >= 0 for label in f.label_ids) for f in features)
    assert labelled == sum(sum(s <= p < s + n for s, n in windows) for p in first_piece)
    assert labelled > 600


@pytest.mark.parametrize("label_scheme", ["iob1", "iob2", "iobes"])
def test_gold_labels_reassemble_to_gold_tags_on_sciner(
    sample_data, tokenizer, tmp_path, label_scheme
):
    """Labels learnt in any scheme come back as the gold chunks, in every file scheme."""
    train = conll.read_conll(str(sample_data / "sciner" / "train.txt"))
    labels = conll.label_list(train, label_scheme)
    features = ner_features.convert_sentences_to_features(
        train, labels, tokenizer, max_seq_length=32, doc_stride=8, label_scheme=label_scheme
    )
    assert sum(f.window_index > 0 for f in features) > 300  # many long sentences
    label_ids = np.array([f.label_ids for f in features])
    # Logits that put all weight on the gold label (label 0 where there is none).
    logits = np.eye(len(labels))[np.maximum(label_ids, 0)]
    tags = ner_features.predictions_to_tags(logits, features, train, labels)
    assert tags == [tag_schemes.from_iob2(s.tags, label_scheme) for s in train]
    if label_scheme == "iob1":  # I- everywhere but between two touching chunks of a type
        assert collections.Counter(t[0] for row in tags for t in row) == {
            "O": 7843,
            "I": 417,
            "B": 1,
        }
    for file_scheme in ("iob1", "iob2", "iobes"):
        path = str(tmp_path / f"{label_scheme}_as_{file_scheme}.txt")
        conll.write_predictions(path, train, tags, tag_scheme=file_scheme)
        counts = conlleval.evaluate_file(path)
        assert counts.found_guessed == counts.found_correct == counts.correct_chunks == 272
        for line in open(path, encoding="utf-8"):
            if line.strip():
                _, gold, guess = line.split()
                assert gold == guess and tag_schemes.tag_error(guess, file_scheme) is None


def test_iob1_labels_of_a_hand_made_sentence(tmp_path, tokenizer):
    """IOB1 labels: I- throughout, B- only for a chunk right after one of its type."""
    text = "Jim I-PER\nHenson I-PER\nKermit B-PER\nin O\nParis I-LOC\n"
    [sentence] = conll.read_conll(_write(tmp_path, "iob1.txt", text), tag_scheme="iob1")
    labels = conll.label_list([sentence], "iob1")
    assert labels == ["O", "I-LOC", "B-PER", "I-PER"]
    [feature] = ner_features.convert_sentences_to_features(
        [sentence], labels, tokenizer, 16, 8, label_scheme="iob1"
    )
    assert [i for i in feature.label_ids if i != IGNORE] == [3, 3, 2, 0, 1]
    labels = conll.label_list([sentence])
    assert labels == ["O", "B-LOC", "B-PER", "I-PER"]
    [feature] = ner_features.convert_sentences_to_features([sentence], labels, tokenizer, 16, 8)
    assert [i for i in feature.label_ids if i != IGNORE] == [2, 3, 2, 0, 1]


def test_predictions_to_tags_errors(hand_sentences, tokenizer):
    labels = conll.label_list(hand_sentences)
    features = ner_features.convert_sentences_to_features(
        hand_sentences, labels, tokenizer, max_seq_length=8, doc_stride=2
    )
    with pytest.raises(ValueError, match=r"must be \[F=4, S\]"):
        ner_features.predictions_to_tags(np.zeros([3, 8]), features, hand_sentences, labels)
    with pytest.raises(ValueError, match="label id 5 is not in"):
        ner_features.predictions_to_tags(np.full([4, 8], 5), features, hand_sentences, labels)
    with pytest.raises(ValueError, match="word 4: no prediction"):
        ner_features.predictions_to_tags(np.zeros([1, 8]), features[:1], hand_sentences, labels)


def test_bad_lengths(hand_sentences, tokenizer):
    with pytest.raises(ValueError, match="max_seq_length"):
        ner_features.convert_sentences_to_features(hand_sentences, ["O"], tokenizer, 2, 1)
    with pytest.raises(ValueError, match="doc_stride"):
        ner_features.convert_sentences_to_features(hand_sentences, ["O"], tokenizer, 8, 0)


# ----------------------------------------------------------------------------
# Files written.
# ----------------------------------------------------------------------------


def _write_hand_windows(path: str, hand_sentences, tokenizer):
    """The hand sentences, twice, as windows of 8 tokens (stride 2) written to `path`;
    returns (labels, features, metadata)."""
    labels = conll.label_list(hand_sentences)
    features = ner_features.convert_sentences_to_features(
        hand_sentences * 2, labels, tokenizer, 8, 2
    )
    ner_records.write_tfrecord(features, path)
    metadata = ner_records.describe(
        hand_sentences * 2,
        features,
        labels,
        label_scheme="iob2",
        tag_scheme="iob2",
        max_seq_length=8,
        doc_stride=2,
        do_lower_case=True,
        vocab_size=len(tokenizer.vocab),
    )
    return labels, features, metadata


def test_tfrecord_round_trip_and_metadata(tmp_path, hand_sentences, tokenizer):
    path = str(tmp_path / "out" / "train.tf_record")
    labels, features, metadata = _write_hand_windows(path, hand_sentences, tokenizer)
    serialized = list(tf.data.TFRecordDataset(path).as_numpy_iterator())
    decoded = {k: v.numpy() for k, v in ner_records.decode_records(serialized, 8).items()}
    assert len(serialized) == len(features) == 8
    assert sorted(decoded) == ["input_mask", "input_type_ids", "input_word_ids", "label_ids"]
    assert all(v.dtype == np.int32 for v in decoded.values())
    for i, feature in enumerate(features):
        assert decoded["input_word_ids"][i].tolist() == feature.input_ids
        assert decoded["input_mask"][i].tolist() == feature.input_mask
        assert decoded["input_type_ids"][i].tolist() == feature.segment_ids
        assert decoded["label_ids"][i].tolist() == feature.label_ids
    assert features[4].sentence_index == 1 and features[4].unique_id == 4

    ner_records.write_metadata(path, metadata)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "train.tf_record",
        "train.tf_record.meta.json",
    ]
    data = json.loads((tmp_path / "out" / "train.tf_record.meta.json").read_text("utf-8"))
    assert data == {
        "labels": labels,
        "label_scheme": "iob2",
        "tag_scheme": "iob2",
        "max_seq_length": 8,
        "doc_stride": 2,
        "document_context": False,
        "do_lower_case": True,
        "vocab_size": 30522,
        "num_sentences": 2,
        "num_words": 16,
        "num_features": 8,
        "label_ignore_id": -1,
        "format": "bert_ner_tfrecord/4",
        "record_bytes": os.path.getsize(path),
    }
    assert ner_records.read_metadata(path) == metadata
    assert metadata.num_records == 8 and metadata.max_seq_length == 8
    data["max_seq_lenght"] = data.pop("max_seq_length")
    bad = str(tmp_path / "bad.tf_record")
    (tmp_path / "bad.tf_record.meta.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(
        ValueError,
        match=r"bad\.tf_record\.meta\.json.*max_seq_lenght.*"
        r"max_seq_length",
    ):
        ner_records.read_metadata(bad)
    file_io.write_json(records.metadata_path(bad), dict(data, format="bert_ner_tfrecord/0"))
    with pytest.raises(ValueError, match=r"'bert_ner_tfrecord/0', not 'bert_ner_tfrecord/4'"):
        ner_records.read_metadata(bad)


def test_build_dataset_batches_for_the_trainer(tmp_path, hand_sentences, tokenizer):
    path = str(tmp_path / "train.tf_record")
    _, features, metadata = _write_hand_windows(path, hand_sentences, tokenizer)

    def ids(batches, name="input_word_ids"):
        return np.concatenate([batch[name] for batch in batches]).tolist()

    once = list(ner_records.build_dataset(path, metadata, 3, is_training=False))
    assert sorted(once[0]) == ["input_mask", "input_type_ids", "input_word_ids", "label_ids"]
    assert [len(batch["label_ids"]) for batch in once] == [3, 3, 2]
    assert ids(once) == [f.input_ids for f in features]
    assert ids(once, "label_ids") == [f.label_ids for f in features]
    # A shuffle buffer of one keeps file order; training repeats and drops no record.
    train = list(
        ner_records.build_dataset(path, metadata, 3, is_training=True, shuffle_buffer_size=1).take(
            4
        )
    )
    assert ids(train) == [f.input_ids for f in (features * 2)[:12]]
    context = tf.distribute.InputContext(
        num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2
    )
    shard = list(
        ner_records.build_dataset(path, metadata, 4, is_training=False, input_context=context)
    )
    assert ids(shard) == [f.input_ids for f in features[1::2]]
    assert [len(batch["label_ids"]) for batch in shard] == [2, 2]
    inference = list(ner_records.inference_dataset(features, 5))
    assert ids(inference) == ids(once) and ids(inference, "unique_ids") == list(range(8))


def test_write_predictions_for_conlleval(tmp_path, hand_sentences):
    guessed = [["B-PER", "B-PER", "O", "O", "O", "O", "I-LOC", "O"]]
    path = tmp_path / "predictions.txt"
    conll.write_predictions(str(path), hand_sentences, guessed)
    # An I- that starts a chunk is written B-: the chunks conlleval reads, valid IOB2.
    assert path.read_text(encoding="utf-8") == (
        "Jim B-PER B-PER\nHenson I-PER B-PER\nwas O O\na O O\npuppeteer O O\n"
        "in O O\nGävle B-LOC B-LOC\n\u200b O O\n\n"
    )
    counts = conlleval.evaluate_file(str(path))
    assert (
        counts.num_tokens,
        counts.found_correct,
        counts.found_guessed,
        counts.correct_chunks,
    ) == (8, 2, 3, 1)
    conll.write_predictions(str(path), hand_sentences, guessed, tag_scheme="iobes")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ["Jim B-PER S-PER", "Henson E-PER S-PER"]
    assert lines[6] == "Gävle S-LOC S-LOC"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("predictions")] == [
        "predictions.txt"
    ]
    with pytest.raises(ValueError, match="sentence 0: 8 words but 1 predicted"):
        conll.write_predictions(str(path), hand_sentences, [["O"]])


def test_write_iob1_predictions_in_every_scheme(tmp_path, hand_sentences):
    """A model that learnt IOB1 predicts IOB1 tags; each file gets them in its scheme."""
    guessed = [["I-PER", "I-PER", "B-PER", "O", "O", "O", "I-LOC", "B-LOC"]]
    path = str(tmp_path / "predictions.txt")
    written = {}
    for scheme in ("iob1", "iob2", "iobes"):
        conll.write_predictions(path, hand_sentences, guessed, tag_scheme=scheme)
        lines = [line.split() for line in open(path, encoding="utf-8") if line.strip()]
        written[scheme] = [guess for _, _, guess in lines]
        counts = conlleval.evaluate_file(path)
        assert (counts.found_correct, counts.found_guessed, counts.correct_chunks) == (2, 4, 2)
    assert written == {
        "iob1": ["I-PER", "I-PER", "B-PER", "O", "O", "O", "I-LOC", "B-LOC"],
        "iob2": ["B-PER", "I-PER", "B-PER", "O", "O", "O", "B-LOC", "B-LOC"],
        "iobes": ["B-PER", "E-PER", "S-PER", "O", "O", "O", "S-LOC", "S-LOC"],
    }


# ----------------------------------------------------------------------------
# Documents.
# ----------------------------------------------------------------------------

MARKER = "-DOCSTART- O\n\n"
# Three documents: two sentences, one sentence, two sentences.
DOCUMENTS = [
    ["Jim I-PER\nHenson I-PER\nwas O\nhere O\n", "He O\nleft O\nParis I-LOC\n"],
    ["Kermit I-PER\nsang O\n"],
    ["Oslo I-LOC\nis O\ncold O\n", "Ann I-PER\nagreed O\n"],
]


def _documents_text(marker_before: bool) -> str:
    text = ""
    for sentences in DOCUMENTS:
        body = "\n".join(sentences) + "\n"
        text += MARKER + body if marker_before else body + MARKER
    return text


@pytest.mark.parametrize("marker_before", [True, False], ids=["conll2003", "wikigold_upstream"])
def test_documents_with_markers_before_or_after(tmp_path, marker_before):
    """-DOCSTART- separates documents wherever it stands; sentences keep their order and
    their line numbers; the predictions file has the markers where the input had them."""
    path = _write(tmp_path, "docs.txt", _documents_text(marker_before))
    sentences = conll.read_conll(path, tag_scheme="iob1")
    assert conll.has_documents(sentences)
    assert [s.words[0] for s in sentences] == ["Jim", "He", "Kermit", "Oslo", "Ann"]
    assert [s.document for s in sentences] == [0, 0, 1, 2, 2]
    first = 3 if marker_before else 1
    assert sentences[0].line_numbers == tuple(range(first, first + 4))
    lines = open(path, encoding="utf-8").read().split("\n")
    for sentence in sentences:  # every word at its line
        assert [lines[n - 1].split()[0] for n in sentence.line_numbers] == list(sentence.words)
    out = str(tmp_path / "predictions.txt")
    conll.write_predictions(out, sentences, [s.tags for s in sentences], tag_scheme="iob1")
    written = open(out, encoding="utf-8").read().split("\n")
    # Line for line the input's words, markers and blank lines, with gold and guess.
    assert [line.split()[:1] for line in written] == [line.split()[:1] for line in lines]
    assert [line.split()[1:] for line in written if line.startswith("Jim")] == [["I-PER", "I-PER"]]
    assert conlleval.evaluate_file(out).precision_recall_f1()[2] == 1.0


def test_file_without_markers_is_one_document(tmp_path):
    sentences = conll.parse_conll("a O\n\nb O\n")
    assert not conll.has_documents(sentences)
    assert [s.document for s in sentences] == [0, 0]
    # Two markers in a row open one document; one at the end closes the last.
    sentences = conll.parse_conll(MARKER + MARKER + "a O\n\n" + MARKER + "b O\n" + MARKER)
    assert [(s.document, s.docstart_before, s.docstart_after) for s in sentences] == [
        (0, 2, 0),
        (1, 1, 1),
    ]


def _gold_logits(features, labels):
    """Logits that put all weight on each position's gold label (0 where none)."""
    label_ids = np.array([f.label_ids for f in features])
    return np.eye(len(labels))[np.maximum(label_ids, 0)]


def test_document_windows_span_sentences(tokenizer):
    sentences = conll.parse_conll(_documents_text(True), tag_scheme="iob1")
    labels = conll.label_list(sentences)
    features = ner_features.convert_sentences_to_features(
        sentences, labels, tokenizer, 32, 16, document_context=True
    )
    # One window per document, holding all its sentences' pieces in order.
    assert [f.sentence_index for f in features] == [0, 2, 3]
    pieces = tokenizer.convert_ids_to_tokens(features[0].input_ids[: sum(features[0].input_mask)])
    assert pieces == "[CLS] jim henson was here he left paris [SEP]".split()
    assert features[0].token_to_word[:9] == [-1, 0, 1, 2, 3, 0, 1, 2, -1]
    assert features[0].token_to_sentence[:9] == [-1, 0, 0, 0, 0, 1, 1, 1, -1]
    tags = ner_features.predictions_to_tags(
        _gold_logits(features, labels), features, sentences, labels
    )
    assert tags == [list(s.tags) for s in sentences]
    # A document of one sentence: the same features as without document context.
    alone = ner_features.convert_sentences_to_features(sentences[2:3], labels, tokenizer, 32, 16)
    in_document = ner_features.convert_sentences_to_features(
        sentences[2:3], labels, tokenizer, 32, 16, document_context=True
    )
    assert alone == in_document


def test_long_document_and_long_sentence_each_word_from_its_max_context_window(
    sample_data, tokenizer
):
    """A document of many windows, one of its sentences longer than a window: every word
    is predicted once, from the window the SQuAD rule picks over the whole document's
    pieces, and windows cross sentence boundaries."""
    sciner = conll.read_conll(str(sample_data / "sciner" / "train.txt"))[:40]
    long = max(sciner, key=lambda s: len(s.words))
    sentences = sciner[:20] + [
        dataclasses.replace(
            long, words=long.words * 3, tags=long.tags * 3, line_numbers=long.line_numbers * 3
        )
    ]
    sentences += sciner[20:]
    labels = conll.label_list(sciner)
    max_seq_length, stride = 24, 7
    features = ner_features.convert_sentences_to_features(
        sentences, labels, tokenizer, max_seq_length, stride, document_context=True
    )
    pieces = [ner_features.tokenize_words(s.words, tokenizer) for s in sentences]
    assert max(len(p) for p, _ in pieces) > 3 * (max_seq_length - 2)
    total = sum(len(p) for p, _ in pieces)
    windows = context_windows.windows(total, max_seq_length - 2, stride)
    assert len(features) == len(windows) > 100
    # The reference: each word's first piece, its position in the document.
    offset, expected = 0, {}
    for sentence_index, (piece_list, starts) in enumerate(pieces):
        for word, start in enumerate(starts):
            position = offset + start
            window = context_windows.max_context_window(position, windows)
            expected[(sentence_index, word)] = (window, 1 + position - windows[window][0])
        offset += len(piece_list)
    found = {}
    for feature in features:
        for position, word in enumerate(feature.token_to_word):
            if feature.token_is_max_context[position]:
                key = (feature.token_to_sentence[position], word)
                assert key not in found
                found[key] = (feature.window_index, position)
    assert found == expected
    assert sum(len(set(f.token_to_sentence) - {-1}) > 1 for f in features) > 20
    tags = ner_features.predictions_to_tags(
        _gold_logits(features, labels), features, sentences, labels
    )
    assert tags == [list(s.tags) for s in sentences]
