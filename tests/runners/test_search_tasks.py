"""The search of hparam_search.py on the other fine-tuning runners: run_ner.py
fine-tuned and feature-based on real sciner sentences, run_squad.py on the SQuAD
sample. Each runs a grid of two trials and makes the best on dev output_dir's model
(run_classifier.py in depth: test_search.py).
"""

import json

import pytest

from tests.conftest import REPO_ROOT, read_results, write_tiny_config
from tests.helpers.run_squad_helpers import squad_flags
from tests.runners.test_search import run_in_one_process

VOCAB = REPO_ROOT / "sample_data" / "vocab" / "uncased_vocab.txt"


def _ner(inputs, output_dir, *extra):
    """run_ner.py's arguments."""
    return [
        f"--bert_config_file={inputs['config']}",
        f"--vocab_file={VOCAB}",
        f"--train_file={inputs['train']}",
        f"--eval_file={inputs['dev']}",
        f"--predict_file={inputs['dev']}",
        "--do_train",
        "--do_eval",
        "--max_seq_length=32",
        "--doc_stride=8",
        "--train_batch_size=8",
        "--num_train_epochs=1",
        "--deterministic",
        f"--output_dir={output_dir}",
        *extra,
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, sample_data, root):
    """{name: (output_dir, terminal output)} of the three searches, run one after the
    other in one process (one TensorFlow start-up): the two of run_ner.py, then
    run_squad.py's."""
    work = tmp_path_factory.mktemp("search_tasks")
    sentences = (sample_data / "sciner" / "train.txt").read_text("utf-8").split("\n\n")
    (work / "train.txt").write_text("\n\n".join(sentences[:40]) + "\n\n", encoding="utf-8")
    (work / "dev.txt").write_text("\n\n".join(sentences[40:52]) + "\n\n", encoding="utf-8")
    inputs = {
        "config": write_tiny_config(work / "bert_config.json"),
        "train": work / "train.txt",
        "dev": work / "dev.txt",
    }
    searches = {
        "ner": _ner(inputs, work / "ner", "--do_predict", "--learning_rate=1e-2,1e-3"),
        # No --do_predict: its test reads no predictions.
        "feature_based": _ner(
            inputs,
            work / "feature_based",
            "--feature_based",
            "--feature_layers=-1,-2",
            "--lstm_units=8",
            "--learning_rate=1e-2",
            "--restarts=2",
        ),
        "run_squad:squad": [
            *squad_flags(root, work / "squad", True),
            "--num_train_epochs=1",
            "--learning_rate=1e-3,5e-4",
        ],
    }
    errors = run_in_one_process("run_ner", searches, work)
    finished = {}
    for search in ("ner", "feature_based", "squad"):
        output = (work / f"{search}.stderr").read_text(encoding="utf-8")
        finished[search] = (work / search, output, errors.get(search))
    return finished


def _finished(runs, name):
    """(output_dir, terminal output) of the search `name`, which ended without error."""
    output_dir, output, error = runs[name]
    assert error == ["no error", ""], f"{name}:\n{output[-5000:]}"
    return output_dir, output


def _check_search(output_dir, metric, names) -> dict:
    """The report's trials and choice; output_dir's results are the chosen trial's."""
    results = json.loads((output_dir / "search_results.json").read_text())
    assert results["metric"] == metric
    assert [t["output_dir"] for t in results["trials"]] == [f"trials/{n}" for n in names]
    for trial in results["trials"]:
        history = json.loads((output_dir / trial["output_dir"] / "eval_history.json").read_text())
        assert trial["score"] == max(h["score"] for h in history)
    best = max(results["trials"], key=lambda t: t["score"])
    assert results["best"]["output_dir"] == best["output_dir"]
    chosen = output_dir / best["output_dir"]
    assert (output_dir / "eval_results.txt").read_bytes() == (
        chosen / "eval_results.txt"
    ).read_bytes()
    assert results["configurations"][0]["n"] == len(names) // len(results["configurations"])
    return results


@pytest.mark.slow
def test_ner_search(runs):
    output_dir, terminal = _finished(runs, "ner")
    results = _check_search(output_dir, "eval_f1", ["lr0.01_bs8_ep1_r1", "lr0.001_bs8_ep1_r1"])
    assert [c["learning_rate"] for c in results["configurations"]] == [1e-2, 1e-3]
    assert results["configurations"][0]["std"] is None  # One restart.
    assert "Trial 2/2: learning_rate=0.001" in terminal
    info = json.loads((output_dir / "model_info.json").read_text())
    assert info["model_kind"] == "token_classifier"
    predictions = (output_dir / "test_predictions.txt").read_text("utf-8")
    assert predictions.count("\n\n") >= 11  # The dev sentences, tagged by the chosen model.


@pytest.mark.slow
def test_feature_based_tagger_search(runs):
    output_dir, _ = _finished(runs, "feature_based")
    results = _check_search(output_dir, "eval_f1", ["lr0.01_bs8_ep1_r1", "lr0.01_bs8_ep1_r2"])
    assert [t["seed"] for t in results["trials"]] == [12345, 12346]
    config = results["configurations"][0]
    assert config["n"] == 2 and config["std"] is not None
    info = json.loads((output_dir / "model_info.json").read_text())
    assert info["model_kind"] == "feature_based_token_classifier"


@pytest.mark.slow
def test_squad_search(runs):
    output_dir, _ = _finished(runs, "squad")
    results = _check_search(output_dir, "f1", ["lr0.001_bs16_ep1_r1", "lr0.0005_bs16_ep1_r1"])
    chosen = output_dir / results["best"]["output_dir"]
    # The chosen trial's predictions of the dev file (made by its evaluation) are
    # output_dir's, predicted again from its model.
    for name in ("predictions.json", "nbest_predictions.json", "null_odds.json"):
        assert (output_dir / name).read_bytes() == (chosen / name).read_bytes(), name
    assert read_results(output_dir / "eval_results.txt")["f1"] == results["best"]["score"]
