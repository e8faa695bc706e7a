"""A reader of one's own, written for the original release, through run_classifier.py.

The reader is the original README's: a `DataProcessor` subclass in a module of the
user's, with `get_train_examples(data_dir)`, ..., `get_labels()`, built on
`self._read_tsv` and `InputExample(guid, text_a, text_b, label)`, importing what the
original's users imported less the `bert.` prefix. It runs as
`--task_name=my_cola:MyColaProcessor` with run_classifier.py as the program, and gives
the examples (and records) of the built-in CoLA reader, as does the installed
bert-tensorflow's own `ColaProcessor` (imported from `bert.run_classifier`, with the
stand-ins it needs under TensorFlow 2). The data are sample_data/cola_format (real
sentences in CoLA's layout). The run uses --preserve_unused_tokens and its test
sentences hold `[unused0]`: its export keeps it as one token, id 1.

Everything runs in subprocesses (the runner's absl flags and those of the original's
modules would meet in the test process).
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.conftest import REPO_ROOT, SAMPLE_DATA, read_results, write_tiny_config
from tests.helpers.run_classifier_helpers import per_class_keys

# A user's module, as the original README has one write it (its CoLA reader).
USER_MODULE = '''
import os

from run_classifier import DataProcessor, InputExample
from data_prep.text import tokenization


class MyColaProcessor(DataProcessor):
  """Processor for the CoLA data set (GLUE version)."""

  def get_train_examples(self, data_dir):
    return self._create_examples(
        self._read_tsv(os.path.join(data_dir, "train.tsv")), "train")

  def get_dev_examples(self, data_dir):
    return self._create_examples(
        self._read_tsv(os.path.join(data_dir, "dev.tsv")), "dev")

  def get_test_examples(self, data_dir):
    return self._create_examples(
        self._read_tsv(os.path.join(data_dir, "test.tsv")), "test")

  def get_labels(self):
    return ["0", "1"]

  def _create_examples(self, lines, set_type):
    examples = []
    for (i, line) in enumerate(lines):
      # Only the test set has a header
      if set_type == "test" and i == 0:
        continue
      guid = "%s-%s" % (set_type, i)
      if set_type == "test":
        text_a = tokenization.convert_to_unicode(line[1])
        label = "0"
      else:
        text_a = tokenization.convert_to_unicode(line[3])
        label = tokenization.convert_to_unicode(line[1])
      examples.append(
          InputExample(guid=guid, text_a=text_a, text_b=None, label=label))
    return examples


class NoTestProcessor(MyColaProcessor):
  get_test_examples = DataProcessor.get_test_examples


class OtherLabelsProcessor(MyColaProcessor):
  def get_labels(self):
    return ["yes", "no"]
'''

# The installed original's own ColaProcessor, with what it needs to import next to the
# runner under TensorFlow 2.
BERT_MODULE = """
import sys
import types

from absl import flags

# bert/modeling.py imports tensorflow.contrib, which TensorFlow 2 does not have.
for name in ("tensorflow.contrib", "tensorflow.contrib.layers"):
    sys.modules.setdefault(name, types.ModuleType(name))
# bert/run_classifier.py and bert/tokenization.py define absl flags that the runner
# defines too: while they are imported, a flag already defined keeps its definition.
_set_flag = flags.FlagValues.__setitem__


def _keep_defined(self, name, flag):
    if name not in self:
        _set_flag(self, name, flag)


flags.FlagValues.__setitem__ = _keep_defined
try:
    from bert.run_classifier import ColaProcessor
finally:
    flags.FlagValues.__setitem__ = _set_flag
"""

# A module that defines a flag the runner defines (as the original's run_classifier.py).
FLAGGED_MODULE = """
from absl import flags
from run_classifier import DataProcessor

flags.DEFINE_string("data_dir", None, "mine")


class Processor(DataProcessor):
    def get_train_examples(self, data_dir):
        return []

    def get_labels(self):
        return ["0", "1"]
"""

_DRIVER = textwrap.dedent("""
    import json, os, shutil, sys, time
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    import run_classifier
    from data_prep.classifier import classifier_features, classifier_tasks
    from data_prep.text import tokenization
    import my_cola
    data_dir, out_dir, export_dir, vocab_file, config_file, work = sys.argv[1:7]
    tokenizer = tokenization.FullTokenizer(vocab_file, True)
    results = {}

    def fields(processor, split):
        return [[e.text_a, e.text_b, e.label] for e in processor.get_examples(data_dir, split)]

    classifier_tasks.PROCESSORS["mytask"] = my_cola.MyColaProcessor  # The table way.
    names = ["cola", "my_cola:MyColaProcessor", "bert_cola:ColaProcessor", "mytask"]
    processors = {name: classifier_tasks.get_processor(name) for name in names}
    results["examples"] = {
        name: {split: fields(p, split) for split in ("train", "dev", "test")}
        for name, p in processors.items()
    }
    results["bert_class"] = type(processors["bert_cola:ColaProcessor"].processor).__module__

    def parsed(path):
        out = []
        for record in tf.data.TFRecordDataset(path):
            example = tf.train.Example.FromString(record.numpy())
            out.append({k: list(v.int64_list.value) for k, v in example.features.feature.items()})
        return out

    records = {}
    for i, (name, p) in enumerate(processors.items()):
        path = os.path.join(work, f"train_{i}.tf_record")
        classifier_features.create_features(p, data_dir, "train", path, tokenizer, 48)
        records[name] = parsed(path)
    results["records_equal"] = [records[n] == records["cola"] for n in names]
    results["num_records"] = len(records["cola"])

    # The feature cache of a reader whose files are unknown: keyed by its examples.
    copy = os.path.join(work, "data_copy")
    shutil.copytree(data_dir, copy)
    record = os.path.join(work, "dev.tf_record")
    p = classifier_tasks.get_processor("bert_cola:ColaProcessor")
    get = lambda p: classifier_features.get_or_create_features(
        p, copy, "dev", record, tokenizer, 48)
    first = get(p)["examples_sha256"]
    mtime = os.stat(record).st_mtime_ns
    time.sleep(0.01)
    again = get(classifier_tasks.get_processor("bert_cola:ColaProcessor"))["examples_sha256"]
    reused = os.stat(record).st_mtime_ns == mtime and again == first
    with open(os.path.join(copy, "dev.tsv"), "a", encoding="utf-8") as f:
        f.write("mrpc\\t1\\t\\tOne more sentence.\\n")
    changed = get(classifier_tasks.get_processor("bert_cola:ColaProcessor"))
    results["cache"] = [reused, changed["examples_sha256"] != first, changed["num_examples"]]

    # The export of the CLI run: its answers are the run's test_results.tsv, and it
    # keeps [unused0] whole.
    loaded = tf.saved_model.load(export_dir)
    texts = [e.text_a for e in processors["cola"].get_examples(data_dir, "test")]
    answer = loaded.signatures["serving_text_a"](text_a=tf.constant(texts))
    results["export_probabilities"] = answer["probabilities"].numpy().tolist()
    results["export_tokens"] = loaded.tokenizer.tokenize(
        tf.constant(["[unused0]", "[unused0] is here"])).to_list()
    results["export_preserve"] = bool(loaded.preserve_unused_tokens.numpy())

    # Fine-tuning with the original's own class, through the runner's main.
    run_classifier.FLAGS([
        "run_classifier.py", "--task_name=bert_cola:ColaProcessor", f"--data_dir={data_dir}",
        f"--bert_config_file={config_file}", f"--vocab_file={vocab_file}", "--do_train",
        "--do_eval", "--max_seq_length=48", "--train_batch_size=8", "--num_train_epochs=1",
        f"--output_dir={os.path.join(work, 'bert_cola_out')}"])
    run_classifier.main([])

    errors = {}
    for case, name, split in (
        ("not_on_path", "no_such_module:Processor", None),
        ("no_class", "my_cola:Nope", None),
        ("defines_flags", "flagged:Processor", None),
        ("no_test_method", "my_cola:NoTestProcessor", "test"),
        ("label_not_listed", "my_cola:OtherLabelsProcessor", "train"),
        ("not_a_processor", "json:JSONDecoder", None),
    ):
        try:
            p = classifier_tasks.get_processor(name)
            p.get_examples(data_dir, split)
            errors[case] = ["no error", ""]
        except Exception as e:
            errors[case] = [type(e).__name__, str(e)]
    results["errors"] = errors
    print("RESULTS" + json.dumps(results))
""")


def _env(user_dir: pathlib.Path) -> dict:
    path = os.pathsep.join([str(REPO_ROOT), str(user_dir), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="2")


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    """The user's modules, CoLA-format files (test sentences with [unused0]) and a
    tiny model config."""
    root = tmp_path_factory.mktemp("own_task")
    (root / "my_cola.py").write_text(USER_MODULE, encoding="utf-8")
    (root / "bert_cola.py").write_text(BERT_MODULE, encoding="utf-8")
    (root / "flagged.py").write_text(FLAGGED_MODULE, encoding="utf-8")
    data = root / "cola"
    shutil.copytree(SAMPLE_DATA / "cola_format", data)
    lines = (data / "test.tsv").read_text(encoding="utf-8").splitlines()
    for i in (1, 4, 7):
        index, sentence = lines[i].split("\t")
        lines[i] = f"{index}\t[unused0] {sentence}"
    (data / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_tiny_config(root / "bert_config.json")
    return root


@pytest.fixture(scope="module")
def cli_run(user_dir, vocab_file):
    """run_classifier.py as the program, with the user's reader by module:Class."""
    out = user_dir / "out"
    command = [
        sys.executable,
        str(REPO_ROOT / "run_classifier.py"),
        "--task_name=my_cola:MyColaProcessor",
        f"--data_dir={user_dir / 'cola'}",
        f"--bert_config_file={user_dir / 'bert_config.json'}",
        f"--vocab_file={vocab_file}",
        "--do_train",
        "--do_eval",
        "--do_predict",
        "--preserve_unused_tokens",
        "--max_seq_length=48",
        "--train_batch_size=8",
        "--num_train_epochs=2",
        "--dtype=float32",  # Its export answers as predicted to 1e-5 (bfloat16: not).
        f"--output_dir={out}",
        f"--export_dir={user_dir / 'export'}",
    ]
    process = subprocess.run(
        command, capture_output=True, text=True, cwd=user_dir, env=_env(user_dir), timeout=600
    )
    assert process.returncode == 0, process.stderr[-5000:]
    return out


@pytest.fixture(scope="module")
def driver(user_dir, cli_run, vocab_file, tmp_path_factory):
    work = tmp_path_factory.mktemp("driver")
    process = subprocess.run(
        [
            sys.executable,
            "-c",
            _DRIVER,
            str(user_dir / "cola"),
            str(cli_run),
            str(user_dir / "export"),
            vocab_file,
            str(user_dir / "bert_config.json"),
            str(work),
        ],
        capture_output=True,
        text=True,
        cwd=user_dir,
        env=_env(user_dir),
        timeout=600,
    )
    marker = [line for line in process.stdout.splitlines() if line.startswith("RESULTS")]
    assert marker, process.stderr[-5000:]
    return {"work": work, **json.loads(marker[0][len("RESULTS") :])}


@pytest.mark.slow
def test_cli_run_with_a_reader_of_ones_own(cli_run):
    results = read_results(cli_run / "eval_results.txt")
    assert set(results) == {"eval_accuracy", "eval_loss", "global_step", "loss"} | per_class_keys(
        ["0", "1"]
    )
    assert 0.0 <= results["eval_accuracy"] <= 1.0 and results["eval_loss"] > 0
    history = json.loads((cli_run / "eval_history.json").read_text())
    assert [entry["global_step"] for entry in history] == [4, 9]  # 36 examples, 8 a batch.
    assert (cli_run / "best").is_dir()  # The results are the best epoch's.
    assert results in [{k: e[k] for k in results} for e in history]
    predictions = np.loadtxt(cli_run / "test_results.tsv", delimiter="\t")
    assert predictions.shape == (8, 2)
    np.testing.assert_allclose(predictions.sum(axis=1), 1.0, atol=1e-6)
    info = json.loads((cli_run / "model_info.json").read_text())
    assert info["task_name"] == "my_cola:MyColaProcessor" and info["labels"] == ["0", "1"]
    assert info["preserve_unused_tokens"] is True
    metadata = json.loads((cli_run / "train.tf_record.meta.json").read_text())
    assert metadata["processor_options"] == {"processor": "my_cola.MyColaProcessor"}
    assert len(metadata["examples_sha256"]) == 64 and metadata["num_examples"] == 36


@pytest.mark.slow
def test_every_reader_gives_the_built_in_examples_and_records(driver):
    examples = driver["examples"]
    ours = examples["cola"]
    assert [len(ours[split]) for split in ("train", "dev", "test")] == [36, 12, 8]
    assert ours["train"][1][2] == "0" and ours["train"][0][2] == "1"
    assert any('"' in text for text, _, _ in ours["train"])  # Quoting is off.
    for name in ("my_cola:MyColaProcessor", "bert_cola:ColaProcessor", "mytask"):
        assert examples[name] == ours, name
    assert all(label is None for _, _, label in ours["test"])
    assert driver["bert_class"] == "bert.run_classifier"  # The installed original's class.
    assert driver["records_equal"] == [True] * 4 and driver["num_records"] == 36


@pytest.mark.slow
def test_the_cache_of_such_a_reader_follows_its_examples(driver):
    reused, rebuilt, count = driver["cache"]
    assert reused and rebuilt and count == 13


@pytest.mark.slow
def test_the_export_answers_as_predicted_and_keeps_unused_tokens(driver, cli_run):
    predicted = np.loadtxt(cli_run / "test_results.tsv", delimiter="\t")
    np.testing.assert_allclose(driver["export_probabilities"], predicted, atol=1e-5)
    assert driver["export_preserve"]
    assert driver["export_tokens"][0] == [1]
    assert driver["export_tokens"][1][0] == 1 and len(driver["export_tokens"][1]) == 3


@pytest.mark.slow
def test_the_original_class_fine_tunes(driver):
    results = read_results(driver["work"] / "bert_cola_out" / "eval_results.txt")
    assert set(results) == {"eval_accuracy", "eval_loss", "global_step", "loss"} | per_class_keys(
        ["0", "1"]
    )
    info = json.loads((driver["work"] / "bert_cola_out" / "model_info.json").read_text())
    assert info["task_name"] == "bert_cola:ColaProcessor"


@pytest.mark.slow
@pytest.mark.parametrize(
    "case,error,parts",
    [
        ("not_on_path", "UserError", ["no module 'no_such_module' on the Python path"]),
        ("no_class", "UserError", ["my_cola.py has no class 'Nope'"]),
        ("defines_flags", "UserError", ["flagged", "defines a flag", "data_dir"]),
        ("no_test_method", "UserError", ["my_cola.NoTestProcessor has no get_test_examples"]),
        (
            "label_not_listed",
            "UserError",
            ["get_train_examples(", "example 'train-0': label '1' is not one of get_labels()"],
        ),
        ("not_a_processor", "UserError", ["json.decoder.JSONDecoder is not a DataProcessor"]),
    ],
)
def test_a_reader_that_cannot_run_is_a_clear_error(driver, case, error, parts):
    got_error, message = driver["errors"][case]
    assert got_error == error, message
    for part in parts:
        assert part in message, message
