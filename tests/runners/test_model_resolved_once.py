"""A run resolves its model once: in one run_classifier.py run that trains, evaluates,
predicts and exports from a fine-tuned --init_checkpoint, model_info.json is read once
and the model's vocabulary once (`modeling.model_files.ModelFiles` carries them), and
the checkpoint's format is found once.

The runner runs in a subprocess (its absl flags); the model is the tiny random BERT.
"""

import textwrap

import pytest

from tests.conftest import run_results_driver, write_tiny_config

_DRIVER = textwrap.dedent("""
    import json, os, sys
    import run_classifier
    from common import file_io
    from modeling import checkpoint_readers, model_files

    counts = {"model_info": 0, "vocab": 0, "resolve_checkpoint": 0}
    read_json, read_vocab = file_io.read_json, model_files.read_vocab
    resolve_checkpoint = checkpoint_readers.resolve_checkpoint

    def counting_read_json(path):
        counts["model_info"] += os.path.basename(path) == "model_info.json"
        return read_json(path)

    def counting_read_vocab(path):
        counts["vocab"] += 1
        return read_vocab(path)

    def counting_resolve_checkpoint(path):
        counts["resolve_checkpoint"] += 1
        return resolve_checkpoint(path)

    results = {}
    for name, argv in json.loads(sys.argv[1]).items():
        run_classifier.FLAGS.unparse_flags()
        run_classifier.FLAGS(["run_classifier.py", *argv])
        if name == "counted":
            file_io.read_json = counting_read_json
            model_files.read_vocab = counting_read_vocab
            checkpoint_readers.resolve_checkpoint = counting_resolve_checkpoint
        run_classifier.main([])
        results[name] = dict(counts)
    print("RESULTS" + json.dumps(results))
""")


@pytest.mark.slow
def test_one_run_reads_model_info_and_vocabulary_once(tmp_path, mrpc_dir, vocab_file):
    config = write_tiny_config(tmp_path / "bert_config.json")
    common = [
        "--task_name=MRPC",
        f"--data_dir={mrpc_dir}",
        "--max_seq_length=32",
        "--train_batch_size=16",
        "--num_train_epochs=1",
    ]
    fine_tuned = tmp_path / "fine_tuned"
    runs = {
        # A fine-tuned model: its output_dir has model_info.json, vocab.txt and its config.
        "first": [
            *common,
            f"--bert_config_file={config}",
            f"--vocab_file={vocab_file}",
            "--do_train",
            f"--output_dir={fine_tuned}",
        ],
        "counted": [
            *common,
            f"--init_checkpoint={fine_tuned}",
            "--do_train",
            "--do_eval",
            "--do_predict",
            f"--output_dir={tmp_path / 'out'}",
            f"--export_dir={tmp_path / 'export'}",
        ],
    }
    results = run_results_driver(_DRIVER, runs, timeout=600)
    assert results["counted"] == {"model_info": 1, "vocab": 1, "resolve_checkpoint": 1}
    assert (tmp_path / "export" / "saved_model.pb").exists()
