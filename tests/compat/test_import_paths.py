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


def test_the_command_lines_need_no_test_only_package():
    """The processes tests start see only the packages of requirements.txt, as a user's
    install has (tests/helpers/runtime_only/sitecustomize.py): every runner imports there,
    and a test-only package is not found."""
    code = (
        "import sys\n"
        # The runners define flags of the same names; let a later definition replace one.
        "from absl import flags\n"
        "define = flags.FlagValues.__setitem__\n"
        "def redefine(self, name, flag):\n"
        "    flag.allow_override = True\n"
        "    define(self, name, flag)\n"
        "flags.FlagValues.__setitem__ = redefine\n"
        "import convert_checkpoint, export_tfhub, extract_features, hparam_search\n"
        "import run_classifier, run_ner, run_pretraining, run_squad\n"
        "from data_prep import create_pretraining_data, pretraining_pipeline\n"
        "from sitecustomize import TEST_ONLY\n"
        "assert not [m for m in sys.modules if m.partition('.')[0] in TEST_ONLY]\n"
        "for name in sorted(TEST_ONLY):\n"
        "    try:\n"
        "        __import__(name)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    raise SystemExit(f'{name} was imported')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
