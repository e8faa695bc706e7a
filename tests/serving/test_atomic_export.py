"""Tests of serving/savedmodel.py's atomic export writing: a failed, interrupted or
killed export never leaves a partial SavedModel at the export path, and keeps or
replaces a previous export as it should.
"""

import os
import signal
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

from serving import savedmodel
from tests.conftest import REPO_ROOT


# ---------------------------------------------------------------------------------
# Atomic export.


def _half_write_then_fail(module, path, signatures=None):
    with open(os.path.join(path, "saved_model.pb"), "wb") as f:
        f.write(b"half")
    raise RuntimeError("killed midway")


def test_failed_export_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(tf.saved_model, "save", _half_write_then_fail)
    target = tmp_path / "export"
    with pytest.raises(RuntimeError, match="killed midway"):
        savedmodel.save_atomically(tf.Module(), str(target))
    assert not target.exists()
    assert os.listdir(tmp_path) == []


def _previous_export(target, content: bytes):
    """A folder that counts as a previous export: saved_model.pb and our marker."""
    target.mkdir()
    (target / "saved_model.pb").write_bytes(content)
    savedmodel.write_marker(str(target), "encoder")


def test_failed_export_keeps_existing_export(tmp_path, monkeypatch):
    target = tmp_path / "export"
    _previous_export(target, b"the previous export")
    monkeypatch.setattr(tf.saved_model, "save", _half_write_then_fail)
    with pytest.raises(RuntimeError):
        savedmodel.save_atomically(tf.Module(), str(target), overwrite=True)
    assert sorted(os.listdir(target)) == ["assets.extra", "saved_model.pb"]
    assert (target / "saved_model.pb").read_bytes() == b"the previous export"
    assert os.listdir(tmp_path) == ["export"]


def test_successful_export_replaces_existing_export(tmp_path):
    target = tmp_path / "export"
    _previous_export(target, b"the previous export")
    (target / "stale.txt").write_text("old")
    module = tf.Module()
    module.v = tf.Variable(3.0)
    savedmodel.save_atomically(module, str(target), overwrite=True)
    assert not (target / "stale.txt").exists()
    assert float(tf.saved_model.load(str(target)).v.numpy()) == 3.0
    assert os.listdir(tmp_path) == ["export"]
    with pytest.raises(ValueError, match="only local paths"):
        savedmodel.save_atomically(module, "gs://bucket/export")


_KILL_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import tensorflow as tf
    from serving import savedmodel

    def save_then_die(module, path, signatures=None):
        open(os.path.join(path, "saved_model.pb"), "wb").write(b"half")
        os.kill(os.getpid(), signal.SIGKILL)

    tf.saved_model.save = save_then_die
    savedmodel.save_atomically(tf.Module(), sys.argv[1], overwrite=True)
""")


@pytest.mark.slow
def test_killed_export_is_never_at_export_path(tmp_path):
    for existing in (False, True):
        target = tmp_path / f"export_{existing}"
        if existing:
            _previous_export(target, b"previous")
        result = subprocess.run(
            [sys.executable, "-c", _KILL_SCRIPT, str(target)],
            cwd=REPO_ROOT,
            capture_output=True,
            timeout=120,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        )
        assert result.returncode == -signal.SIGKILL
        if existing:
            assert (target / "saved_model.pb").read_bytes() == b"previous"
        else:
            assert not target.exists()
        # Only a hidden temporary folder is left beside it.
        leftovers = [n for n in os.listdir(tmp_path) if n.startswith(f".export_{existing}.tmp-")]
        assert len(leftovers) == 1
