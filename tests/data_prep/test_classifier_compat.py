"""Readers written for the original release, wrapped as this project's
(data_prep/classifier/classifier_compat.py), in the test process; the runner end to end with
them is in test_own_task.py."""

import os
import shutil

import pytest

from data_prep.classifier import classifier_compat, classifier_reader, classifier_tasks
from data_prep.text import tokenization
from tests.conftest import SAMPLE_DATA

COLA = str(SAMPLE_DATA / "cola_format")


class PairProcessor(classifier_reader.DataProcessor):
    """An original-style reader of sentence pairs (MRPC's layout), without a test
    split, its labels read from data_dir."""

    def get_train_examples(self, data_dir):
        return self._create_examples(self._read_tsv(os.path.join(data_dir, "train.tsv")), "train")

    def get_dev_examples(self, data_dir):
        return self._create_examples(self._read_tsv(os.path.join(data_dir, "dev.tsv")), "dev")

    def get_labels(self, data_dir):
        lines = self._read_tsv(os.path.join(data_dir, "train.tsv"))[1:]
        return sorted({line[0] for line in lines})

    def _create_examples(self, lines, set_type):
        return [
            classifier_reader.InputExample(
                "%s-%d" % (set_type, i),
                tokenization.convert_to_unicode(line[3]),
                line[4].encode("utf-8"),  # bytes, as Python 2 code had them
                line[0],
            )
            for i, line in enumerate(lines)
            if i > 0
        ]


def test_processors_are_registered_under_their_names():
    for name, cls in classifier_tasks.PROCESSORS.items():
        assert cls.name == name
        assert not classifier_compat.is_original_style(cls)


def test_an_original_style_pair_reader_in_processors(monkeypatch, tmp_path):
    monkeypatch.setitem(classifier_tasks.PROCESSORS, "pairs", PairProcessor)
    source = SAMPLE_DATA / "glue" / "MRPC"
    for name in ("train.tsv", "dev.tsv"):
        lines = (source / name).read_bytes().split(b"\n")
        (tmp_path / name).write_bytes(b"\n".join(lines[:21]) + b"\n")
    processor = classifier_tasks.get_processor("PAIRS")
    assert isinstance(processor, classifier_compat.OriginalStyleReader)
    assert processor.name == "pairs" and processor.get_labels(str(tmp_path)) == ["0", "1"]
    mrpc = classifier_tasks.get_processor("mrpc")
    for split in ("train", "dev"):
        ours = processor.get_examples(str(tmp_path), split)
        built_in = mrpc.get_examples(str(tmp_path), split)
        assert len(ours) == 20
        assert [(e.text_a, e.text_b, e.label) for e in ours] == [
            (e.text_a, e.text_b, e.label) for e in built_in
        ]
        assert ours[0].guid == f"{split}-1" and ours[3].index == "3"
    with pytest.raises(ValueError, match=r"test_classifier_compat.PairProcessor has no get_test"):
        processor.split_name("test")
    key = processor.examples_key(str(tmp_path), "dev")
    assert key["labels"] == ["0", "1"] and len(key["examples_sha256"]) == 64
    assert processor.input_files(str(tmp_path), "dev") == []


def test_read_tsv_is_the_original_helper(tmp_path):
    path = tmp_path / "x.tsv"
    path.write_bytes('\ufeffa\t"b c"\td\n\nx"y\tz\n'.encode("utf-8"))
    read = classifier_reader.DataProcessor._read_tsv
    assert read(str(path)) == [["a", '"b c"', "d"], ['x"y', "z"]]
    assert read(str(path), quotechar='"')[0] == ["a", "b c", "d"]
    with pytest.raises(FileNotFoundError, match="nope.tsv"):
        read(str(tmp_path / "nope.tsv"))
    (tmp_path / "bad.tsv").write_bytes(b"ok\n\xff\n")
    with pytest.raises(ValueError, match="bad.tsv:2"):
        read(str(tmp_path / "bad.tsv"))


class _Broken(classifier_reader.DataProcessor):
    def __init__(self, labels=("0", "1"), items=None):
        self.labels_given, self.items = labels, items

    def get_train_examples(self, data_dir):
        return self.items

    def get_dev_examples(self, data_dir):
        raise NotImplementedError()

    def get_test_examples(self, data_dir):
        return self._read_tsv(os.path.join(data_dir, "missing.tsv"))

    def get_labels(self):
        return self.labels_given


@pytest.mark.parametrize(
    "labels,items,split,message",
    [
        (["0"], [], "train", r"two or more distinct labels, got \['0'\]"),
        ("01", [], "train", r"returned '01', not a list"),
        (("0", "1"), ["x"], "train", r"item 0 is a str, not an InputExample"),
        (
            ("0", "1"),
            [classifier_reader.InputExample("g", 5, None, "0")],
            "train",
            r"example 'g': text_a is a int",
        ),
        (
            ("0", "1"),
            [classifier_reader.InputExample("g", "a", None, None)],
            "train",
            r"example 'g' has no label",
        ),
        (("0", "1"), [], "dev", r"_Broken.get_dev_examples\('d'\) is not implemented"),
        (("0", "1"), [], "test", r"Input file not found: d/missing.tsv"),
    ],
)
def test_a_broken_reader_is_a_clear_error(labels, items, split, message):
    reader = classifier_compat.OriginalStyleReader(_Broken(labels, items), "broken")
    with pytest.raises(ValueError, match=message):
        reader.get_examples("d", split)


def test_same_examples_as_the_built_in_cola_reader_and_integer_labels(tmp_path):
    class IntLabels(_Broken):
        def get_train_examples(self, data_dir):
            rows = self._read_tsv(os.path.join(data_dir, "train.tsv"))
            return [
                classifier_reader.InputExample(i, r[3], None, int(r[1])) for i, r in enumerate(rows)
            ]

        def get_labels(self):
            return [0, 1]

    shutil.copytree(COLA, tmp_path / "cola")
    reader = classifier_compat.OriginalStyleReader(IntLabels(), "ints")
    ours = reader.get_examples(str(tmp_path / "cola"), "train")
    built_in = classifier_tasks.get_processor("cola").get_examples(str(tmp_path / "cola"), "train")
    assert [(e.text_a, e.label) for e in ours] == [(e.text_a, e.label) for e in built_in]
    assert reader.get_labels() == ["0", "1"] and ours[5].guid == "5"
