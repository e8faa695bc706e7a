"""restore_model and the checkpoint writers on the tiny model: every kind of model from
every format, heads included; mismatches, kinds, re-initialised heads, the best/ rule,
and writers that never destroy a user's folder."""

import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from modeling import checkpoint_names as names
from modeling import checkpoints, feature_based, model_files, models
from modeling import checkpoint_readers, checkpoint_writers
from modeling.checkpoint_writers import hf_config, hf_tensors
from modeling.config import ACTIVATIONS, BertConfig
from modeling.encoder import BertEncoder
from tests.conftest import tiny_config

TINY = tiny_config(vocab_size=99)
CONFIG = BertConfig(**TINY)
KINDS = ("encoder", "pretrainer", "classifier", "multiple_choice", "span", "token_classifier")
WRITERS = {
    "tf1": checkpoint_writers.write_original_directory,
    "hf": checkpoint_writers.write_hf_directory,
    "tf2": checkpoint_writers.write_tf2_directory,
}


def build(kind, num_labels=3, config=CONFIG):
    encoder = BertEncoder(config)
    return {
        "encoder": lambda: encoder,
        "pretrainer": lambda: models.BertPretrainer(encoder, config),
        "classifier": lambda: models.BertClassifier(encoder, config, num_labels),
        "multiple_choice": lambda: models.BertMultipleChoice(encoder, config),
        "span": lambda: models.BertSpanLabeler(encoder, config),
        "token_classifier": lambda: models.BertTokenClassifier(encoder, config, num_labels),
        "feature_based": lambda: feature_based.BertFeatureBasedTagger(
            encoder, config, num_labels, [0, 1], "weighted_sum", lstm_units=8
        ),
    }[kind]()


def weights(model):
    return {v.path: v.numpy() for v in model.variables if "seed_generator" not in v.path}


def randomized(model, seed=0):
    """The model with every variable random (biases and LayerNorm included), so that a
    variable restored from the wrong place cannot pass."""
    rng = np.random.RandomState(seed)
    for v in model.variables:
        if "seed_generator" not in v.path:
            v.assign(rng.standard_normal(v.shape).astype(np.float32))
    return model


def assert_same(a, b):
    """Equal variables, in order (Keras numbers the names of a second model's layers)."""
    a, b = list(weights(a).items()), list(weights(b).items())
    assert len(a) == len(b)
    for (name, x), (_, y) in zip(a, b):
        np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("".join(f"w{i}\n" for i in range(CONFIG.vocab_size)))
    return str(path)


@pytest.fixture(scope="module")
def written(vocab, tmp_path_factory):
    """{(kind, format): (source model, folder)}: each kind written in each format."""
    root = tmp_path_factory.mktemp("written")
    out = {}
    for kind in KINDS:
        source = randomized(build(kind), seed=KINDS.index(kind))
        for fmt, writer in WRITERS.items():
            folder = str(root / f"{kind}-{fmt}")
            writer(folder, source, vocab, True)
            out[kind, fmt] = source, folder
    return out


# ------------------------------------------------------------------ names


def test_hugging_face_names_of_every_head():
    assert names.hf_name("cls/seq_relationship/output_bias", "bert.") == (
        "cls.seq_relationship.bias",
        False,
    )
    assert names.hf_name("cls/predictions/output_bias", "bert.") == (
        "cls.predictions.bias",
        False,
    )
    assert names.hf_name("output_weights", "bert.") == ("classifier.weight", False)
    assert names.hf_name("output_bias", "bert.") == ("classifier.bias", False)
    assert names.hf_name("cls/squad/output_weights", "bert.") == ("qa_outputs.weight", False)
    assert names.hf_name("bert/pooler/dense/kernel", "bert.") == (
        "bert.pooler.dense.weight",
        True,
    )
    for old, new in [
        ("cls.predictions.decoder.bias", "cls.predictions.bias"),
        ("bert.embeddings.LayerNorm.gamma", "bert.embeddings.LayerNorm.weight"),
        ("cls.predictions.transform.LayerNorm.beta", "cls.predictions.transform.LayerNorm.bias"),
        ("cls.seq_relationship.bias", "cls.seq_relationship.bias"),
    ]:
        assert names.canonical_hf_name(old) == new


def test_original_names_of_task_heads(written):
    def shapes(kind):
        return dict(
            tf.train.list_variables(os.path.join(written[kind, "tf1"][1], "bert_model.ckpt"))
        )

    assert shapes("classifier")["output_weights"] == [3, 32]
    assert shapes("classifier")["output_bias"] == [3]
    assert shapes("token_classifier")["output_weights"] == [3, 32]
    assert shapes("multiple_choice")["output_weights"] == [1, 32]
    assert shapes("span")["cls/squad/output_weights"] == [2, 32]
    assert shapes("span")["cls/squad/output_bias"] == [2]
    pretraining = shapes("pretrainer")
    assert pretraining["cls/seq_relationship/output_weights"] == [2, 32]
    assert len(pretraining) == len(shapes("encoder")) + 7


def test_hugging_face_config_reads_back_unchanged():
    for act in ACTIVATIONS:
        config = BertConfig(**dict(TINY, hidden_act=act))
        values = hf_config(config, "classifier", ["a", "b"], 2)
        assert BertConfig.from_hf_dict(values) == config
        assert values["architectures"] == ["BertForSequenceClassification"]
        assert values["id2label"] == {"0": "a", "1": "b"}
    assert hf_config(CONFIG, "encoder")["hidden_act"] == "gelu_new"  # tanh form
    assert (
        hf_config(BertConfig(**dict(TINY, hidden_act="gelu_exact")), "span")["hidden_act"] == "gelu"
    )


# ------------------------------------------------------------------ restoring


@pytest.mark.parametrize("fmt", ["tf1", "hf", "tf2"])
def test_every_kind_restores_encoder_and_head_from_each_format(written, fmt):
    for kind in KINDS:
        source, folder = written[kind, fmt]
        target = build(kind)
        info = checkpoints.restore_model(folder, target)
        head = [p for p in names.tf2_entries(target) if p != "encoder"]
        assert info["kind"] == fmt
        assert info["restored"] == ["encoder"] + head and info["fresh"] == [], kind
        assert_same(source, target)


def test_head_starts_fresh_when_the_checkpoint_has_none(written):
    for fmt in ("tf1", "hf", "tf2"):
        source, folder = written["encoder", fmt]
        target = build("span")
        initial = target.span.dense.kernel.numpy()
        info = checkpoints.restore_model(folder, target)
        assert info["restored"] == ["encoder"] and info["fresh"] == ["span"]
        np.testing.assert_array_equal(target.span.dense.kernel.numpy(), initial)
        assert_same(source, target.encoder)
    # A pre-training checkpoint into a classifier: its heads are not used.
    info = checkpoints.restore_model(written["pretrainer", "tf1"][1], build("classifier"))
    assert info["fresh"] == ["classifier"]


@pytest.mark.parametrize(
    "fmt,name",
    [
        ("tf1", "output_weights"),
        ("hf", "classifier.weight"),
        ("tf2", "model/classifier/dense/_kernel"),
    ],
)
def test_head_of_another_label_count_names_both_shapes_unless_reinitialised(
    written, fmt, name, caplog
):
    source, folder = written["classifier", fmt]
    target = build("classifier", num_labels=2)
    before = weights(target)
    with pytest.raises(checkpoint_readers.CheckpointMismatchError) as error:
        checkpoints.restore_model(folder, target)
    message = str(error.value)
    assert name in message and "reinit_head" in message
    have, want = ([3, 32], [2, 32]) if fmt != "tf2" else ([32, 3], [32, 2])
    assert f"shape {have}" in message and f"needs {want}" in message
    for key, value in weights(target).items():  # Nothing was assigned.
        np.testing.assert_array_equal(value, before[key])

    with caplog.at_level(logging.INFO, logger="absl"):
        info = checkpoints.restore_model(folder, target, reinit_head=True)
    assert info["restored"] == ["encoder"] and info["fresh"] == ["classifier"]
    assert_same(source.encoder, target.encoder)
    np.testing.assert_array_equal(
        target.classifier.dense.kernel.numpy(), before["classifier/dense/kernel"]
    )
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("classifier head starts from its initializer" in w and name in w for w in warning)
    summary = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Restored")]
    assert len(summary) == 1
    assert summary[0].startswith(f"Restored encoder from {fmt} checkpoint ")
    assert "starting fresh: classifier" in summary[0]


def test_reinit_head_leaves_a_fitting_head_fresh_too(written):
    info = checkpoints.restore_model(written["span", "hf"][1], build("span"), reinit_head=True)
    assert info["fresh"] == ["span"]


def test_summary_line_says_restored_fresh_and_unused(written, caplog):
    with caplog.at_level(logging.INFO, logger="absl"):
        checkpoints.restore_model(written["classifier", "tf1"][1], build("span"))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Restored")]
    assert len(lines) == 1
    assert lines[0] == (
        f"Restored encoder from tf1 checkpoint "
        f"{written['classifier', 'tf1'][1]}/bert_model.ckpt; starting fresh: "
        f"span; not used: output_bias, output_weights"
    )


def test_head_of_another_kind_is_refused(written, tmp_path):
    # TF2 and TF1: model_info.json says which kind; Hugging Face: architectures.
    for fmt, source_says in [
        ("tf2", "model_info.json"),
        ("tf1", "model_info.json"),
        ("hf", "config.json architectures BertForSequenceClassification"),
    ]:
        folder = written["classifier", fmt][1]
        with pytest.raises(
            checkpoint_readers.CheckpointMismatchError,
            match=f"holds a classifier model \\({source_says}\\), not a token_classifier",
        ):
            checkpoints.restore_model(folder, build("token_classifier"))
        info = checkpoints.restore_model(folder, build("token_classifier"), reinit_head=True)
        assert info["fresh"] == ["classifier"]
    # Regression (one output) against multiple choice: the same [1, H] head.
    regression = build("classifier", num_labels=1)
    checkpoint_writers.write_original_directory(
        str(tmp_path / "stsb"), regression, written["encoder", "tf1"][1] + "/vocab.txt", True
    )
    with pytest.raises(checkpoint_readers.CheckpointMismatchError, match="not a multiple_choice"):
        checkpoints.restore_model(str(tmp_path / "stsb"), build("multiple_choice"))
    # Without model_info.json a TF1 output_weights head cannot say whose it is.
    os.remove(tmp_path / "stsb" / "model_info.json")
    assert checkpoints.restore_model(str(tmp_path / "stsb"), build("multiple_choice"))[
        "restored"
    ] == ["encoder", "scorer"]


def test_older_hugging_face_names_and_masked_lm_alone(written, tmp_path):
    """gamma/beta LayerNorm names, the masked-LM bias as `decoder.bias`, and a
    BertForMaskedLM directory (no next-sentence head)."""
    from safetensors.numpy import load_file, save_file

    source, folder = written["pretrainer", "hf"]
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    renamed = {}
    for key, value in tensors.items():
        if key.startswith("cls.seq_relationship"):
            continue
        key = (
            key.replace("LayerNorm.weight", "LayerNorm.gamma")
            .replace("LayerNorm.bias", "LayerNorm.beta")
            .replace("cls.predictions.bias", "cls.predictions.decoder.bias")
        )
        renamed[key] = value
    old = tmp_path / "old"
    old.mkdir()
    save_file(renamed, str(old / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads(open(os.path.join(folder, "config.json")).read())
    config["architectures"] = ["BertForMaskedLM"]
    (old / "config.json").write_text(json.dumps(config))
    target = build("pretrainer")
    info = checkpoints.restore_model(str(old), target)
    assert info["restored"] == ["encoder", "masked_lm"] and info["fresh"] == ["next_sentence"]
    np.testing.assert_array_equal(
        target.masked_lm.output_bias.numpy(), source.masked_lm.output_bias.numpy()
    )
    np.testing.assert_array_equal(
        target.encoder.embeddings.layer_norm.gamma.numpy(),
        source.encoder.embeddings.layer_norm.gamma.numpy(),
    )


def test_hugging_face_task_directory_without_pooler(written, tmp_path):
    """Hugging Face's token-classification and QA models have no pooler: models that
    do not use it restore the rest; a sequence classifier needs it."""
    from safetensors.numpy import load_file, save_file

    for kind, fresh in [("token_classifier", ["pooler"]), ("classifier", None)]:
        folder = written[kind, "hf"][1]
        no_pooler = tmp_path / kind
        no_pooler.mkdir()
        tensors = {
            k: v
            for k, v in load_file(os.path.join(folder, "model.safetensors")).items()
            if "pooler" not in k
        }
        save_file(tensors, str(no_pooler / "model.safetensors"), metadata={"format": "pt"})
        (no_pooler / "config.json").write_text(open(os.path.join(folder, "config.json")).read())
        if fresh is None:
            with pytest.raises(checkpoint_readers.CheckpointMismatchError, match="pooler"):
                checkpoints.restore_model(str(no_pooler), build(kind))
        else:
            info = checkpoints.restore_model(str(no_pooler), build(kind))
            assert info["restored"] == ["encoder", "classifier"] and info["fresh"] == fresh


def test_feature_based_tagger(written, vocab, tmp_path):
    source = randomized(build("feature_based"))
    checkpoint_writers.write_tf2_directory(str(tmp_path / "fb"), source, vocab, True)
    target = build("feature_based")
    info = checkpoints.restore_model(str(tmp_path / "fb"), target)
    assert info["restored"] == ["encoder", "combination", "bilstm_0", "bilstm_1", "classifier"]
    assert_same(source, target)
    # Its encoder serves a token classifier, whose head is not the tagger's.
    info = checkpoints.restore_model(str(tmp_path / "fb"), build("token_classifier"))
    assert info["fresh"] == ["classifier"]
    # From formats that cannot hold its head: the encoder alone.
    info = checkpoints.restore_model(written["token_classifier", "hf"][1], build("feature_based"))
    assert info["restored"] == ["encoder"] and "bilstm_0" in info["fresh"]
    with pytest.raises(ValueError, match="BiLSTM head has no TF1"):
        checkpoint_writers.write_original_checkpoint(
            str(tmp_path / "x" / "bert_model.ckpt"), source
        )


def test_run_output_dir_resolves_to_its_best_model(tmp_path):
    """A run's output_dir: the Trainer's checkpoints, and best/ as run_classifier keeps
    it. The best model is the one restored; the keys the Trainer writes are the ones
    restore_model reads."""
    from modeling import objectives, training

    model = randomized(build("classifier"), seed=1)
    trainer = training.Trainer(
        tf.distribute.get_strategy(),
        model,
        objectives.ClassificationObjective(),
        str(tmp_path),
        learning_rate=1e-3,
        num_train_steps=10,
    )
    best = {k: v.copy() for k, v in weights(model).items()}
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model, step=tf.Variable(3, dtype=tf.int64)),
        str(tmp_path / "best"),
        max_to_keep=1,
        checkpoint_name="best",
    )
    manager.save(checkpoint_number=3)
    randomized(model, seed=2)
    trainer.global_step.assign(5)
    trainer.save()
    json.dump({"model_kind": "classifier"}, open(tmp_path / "model_info.json", "w"))

    target = build("classifier")
    info = checkpoints.restore_model(str(tmp_path), target)
    assert info["path"] == str(tmp_path / "best" / "best-3")
    for key, value in weights(target).items():
        np.testing.assert_array_equal(value, best[key])
    # model_info.json of the run (beside best/) still says what the model is.
    with pytest.raises(checkpoint_readers.CheckpointMismatchError, match="holds a classifier"):
        checkpoints.restore_model(str(tmp_path), build("token_classifier"))
    # The latest checkpoint by prefix; config and vocab of a best/ prefix from the run.
    info = checkpoints.restore_model(str(tmp_path / "ckpt-5"), build("classifier"))
    assert info["restored"] == ["encoder", "classifier"]
    (tmp_path / "bert_config.json").write_text(CONFIG.to_json_string())
    config = model_files.resolve_config(None, info["path"].replace("ckpt-5", "best/best-3"))
    assert config == CONFIG


def test_inspect_checkpoint_says_kind_labels_and_case(written, vocab, tmp_path):
    info = checkpoints.inspect_checkpoint(written["token_classifier", "tf1"][1])
    assert (info["model_kind"], info["num_labels"], info["do_lower_case"]) == (
        "token_classifier",
        3,
        True,
    )
    assert info["candidates"] == ["classifier", "token_classifier"]
    os.remove(os.path.join(written["token_classifier", "tf1"][1], "model_info.json"))
    assert (
        checkpoints.inspect_checkpoint(written["token_classifier", "tf1"][1])["model_kind"] is None
    )  # output_weights: run_classifier's or NER code's.
    folder = str(tmp_path / "labelled")
    checkpoint_writers.write_hf_directory(
        folder, build("classifier"), vocab, False, ["x", "y", "z"]
    )
    info = checkpoints.inspect_checkpoint(folder)
    assert (info["model_kind"], info["labels"], info["do_lower_case"]) == (
        "classifier",
        ["x", "y", "z"],
        False,
    )
    assert checkpoints.inspect_checkpoint(written["span", "tf2"][1])["model_kind"] == "span"


# ------------------------------------------------------------------ writers


def test_writers_never_replace_a_users_folder(vocab, tmp_path):
    model = build("span")
    users = tmp_path / "users"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    for writer in WRITERS.values():
        with pytest.raises(FileExistsError, match="not an earlier conversion"):
            writer(str(users), model, vocab, True)
    assert os.listdir(users) == ["notes.txt"]

    out = str(tmp_path / "out")
    checkpoint_writers.write_hf_directory(out, model, vocab, True)
    assert oct(os.stat(out).st_mode & 0o777) == oct(0o777 & ~_umask())
    with pytest.raises(
        FileExistsError, match="earlier conversion to the Hugging Face format; pass --overwrite"
    ):
        checkpoint_writers.write_hf_directory(out, model, vocab, True)
    with pytest.raises(FileExistsError, match="not an earlier conversion"):  # Another writer.
        checkpoint_writers.write_tf2_directory(out, model, vocab, True, overwrite=True)
    checkpoint_writers.write_hf_directory(out, build("span"), vocab, True, overwrite=True)
    (tmp_path / "out" / "extra.txt").write_text("added by the user")
    with pytest.raises(FileExistsError, match="not an earlier conversion"):
        checkpoint_writers.write_hf_directory(out, model, vocab, True, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["out", "users"]  # No temporary left behind.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert checkpoint_writers.write_tf2_directory(str(empty), model, vocab, True) == str(
        empty / "ckpt-0"
    )


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_hugging_face_pretraining_weights_carry_the_tied_decoder():
    model = randomized(build("pretrainer"))
    tensors = hf_tensors(model)
    np.testing.assert_array_equal(
        tensors["cls.predictions.decoder.weight"], model.encoder.word_embeddings.numpy()
    )
    assert tensors["cls.seq_relationship.weight"].shape == (2, 32)
    assert "cls.predictions.bias" in tensors and "cls.seq_relationship.bias" in tensors
