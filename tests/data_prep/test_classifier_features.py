"""Tests of data_prep/classifier/classifier_features.py: packing, SWAG (multiple choice),
bad input (unknown task, missing file, bad columns, labels and scores), TFRecords
and the cache.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from data_prep.classifier import classifier_features as cf
from data_prep.classifier import classifier_reader
from data_prep.classifier import classifier_tasks as ct
from data_prep import records
from data_prep.text import tokenization
from tests.helpers.classifier_helpers import MRPC_HEADER, _write


SWAG_HEADER = (
    ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label"
)


# ----------------------------------------------------------------------------
# Packing.
# ----------------------------------------------------------------------------


def _tokens(tokenizer, ids):
    return tokenizer.convert_ids_to_tokens(ids)


def test_pair_packing_with_truncation(tokenizer):
    example = classifier_reader.InputExample(
        "t-1", "The quick brown fox jumps", "over the lazy dog", "1"
    )
    features = cf.convert_example(example, ["0", "1"], 10, tokenizer)
    # 5 + 4 tokens into 10 - 3 = 7: A loses "jumps" (longer), then B loses "dog"
    # (a tie pops from B).
    assert _tokens(tokenizer, features.input_ids) == [
        "[CLS]",
        "the",
        "quick",
        "brown",
        "fox",
        "[SEP]",
        "over",
        "the",
        "lazy",
        "[SEP]",
    ]
    assert features.segment_ids == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert features.input_mask == [1] * 10
    assert features.label_id == 1 and features.truncated


def test_single_packing_with_padding(tokenizer):
    example = classifier_reader.InputExample("t-1", "The dog is hairy.", None, "0")
    features = cf.convert_example(example, ["0", "1"], 10, tokenizer)
    assert _tokens(tokenizer, features.input_ids[:7]) == [
        "[CLS]",
        "the",
        "dog",
        "is",
        "hairy",
        ".",
        "[SEP]",
    ]
    assert features.input_ids[7:] == [0, 0, 0]
    assert features.input_mask == [1] * 7 + [0] * 3
    assert features.segment_ids == [0] * 10
    assert not features.truncated


def test_unlabelled_and_regression_label_ids(tokenizer):
    unlabelled = classifier_reader.InputExample("test-1", "a", "b", None)
    assert cf.convert_example(unlabelled, ["0", "1"], 8, tokenizer).label_id == 0
    score = classifier_reader.InputExample("dev-1", "a", "b", 3.8)
    assert cf.convert_example(score, [], 8, tokenizer, is_regression=True).label_id == 3.8


# ----------------------------------------------------------------------------
# SWAG.
# ----------------------------------------------------------------------------


def _write_swag(directory):
    _write(
        directory,
        "train.csv",
        [
            SWAG_HEADER,
            '0,lsmdc3001,19,"A man sits down. He","A man sits down.",He,gold,'
            'eats.,"runs away, fast",sleeps.,reads.,1',
        ],
    )
    _write(
        directory,
        "val.csv",
        [SWAG_HEADER, "5,anetv_x,3,A dog. It,A dog.,It,gold,barks.,runs.,sits.,eats.,0"],
    )
    _write(
        directory,
        "test.csv",
        [
            SWAG_HEADER.rsplit(",", 1)[0],
            "7,anetv_y,4,A cat. It,A cat.,It,gen,purrs.,runs.,sits.,eats.",
        ],
    )


def test_swag_reader_and_features(tmp_path, tokenizer):
    _write_swag(tmp_path)
    processor = ct.get_processor("swag")
    (example,) = processor.get_train_examples(str(tmp_path))
    assert example.context == "A man sits down."
    assert example.choices == ("He eats.", "He runs away, fast", "He sleeps.", "He reads.")
    assert example.label == "1"
    (test,) = processor.get_test_examples(str(tmp_path))
    assert test.label is None and test.choices[0] == "It purrs."

    features = cf.convert_example(example, processor.get_labels(), 12, tokenizer)
    assert len(features.input_ids) == 4
    assert _tokens(tokenizer, features.input_ids[0]) == [
        "[CLS]",
        "a",
        "man",
        "sits",
        "down",
        ".",
        "[SEP]",
        "he",
        "eats",
        ".",
        "[SEP]",
        "[PAD]",
    ]
    # 5 + 5 tokens into 12 - 3 = 9: a tie, so "fast" goes from the choice.
    assert _tokens(tokenizer, features.input_ids[1]) == [
        "[CLS]",
        "a",
        "man",
        "sits",
        "down",
        ".",
        "[SEP]",
        "he",
        "runs",
        "away",
        ",",
        "[SEP]",
    ]
    assert features.segment_ids[1] == [0] * 7 + [1] * 5
    assert features.input_mask[0] == [1] * 11 + [0]
    assert features.label_id == 1 and features.truncated


# ----------------------------------------------------------------------------
# Bad input.
# ----------------------------------------------------------------------------


def test_unknown_task_lists_known_ones():
    with pytest.raises(ValueError, match="Unknown task 'mrcp'.*cola, sst-2, mrpc"):
        ct.get_processor("mrcp")
    with pytest.raises(ValueError, match="does not take xnli_language"):
        ct.get_processor("rte", xnli_language="de")
    assert isinstance(ct.get_processor("rte", xnli_language=None), ct.RteProcessor)


def test_missing_dev_file_names_path(tmp_path):
    _write(tmp_path, "train.tsv", ["index\tsentence1\tsentence2\tlabel"])
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "dev.tsv")):
        ct.get_processor("rte").get_dev_examples(str(tmp_path))


def test_too_few_columns_names_file_and_line(tmp_path):
    _write(
        tmp_path, "train.tsv", [MRPC_HEADER, "1\t1\t2\tOne.\tTwo.", "0\t3\t4\tOnly one sentence."]
    )
    with pytest.raises(
        ValueError,
        match=r"train.tsv:3: expected at least 5 "
        r"columns .* got 4",
    ):
        ct.get_processor("mrpc").get_train_examples(str(tmp_path))


def test_label_not_in_list(tmp_path):
    _write(
        tmp_path,
        "train.tsv",
        ["index\tsentence1\tsentence2\tlabel", "0\tA.\tB.\tentailment", "1\tC.\tD.\tneutral"],
    )
    with pytest.raises(
        ValueError,
        match=r"train.tsv:3: label 'neutral' is not "
        r"one of \['entailment', "
        r"'not_entailment'\]",
    ):
        ct.get_processor("rte").get_train_examples(str(tmp_path))


@pytest.mark.parametrize(
    "score,message",
    [
        ("high", "label 'high' is not a number"),
        ("nan", "label .nan. is not a number"),
        ("5.5", r"score 5.5 is outside \(0.0, 5.0\)"),
    ],
)
def test_malformed_stsb_score(tmp_path, score, message):
    _write(
        tmp_path,
        "dev.tsv",
        [
            "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
            "sentence2\tscore",
            f"0\tg\tf\ty\t1\tnone\tnone\tA.\tB.\t{score}",
        ],
    )
    with pytest.raises(ValueError, match=f"dev.tsv:2: {message}"):
        ct.get_processor("stsb").get_dev_examples(str(tmp_path))


def test_empty_text(tmp_path):
    _write(tmp_path, "train.tsv", ["sentence\tlabel", "Good.\t1", " \t0"])
    with pytest.raises(ValueError, match=r"train.tsv:3: empty text_a"):
        ct.get_processor("sst-2").get_train_examples(str(tmp_path))


def test_short_max_seq_length(tmp_path, tokenizer):
    with pytest.raises(ValueError, match="max_seq_length=2"):
        cf.create_features(
            ct.get_processor("rte"),
            str(tmp_path),
            "train",
            str(tmp_path / "x.tf_record"),
            tokenizer,
            2,
        )


# ----------------------------------------------------------------------------
# TFRecords and the cache.
# ----------------------------------------------------------------------------


def _labels(batches):
    return [batch["label_ids"] for batch in batches]


def _small_mrpc(directory):
    _write(
        directory,
        "train.tsv",
        [
            MRPC_HEADER,
            "1\t1\t2\tThe quick brown fox jumps\tover the lazy dog",
            "0\t3\t4\tA man sits down.\tHe eats.",
            "1\t5\t6\tThe dog is hairy.\tThe dog has hair.",
        ],
        bom=True,
    )


def test_tfrecord_round_trip(tmp_path, tokenizer):
    _small_mrpc(tmp_path)
    processor = ct.get_processor("mrpc")
    output_file = str(tmp_path / "out" / "train.tf_record")
    metadata = cf.get_or_create_features(
        processor, str(tmp_path), "train", output_file, tokenizer, 12
    )
    # Only the third pair (5 + 5 tokens) does not fit 12.
    assert metadata["num_examples"] == 3 and metadata["num_truncated"] == 1
    assert metadata["labels"] == ["0", "1"] and metadata["max_seq_length"] == 12
    assert metadata["vocab_file"] == "uncased_vocab.txt"
    assert metadata["do_lower_case"] is True and metadata["num_choices"] is None
    assert metadata.entries == records.read_metadata(output_file, cf.RECORD_FORMAT)
    assert metadata == cf.read_metadata(output_file) and metadata.num_records == 3
    assert sorted(os.listdir(tmp_path / "out")) == ["train.tf_record", "train.tf_record.meta.json"]

    features = next(iter(cf.build_dataset(output_file, metadata, batch_size=8, is_training=False)))
    labels = features["label_ids"]
    assert sorted(features) == ["input_mask", "input_type_ids", "input_word_ids", "label_ids"]
    expected = [
        cf.convert_example(e, ["0", "1"], 12, tokenizer)
        for e in processor.get_train_examples(str(tmp_path))
    ]
    assert features["input_word_ids"].dtype == tf.int32
    np.testing.assert_array_equal(features["input_word_ids"], [f.input_ids for f in expected])
    np.testing.assert_array_equal(features["input_mask"], [f.input_mask for f in expected])
    np.testing.assert_array_equal(features["input_type_ids"], [f.segment_ids for f in expected])
    np.testing.assert_array_equal(labels, [1, 0, 1])
    assert labels.dtype == tf.int32

    # is_real_example is kept in the records, as the original writes it.
    record = next(iter(tf.data.TFRecordDataset(output_file)))
    parsed = tf.train.Example.FromString(record.numpy()).features.feature
    assert list(parsed["is_real_example"].int64_list.value) == [1]


def test_training_dataset_repeats_and_drops_remainder(tmp_path, tokenizer):
    _small_mrpc(tmp_path)
    output_file = str(tmp_path / "train.tf_record")
    metadata = cf.get_or_create_features(
        ct.get_processor("mrpc"), str(tmp_path), "train", output_file, tokenizer, 10
    )
    # A shuffle buffer of one keeps file order: labels 1 0 1, 1 0 1, ...
    batches = list(
        cf.build_dataset(
            output_file, metadata, batch_size=2, is_training=True, shuffle_buffer_size=1
        ).take(4)
    )
    assert [labels.numpy().tolist() for labels in _labels(batches)] == [
        [1, 0],
        [1, 1],
        [0, 1],
        [1, 0],
    ]
    # Evaluation keeps the partial last batch and stops after one pass.
    batches = list(cf.build_dataset(output_file, metadata, batch_size=2, is_training=False))
    assert [labels.numpy().tolist() for labels in _labels(batches)] == [[1, 0], [1]]

    def shuffled(seed):
        dataset = cf.build_dataset(output_file, metadata, batch_size=3, is_training=True, seed=seed)
        return [features["input_word_ids"].numpy().tolist() for features in dataset.take(3)]

    assert shuffled(seed=1) == shuffled(seed=1)


def test_dataset_sharded_by_input_context(tmp_path, tokenizer):
    _small_mrpc(tmp_path)
    output_file = str(tmp_path / "train.tf_record")
    metadata = cf.get_or_create_features(
        ct.get_processor("mrpc"), str(tmp_path), "train", output_file, tokenizer, 10
    )
    context = tf.distribute.InputContext(
        num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2
    )
    # Global batch 4 -> 2 per replica; pipeline 1 of 2 reads record 1 (label 0).
    batches = list(
        cf.build_dataset(
            output_file, metadata, batch_size=4, is_training=False, input_context=context
        )
    )
    assert [labels.numpy().tolist() for labels in _labels(batches)] == [[0]]


def test_multiple_choice_round_trip(tmp_path, tokenizer):
    _write_swag(tmp_path)
    processor = ct.get_processor("swag")
    output_file = str(tmp_path / "dev.tf_record")
    metadata = cf.get_or_create_features(processor, str(tmp_path), "dev", output_file, tokenizer, 9)
    assert metadata["num_choices"] == 4
    features = next(iter(cf.build_dataset(output_file, metadata, 4, is_training=False)))
    labels = features["label_ids"]
    (example,) = processor.get_dev_examples(str(tmp_path))
    expected = cf.convert_example(example, processor.get_labels(), 9, tokenizer)
    assert features["input_word_ids"].shape == (1, 4, 9)
    np.testing.assert_array_equal(features["input_word_ids"][0], expected.input_ids)
    np.testing.assert_array_equal(features["input_type_ids"][0], expected.segment_ids)
    assert _tokens(tokenizer, features["input_word_ids"][0, 2].numpy()) == [
        "[CLS]",
        "a",
        "dog",
        ".",
        "[SEP]",
        "it",
        "sits",
        ".",
        "[SEP]",
    ]
    np.testing.assert_array_equal(labels, [0])


def test_regression_round_trip(tmp_path, tokenizer):
    _write(
        tmp_path,
        "dev.tsv",
        [
            "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
            "sentence2\tscore",
            "0\tg\tf\ty\t1\tnone\tnone\tA.\tB.\t3.800",
            "1\tg\tf\ty\t1\tnone\tnone\tC.\tD.\t0.25",
        ],
    )
    output_file = str(tmp_path / "dev.tf_record")
    metadata = cf.get_or_create_features(
        ct.get_processor("sts-b"), str(tmp_path), "dev", output_file, tokenizer, 8
    )
    assert metadata["is_regression"] and metadata["labels"] == []
    labels = next(iter(cf.build_dataset(output_file, metadata, 2, False)))["label_ids"]
    assert labels.dtype == tf.float32
    np.testing.assert_allclose(labels, [3.8, 0.25], rtol=1e-6)


def test_cache_reuse_and_rebuild(tmp_path, vocab_file, monkeypatch):
    _small_mrpc(tmp_path)
    processor = ct.get_processor("mrpc")
    output_file = str(tmp_path / "train.tf_record")
    build = cf._create_features
    builds = []

    def counting_build(*args):
        builds.append(args[5]["max_seq_length"])  # Its settings.
        return build(*args)

    monkeypatch.setattr(cf, "_create_features", counting_build)

    def get(max_seq_length=10, do_lower_case=True):
        return cf.get_or_create_features(
            processor,
            str(tmp_path),
            "train",
            output_file,
            tokenization.FullTokenizer(vocab_file, do_lower_case),
            max_seq_length,
        )

    first = get()
    assert get() == first and len(builds) == 1  # reused

    train = tmp_path / "train.tsv"
    os.utime(train, ns=(1, 1))  # new mtime, same content: the hash matches
    assert get() == first and len(builds) == 1

    get(max_seq_length=12)  # a flag changed
    assert len(builds) == 2
    get(max_seq_length=12, do_lower_case=False)
    assert len(builds) == 3

    text = train.read_text(encoding="utf-8")
    train.write_text(text.replace("hairy", "fuzzy"), encoding="utf-8")  # same size
    metadata = get(max_seq_length=12, do_lower_case=False)
    assert len(builds) == 4 and metadata["num_examples"] == 3

    with open(output_file, "ab") as f:  # a damaged record file
        f.write(b"x")
    get(max_seq_length=12, do_lower_case=False)
    assert len(builds) == 5

    os.remove(records.metadata_path(output_file))
    get(max_seq_length=12, do_lower_case=False)
    assert len(builds) == 6
    assert [name for name in os.listdir(tmp_path) if ".tmp" in name] == []


def test_a_byte_that_is_not_utf8_names_file_and_line(tmp_path):
    """A GLUE TSV saved in Latin-1 (an é as the byte 0xe9) fails naming its file, line
    and column, not with a bare UnicodeDecodeError."""
    directory = tmp_path / "MRPC"
    directory.mkdir()
    header = b"Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    (directory / "train.tsv").write_bytes(
        header
        + b"1\t1\t2\tA fine line.\tAnother one.\n"
        + b"0\t3\t4\tThe caf\xe9 opened.\tIt closed.\n"
    )
    with pytest.raises(
        ValueError,
        match=r"train.tsv:3: not UTF-8 text \(invalid "
        r"continuation byte: byte b.\\xe9. at column 14",
    ):
        ct.get_processor("mrpc").get_examples(str(directory), "train")
