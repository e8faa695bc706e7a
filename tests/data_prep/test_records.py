"""common/file_io.py and data_prep/records.py: atomic writes leave nothing that looks
complete; globs skip the leftovers of unfinished writes."""

import collections
import errno
import os
import re

import pytest
import tensorflow as tf

from common import file_io
from common.errors import CannotWriteError
from data_prep import records


def test_atomic_open_writes_only_on_success(tmp_path):
    path = str(tmp_path / "sub" / "out.txt")
    with pytest.raises(RuntimeError):
        with file_io.atomic_open(path) as f:
            f.write("half")
            raise RuntimeError("killed")
    assert not os.path.exists(path)
    assert os.listdir(tmp_path / "sub") == []
    file_io.write_text(path, "whole\n")
    assert open(path, encoding="utf-8").read() == "whole\n"
    file_io.write_json(path, {"b": 1, "a": [2]})
    assert file_io.read_json(path) == {"a": [2], "b": 1}


def test_leftovers_are_hidden_from_globs_and_cleared_by_the_next_write(tmp_path):
    out = tmp_path / "shards"
    out.mkdir()
    (out / "a.tfrecord").write_bytes(b"")
    leftover = file_io.temp_path(str(out / "b.tfrecord"))
    open(leftover, "wb").write(b"partial")  # what a killed writer leaves
    assert os.path.basename(leftover).startswith(".b.tfrecord.tmp-")
    assert file_io.is_temp_name(os.path.basename(leftover))
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
    assert len(records.expand_globs([f"{tmp_path}/a", f"{tmp_path}/a"], original_order=True)) == 2
    with pytest.raises(FileNotFoundError, match="--input_file pattern .*nothing"):
        records.expand_globs(f"{tmp_path}/nothing*")
    with pytest.raises(ValueError, match="--train_file is empty"):
        records.expand_globs(" , ", what="--train_file")


def test_atomic_directory_replaces_only_when_complete(tmp_path):
    target = str(tmp_path / "export")
    with file_io.atomic_directory(target) as temp:
        open(os.path.join(temp, "v1"), "w").write("1")
    with pytest.raises(RuntimeError):
        with file_io.atomic_directory(target) as temp:
            open(os.path.join(temp, "v2"), "w").write("2")
            raise RuntimeError("failed export")
    assert os.listdir(target) == ["v1"]
    with file_io.atomic_directory(target) as temp:
        open(os.path.join(temp, "v2"), "w").write("2")
    assert os.listdir(target) == ["v2"]
    assert sorted(os.listdir(tmp_path)) == ["export"]


def test_a_failed_atomic_directory_says_why_and_keeps_the_old_folder(tmp_path):
    target = str(tmp_path / "export")
    with file_io.atomic_directory(target) as temp:
        open(os.path.join(temp, "v1"), "w").write("1")
    with pytest.raises(
        CannotWriteError, match=re.escape(f"cannot write {target}: No space")
    ) as caught:
        with file_io.atomic_directory(target) as temp:
            open(os.path.join(temp, "v2"), "w").write("2")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert isinstance(caught.value.__cause__, OSError)
    assert os.listdir(target) == ["v1"]
    assert sorted(os.listdir(tmp_path)) == ["export"]


def test_write_tfrecord_removes_the_old_metadata_first(tmp_path):
    path = str(tmp_path / "train.tf_record")
    assert records.write_tfrecord(path, [b"a", b"b"]) == 2
    records.write_metadata(path, "test_tfrecord/1", {"n": 2})
    assert records.metadata_path(path) == path + ".meta.json"
    with pytest.raises(RuntimeError):
        records.write_tfrecord(path, _failing([b"c"]))
    assert not os.path.exists(records.metadata_path(path))  # Never claims other records.
    assert [r.numpy() for r in tf.data.TFRecordDataset(path)] == [b"a", b"b"]
    assert sorted(os.listdir(tmp_path)) == ["train.tf_record"]


def _failing(values):
    yield from values
    raise RuntimeError("reader failed")


def test_metadata_format_fingerprints_and_reuse(tmp_path):
    source = tmp_path / "train.tsv"
    source.write_text("a\tb\n", encoding="utf-8")
    path = str(tmp_path / "train.tf_record")
    records.write_tfrecord(path, [b"x"])
    settings = {"max_seq_length": 8, "labels": ("0", "1")}
    written = records.write_metadata(
        path, "test_tfrecord/1", dict(settings, count=1), input_files=[str(source)]
    )
    assert written == records.read_metadata(path, "test_tfrecord/1")
    assert written["format"] == "test_tfrecord/1" and written["labels"] == ["0", "1"]
    assert written["record_bytes"] == os.path.getsize(path)
    (fingerprint,) = written["input_files"]
    assert fingerprint["name"] == "train.tsv" and fingerprint["size"] == 4
    assert fingerprint["sha256"] == records.file_sha256(str(source))

    def reused(**changes):
        return records.reusable_metadata(
            path,
            changes.pop("record_format", "test_tfrecord/1"),
            dict(settings, **changes),
            [str(source)],
        )

    assert reused() == written
    assert reused(max_seq_length=9) is None
    assert reused(record_format="test_tfrecord/2") is None
    with pytest.raises(
        ValueError,
        match=r"meta\.json.*'test_tfrecord/1', not "
        r"'test_tfrecord/2'",
    ):
        records.read_metadata(path, "test_tfrecord/2")
    os.utime(source, ns=(1, 1))  # Another mtime, the same content: still the same file.
    assert reused() == written
    source.write_text("a\tc\n", encoding="utf-8")  # The same size, another content.
    assert reused() is None
    source.write_text("a\tb\n", encoding="utf-8")
    with open(path, "ab") as f:  # A damaged record file.
        f.write(b"x")
    assert reused() is None
    with pytest.raises(ValueError, match="write_metadata itself"):
        records.write_metadata(path, "test_tfrecord/1", {"format": "mine"})
    records.remove_metadata(path)
    assert reused() is None
    with pytest.raises(FileNotFoundError, match=r"train\.tf_record\.meta\.json"):
        records.read_metadata(path)


def test_read_json_and_results_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.json is not valid JSON"):
        file_io.read_json(str(bad))
    with pytest.raises(FileNotFoundError, match=r"absent\.json does not exist"):
        file_io.read_json(str(tmp_path / "absent.json"))
    path = tmp_path / "eval_results.txt"
    file_io.write_results(str(path), {"global_step": 3, "eval_accuracy": 0.5})
    assert path.read_text(encoding="utf-8") == "eval_accuracy = 0.5\nglobal_step = 3\n"


def test_eval_results_sorted_key_value_lines(tmp_path):
    """eval_results.txt of the GLUE runs (moved from test_glue_metrics)."""
    path = tmp_path / "eval_results.txt"
    path.write_text("stale\n")
    file_io.write_results(
        str(path), {"global_step": 343, "eval_loss": 0.5, "eval_accuracy": 0.75, "eval_f1": 0.8}
    )
    assert path.read_text() == (
        "eval_accuracy = 0.75\neval_f1 = 0.8\neval_loss = 0.5\nglobal_step = 343\n"
    )
    assert [name for name in os.listdir(tmp_path) if ".tmp" in name] == []


def test_eval_results_file(tmp_path):
    """eval_results.txt of the SQuAD runs (moved from test_squad_eval)."""
    output = tmp_path / "eval_results.txt"
    file_io.write_results(str(output), collections.OrderedDict(f1=95.0, exact=75.0, total=4))
    assert output.read_text() == "exact = 75.0\nf1 = 95.0\ntotal = 4\n"
    assert [p.name for p in tmp_path.iterdir()] == ["eval_results.txt"]


def test_stale_temps_are_removed_and_live_writers_kept(tmp_path):
    """A temporary file of a process that ended is removed before a write; one of
    another process that still runs (another worker writing the same file) is left."""
    import subprocess
    import sys

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / f".out.json.tmp-{ended.pid}-0badc0de"
        live = tmp_path / f".out.json.tmp-{running.pid}-0badc0de"
        stale.write_text("partial")
        live.write_text("being written")
        file_io.write_text(str(tmp_path / "out.json"), "{}")
        assert not stale.exists() and live.read_text() == "being written"
        assert (tmp_path / "out.json").read_text() == "{}"
    finally:
        running.kill()
        running.wait()
