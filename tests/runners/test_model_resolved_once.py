"""A run resolves its model once: in one run of run_classifier.py, run_ner.py or
run_squad.py that trains, evaluates, predicts and exports from a fine-tuned
--init_checkpoint, model_info.json is read once, the checkpoint's format is found once,
and the vocabulary file's bytes are read once (`modeling.model_files.ModelFiles`
carries them; the feature builders and the export take its tokenizer).

The vocabulary's reads are counted where Python opens a file: `open` (builtins and io),
`tf.io.gfile.GFile` and `tf.io.gfile.copy`, on any path ending in vocab.txt opened to
read. Not counted: TensorFlow's own reads of the file the export bundles as its
vocabulary asset (its lookup table's initializer and the SavedModel's copy of the asset
read the file in C++): the export's contract is that asset, a file.

The three runners run one after the other in one subprocess (one TensorFlow start-up,
tests/helpers/runner_switch.py); the model is the tiny random BERT.
"""

import textwrap

import pytest

from tests.conftest import run_results_driver, write_tiny_config

_DRIVER = textwrap.dedent("""
    import builtins, io, json, os, sys
    import tensorflow as tf
    from common import file_io
    from modeling import checkpoint_readers
    from tests.helpers.runner_switch import switch_runner

    counts = {}
    read_json, resolve_checkpoint = file_io.read_json, checkpoint_readers.resolve_checkpoint
    open_, gfile, copy = builtins.open, tf.io.gfile.GFile, tf.io.gfile.copy

    def count_vocab(path, mode="r"):
        if isinstance(path, (str, bytes, os.PathLike)):
            name = os.fsdecode(os.path.basename(os.fspath(path)))
            counts["vocab"] += name.endswith("vocab.txt") and not set(mode) & set("wax+")

    def counting_open(file, mode="r", *args, **kwargs):
        count_vocab(file, mode)
        return open_(file, mode, *args, **kwargs)

    class CountingGFile(gfile):
        def __init__(self, name, mode="r"):
            count_vocab(name, mode)
            super().__init__(name, mode)

    def counting_copy(src, dst, overwrite=False):
        count_vocab(src)
        return copy(src, dst, overwrite)

    def counting_read_json(path):
        counts["model_info"] += os.path.basename(path) == "model_info.json"
        return read_json(path)

    def counting_resolve_checkpoint(path):
        counts["resolve_checkpoint"] += 1
        return resolve_checkpoint(path)

    counting = {
        (builtins, "open"): counting_open,
        (io, "open"): counting_open,
        (tf.io.gfile, "GFile"): CountingGFile,
        (tf.io.gfile, "copy"): counting_copy,
        (file_io, "read_json"): counting_read_json,
        (checkpoint_readers, "resolve_checkpoint"): counting_resolve_checkpoint,
    }
    originals = {place: getattr(*place) for place in counting}

    # {"<runner>:<run>": argv}: each runner's runs together; "counted" runs are counted.
    results, runner = {}, None
    for key, argv in json.loads(sys.argv[1]).items():
        module, name = key.split(":")
        runner = switch_runner(runner, module)
        runner.FLAGS.unparse_flags()
        runner.FLAGS([runner.__name__ + ".py", *argv])
        if name == "counted":
            counts.update(model_info=0, vocab=0, resolve_checkpoint=0)
            for (place, attribute), replacement in counting.items():
                setattr(place, attribute, replacement)
        try:
            runner.main([])
        finally:
            for (place, attribute), original in originals.items():
                setattr(place, attribute, original)
        if name == "counted":
            results[module] = dict(counts)
    print("RESULTS" + json.dumps(results))
""")

_ONCE = {"model_info": 1, "vocab": 1, "resolve_checkpoint": 1}
RUNNERS = ("run_classifier", "run_ner", "run_squad")


def _runs(work, runner, vocab_file, task_flags) -> dict:
    """A run that trains a fine-tuned model (its output_dir has model_info.json, vocab.txt
    and its config), then the run counted, from it, that trains, evaluates, predicts and
    exports (to work/export): {"<runner>:<run>": argv}."""
    config = write_tiny_config(work / "bert_config.json")
    fine_tuned = work / "fine_tuned"
    return {
        f"{runner}:first": [
            *task_flags,
            f"--bert_config_file={config}",
            f"--vocab_file={vocab_file}",
            "--do_train",
            f"--output_dir={fine_tuned}",
        ],
        f"{runner}:counted": [
            *task_flags,
            f"--init_checkpoint={fine_tuned}",
            "--do_train",
            "--do_eval",
            "--do_predict",
            f"--output_dir={work / 'out'}",
            f"--export_dir={work / 'export'}",
        ],
    }


@pytest.fixture(scope="module")
def counted(tmp_path_factory, mrpc_dir, sample_data, root, vocab_file):
    """{runner: (its counts, its work folder)} of the three runners' counted runs, all
    made in one process."""
    work = {name: tmp_path_factory.mktemp(name) for name in RUNNERS}
    classifier = [
        "--task_name=MRPC",
        f"--data_dir={mrpc_dir}",
        "--max_seq_length=32",
        "--train_batch_size=16",
        "--num_train_epochs=1",
    ]
    ner_work = work["run_ner"]
    sentences = (sample_data / "sciner" / "train.txt").read_text(encoding="utf-8").split("\n\n")
    (ner_work / "train.txt").write_text("\n\n".join(sentences[:16]) + "\n", encoding="utf-8")
    (ner_work / "dev.txt").write_text("\n\n".join(sentences[16:24]) + "\n", encoding="utf-8")
    ner = [
        f"--train_file={ner_work / 'train.txt'}",
        f"--eval_file={ner_work / 'dev.txt'}",
        f"--predict_file={ner_work / 'dev.txt'}",
        "--max_seq_length=32",
        "--doc_stride=8",
        "--train_batch_size=8",
        "--num_train_epochs=1",
    ]
    squad = [
        f"--train_file={root / 'v1.json'}",
        f"--predict_file={root / 'v1.json'}",
        "--max_seq_length=64",
        "--doc_stride=32",
        "--max_query_length=16",
        "--train_batch_size=8",
        "--num_train_epochs=1",
    ]
    runs = {}
    for runner, task_flags in zip(RUNNERS, (classifier, ner, squad)):
        runs.update(_runs(work[runner], runner, vocab_file, task_flags))
    results = run_results_driver(_DRIVER, runs, timeout=900)
    return {runner: (results.get(runner), work[runner]) for runner in RUNNERS}


def _counts(counted, runner) -> dict:
    counts, work = counted[runner]
    assert (work / "export" / "saved_model.pb").exists()
    return counts


@pytest.mark.slow
def test_a_classifier_run_reads_its_model_once(counted):
    assert _counts(counted, "run_classifier") == _ONCE


@pytest.mark.slow
def test_an_ner_run_reads_its_model_once(counted):
    assert _counts(counted, "run_ner") == _ONCE


@pytest.mark.slow
def test_a_squad_run_reads_its_model_once(counted):
    assert _counts(counted, "run_squad") == _ONCE
