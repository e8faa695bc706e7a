"""Tests of data_prep/squad_{reader,features,records}.py, against the original
release's run_squad.py: examples and features, reading hand-made files, pieces of
the feature algorithm, TFRecords.

The original (`bert.run_squad` from bert-tensorflow 1.0.4) is the oracle: the
examples and the features of every window must equal its own, on the bundled
SQuAD v2.0 sample, except where a crash is deliberately fixed. The default suite
uses the sample's first questions; the whole sample runs under `-m slow`.
"""

import json
import logging

import pytest

from data_prep import records
from data_prep.squad import squad_features
from data_prep.squad import squad_reader
from data_prep.squad import squad_records
from tests.helpers.squad_helpers import (
    MAX_QUERY_LENGTH,
    NUM_FAST_QUESTIONS,
    orig_features,
    orig_version,
    question,
    squad_json,
    write_variant,
)


# (max_seq_length, doc_stride): the defaults, and short windows (many per
# question, many answers outside their window).
WINDOWS = [(384, 128), (128, 64)]


def sample_file(tmp_path, version_2_with_negative, is_training, max_questions):
    return write_variant(
        tmp_path,
        max_questions,
        first_answer_only=is_training,
        drop_impossible=not version_2_with_negative,
    )


EXAMPLE_FIELDS = (
    "qas_id",
    "question_text",
    "doc_tokens",
    "orig_answer_text",
    "start_position",
    "end_position",
    "is_impossible",
)


FEATURE_FIELDS = (
    "unique_id",
    "example_index",
    "doc_span_index",
    "doc_span_start",
    "tokens",
    "token_to_orig_map",
    "token_is_max_context",
    "input_ids",
    "input_mask",
    "segment_ids",
    "start_position",
    "end_position",
    "is_impossible",
)


def assert_same_fields(ours, theirs, fields, what):
    assert len(ours) == len(theirs), what
    for index, (a, b) in enumerate(zip(ours, theirs)):
        for field in fields:
            assert getattr(a, field) == getattr(b, field), "%s %d: %s differs" % (
                what,
                index,
                field,
            )


# ----------------------------------------------------------------------------
# Examples and features equal the original's.
# ----------------------------------------------------------------------------


def check_examples(orig, tmp_path, version_2_with_negative, is_training, max_questions):
    path = sample_file(tmp_path, version_2_with_negative, is_training, max_questions)
    with orig_version(orig, version_2_with_negative):
        theirs = orig.read_squad_examples(path, is_training)
    result = squad_reader.read_squad_file(path, is_training, version_2_with_negative)
    assert_same_fields(result.examples, theirs, EXAMPLE_FIELDS, "example")
    assert result.skipped_qas_ids == []
    assert result.num_questions == len(theirs)
    return result.examples, theirs


def check_features(
    orig,
    tokenizer,
    orig_tokenizer,
    tmp_path,
    version_2_with_negative,
    is_training,
    window,
    max_questions,
):
    ours_examples, their_examples = check_examples(
        orig, tmp_path, version_2_with_negative, is_training, max_questions
    )
    max_seq_length, doc_stride = window
    theirs = orig_features(
        orig, their_examples, orig_tokenizer, max_seq_length, doc_stride, is_training
    )
    ours = list(
        squad_features.convert_examples_to_features(
            ours_examples, tokenizer, max_seq_length, doc_stride, MAX_QUERY_LENGTH, is_training
        )
    )
    assert_same_fields(ours, theirs, FEATURE_FIELDS, "feature")
    # The cases that matter occur: several windows per question, and in
    # training answers inside a later window, outside their window and (v2.0)
    # impossible ones.
    assert any(f.doc_span_index > 0 for f in ours)
    if is_training:
        assert any(f.doc_span_index > 0 and f.start_position > 0 for f in ours)
        assert any(f.start_position == 0 and not f.is_impossible for f in ours)
        assert any(f.is_impossible for f in ours) == version_2_with_negative
        assert all(f.end_position >= f.start_position for f in ours)
    return ours


@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: "seq%d_stride%d" % w)
@pytest.mark.parametrize("is_training", [True, False], ids=["train", "predict"])
@pytest.mark.parametrize("version_2_with_negative", [False, True], ids=["v1.1", "v2.0"])
def test_features_equal_original(
    orig, tokenizer, orig_tokenizer, tmp_path, version_2_with_negative, is_training, window
):
    check_features(
        orig,
        tokenizer,
        orig_tokenizer,
        tmp_path,
        version_2_with_negative,
        is_training,
        window,
        NUM_FAST_QUESTIONS,
    )


@pytest.mark.slow
@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: "seq%d_stride%d" % w)
@pytest.mark.parametrize("is_training", [True, False], ids=["train", "predict"])
@pytest.mark.parametrize("version_2_with_negative", [False, True], ids=["v1.1", "v2.0"])
def test_features_equal_original_full_sample(
    orig, tokenizer, orig_tokenizer, tmp_path, version_2_with_negative, is_training, window
):
    features = check_features(
        orig,
        tokenizer,
        orig_tokenizer,
        tmp_path,
        version_2_with_negative,
        is_training,
        window,
        None,
    )
    if window == (384, 128) and not version_2_with_negative:
        assert len({f.example_index for f in features}) == 705


def test_sample_feature_values(tokenizer, tmp_path):
    """Fixed values, independent of the oracle: the first question of the
    sample packed into windows of 64 word pieces."""
    path = write_variant(tmp_path, 1, first_answer_only=True)
    (example,) = squad_reader.read_squad_examples(path, True, True)
    assert example.question_text == "In what country is Normandy located?"
    assert example.doc_tokens[example.start_position] == "France."
    features = list(
        squad_features.convert_examples_to_features([example], tokenizer, 64, 32, 16, True)
    )
    first = features[0]
    assert first.tokens[:11] == [
        "[CLS]",
        "in",
        "what",
        "country",
        "is",
        "normandy",
        "located",
        "?",
        "[SEP]",
        "the",
        "norman",
    ]
    assert first.tokens[-1] == "[SEP]" and len(first.tokens) == 64
    assert first.segment_ids == [0] * 9 + [1] * 55
    assert first.input_ids[:3] == [101, 1999, 2054]
    assert first.token_to_orig_map[9] == 0  # "the" <- "The"
    assert [f.doc_span_start for f in features] == [32 * i for i in range(len(features))]
    # The answer "France" is a piece of "France." in the first window.
    assert first.tokens[first.start_position] == "france"
    assert first.start_position == first.end_position
    assert [f.unique_id for f in features] == [
        squad_features.FIRST_UNIQUE_ID + i for i in range(len(features))
    ]


def test_split_context_offsets():
    tokens, offsets = squad_reader.split_context(" ab\tc\u202fd  e")
    assert tokens == ["ab", "c", "d", "e"]
    assert offsets == [-1, 0, 0, 0, 1, 1, 2, 2, 2, 3]


def test_training_reads_first_answer_and_impossible(tmp_path):
    qa = question("q1", "mat", 19)
    qa["answers"].append({"text": "the mat", "answer_start": 15})
    path = squad_json(tmp_path, [qa, question("q2", "", 0, True)])
    first, impossible = squad_reader.read_squad_examples(path, True, True)
    assert (first.orig_answer_text, first.start_position, first.end_position) == ("mat", 5, 5)
    assert (impossible.is_impossible, impossible.start_position, impossible.orig_answer_text) == (
        True,
        -1,
        "",
    )


def test_unrecoverable_answer_is_counted_and_logged(tmp_path, caplog):
    path = squad_json(tmp_path, [question("good", "cat", 4), question("bad", "dog", 4)])
    with caplog.at_level(logging.WARNING, logger="absl"):
        result = squad_reader.read_squad_file(path, True, True)
    assert [e.qas_id for e in result.examples] == ["good"]
    assert result.skipped_qas_ids == ["bad"]
    assert result.num_questions == 2
    assert "bad" in caplog.text and "'dog'" in caplog.text
    # At prediction time answers are not read: nothing is skipped.
    assert len(squad_reader.read_squad_examples(path, False, True)) == 2


@pytest.mark.parametrize(
    "content, message",
    [
        ({"version": "1.1"}, 'no top-level "data" list'),
        (
            {"data": [{"paragraphs": [{"context": "x", "qas": []}, {"qas": []}]}]},
            "paragraph 1 of article 0 has no 'context' string",
        ),
        ({"data": [{"title": "t"}]}, "article 0 has no 'paragraphs' list"),
        (
            {"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "q7"}]}]}]},
            "question q7 has no 'question' string",
        ),
    ],
)
def test_malformed_file_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(ValueError, match=message) as info:
        squad_reader.read_squad_examples(str(path), False)
    assert str(path) in str(info.value)


def test_not_json_and_missing_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"data": [', encoding="utf-8")
    with pytest.raises(ValueError, match="broken.json is not valid JSON"):
        squad_reader.read_squad_examples(str(path), False)
    with pytest.raises(ValueError, match="absent.json does not exist"):
        squad_reader.read_squad_examples(str(tmp_path / "absent.json"), False)


def test_answer_offset_past_context(tmp_path):
    path = squad_json(tmp_path, [question("q9", "mat.", 21)])
    with pytest.raises(
        ValueError, match="question q9: answer 'mat.' at character 21 runs outside its context"
    ) as info:
        squad_reader.read_squad_examples(path, True, True)
    assert path in str(info.value)


def test_training_question_without_answer(tmp_path):
    path = squad_json(tmp_path, [question("q3", "", 0, is_impossible=True)])
    # v1.1 mode does not read is_impossible, as in the original.
    with pytest.raises(
        ValueError, match="question q3 is marked is_impossible .*--version_2_with_negative"
    ):
        squad_reader.read_squad_examples(path, True, False)


# ----------------------------------------------------------------------------
# Features: pieces of the algorithm.
# ----------------------------------------------------------------------------


def test_length_check_at_call(tokenizer):
    with pytest.raises(
        ValueError,
        match=r"--max_seq_length=67 must be "
        r"greater than --max_query_length=64 \+ 3",
    ):
        squad_features.convert_examples_to_features([], tokenizer, 67, 128, 64, False)
    assert (
        list(squad_features.convert_examples_to_features([], tokenizer, 68, 128, 64, False)) == []
    )


def test_improve_answer_span(tokenizer):
    words = "The leader was John Smith (1895-1943).".split()
    pieces, _, word_to_piece = squad_features.tokenize_document(tokenizer, words)
    assert pieces[word_to_piece[5] :] == ["(", "1895", "-", "1943", ")", "."]
    start, end = squad_features.improve_answer_span(
        pieces, word_to_piece[5], len(pieces) - 1, tokenizer, "1895"
    )
    assert (start, end) == (word_to_piece[5] + 1, word_to_piece[5] + 1)
    # "Japan" is inside the piece "japanese": the word span stays.
    pieces, _, _ = squad_features.tokenize_document(tokenizer, ["Japanese", "cars"])
    assert squad_features.improve_answer_span(pieces, 0, 0, tokenizer, "Japan") == (0, 0)


def test_doc_spans_and_max_context():
    spans = squad_features.doc_spans(12, 5, 3)
    assert spans == [(0, 5), (3, 5), (6, 5), (9, 3)]
    # "bought" (position 7) has context (1, 2) in span 2, (4, 0) in span 1.
    assert [squad_features.is_max_context(spans, i, 7) for i in range(4)] == [
        False,
        False,
        True,
        False,
    ]
    # Ties go to the longer window: position 9 is (3, 1) in span 2, (0, 2) in 3.
    assert squad_features.is_max_context(spans, 2, 9)
    assert squad_features.doc_spans(0, 5, 3) == []
    assert squad_features.doc_spans(4, 5, 3) == [(0, 4)]


def test_features_are_generated_lazily_with_progress(tokenizer, tmp_path, caplog):
    path = write_variant(tmp_path, 6)
    examples = squad_reader.read_squad_examples(path, False, True)
    generator = squad_features.convert_examples_to_features(
        examples, tokenizer, 384, 128, 64, False, log_every=2
    )
    first = next(generator)
    assert first.unique_id == squad_features.FIRST_UNIQUE_ID
    with caplog.at_level(logging.INFO, logger="absl"):
        rest = list(generator)
    assert len(rest) == 5
    assert "Converted 4 of 6 examples into 4 features" in caplog.text


# ----------------------------------------------------------------------------
# TFRecords.
# ----------------------------------------------------------------------------


def test_tfrecords_equal_original_and_decode(orig, tokenizer, orig_tokenizer, tmp_path):
    import tensorflow as tf

    path = write_variant(tmp_path, 20, first_answer_only=True)
    with orig_version(orig, True):
        their_examples = orig.read_squad_examples(path, True)
    theirs = orig_features(orig, their_examples, orig_tokenizer, 128, 64, True)
    writer = orig.FeatureWriter(str(tmp_path / "orig.tf_record"), True)
    for feature in theirs:
        writer.process_feature(feature)
    writer.close()

    examples = squad_reader.read_squad_examples(path, True, True)
    features = list(
        squad_features.convert_examples_to_features(examples, tokenizer, 128, 64, 64, True)
    )
    output = str(tmp_path / "train.tf_record")
    assert squad_records.write_features(iter(features), output, True) == len(theirs)
    assert sorted(p.name for p in tmp_path.iterdir() if "tf_record" in p.name) == [
        "orig.tf_record",
        "train.tf_record",
    ]

    def parsed(record_file):
        return [
            tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(record_file)
        ]

    assert parsed(output) == parsed(str(tmp_path / "orig.tf_record"))

    serialized = list(tf.data.TFRecordDataset(output).as_numpy_iterator())
    decoded = {k: v.numpy() for k, v in squad_records.decode_records(serialized, 128, True).items()}
    assert len(serialized) == len(features)
    assert sorted(decoded) == sorted(
        [
            "unique_ids",
            "input_word_ids",
            "input_mask",
            "input_type_ids",
            "start_positions",
            "end_positions",
            "is_impossible",
        ]
    )
    assert all(t.dtype == tf.int32 for t in decoded.values())
    for i, feature in enumerate(features):
        assert decoded["unique_ids"][i] == feature.unique_id
        assert decoded["input_word_ids"][i].tolist() == feature.input_ids
        assert decoded["input_mask"][i].tolist() == feature.input_mask
        assert decoded["input_type_ids"][i].tolist() == feature.segment_ids
        assert decoded["start_positions"][i] == feature.start_position
        assert decoded["end_positions"][i] == feature.end_position
        assert decoded["is_impossible"][i] == feature.is_impossible


def test_predict_records_have_no_labels(tokenizer, tmp_path):
    path = write_variant(tmp_path, 3)
    features = list(
        squad_features.convert_examples_to_features(
            squad_reader.read_squad_examples(path, False, True), tokenizer, 384, 128, 64, False
        )
    )
    output = str(tmp_path / "eval.tf_record")
    squad_records.write_features(features, output, False)
    import tensorflow as tf

    serialized = list(tf.data.TFRecordDataset(output).take(1).as_numpy_iterator())
    record = squad_records.decode_records(serialized, 384, False)
    assert sorted(record) == ["input_mask", "input_type_ids", "input_word_ids", "unique_ids"]
    with pytest.raises(Exception, match="_positions .* is required"):
        squad_records.decode_records(serialized, 384, True)


def test_failed_write_leaves_no_file(tmp_path):
    def broken():
        raise RuntimeError("reader failed")
        yield  # pylint: disable=unreachable

    output = tmp_path / "train.tf_record"
    with pytest.raises(RuntimeError, match="reader failed"):
        squad_records.write_features(broken(), str(output), True)
    assert list(tmp_path.iterdir()) == []


def test_metadata_round_trip(tmp_path):
    path = str(tmp_path / "train.tf_record")
    squad_records.write_features([], path, True)
    written = squad_records.write_metadata(
        path,
        max_seq_length=384,
        doc_stride=128,
        max_query_length=64,
        do_lower_case=True,
        is_training=True,
        version_2_with_negative=True,
        num_questions=10,
        num_examples=9,
        num_features=12,
        num_skipped=1,
        vocab_file="vocab.txt",
    )
    assert squad_records.read_metadata(path) == written
    assert written.num_records == 12 and written.max_seq_length == 384
    assert records.read_metadata(path, squad_records.RECORD_FORMAT) == written.entries
    assert written.entries == {
        "task": "squad",
        "is_training": True,
        "version_2_with_negative": True,
        "max_seq_length": 384,
        "doc_stride": 128,
        "max_query_length": 64,
        "do_lower_case": True,
        "preserve_unused_tokens": False,
        "num_questions": 10,
        "num_examples": 9,
        "num_features": 12,
        "num_skipped": 1,
        "vocab_file": "vocab.txt",
        "format": "bert_squad_tfrecord/2",
        "record_bytes": 0,
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "train.tf_record",
        "train.tf_record.meta.json",
    ]
