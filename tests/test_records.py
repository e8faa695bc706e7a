"""data_prep.records: atomic writes leave nothing that looks complete; globs skip the
leftovers of unfinished writes."""

import os

import pytest
import tensorflow as tf

from data_prep import records


def test_atomic_open_writes_only_on_success(tmp_path):
    path = str(tmp_path / "sub" / "out.txt")
    with pytest.raises(RuntimeError):
        with records.atomic_open(path) as f:
            f.write("half")
            raise RuntimeError("killed")
    assert not os.path.exists(path)
    assert os.listdir(tmp_path / "sub") == []
    records.write_text(path, "whole\n")
    assert open(path, encoding="utf-8").read() == "whole\n"
    records.write_json(path, {"b": 1, "a": [2]})
    assert records.read_json(path) == {"a": [2], "b": 1}


def test_leftovers_are_hidden_from_globs_and_cleared_by_the_next_write(tmp_path):
    out = tmp_path / "shards"
    out.mkdir()
    (out / "a.tfrecord").write_bytes(b"")
    leftover = records.temp_path(str(out / "b.tfrecord"))
    open(leftover, "wb").write(b"partial")  # what a killed writer leaves
    assert os.path.basename(leftover).startswith(".b.tfrecord.tmp-")
    assert records.is_temp_name(os.path.basename(leftover))
    assert records.expand_globs(str(out / "*")) == [str(out / "a.tfrecord")]
    with records.atomic_tfrecord_writer(str(out / "b.tfrecord")) as writer:
        writer.write(b"record")
    assert not os.path.exists(leftover)
    assert sorted(os.listdir(out)) == ["a.tfrecord", "b.tfrecord"]
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(out / "b.tfrecord"))] == [b"record"]


def test_expand_globs_order_and_errors(tmp_path):
    for name in ("b", "a", "c"):
        (tmp_path / name).write_text("x")
    (tmp_path / "folder").mkdir()
    files = records.expand_globs(f"{tmp_path}/c, {tmp_path}/*")
    assert [os.path.basename(f) for f in files] == ["c", "a", "b"]
    assert len(records.expand_globs([f"{tmp_path}/a", f"{tmp_path}/a"],
                                    original_order=True)) == 2
    with pytest.raises(FileNotFoundError, match="--input_file pattern .*nothing"):
        records.expand_globs(f"{tmp_path}/nothing*")
    with pytest.raises(ValueError, match="--train_file is empty"):
        records.expand_globs(" , ", what="--train_file")


def test_atomic_directory_replaces_only_when_complete(tmp_path):
    target = str(tmp_path / "export")
    with records.atomic_directory(target) as temp:
        open(os.path.join(temp, "v1"), "w").write("1")
    with pytest.raises(RuntimeError):
        with records.atomic_directory(target) as temp:
            open(os.path.join(temp, "v2"), "w").write("2")
            raise RuntimeError("failed export")
    assert os.listdir(target) == ["v1"]
    with records.atomic_directory(target) as temp:
        open(os.path.join(temp, "v2"), "w").write("2")
    assert os.listdir(target) == ["v2"]
    assert sorted(os.listdir(tmp_path)) == ["export"]
