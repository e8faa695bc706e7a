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

Each runner runs in a subprocess (its absl flags); the model is the tiny random BERT.
"""

import textwrap

import pytest

from tests.conftest import run_results_driver, write_tiny_config

_DRIVER = textwrap.dedent("""
    import builtins, importlib, io, json, os, sys
    import tensorflow as tf
    runner = importlib.import_module(sys.argv[2])
    from common import file_io
    from modeling import checkpoint_readers

    counts = {"model_info": 0, "vocab": 0, "resolve_checkpoint": 0}
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

    results = {}
    for name, argv in json.loads(sys.argv[1]).items():
        runner.FLAGS.unparse_flags()
        runner.FLAGS([runner.__name__ + ".py", *argv])
        if name == "counted":
            builtins.open = io.open = counting_open
            tf.io.gfile.GFile, tf.io.gfile.copy = CountingGFile, counting_copy
            file_io.read_json = counting_read_json
            checkpoint_readers.resolve_checkpoint = counting_resolve_checkpoint
        runner.main([])
        results[name] = dict(counts)
    print("RESULTS" + json.dumps(results))
""")

_ONCE = {"model_info": 1, "vocab": 1, "resolve_checkpoint": 1}


def _counted_run(tmp_path, runner, vocab_file, task_flags):
    """Trains a fine-tuned model (its output_dir has model_info.json, vocab.txt and its
    config), then counts one run from it that trains, evaluates, predicts and exports."""
    config = write_tiny_config(tmp_path / "bert_config.json")
    fine_tuned = tmp_path / "fine_tuned"
    runs = {
        "first": [
            *task_flags,
            f"--bert_config_file={config}",
            f"--vocab_file={vocab_file}",
            "--do_train",
            f"--output_dir={fine_tuned}",
        ],
        "counted": [
            *task_flags,
            f"--init_checkpoint={fine_tuned}",
            "--do_train",
            "--do_eval",
            "--do_predict",
            f"--output_dir={tmp_path / 'out'}",
            f"--export_dir={tmp_path / 'export'}",
        ],
    }
    results = run_results_driver(_DRIVER, runs, runner, timeout=600)
    assert (tmp_path / "export" / "saved_model.pb").exists()
    return results["counted"]


@pytest.mark.slow
def test_a_classifier_run_reads_its_model_once(tmp_path, mrpc_dir, vocab_file):
    flags = [
        "--task_name=MRPC",
        f"--data_dir={mrpc_dir}",
        "--max_seq_length=32",
        "--train_batch_size=16",
        "--num_train_epochs=1",
    ]
    assert _counted_run(tmp_path, "run_classifier", vocab_file, flags) == _ONCE


@pytest.mark.slow
def test_an_ner_run_reads_its_model_once(tmp_path, sample_data, vocab_file):
    sentences = (sample_data / "sciner" / "train.txt").read_text(encoding="utf-8").split("\n\n")
    (tmp_path / "train.txt").write_text("\n\n".join(sentences[:16]) + "\n", encoding="utf-8")
    (tmp_path / "dev.txt").write_text("\n\n".join(sentences[16:24]) + "\n", encoding="utf-8")
    flags = [
        f"--train_file={tmp_path / 'train.txt'}",
        f"--eval_file={tmp_path / 'dev.txt'}",
        f"--predict_file={tmp_path / 'dev.txt'}",
        "--max_seq_length=32",
        "--doc_stride=8",
        "--train_batch_size=8",
        "--num_train_epochs=1",
    ]
    assert _counted_run(tmp_path, "run_ner", vocab_file, flags) == _ONCE


@pytest.mark.slow
def test_a_squad_run_reads_its_model_once(tmp_path, root, vocab_file):
    flags = [
        f"--train_file={root / 'v1.json'}",
        f"--predict_file={root / 'v1.json'}",
        "--max_seq_length=64",
        "--doc_stride=32",
        "--max_query_length=16",
        "--train_batch_size=8",
        "--num_train_epochs=1",
    ]
    assert _counted_run(tmp_path, "run_squad", vocab_file, flags) == _ONCE
