"""The command lines of the original release's README, run unchanged (paths swapped
for bundled sample data and a tiny model in the original release's folder layout):
fine-tune MRPC then predict from the fine-tuned checkpoint; SQuAD 1.1; SQuAD 2.0 with
a tuned null threshold; create_pretraining_data then run_pretraining; extract_features.

Each command runs as its own process, as a user types it, including the TPU-era flags
(`--use_tpu=False`, `--tpu_name`, `--iterations_per_loop`, ...), which map to their
current meaning with one warning line.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT, SAMPLE_DATA, read_results

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def run(script: str, *flags: str, expect_ok: bool = True) -> subprocess.CompletedProcess:
    """`python <script> <flags>` from the repository root."""
    args = [
        sys.executable,
        *(
            ["-m", script]
            if "." in script and not script.endswith(".py")
            else [str(REPO_ROOT / script)]
        ),
        *flags,
    ]
    result = subprocess.run(
        args, cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=900
    )
    if expect_ok:
        assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def bert_base_dir(tmp_path_factory):
    """$BERT_BASE_DIR: bert_model.ckpt, bert_config.json and vocab.txt of a tiny random
    model, written in the original release's TF1 format."""
    import shutil

    import keras

    from modeling import checkpoint_writers
    from modeling.config import BertConfig
    from modeling.encoder import BertEncoder
    from modeling.models import BertPretrainer

    directory = tmp_path_factory.mktemp("uncased_L-4_H-32_A-4")
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=128,
        type_vocab_size=2,
    )
    config.to_json_file(str(directory / "bert_config.json"))
    shutil.copy(SAMPLE_DATA / "vocab" / "uncased_vocab.txt", directory / "vocab.txt")
    keras.utils.set_random_seed(1)
    encoder = BertEncoder(config)
    checkpoint_writers.write_original_checkpoint(
        str(directory / "bert_model.ckpt"), encoder, BertPretrainer(encoder, config)
    )
    return directory


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    """$GLUE_DIR/MRPC: the bundled MRPC files cut to their first rows."""
    directory = tmp_path_factory.mktemp("glue") / "MRPC"
    directory.mkdir()
    for name, rows in (("train.tsv", 97), ("dev.tsv", 41), ("test.tsv", 23)):
        lines = (
            (SAMPLE_DATA / "glue" / "MRPC" / name)
            .read_text(encoding="utf-8")
            .splitlines(keepends=True)
        )
        (directory / name).write_text("".join(lines[: rows + 1]), encoding="utf-8")
    return directory.parent


def base_flags(bert_base_dir) -> list[str]:
    return [
        f"--vocab_file={bert_base_dir / 'vocab.txt'}",
        f"--bert_config_file={bert_base_dir / 'bert_config.json'}",
    ]


def test_mrpc_fine_tune_then_predict_from_the_fine_tuned_checkpoint(
    bert_base_dir, glue_dir, tmp_path
):
    """The README's two MRPC commands: the predictions made from the fine-tuned
    checkpoint in a new output_dir are the ones the training run made, whatever the
    seed (the fine-tuned head is restored, not drawn anew)."""
    train_dir = tmp_path / "mrpc_output"
    result = run(
        "run_classifier.py",
        "--task_name=MRPC",
        "--do_train=true",
        "--do_eval=true",
        "--do_predict=true",
        f"--data_dir={glue_dir / 'MRPC'}",
        *base_flags(bert_base_dir),
        f"--init_checkpoint={bert_base_dir / 'bert_model.ckpt'}",
        "--max_seq_length=64",
        "--train_batch_size=32",
        "--learning_rate=2e-5",
        "--num_train_epochs=1.0",
        f"--output_dir={train_dir}/",
        "--use_tpu=False",
        "--iterations_per_loop=2",
    )
    assert (
        "Original release flags: --use_tpu=False -> --distribution_strategy=one_device; "
        "--iterations_per_loop=2 -> --steps_per_loop=2" in result.stderr
    )
    expected = np.loadtxt(train_dir / "test_results.tsv")
    assert expected.shape == (23, 2)
    trained = [str(train_dir), str(next(train_dir.glob("best/best-*.index")))[:-6]]
    for index, (trained_classifier, seed) in enumerate(zip(trained, (1, 2))):
        out = tmp_path / f"predict_{index}"
        run(
            "run_classifier.py",
            "--task_name=MRPC",
            "--do_predict=true",
            f"--data_dir={glue_dir / 'MRPC'}",
            *base_flags(bert_base_dir),
            f"--init_checkpoint={trained_classifier}",
            "--max_seq_length=64",
            f"--output_dir={out}/",
            f"--seed={seed}",
        )
        np.testing.assert_allclose(np.loadtxt(out / "test_results.tsv"), expected, atol=1e-5)


@pytest.fixture(scope="module")
def squad_dir(tmp_path_factory):
    """$SQUAD_DIR: train and dev files of 2 paragraphs of the bundled SQuAD 2.0 sample,
    as v2.0 and as v1.1 (answerable questions only)."""
    directory = tmp_path_factory.mktemp("squad")
    sample = json.loads(
        (SAMPLE_DATA / "squad" / "dev-v2.0-first5articles.json").read_text(encoding="utf-8")
    )
    article = dict(sample["data"][0], paragraphs=sample["data"][0]["paragraphs"][:2])
    v1 = dict(
        article,
        paragraphs=[
            dict(
                p,
                qas=[
                    {k: v for k, v in qa.items() if k != "is_impossible"}
                    for qa in p["qas"]
                    if not qa["is_impossible"]
                ],
            )
            for p in article["paragraphs"]
        ],
    )
    for name, version, data in (("v2.0", "v2.0", article), ("v1.1", "1.1", v1)):
        for split in ("train", "dev"):
            (directory / f"{split}-{name}.json").write_text(
                json.dumps({"version": version, "data": [data]}), encoding="utf-8"
            )
    return directory


def squad_flags(bert_base_dir, squad_dir, version: str, output_dir) -> list[str]:
    return [
        *base_flags(bert_base_dir),
        f"--init_checkpoint={bert_base_dir / 'bert_model.ckpt'}",
        f"--train_file={squad_dir / f'train-{version}.json'}",
        f"--predict_file={squad_dir / f'dev-{version}.json'}",
        "--train_batch_size=12",
        "--learning_rate=3e-5",
        "--num_train_epochs=1.0",
        "--max_seq_length=128",
        "--doc_stride=64",
        f"--output_dir={output_dir}/",
    ]


def test_squad_1_1(bert_base_dir, squad_dir, tmp_path):
    out = tmp_path / "squad_base"
    run(
        "run_squad.py",
        "--do_train=True",
        "--do_predict=True",
        *squad_flags(bert_base_dir, squad_dir, "v1.1", out),
    )
    predictions = json.loads((out / "predictions.json").read_text())
    assert len(predictions) == 8 and not (out / "null_odds.json").exists()
    # evaluate-v1.1.py's scores, as run_squad --do_eval computes them.
    run("run_squad.py", "--do_eval=True", *squad_flags(bert_base_dir, squad_dir, "v1.1", out))
    assert set(read_results(out / "eval_results.txt")) == {"exact_match", "f1"}


def test_squad_2_0_with_a_tuned_null_threshold(bert_base_dir, squad_dir, tmp_path):
    """Train with --version_2_with_negative, score with the null odds, then predict
    again with --do_train=False and the best threshold, as the README advises."""
    out = tmp_path / "squad_large"
    flags = squad_flags(bert_base_dir, squad_dir, "v2.0", out)
    result = run(
        "run_squad.py",
        "--do_train=True",
        "--do_predict=True",
        "--do_eval=True",
        *flags,
        "--version_2_with_negative=True",
        "--use_tpu=False",
        "--verbose_logging=True",
    )
    assert "--verbose_logging=True -> debug logging" in result.stderr
    results = read_results(out / "eval_results.txt")
    assert {"best_f1", "best_f1_thresh", "HasAns_f1", "NoAns_f1"} <= set(results)
    odds = json.loads((out / "null_odds.json").read_text())
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    # The README's threshold is best_f1_thresh. The official script reports 0.0 when
    # answering nothing scores best; when that threshold leaves every question on one
    # side, one between the null odds is used, so that both kinds of answer are checked.
    threshold = results["best_f1_thresh"]
    if not 0 < sum(value > threshold for value in odds.values()) < len(odds):
        threshold = sorted(odds.values())[len(odds) // 2]
    run(
        "run_squad.py",
        "--do_train=False",
        "--do_predict=True",
        "--do_eval=True",
        *flags,
        "--version_2_with_negative=True",
        f"--null_score_diff_threshold={threshold}",
    )
    predictions = json.loads((out / "predictions.json").read_text())
    # The same model (no training): the null odds and n-best lists do not change;
    # a question is answered "" exactly where its null odds exceed the threshold,
    # else with its best non-null answer.
    assert json.loads((out / "null_odds.json").read_text()) == pytest.approx(odds)
    for qid, answer in predictions.items():
        best_text = next(entry["text"] for entry in nbest[qid] if entry["text"])
        assert answer == ("" if odds[qid] > threshold else best_text), qid
    assert (
        len(predictions)
        > sum(answer == "" for answer in predictions.values())
        == sum(value > threshold for value in odds.values())
        > 0
    )


def test_create_pretraining_data_then_run_pretraining(bert_base_dir, tmp_path):
    shard = tmp_path / "tf_examples.tfrecord"
    run(
        "data_prep.create_pretraining_data",
        f"--input_file={SAMPLE_DATA / 'corpus' / 'bert_paper_v1.txt'}",
        f"--output_file={shard}",
        f"--vocab_file={bert_base_dir / 'vocab.txt'}",
        "--do_lower_case=True",
        "--max_seq_length=128",
        "--max_predictions_per_seq=20",
        "--masked_lm_prob=0.15",
        "--random_seed=12345",
        "--dupe_factor=1",
    )
    out = tmp_path / "pretraining_output"
    run(
        "run_pretraining.py",
        f"--input_file={shard}",
        f"--output_dir={out}",
        "--do_train=True",
        "--do_eval=True",
        f"--bert_config_file={bert_base_dir / 'bert_config.json'}",
        f"--init_checkpoint={bert_base_dir / 'bert_model.ckpt'}",
        "--train_batch_size=32",
        "--max_seq_length=128",
        "--max_predictions_per_seq=20",
        "--num_train_steps=20",
        "--num_warmup_steps=10",
        "--learning_rate=2e-5",
        "--use_tpu=False",
        "--iterations_per_loop=10",
        "--max_eval_steps=2",
    )
    results = read_results(out / "eval_results.txt")
    assert results["global_step"] == 20
    assert {
        "masked_lm_accuracy",
        "masked_lm_loss",
        "next_sentence_accuracy",
        "next_sentence_loss",
    } <= set(results)


def test_extract_features(bert_base_dir, tmp_path):
    output = tmp_path / "output.jsonl"
    run(
        "extract_features.py",
        f"--input_file={SAMPLE_DATA / 'extract_features_input.txt'}",
        f"--output_file={output}",
        *base_flags(bert_base_dir),
        f"--init_checkpoint={bert_base_dir / 'bert_model.ckpt'}",
        "--layers=-1,-2,-3,-4",
        "--max_seq_length=128",
        "--batch_size=8",
        "--use_tpu=False",
        "--master=local",
        "--num_tpu_cores=8",
        "--use_one_hot_embeddings=False",
    )
    first = json.loads(output.read_text().splitlines()[0])
    assert first["linex_index"] == 0
    assert [layer["index"] for layer in first["features"][0]["layers"]] == [-1, -2, -3, -4]


def test_use_tpu_maps_to_the_tpu_strategy():
    """--use_tpu --tpu_name=X (+ zone, project) asks for the TPU strategy on X; the
    mapping is checked without a TPU (creating the strategy needs one)."""
    from absl import flags

    import runner_flags
    import runner_settings

    values = flags.FlagValues()
    runner_flags.define_common_flags(max_seq_length=128, flag_values=values)
    runner_flags.define_training_flags(flag_values=values)
    values(
        [
            "prog",
            "--use_tpu=True",
            "--tpu_name=my-tpu",
            "--tpu_zone=us-central1-b",
            "--gcp_project=p",
            "--iterations_per_loop=100",
            "--num_tpu_cores=8",
        ]
    )
    runner_settings.apply_original_flags(values)
    assert values.distribution_strategy == "tpu" and values.tpu == "my-tpu"
    assert values.steps_per_loop == 100
    values.unparse_flags()
    values(["prog", "--use_tpu=True", "--distribution_strategy=mirrored"])
    with pytest.raises(ValueError, match="--use_tpu contradicts"):
        runner_settings.apply_original_flags(values)
