"""The left-to-right model of the paper's Table 5 ("LTR & No NSP"): pre-training with
run_pretraining.py --objective=ltr, the left-only constraint kept by every later use of
the model, and its Hugging Face conversion as a causal BERT in transformers.

A tiny model pre-trained a few steps on shards of the bundled paper text (module
fixture); the fine-tuning runs from its output_dir alone are marked slow. The runs of
each runner share one process (module fixtures): TensorFlow starts once per runner.
"""

import json
import math
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import flags as absl_flags

import convert_checkpoint
import model_flags
import runner_flags
from data_prep.pretraining import pretraining_data
from data_prep.text import tokenization
from modeling import checkpoint_writers, checkpoints, heads, model_files, models
from modeling.checkpoint_readers import CheckpointMismatchError
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.objectives import LanguageModelObjective
from tests.conftest import REPO_ROOT, SAMPLE_DATA, read_results, tiny_config, write_tiny_config
from tests.helpers.pretraining_data_helpers import make_shard, run_pretraining_in_one_process
from tests.helpers.run_classifier_helpers import run_in_one_process
from tests.helpers.run_squad_helpers import run_driver as run_squad_in_one_process

VOCAB = str(SAMPLE_DATA / "vocab" / "uncased_vocab.txt")
SEQ, PREDS = 64, 10
CONFIG_KEYS = sorted(tiny_config())


def _run(script, *args, check=True):
    process = subprocess.run(
        [sys.executable, str(REPO_ROOT / script), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=900,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    if check:
        assert process.returncode == 0, process.stderr[-4000:]
    return process


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    path = tmp_path_factory.mktemp("ltr_shards") / "paper.tfrecord"
    return make_shard(SAMPLE_DATA / "corpus" / "bert_paper_v2.txt", path, VOCAB, SEQ, PREDS)


@pytest.fixture(scope="module")
def pretraining_runs(shard, tmp_path_factory):
    """{objective: output_dir} of 4 pre-training steps, each with the config and the
    vocabulary it was trained with (self-contained), and {name: [error type, message]}
    of every run_pretraining.py run of this file, all in one process: the two runs, then
    two refused: --objective=ltr with the next-sentence loss, and --objective=mlm on the
    ltr run's output_dir."""
    root = tmp_path_factory.mktemp("ltr_pretraining")
    config = write_tiny_config(root / "bert_config.json", max_position_embeddings=SEQ)
    dirs = {objective: str(root / objective) for objective in ("ltr", "mlm")}
    runs = {
        objective: [
            f"--input_file={shard}",
            f"--output_dir={dirs[objective]}",
            f"--bert_config_file={config}",
            f"--vocab_file={VOCAB}",
            f"--objective={objective}",
            f"--max_seq_length={SEQ}",
            f"--max_predictions_per_seq={PREDS}",
            "--train_batch_size=8",
            "--eval_batch_size=8",
            "--num_train_steps=4",
            "--num_warmup_steps=1",
            "--learning_rate=1e-3",
            "--steps_per_loop=2",
            "--max_eval_steps=2",
            "--do_train",
            "--do_eval",
        ]
        for objective in dirs
    }
    common = [
        f"--input_file={shard}",
        f"--max_seq_length={SEQ}",
        f"--max_predictions_per_seq={PREDS}",
        "--do_train",
        "--num_train_steps=1",
    ]
    runs["ltr_with_next_sentence"] = [
        *common,
        f"--output_dir={dirs['mlm']}_other",
        "--objective=ltr",
        "--use_next_sentence_loss",
    ]
    runs["mlm_on_ltr_output_dir"] = [*common, f"--output_dir={dirs['ltr']}", "--objective=mlm"]
    results = run_pretraining_in_one_process(runs)
    for objective in dirs:
        assert results[objective] == ["no error", ""], results[objective]
    return dirs, results


@pytest.fixture(scope="module")
def pretrained(pretraining_runs):
    """{objective: output_dir} of the two pre-training runs of `pretraining_runs`."""
    return pretraining_runs[0]


def load_encoder(output_dir):
    """The encoder of a run's output_dir, built from its files alone."""
    files = model_files.resolve(None, None, output_dir, None)
    encoder = BertEncoder(files.config, causal_attention=files.causal_attention)
    checkpoints.restore_model(output_dir, encoder)
    return encoder, files


def sentence_batch(tokenizer, text, seq=24):
    ids = tokenizer.convert_tokens_to_ids(["[CLS]"] + tokenizer.tokenize(text) + ["[SEP]"])
    batch = {
        "input_word_ids": np.zeros((1, seq), np.int32),
        "input_mask": np.zeros((1, seq), np.int32),
        "input_type_ids": np.zeros((1, seq), np.int32),
    }
    batch["input_word_ids"][0, : len(ids)] = ids
    batch["input_mask"][0, : len(ids)] = 1
    return batch, len(ids)


# ------------------------------------------------------------ pre-training


@pytest.mark.slow
def test_ltr_pretraining_writes_its_metrics_and_the_left_only_constraint(pretrained):
    output_dir = pretrained["ltr"]
    results = read_results(os.path.join(output_dir, "eval_results.txt"))
    assert set(results) == {"next_token_accuracy", "next_token_loss", "perplexity", "global_step"}
    assert results["global_step"] == 4
    assert math.isclose(results["perplexity"], math.exp(results["next_token_loss"]), rel_tol=1e-6)
    # Four steps from random weights: about the uniform loss over 30,522 tokens.
    assert 7.0 < results["next_token_loss"] < 11.0
    info = json.loads(open(os.path.join(output_dir, "model_info.json")).read())
    assert info["causal_attention"] is True and info["pretraining_objective"] == "ltr"
    # bert_config.json keeps exactly the original keys.
    assert sorted(json.loads(open(os.path.join(output_dir, "bert_config.json")).read())) == (
        CONFIG_KEYS
    )
    mlm_info = json.loads(open(os.path.join(pretrained["mlm"], "model_info.json")).read())
    assert "causal_attention" not in mlm_info
    assert "masked_lm_accuracy" in read_results(os.path.join(pretrained["mlm"], "eval_results.txt"))


@pytest.mark.slow
def test_ltr_features_at_a_position_ignore_every_later_token(pretrained):
    tokenizer = tokenization.FullTokenizer(VOCAB, True)
    batch, length = sentence_batch(tokenizer, "the model reads the text from left to right")
    for objective, causal in (("ltr", True), ("mlm", False)):
        encoder, files = load_encoder(pretrained[objective])
        assert files.causal_attention is causal and encoder.causal_attention is causal
        before = encoder(batch)["sequence_output"].numpy()[0]
        for changed in (3, length - 2):
            ids = batch["input_word_ids"].copy()
            ids[0, changed] = tokenizer.vocab["table"]
            after = encoder(dict(batch, input_word_ids=ids))["sequence_output"].numpy()[0]
            moved = np.abs(after - before).max(axis=-1)[:length]
            if causal:
                assert moved[:changed].max() == 0.0, (objective, changed, moved)
                assert moved[changed:].min() > 1e-4, (objective, changed, moved)
            else:  # Every position sees the change.
                assert moved.min() > 1e-4, (objective, changed, moved)


@pytest.fixture(scope="module")
def short_shard(tmp_path_factory):
    """Shards of short pairs (the paper's sentences of at most 16 word pieces, one a
    document, so each pair is two of them), whose batches the input pipeline cuts."""
    tokenizer = tokenization.FullTokenizer(VOCAB, True)
    lines = (SAMPLE_DATA / "corpus" / "bert_paper_v2.txt").read_text(encoding="utf-8")
    short = [line for line in lines.splitlines() if 4 <= len(tokenizer.tokenize(line)) <= 16]
    assert len(short) > 50
    root = tmp_path_factory.mktemp("ltr_short")
    (root / "short.txt").write_text("\n\n".join(short) + "\n", encoding="utf-8")
    return make_shard(root / "short.txt", root / "short.tfrecord", VOCAB, SEQ, PREDS)


def _batches(shard, pad_to_max_seq_length):
    """The first evaluation batch of 16 from the shard, cut to its longest sequence or
    padded to SEQ."""
    metadata = pretraining_data.shards_metadata([shard], SEQ, PREDS)
    dataset = pretraining_data.pretraining_dataset(
        [shard], metadata, 16, False, pad_to_max_seq_length=pad_to_max_seq_length
    )
    return next(iter(dataset))


def test_restore_masked_tokens_gives_back_the_clean_text(short_shard):
    batch = _batches(short_shard, pad_to_max_seq_length=False)  # Cut to its length.
    assert batch["input_word_ids"].shape[1] < SEQ
    mask_id = tokenization.load_vocab(VOCAB)["[MASK]"]
    restored = pretraining_data.restore_masked_tokens(batch)
    ids, clean = batch["input_word_ids"].numpy(), restored["input_word_ids"].numpy()
    weights = batch["masked_lm_weights"].numpy()
    positions, originals = batch["masked_lm_positions"].numpy(), batch["masked_lm_ids"].numpy()
    assert (ids == mask_id).sum() > 20 and (clean == mask_id).sum() == 0
    expected = ids.copy()
    for row in range(len(ids)):
        real = weights[row] > 0
        expected[row, positions[row, real]] = originals[row, real]
    np.testing.assert_array_equal(clean, expected)
    # One example at a time (a map before batching) gives the same.
    single = pretraining_data.restore_masked_tokens({k: v[0] for k, v in batch.items()})
    np.testing.assert_array_equal(single["input_word_ids"].numpy(), expected[0])
    assert set(restored) == set(batch)


def test_restore_masked_tokens_by_hand():
    features = {
        "input_word_ids": tf.constant([[101, 103, 7, 103, 102, 0]]),
        "masked_lm_positions": tf.constant([[1, 3, 2, 0]]),
        "masked_lm_ids": tf.constant([[5, 6, 7, 0]]),
        "masked_lm_weights": tf.constant([[1.0, 1.0, 1.0, 0.0]]),
    }
    restored = pretraining_data.restore_masked_tokens(features)["input_word_ids"]
    assert restored.numpy().tolist() == [[101, 5, 7, 6, 102, 0]]


def test_language_model_loss_counts_every_next_real_token():
    rng = np.random.RandomState(0)
    ids = np.array([[101, 5, 6, 7, 102, 0], [101, 8, 102, 0, 0, 0]], np.int32)
    mask = (ids > 0).astype(np.int32)
    logits = rng.standard_normal((2, 5, 110)).astype(np.float32)
    task = LanguageModelObjective()
    features = {"input_word_ids": ids, "input_mask": mask}
    sums = {k: float(v) for k, v in task.eval_sums(features, {"lm_logits": logits}).items()}
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    targets = [(0, i) for i in range(4)] + [(1, 0), (1, 1)]  # Next token real: 4 + 2.
    nll = [-log_probs[b, i, ids[b, i + 1]] for b, i in targets]
    correct = [float(np.argmax(logits[b, i]) == ids[b, i + 1]) for b, i in targets]
    assert sums["predictions"] == 6.0 == float(task.loss_weights(features)["next_token"])
    assert math.isclose(sums["loss"], sum(nll), rel_tol=1e-5)
    assert sums["correct"] == sum(correct)
    loss_sum = float(task.loss_sums(features, {"lm_logits": logits})["next_token"])
    assert math.isclose(loss_sum, sum(nll), rel_tol=1e-5)
    metrics = task.finalize_eval(sums)
    assert math.isclose(metrics["perplexity"], math.exp(sum(nll) / 6), rel_tol=1e-5)


def test_ltr_step_on_a_cut_batch_computes_what_the_full_width_batch_computes(short_shard):
    """The input pipeline cuts each batch to its longest sequence: the causal mask and
    the next-token targets then span the cut length, and the loss, its weight and the
    logits of the real positions equal those of the same batch padded to SEQ."""
    cut, full = _batches(short_shard, False), _batches(short_shard, True)
    length = cut["input_word_ids"].shape[1]
    assert length < SEQ  # Else the test compares a batch with itself.
    config = BertConfig.from_dict(tiny_config(0.0, vocab_size=30522, max_position_embeddings=SEQ))
    model = models.BertPretrainer(BertEncoder(config, causal_attention=True), config, "ltr")
    task = LanguageModelObjective()
    results = {}
    for name, batch in (("cut", cut), ("full", full)):
        features = pretraining_data.restore_masked_tokens(batch)
        outputs = model(features)
        assert outputs["lm_logits"].shape[1] == features["input_word_ids"].shape[1] - 1
        results[name] = (
            float(task.loss_weights(features)["next_token"]),
            float(task.loss_sums(features, outputs)["next_token"]),
            outputs["lm_logits"].numpy()[:, : length - 1],
        )
    np.testing.assert_array_equal(
        cut["input_word_ids"].numpy(), full["input_word_ids"].numpy()[:, :length]
    )
    assert results["cut"][0] == results["full"][0] > 100
    assert math.isclose(results["cut"][1], results["full"][1], rel_tol=1e-5)
    mask = cut["input_mask"].numpy()[:, 1:].astype(bool)  # Predictions of real tokens.
    np.testing.assert_allclose(results["cut"][2][mask], results["full"][2][mask], atol=1e-4)


def test_causal_pooler_reads_the_last_real_token_whatever_the_padding():
    config = BertConfig.from_dict(tiny_config(0.0, vocab_size=99))
    encoder = BertEncoder(config, causal_attention=True)
    ids = np.array([[2, 17, 33, 41, 3]], np.int32)
    outputs = []
    for pad in (0, 4):
        batch = {
            "input_word_ids": np.pad(ids, [[0, 0], [0, pad]]),
            "input_mask": np.pad(np.ones_like(ids), [[0, 0], [0, pad]]),
            "input_type_ids": np.zeros((1, 5 + pad), np.int32),
        }
        outputs.append(encoder(batch))
    for out in outputs:
        last = out["sequence_output"][:, 4]
        np.testing.assert_allclose(out["pooled_output"], encoder.pooler(last), atol=1e-6)
    np.testing.assert_allclose(
        outputs[0]["sequence_output"], outputs[1]["sequence_output"][:, :5], atol=1e-5
    )
    np.testing.assert_allclose(outputs[0]["pooled_output"], outputs[1]["pooled_output"], atol=1e-5)


@pytest.mark.slow
def test_ltr_objective_refuses_the_next_sentence_loss_and_a_mixed_output_dir(pretraining_runs):
    _, results = pretraining_runs
    error, message = results["ltr_with_next_sentence"]
    assert error == "UserError" and "has no next-sentence loss" in message
    error, message = results["mlm_on_ltr_output_dir"]
    assert error == "UserError" and "holds a run of --objective=ltr" in message


# ------------------------------------------------------------ later uses


def random_output_dirs(root):
    """{"ltr": folder, "mlm": folder} of random tiny pre-trainers, each a
    self-contained folder as a run's output_dir (checkpoint, config, vocabulary,
    model_info.json)."""
    config = BertConfig.from_dict(tiny_config(0.0, max_position_embeddings=SEQ))
    dirs = {}
    for objective in ("ltr", "mlm"):
        encoder = BertEncoder(config, causal_attention=objective == "ltr")
        model = models.BertPretrainer(encoder, config, objective)
        dirs[objective] = str(root / objective)
        checkpoint_writers.write_tf2_directory(dirs[objective], model, VOCAB, True)
    return dirs


def test_the_runners_build_a_left_to_right_encoder_from_its_files(tmp_path):
    dirs = random_output_dirs(tmp_path)
    info = json.loads(open(os.path.join(dirs["ltr"], "model_info.json")).read())
    assert info["causal_attention"] is True
    values = absl_flags.FlagValues()
    runner_flags.define_common_flags(max_seq_length=SEQ, flag_values=values)
    runner_flags.define_finetuning_flags(values)
    values(["prog", f"--init_checkpoint={dirs['ltr']}", f"--output_dir={tmp_path / 'out'}"])
    encoder, files = model_flags.build_encoder(values, tf.distribute.get_strategy())
    assert encoder.causal_attention and files.causal_attention
    # ... and write it into the next output_dir.
    model_files.write_model_files(str(tmp_path / "out"), files, "classifier")
    assert model_files.resolve(None, None, str(tmp_path / "out"), None).causal_attention
    values.init_checkpoint = dirs["mlm"]
    encoder, files = model_flags.build_encoder(values, tf.distribute.get_strategy())
    assert not encoder.causal_attention and not files.causal_attention


def test_causal_attention_hides_every_later_token():
    config = BertConfig.from_dict(tiny_config(0.0, vocab_size=99))
    ids = np.array([[2, 17, 33, 41, 58, 3, 0, 0]], np.int32)
    batch = {
        "input_word_ids": ids,
        "input_mask": (ids > 0).astype(np.int32),
        "input_type_ids": np.zeros_like(ids),
    }
    changed = ids.copy()
    changed[0, 3] = 77
    for causal in (True, False):
        encoder = BertEncoder(config, causal_attention=causal)
        before = encoder(batch)["encoder_outputs"]
        after = encoder(dict(batch, input_word_ids=changed))["encoder_outputs"]
        for a, b in zip(before, after):
            moved = np.abs(a.numpy() - b.numpy()).max(axis=-1)[0, :6]
            if causal:
                assert moved[:3].max() == 0.0 and moved[3:].min() > 1e-4, moved
            else:
                assert moved.min() > 1e-4, moved


def test_a_bilstm_head_is_never_half_restored(tmp_path):
    encoder, files = load_encoder(random_output_dirs(tmp_path)["ltr"])
    with_bilstm = models.BertSpanLabeler(encoder, files.config, bilstm_units=8)
    folder = str(tmp_path / "span")
    checkpoint_writers.write_tf2_directory(folder, with_bilstm, VOCAB, True)
    assert json.loads(open(os.path.join(folder, "model_info.json")).read())["bilstm_units"] == 8
    without = models.BertSpanLabeler(BertEncoder(files.config, causal_attention=True), files.config)
    with pytest.raises(CheckpointMismatchError, match="head parts this model lacks: bilstm"):
        checkpoints.restore_model(folder, without)
    for writer in (
        checkpoint_writers.write_hf_directory,
        checkpoint_writers.write_original_directory,
    ):
        with pytest.raises(ValueError, match="BiLSTM head .* has no TF1 or Hugging Face names"):
            writer(str(tmp_path / writer.__name__), with_bilstm, VOCAB, True)
    # Our own format keeps it: converted tf2 -> tf2, the same outputs.
    copy = convert_checkpoint.convert(folder, str(tmp_path / "copy"), "tf2")
    rebuilt = convert_checkpoint.build_model("span", files.config, None, True, 8)
    checkpoints.restore_model(copy, rebuilt)
    batch, _ = sentence_batch(tokenization.FullTokenizer(VOCAB, True), "a span to find")
    np.testing.assert_allclose(
        rebuilt(batch)["start_logits"], with_bilstm(batch)["start_logits"], atol=1e-6
    )


def test_bilstm_summary_is_each_direction_after_the_whole_input():
    keras.utils.set_random_seed(5)
    layer = heads.BiLSTM(4)
    layer.build((None, None, 6))
    x = np.random.default_rng(0).normal(size=(2, 7, 6)).astype(np.float32)
    mask = np.array([[1] * 7, [1] * 4 + [0] * 3], np.int32)
    summary = layer.summary_vector(layer(x, mask), mask).numpy()
    for row, length in ((0, 7), (1, 4)):
        real = x[row : row + 1, :length]
        forward = layer.forward_layer(real).numpy()[0, -1]  # After reading left to right.
        backward = layer.backward_layer(real).numpy()[0, -1]  # ... right to left.
        np.testing.assert_allclose(summary[row], np.concatenate([forward, backward]), atol=1e-5)


@pytest.mark.parametrize("kind", ["classifier", "span", "token_classifier"])
def test_task_models_with_a_bilstm_ignore_padding(kind):
    config = BertConfig.from_dict(tiny_config(0.0, vocab_size=99))
    builders = {
        "classifier": lambda e: models.BertClassifier(e, config, 3, bilstm_units=6),
        "span": lambda e: models.BertSpanLabeler(e, config, bilstm_units=6),
        "token_classifier": lambda e: models.BertTokenClassifier(e, config, 5, bilstm_units=6),
    }
    model = builders[kind](BertEncoder(config, causal_attention=True))
    assert model.bilstm.units == 6
    ids = np.array([[2, 17, 33, 41, 3]], np.int32)
    outputs = []
    for pad in (0, 3):
        batch = {
            "input_word_ids": np.pad(ids, [[0, 0], [0, pad]]),
            "input_mask": np.pad(np.ones_like(ids), [[0, 0], [0, pad]]),
            "input_type_ids": np.zeros((1, 5 + pad), np.int32),
        }
        outputs.append(model(batch))
    for key, value in outputs[0].items():
        padded = outputs[1][key].numpy()
        padded = padded if kind == "classifier" else padded[:, :5]
        np.testing.assert_allclose(value.numpy(), padded, atol=1e-5)
        assert np.abs(value.numpy()).max() > 1e-3


@pytest.mark.slow
def test_extract_features_keeps_the_left_only_constraint(pretrained, tmp_path):
    text = tmp_path / "input.txt"
    text.write_text("the model reads from left to right\nthe model reads from left to left\n")
    output = tmp_path / "features.jsonl"
    _run(
        "extract_features.py",
        f"--input_file={text}",
        f"--output_file={output}",
        f"--init_checkpoint={pretrained['ltr']}",
        "--layers=-1",
        "--max_seq_length=16",
    )
    first, second = [json.loads(line)["features"] for line in output.read_text().splitlines()]
    values = [[np.array(f["layers"][0]["values"]) for f in lines] for lines in (first, second)]
    changed = 7  # [CLS] the model reads from left to |right
    assert first[changed]["token"] == "right" and second[changed]["token"] == "left"
    for position in range(changed):
        np.testing.assert_array_equal(values[0][position], values[1][position])
    assert np.abs(values[0][changed] - values[1][changed]).max() > 1e-3


@pytest.mark.slow
def test_tf_hub_export_of_an_ltr_encoder_is_causal(pretrained, tmp_path):
    from modeling import hub
    from serving import encoder as encoder_export

    encoder, files = load_encoder(pretrained["ltr"])
    path = encoder_export.export_encoder(encoder, str(tmp_path / "hub"), VOCAB, True)
    loaded = hub.HubEncoder(path)
    assert loaded.causal_attention
    batch, _ = sentence_batch(tokenization.FullTokenizer(VOCAB, True), "left to right only")
    ours, theirs = encoder(batch), loaded(batch)
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(theirs[key], ours[key], atol=1e-5)
    assert tf.saved_model.load(path).causal_attention.numpy()


# ------------------------------------------------------------ fine-tuning from output_dir


def _finetune_args(output_dir, init_checkpoint, bilstm_units):
    return [
        f"--init_checkpoint={init_checkpoint}",
        f"--output_dir={output_dir}",
        f"--max_seq_length={SEQ}",
        "--train_batch_size=8",
        "--eval_batch_size=8",
        "--learning_rate=1e-3",
        "--num_train_epochs=1",
        f"--bilstm_units={bilstm_units}",
    ]


# Each runner fine-tunes one head: run_classifier's with a BiLSTM (restored from the
# fine-tuned output_dir alone), run_squad's without (every head with and without:
# test_task_models_with_a_bilstm_ignore_padding).
CLASSIFIER_BILSTM_UNITS, SQUAD_BILSTM_UNITS = (8,), (0,)


@pytest.fixture(scope="module")
def classifier_runs(pretrained, mrpc_dir, tmp_path_factory):
    """{bilstm_units: (fine-tuned output_dir, output_dir of an evaluation from it
    alone)}: MRPC fine-tuned from the ltr run's output_dir, then evaluated from the
    fine-tuned output_dir alone; every run in one process."""
    root = tmp_path_factory.mktemp("ltr_mrpc")
    task = ["--task_name=MRPC", f"--data_dir={mrpc_dir}"]
    runs, dirs = {}, {}
    for units in CLASSIFIER_BILSTM_UNITS:
        output_dir, again = root / f"mrpc_{units}", root / f"again_{units}"
        dirs[units] = (output_dir, again)
        runs[f"train_{units}"] = [
            *task,
            *_finetune_args(output_dir, pretrained["ltr"], units),
            "--do_train",
            "--do_eval",
        ]
        runs[f"again_{units}"] = [
            *task,
            f"--init_checkpoint={output_dir}",
            f"--output_dir={again}",
            f"--max_seq_length={SEQ}",
            "--do_eval",
        ]
    results = run_in_one_process(runs)
    assert all(result == ["no error", ""] for result in results.values()), results
    return dirs


@pytest.mark.slow
@pytest.mark.parametrize("bilstm_units", CLASSIFIER_BILSTM_UNITS)
def test_run_classifier_fine_tunes_an_ltr_model_from_its_output_dir(classifier_runs, bilstm_units):
    output_dir, again = classifier_runs[bilstm_units]
    results = read_results(output_dir / "eval_results.txt")
    assert 0.0 <= results["eval_accuracy"] <= 1.0 and math.isfinite(results["eval_loss"])
    info = json.loads((output_dir / "model_info.json").read_text())
    assert info["causal_attention"] is True and info["bilstm_units"] == bilstm_units
    # The fine-tuned output_dir alone predicts with the same model (BiLSTM included).
    assert math.isclose(
        read_results(again / "eval_results.txt")["eval_loss"], results["eval_loss"], rel_tol=1e-5
    )


@pytest.fixture(scope="module")
def squad_runs(pretrained, root, tmp_path_factory):
    """{bilstm_units: output_dir} of SQuAD 1.1 fine-tuned from the ltr run's output_dir
    (without a BiLSTM head), then predicted and scored."""
    folder = tmp_path_factory.mktemp("ltr_squad")
    dirs = {units: folder / f"squad_{units}" for units in SQUAD_BILSTM_UNITS}
    runs = {
        str(units): [
            f"--train_file={root / 'v1.json'}",
            f"--predict_file={root / 'v1.json'}",
            "--doc_stride=32",
            "--max_query_length=16",
            *_finetune_args(output_dir, pretrained["ltr"], units),
            "--do_train",
            "--do_predict",
            "--do_eval",
        ]
        for units, output_dir in dirs.items()
    }
    results = run_squad_in_one_process(runs)
    assert all(result == ["no error", ""] for result in results.values()), results
    return dirs


@pytest.mark.slow
@pytest.mark.parametrize("bilstm_units", SQUAD_BILSTM_UNITS)
def test_run_squad_fine_tunes_an_ltr_model_from_its_output_dir(squad_runs, bilstm_units):
    output_dir = squad_runs[bilstm_units]
    results = read_results(output_dir / "eval_results.txt")
    assert 0.0 <= results["f1"] <= 100.0
    info = json.loads((output_dir / "model_info.json").read_text())
    assert info["causal_attention"] is True and info["bilstm_units"] == bilstm_units
    predictions = json.loads((output_dir / "predictions.json").read_text())
    assert len(predictions) == 8  # The answerable questions of the two paragraphs.


# ------------------------------------------------------------ Hugging Face


@pytest.mark.slow
def test_hugging_face_conversion_is_a_causal_bert_with_our_outputs(pretrained, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder = convert_checkpoint.convert(pretrained["ltr"], str(tmp_path / "hf"), "hf")
    config = json.loads(open(os.path.join(folder, "config.json")).read())
    assert config["is_decoder"] is True and config["architectures"] == ["BertLMHeadModel"]
    lm = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(lm).__name__ == "BertLMHeadModel" and lm.config.is_decoder

    encoder, files = load_encoder(pretrained["ltr"])
    ours = models.BertPretrainer(encoder, files.config, "ltr")
    checkpoints.restore_model(pretrained["ltr"], ours)
    tokenizer = tokenization.FullTokenizer(VOCAB, True)
    rows = [
        sentence_batch(tokenizer, text, seq=20)
        for text in ("left to right", "a longer sentence of the paper text to read")
    ]
    batch = {k: np.concatenate([r[0][k] for r in rows]) for k in rows[0][0]}
    real = batch["input_mask"].astype(bool)
    inputs = {
        "input_ids": torch.tensor(batch["input_word_ids"], dtype=torch.long),
        "attention_mask": torch.tensor(batch["input_mask"], dtype=torch.long),
        "token_type_ids": torch.tensor(batch["input_type_ids"], dtype=torch.long),
    }
    with torch.no_grad():
        theirs = lm(**inputs).logits.numpy()  # [B, S, V]: position i predicts i + 1.
        base = transformers.AutoModel.from_pretrained(folder).eval()
        hidden = base(**inputs).last_hidden_state
        last = torch.tensor([n - 1 for _, n in rows])
        pooled = base.pooler.activation(base.pooler.dense(hidden[torch.arange(2), last]))
    out = ours(batch)["lm_logits"].numpy()  # [B, S-1, V]
    diff = np.abs(out - theirs[:, :-1])[real[:, 1:]].max()
    assert diff < 1e-4 and np.abs(out).max() > 0.1
    encoded = encoder(batch)
    np.testing.assert_allclose(encoded["sequence_output"].numpy()[real], hidden[real], atol=1e-4)
    # Hugging Face's pooler reads [CLS]; ours reads the last real token (the same dense).
    np.testing.assert_allclose(encoded["pooled_output"], pooled, atol=1e-5)

    # A task model fine-tuned from it: a span labeler converts and matches; a
    # classifier (pooled from the last token, not [CLS]) is refused.
    span = models.BertSpanLabeler(encoder, files.config)
    span_folder = checkpoint_writers.write_hf_directory(str(tmp_path / "span"), span, VOCAB, True)
    qa = transformers.AutoModelForQuestionAnswering.from_pretrained(span_folder).eval()
    assert qa.config.is_decoder
    with torch.no_grad():
        start = qa(**inputs).start_logits.numpy()
    np.testing.assert_allclose(span(batch)["start_logits"].numpy()[real], start[real], atol=1e-4)
    classifier = models.BertClassifier(encoder, files.config, 2)
    with pytest.raises(ValueError, match="left-to-right classifier has no Hugging Face class"):
        checkpoint_writers.write_hf_directory(str(tmp_path / "cls"), classifier, VOCAB, True)
    # Read back: the Hugging Face folder is a left-to-right model for us too.
    assert model_files.resolve(None, None, folder, None).causal_attention
