"""One run per output, stale locks, stopped runs, runs that cannot write, shards of
unfinished or mixed runs, a resumed run that changes a setting, a damaged vocabulary.

The processes that hold a lock here are small Python programs (no TensorFlow); the
runners' own locks, SIGTERM and lost workers are in test_pretraining.py and
test_kill_resume.py.
"""

import errno
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

from common.errors import CannotWriteError, UserError
from common import file_io
from data_prep.pretraining import pretraining_data
from common import run_control
from data_prep import records
from modeling import model_files
from tests.conftest import REPO_ROOT, SAMPLE_DATA
from tests.helpers import repo_pythonpath

VOCAB = str(SAMPLE_DATA / "vocab" / "uncased_vocab.txt")

_HOLDER = textwrap.dedent("""
    import sys, time
    from common import run_control
    run_control.hold_directory(sys.argv[1], "--output_dir=" + sys.argv[1])
    print("held", "tensorflow" in sys.modules, flush=True)
    time.sleep(600)
""")


def hold_in_another_process(directory):
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(directory), "--some_flag=1"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        # A fresh interpreter: it tells which modules taking the lock imports.
        env=dict(os.environ, PYTHONPATH=repo_pythonpath(), BERT_TESTS_FRESH_PROCESSES="1"),
    )
    # Taking a lock starts no TensorFlow (common.file_io imports it on first use).
    assert process.stdout.readline().strip() == "held False"
    return process


def test_a_second_run_on_a_live_runs_output_stops_naming_it(tmp_path):
    out = tmp_path / "out"
    holder = hold_in_another_process(out)
    try:
        with pytest.raises(run_control.LockedError) as caught:
            run_control.acquire(run_control.lock_path_for_directory(str(out)), "--output_dir=out")
        message = str(caught.value)
        assert f"pid {holder.pid} on host {socket.gethostname()}" in message
        assert "--some_flag=1" in message  # Its command.
        assert "--output_dir=out is in use by another run" in message
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # Killed: its lock file is still there, but stale; the next run takes it over.
    assert (out / ".run.lock").exists()
    lock = run_control.acquire(run_control.lock_path_for_directory(str(out)), "--output_dir=out")
    assert json.loads((out / ".run.lock").read_text())["pid"] == os.getpid()
    lock.release()
    assert not (out / ".run.lock").exists()
    # A lock is hidden: no output glob reads it.
    out.joinpath("a.tfrecord").write_bytes(b"")
    assert records.expand_globs(str(out / "*")) == [str(out / "a.tfrecord")]


def test_without_flock_the_lock_file_decides(tmp_path, monkeypatch):
    """On a file system without flock: a dead pid on this host is stale, a live one
    refused; a lock from another host is refused, naming the file to delete."""

    def no_flock(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(run_control.fcntl, "flock", no_flock)
    path = tmp_path / ".run.lock"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], stdout=-1)
    here, there = socket.gethostname(), "another-host"
    for host, pid, refused in ((here, int(dead.stdout), False), (there, 1, True)):
        path.write_text(json.dumps({"pid": pid, "host": host, "command": "x", "started": 0}))
        if refused:
            with pytest.raises(run_control.LockedError, match=f"once it is gone, delete {path}"):
                run_control.acquire(str(path), "--output_dir=o")
        else:
            run_control.acquire(str(path), "--output_dir=o").release()
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        path.write_text(json.dumps({"pid": parent.pid, "host": here, "command": "sleeper"}))
        with pytest.raises(run_control.LockedError, match=f"pid {parent.pid} .*sleeper"):
            run_control.acquire(str(path), "--output_dir=o")
    finally:
        parent.kill()
        parent.wait()


def test_only_the_chief_of_a_cluster_takes_the_lock():
    cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    chief = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})
    other = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}})
    with_chief = json.dumps(
        {"cluster": dict(cluster, chief=["127.0.0.1:3"]), "task": {"type": "worker", "index": 0}}
    )
    assert run_control.is_chief(None) and run_control.is_chief(chief)
    assert not run_control.is_chief(other) and not run_control.is_chief(with_chief)


@pytest.mark.parametrize(
    "signum, code, said",
    [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C (SIGINT)")],
)
def test_a_signal_outside_training_ends_with_one_line(tmp_path, signum, code, said):
    program = textwrap.dedent(f"""
        import os, signal, sys, time
        from common import file_io
        from common import run_control
        run_control.exit_on_sigterm("job", "the shards written so far are whole")
        with file_io.atomic_open(sys.argv[1]) as f:
            f.write("half")
            os.kill(os.getpid(), {int(signum)})
            time.sleep(5)
            f.write(" and the rest")
    """)
    target = tmp_path / "out.txt"
    result = subprocess.run(
        [sys.executable, "-c", program, str(target)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=repo_pythonpath()),
        timeout=120,
    )
    assert result.returncode == code
    assert result.stderr.strip().splitlines()[-1] == (
        f"job: stopped by {said}; the shards written so far are whole. Run the same command "
        "again to finish."
    )
    assert os.listdir(tmp_path) == []  # The unfinished file was removed.


def test_a_signal_as_the_program_exits_lets_it_end(tmp_path):
    """Ctrl-C once the work is done, during the exit's atexit callbacks: exit 0, no
    traceback (it came too late to stop anything)."""
    program = textwrap.dedent("""
        import atexit, os, signal, time
        from common import run_control
        run_control.exit_on_sigterm("job")
        atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.5)))
        print("done")
    """)
    result = subprocess.run(
        [sys.executable, "-c", program],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=repo_pythonpath(), TF_CPP_MIN_LOG_LEVEL="3"),
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout == "done\n"
    assert "Traceback" not in result.stderr and "stopped" not in result.stderr


def test_an_output_under_a_regular_file_is_named(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    for output in (tmp_path / "notes.txt", tmp_path / "notes.txt" / "out" / "more"):
        with pytest.raises(UserError) as caught:
            run_control.hold_run_outputs(str(output), None, False)
        assert str(caught.value) == (
            f"--output_dir={output}: {tmp_path / 'notes.txt'} is a file, not a folder, so "
            "nothing can be written under it. Give another path."
        )


# ---------------------------------------------------------------------------- no space


def _full_disk(monkeypatch):
    """Every temporary file of an atomic write is /dev/full: writing it fails with
    ENOSPC as on a full disk."""
    real = file_io.temp_path

    def full(path):
        temp = real(path)
        os.symlink("/dev/full", temp)
        return temp

    monkeypatch.setattr(file_io, "temp_path", full)


def test_a_full_disk_is_a_clear_error_and_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "train.tfrecord"
    records.write_tfrecord(str(target), [b"old"])
    records.write_metadata(str(target), "test/1", {"count": 1})
    _full_disk(monkeypatch)
    with pytest.raises(CannotWriteError, match="No space left on device") as caught:
        records.write_tfrecord(str(target), [b"x" * 100_000] * 10)
    assert f"cannot write {target}" in str(caught.value)
    assert "free some space" in str(caught.value)
    # The earlier records are whole; their metadata went first (it described them
    # only while nothing replaced them), and no temporary file is left.
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(target))] == [b"old"]
    assert sorted(os.listdir(tmp_path)) == ["train.tfrecord"]
    with pytest.raises(CannotWriteError, match="No space left on device"):
        file_io.write_json(str(tmp_path / "results.json"), {"a": "b" * 100_000})
    assert sorted(os.listdir(tmp_path)) == ["train.tfrecord"]


def unwritable_dir(tmp_path) -> pathlib.Path:
    """A folder this process may not create files in: a read-only one for a normal
    user; for root (whom permissions do not stop) a folder of sysfs."""
    if os.geteuid() != 0:
        directory = tmp_path / "read_only"
        directory.mkdir()
        directory.chmod(0o500)
        return directory
    return pathlib.Path("/sys/kernel")


def test_no_permission_is_a_clear_error(tmp_path):
    directory = unwritable_dir(tmp_path)
    with pytest.raises(CannotWriteError, match=f"cannot write {directory}/out") as caught:
        file_io.write_text(str(directory / "out" / "a.txt"), "x")
    # Not writable, not full: the advice says so.
    assert "the folder is not writable by this user: give another output folder" in str(
        caught.value
    )
    assert "space" not in str(caught.value)
    with pytest.raises(CannotWriteError, match="(Permission denied|Operation not permitted)"):
        run_control.acquire(run_control.lock_path_for_directory(str(directory / "o")), "o")


# ---------------------------------------------------------------------------- shards


def _shard(directory, name, **metadata):
    path = directory / name
    records.write_tfrecord(str(path), [b"r"])
    file_io.write_json(records.metadata_path(str(path)), metadata)
    return str(path)


def test_shards_of_an_unfinished_or_mixed_run_are_refused(tmp_path):
    run = dict(run_id="r1", run_shards=["a.tfrecord", "b.tfrecord"])
    a = _shard(tmp_path, "a.tfrecord", **run)
    with pytest.raises(UserError, match="b.tfrecord is missing .* did not finish"):
        pretraining_data.check_shard_runs([a])
    b = _shard(tmp_path, "b.tfrecord", **run)
    pretraining_data.check_shard_runs([a, b])
    _shard(tmp_path, "b.tfrecord", run_id="r2", run_shards=["b.tfrecord"])
    with pytest.raises(UserError, match="shards of two different runs"):
        pretraining_data.check_shard_runs([a, b])
    # The pipeline's: summary.json, written last, names the run and its shards.
    pipeline = tmp_path / "pipeline"
    pipeline.mkdir()
    c = _shard(pipeline, "c.tfrecord", pipeline_run="p1")
    with pytest.raises(UserError, match="pipeline run that did not finish"):
        pretraining_data.check_shard_runs([c])
    (pipeline / "summary.json").write_text(json.dumps({"run_id": "p2", "shards": []}))
    with pytest.raises(UserError, match="left by an earlier pipeline run"):
        pretraining_data.check_shard_runs([c])
    (pipeline / "summary.json").write_text(json.dumps({"run_id": "p1", "shards": ["c.tfrecord"]}))
    pretraining_data.check_shard_runs([c])
    # `shards/*` reads the shards, not the JSON beside them.
    assert pretraining_data.expand_input_files(str(pipeline / "*")) == [c]


def test_a_resumed_run_keeps_the_record_of_every_part(tmp_path, caplog):
    """run_config.json keeps the first part's settings; each later part that changes
    any adds them with the step it resumed at; a changed setting of `keys` is warned
    about once, naming both values; a part that changes nothing leaves the file as is."""
    config = tmp_path / "run_config.json"
    keys = ("train_batch_size", "seed")
    first = {"train_batch_size": 32, "seed": 1, "do_predict": False}
    # Nothing to resume (no checkpoint): a new record.
    assert run_control.write_run_config(str(config), {"train_batch_size": 8}, keys) == []
    assert run_control.write_run_config(str(config), first, keys) == []
    assert json.loads(config.read_text()) == first
    second = {"train_batch_size": 8, "seed": 1, "do_predict": True}
    caplog.set_level("WARNING")
    said = run_control.write_run_config(str(config), second, keys, str(tmp_path / "ckpt-5"))
    assert said == ["train_batch_size 32 -> 8"]
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "at step 5 with other settings than the steps already taken: train_batch_size " in (
        warning
    )
    changes = {"step": 5, "changed": {"do_predict": [False, True], "train_batch_size": [32, 8]}}
    assert json.loads(config.read_text()) == dict(first, resumed=[changes])
    # Resumed again with the second part's settings: nothing changed, nothing added.
    caplog.clear()
    assert run_control.write_run_config(str(config), second, keys, str(tmp_path / "ckpt-9")) == []
    assert caplog.records == []
    third = dict(second, seed=2)
    assert run_control.write_run_config(str(config), third, keys, str(tmp_path / "ckpt-12")) == [
        "seed 1 -> 2"
    ]
    assert json.loads(config.read_text())["resumed"] == [
        changes,
        {"step": 12, "changed": {"seed": [1, 2]}},
    ]
    assert json.loads(config.read_text())["seed"] == 1


# ---------------------------------------------------------------------------- vocabulary


def test_a_damaged_vocabulary_is_refused_naming_the_first_line(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    lines = pathlib.Path(VOCAB).read_text(encoding="utf-8").splitlines()
    (model / "vocab.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    damaged = tmp_path / "damaged.txt"
    damaged.write_text("\n".join(lines[:1999] + lines[2000:]) + "\n", encoding="utf-8")
    # The same entries with other line endings are the same vocabulary.
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(("\r\n".join(lines) + "\r\n").encode("utf-8"))
    model_files.check_vocab_matches_model(str(crlf), str(model))
    with pytest.raises(UserError) as caught:
        model_files.check_vocab_matches_model(str(damaged), str(model))
    message = str(caught.value)
    assert f"first differ at line 2000, {lines[2000]!r} against {lines[1999]!r}" in message
    assert "--allow_vocab_mismatch" in message
    model_files.check_vocab_matches_model(str(damaged), str(model), allow_mismatch=True)
    # Only the fingerprint in model_info.json: the check still holds.
    (model / "vocab.txt").unlink()
    file_io.write_json(
        str(model / "model_info.json"),
        {"vocab_sha256": model_files.vocab_fingerprint(VOCAB), "vocab_size": len(lines)},
    )
    model_files.check_vocab_matches_model(VOCAB, str(model))
    with pytest.raises(UserError, match="fingerprint is not the one in model_info.json"):
        model_files.check_vocab_matches_model(str(damaged), str(model))


def test_extract_features_refuses_a_damaged_vocabulary_of_a_real_checkpoint(minilm_dir, tmp_path):
    """The issue's case: line 2,000 of the checkpoint's vocab.txt deleted."""
    lines = (pathlib.Path(minilm_dir) / "vocab.txt").read_text(encoding="utf-8").splitlines()
    damaged = tmp_path / "vocab.txt"
    damaged.write_text("\n".join(lines[:1999] + lines[2000:]) + "\n", encoding="utf-8")
    (tmp_path / "in.txt").write_text("the quick brown fox\n", encoding="utf-8")
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "extract_features.py"),
            f"--input_file={tmp_path / 'in.txt'}",
            f"--output_file={tmp_path / 'out.jsonl'}",
            f"--init_checkpoint={minilm_dir}",
            f"--vocab_file={damaged}",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        timeout=300,
    )
    assert result.returncode != 0
    assert "they first differ at line 2000" in result.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_a_rerun_may_replace_the_export_its_output_dir_made(tmp_path):
    from modeling import finetuning

    out, export = tmp_path / "out", tmp_path / "export"
    assert not finetuning.owns_export(str(out), str(export))
    file_io.write_json(str(out / "export.json"), {"export_dir": str(export)})
    assert finetuning.owns_export(str(out), str(export))
    assert not finetuning.owns_export(str(out), str(tmp_path / "another_export"))
