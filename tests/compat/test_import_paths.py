"""The import paths and command lines users are shown keep working after
data_prep/ moved into sub-packages (docs/own_task.md, README.md,
docs/original_release.md) and serving/tasks.py became serving/exports.py
(docs/serving.md)."""

import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_the_older_tokenization_import_is_the_module_itself():
    from data_prep import tokenization
    from data_prep.text import tokenization as moved

    assert tokenization is moved
    tokenizer = tokenization.FullTokenizer
    assert tokenizer.__module__ == "data_prep.text.tokenization"
    for name in ("BasicTokenizer", "WordpieceTokenizer", "convert_to_unicode", "load_vocab"):
        assert getattr(tokenization, name) is getattr(moved, name)


def test_the_older_export_import_is_the_module_itself():
    """docs/serving.md showed `from serving import tasks`; the module is now
    serving/exports.py."""
    from serving import exports
    from serving import tasks

    assert tasks is exports
    assert tasks.export_task_model is exports.export_task_model


def test_the_data_command_lines_run_at_their_old_paths():
    for command in (
        ["-m", "data_prep.create_pretraining_data", "--helpshort"],
        ["-m", "data_prep.pretraining_pipeline", "--helpshort"],
        ["data_prep/create_pretraining_data.py", "--helpshort"],
    ):
        result = subprocess.run(
            [sys.executable, *command], cwd=REPO_ROOT, capture_output=True, text=True
        )
        # absl prints the help and exits with status 1.
        assert result.returncode == 1 and "Traceback" not in result.stderr, (
            command,
            result.stderr[-2000:],
        )
        assert "--input_file" in result.stdout, command
