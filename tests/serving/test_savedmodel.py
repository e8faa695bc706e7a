"""Exports never destroy: the export-path rules of serving/savedmodel.py, for the library
and for export_tfhub.py (issue 21: a folder of the user's files used to be deleted and
left with mode 0700)."""

import glob
import json
import os
import stat

import pytest
import tensorflow as tf

from serving import savedmodel


def _module(value: float = 3.0) -> tf.Module:
    module = tf.Module()
    module.v = tf.Variable(value)
    return module


def _snapshot(folder) -> dict:
    """{relative path: bytes or None for folders}, and the folder's mode."""
    files = {}
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(root, name)
            files[os.path.relpath(path, folder)] = (
                None if os.path.isdir(path) else open(path, "rb").read()
            )
    return {"files": files, "mode": stat.S_IMODE(os.stat(folder).st_mode)}


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_folder_of_user_files_is_refused_and_left_as_it_is(tmp_path):
    user = tmp_path / "my_files"
    (user / "notes").mkdir(parents=True)
    (user / "thesis.tex").write_text("years of work")
    (user / "notes" / "a.txt").write_text("a")
    (user / "saved_model.pb").write_bytes(b"someone else's model")  # but no marker
    before = _snapshot(user)
    with pytest.raises(FileExistsError, match="not an export of this project") as error:
        savedmodel.save_atomically(_module(), str(user), overwrite=True)
    assert str(user) in str(error.value)
    assert _snapshot(user) == before
    assert sorted(os.listdir(tmp_path)) == ["my_files"]  # no temporary folder either


def test_a_previous_export_is_replaced_only_with_overwrite(tmp_path):
    target = str(tmp_path / "export")
    assert savedmodel.save_atomically(_module(1.0), target, kind="encoder") == target
    marker = json.loads((tmp_path / "export" / savedmodel.MARKER_FILE).read_text())
    assert marker == {"format": savedmodel.MARKER_FORMAT, "format_version": 1, "kind": "encoder"}
    assert savedmodel.read_marker(target) == marker
    with pytest.raises(
        FileExistsError,
        match=r"holds a previous export \(encoder\); pass "
        r"--overwrite",
    ):
        savedmodel.save_atomically(_module(2.0), target)
    assert float(tf.saved_model.load(target).v.numpy()) == 1.0
    savedmodel.save_atomically(_module(2.0), target, kind="squad", overwrite=True)
    assert float(tf.saved_model.load(target).v.numpy()) == 2.0
    assert savedmodel.read_marker(target)["kind"] == "squad"
    assert sorted(os.listdir(tmp_path)) == ["export"]


def test_new_and_empty_paths_are_written_other_things_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    savedmodel.save_atomically(_module(), str(tmp_path / "empty"))
    savedmodel.save_atomically(_module(), str(tmp_path / "new" / "deeper" / "export"))
    assert savedmodel.read_marker(str(tmp_path / "new" / "deeper" / "export"))
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(FileExistsError, match="is not a folder"):
        savedmodel.check_export_path(str(tmp_path / "file"))
    os.symlink(tmp_path / "empty", tmp_path / "link")
    with pytest.raises(FileExistsError, match="symbolic link"):
        savedmodel.check_export_path(str(tmp_path / "link"), overwrite=True)
    with pytest.raises(ValueError, match="only local paths"):
        savedmodel.check_export_path("gs://bucket/export")


def test_folders_get_the_users_permissions(tmp_path, umask_022):
    """Folders as TensorFlow's file system creates them (0755 less the umask), as the
    SavedModel's own subfolders are, not the 0700 of a private temporary folder."""
    target = tmp_path / "parent" / "export"
    savedmodel.save_atomically(_module(), str(target))
    for folder in (target.parent, target, target / "variables", target / "assets.extra"):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o755, folder
    os.umask(0o027)
    savedmodel.save_atomically(_module(), str(target), overwrite=True)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o750


def test_a_killed_export_leaves_a_hidden_folder_that_the_next_export_clears(tmp_path):
    leftover = tmp_path / ".export.tmp-12345-deadbeef"
    (leftover / "variables").mkdir(parents=True)
    (leftover / "saved_model.pb").write_bytes(b"half")
    assert glob.glob(str(tmp_path / "*")) == []  # no output glob sees it
    savedmodel.save_atomically(_module(), str(tmp_path / "export"))
    assert sorted(os.listdir(tmp_path)) == ["export"]


def test_export_tfhub_refuses_user_files_and_needs_overwrite(tmp_path, monkeypatch):
    """The command line checks --export_path before any work and passes --overwrite on
    (its real exports are the slow tests of test_export.py and test_export_tfhub.py)."""
    import export_tfhub
    from absl import app

    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    calls = []
    monkeypatch.setattr(
        export_tfhub.preprocessing,
        "export_preprocessing",
        lambda *args, **kwargs: calls.append(kwargs),
    )

    def run(*argv):
        export_tfhub.FLAGS.unparse_flags()
        export_tfhub.FLAGS(
            ["export_tfhub.py", "--export_type=preprocessing", f"--vocab_file={vocab_file}", *argv]
        )
        export_tfhub.main([])

    user = tmp_path / "user"
    user.mkdir()
    (user / "data.csv").write_text("1,2")
    with pytest.raises(app.UsageError, match=f"--export_path={user}: .*not an export"):
        run(f"--export_path={user}")
    assert os.listdir(user) == ["data.csv"]
    previous = str(tmp_path / "previous")
    savedmodel.save_atomically(_module(), previous, kind="preprocessing")
    with pytest.raises(app.UsageError, match="--overwrite"):
        run(f"--export_path={previous}")
    assert calls == []
    run(f"--export_path={previous}", "--overwrite")
    run(f"--export_path={tmp_path / 'new'}")
    assert calls == [
        {"overwrite": True, "preserve_unused_tokens": False},
        {"overwrite": False, "preserve_unused_tokens": False},
    ]
