"""Predicting from a fine-tuned checkpoint in a new output_dir gives the predictions the
training run made, whatever --seed: the task head is restored with the encoder, and the
output_dir carries the config, vocabulary, case and labels (issue: a fine-tuned model
predicted with a random head). For SQuAD, NER, and a classifier converted to the
original release's TF1 format by convert_checkpoint.py and read back.

A runner's runs (training, then predicting in a new output_dir) run one after the other
in a process of their own (each run builds its model anew from its flags; the runners'
absl flags would clash in the test process), with a tiny random model. The TF1
conversion between the classifier's two runs calls convert_checkpoint.convert here.
"""

import json
import pathlib

import numpy as np
import pytest

from tests.conftest import SAMPLE_DATA, write_tiny_config
from tests.helpers.run_classifier_helpers import run_runner_in_one_process

VOCAB = str(SAMPLE_DATA / "vocab" / "uncased_vocab.txt")


def run(runner: str, **runs: list[str]) -> None:
    """Runs `runner`'s runs {name: flags} in order in one new process; each must succeed."""
    results = run_runner_in_one_process(runner, runs)
    assert results == {name: ["no error", ""] for name in runs}, results


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "bert_config.json"
    return write_tiny_config(path, max_position_embeddings=128)


def test_squad(config_file, tmp_path):
    sample = json.loads(
        (SAMPLE_DATA / "squad" / "dev-v2.0-first5articles.json").read_text(encoding="utf-8")
    )
    data = tmp_path / "squad.json"
    data.write_text(
        json.dumps(
            {
                "version": "v2.0",
                "data": [dict(sample["data"][0], paragraphs=sample["data"][0]["paragraphs"][:2])],
            }
        )
    )
    common = [
        f"--predict_file={data}",
        "--version_2_with_negative",
        "--max_seq_length=96",
        "--doc_stride=40",
        "--max_query_length=24",
        "--do_predict",
    ]
    trained, out = tmp_path / "trained", tmp_path / "predicted"
    run(
        "run_squad",
        train=[
            *common,
            f"--train_file={data}",
            "--do_train",
            f"--bert_config_file={config_file}",
            f"--vocab_file={VOCAB}",
            "--train_batch_size=8",
            "--num_train_epochs=1",
            "--learning_rate=1e-3",
            f"--output_dir={trained}",
        ],
        predict=[*common, f"--init_checkpoint={trained}", "--seed=7", f"--output_dir={out}"],
    )
    for name in ("predictions.json", "null_odds.json"):
        want, got = (json.loads((d / name).read_text()) for d in (trained, out))
        assert got.keys() == want.keys()
        if name == "predictions.json":
            assert got == want
        else:
            np.testing.assert_allclose(list(got.values()), list(want.values()), atol=1e-5)


def _conll_slice(source: pathlib.Path, target: pathlib.Path, sentences: int) -> None:
    blocks = source.read_text(encoding="utf-8").split("\n\n")
    target.write_text("\n\n".join(blocks[:sentences]) + "\n\n", encoding="utf-8")


def test_ner(config_file, tmp_path):
    data = tmp_path / "sciner"
    data.mkdir()
    _conll_slice(SAMPLE_DATA / "sciner" / "train.txt", data / "train.txt", 40)
    _conll_slice(SAMPLE_DATA / "sciner" / "train.txt", data / "test.txt", 20)
    trained, out = tmp_path / "trained", tmp_path / "predicted"
    run(
        "run_ner",
        train=[
            f"--data_dir={data}",
            f"--bert_config_file={config_file}",
            f"--vocab_file={VOCAB}",
            "--do_train",
            "--do_predict",
            "--max_seq_length=64",
            "--train_batch_size=8",
            "--num_train_epochs=1",
            "--learning_rate=1e-3",
            f"--output_dir={trained}",
        ],
        predict=[
            f"--data_dir={data}",
            f"--init_checkpoint={trained}",
            "--do_predict",
            "--max_seq_length=64",
            "--seed=7",
            f"--output_dir={out}",
        ],
    )
    want = (trained / "test_predictions.txt").read_text()
    assert (out / "test_predictions.txt").read_text() == want
    # Not the initializer's all-one-tag output: the trained head predicts several tags.
    assert len({line.split()[-1] for line in want.splitlines() if line.strip()}) > 1


def test_classifier_through_the_original_tf1_format(config_file, tmp_path):
    """Fine-tune, convert the fine-tuned model to the original release's names
    (`bert/...`, `output_weights`, `output_bias`), predict from that checkpoint."""
    glue = tmp_path / "MRPC"
    glue.mkdir()
    for name, rows in (("train.tsv", 64), ("dev.tsv", 16), ("test.tsv", 16)):
        lines = (
            (SAMPLE_DATA / "glue" / "MRPC" / name)
            .read_text(encoding="utf-8")
            .splitlines(keepends=True)
        )
        (glue / name).write_text("".join(lines[: rows + 1]), encoding="utf-8")
    trained = tmp_path / "trained"
    run(
        "run_classifier",
        train=[
            "--task_name=MRPC",
            f"--data_dir={glue}",
            f"--bert_config_file={config_file}",
            f"--vocab_file={VOCAB}",
            "--do_train",
            "--do_predict",
            "--max_seq_length=64",
            "--num_train_epochs=1",
            "--learning_rate=1e-3",
            f"--output_dir={trained}",
        ],
    )
    import convert_checkpoint
    import tensorflow as tf

    converted = tmp_path / "tf1"
    convert_checkpoint.convert(str(trained), str(converted), "tf1")
    names = [name for name, _ in tf.train.list_variables(str(converted / "bert_model.ckpt"))]
    assert {"output_weights", "output_bias", "bert/pooler/dense/kernel"} <= set(names)
    out = tmp_path / "predicted"
    run(
        "run_classifier",
        predict=[
            "--task_name=MRPC",
            f"--data_dir={glue}",
            "--do_predict",
            f"--init_checkpoint={converted / 'bert_model.ckpt'}",
            "--max_seq_length=64",
            "--seed=7",
            f"--output_dir={out}",
        ],
    )
    np.testing.assert_allclose(
        np.loadtxt(out / "test_results.tsv"), np.loadtxt(trained / "test_results.tsv"), atol=1e-5
    )
