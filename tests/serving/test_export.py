"""Tests of serving/ (encoder, preprocessing, classifier exports), modeling/hub.py and
export_tfhub.py on a tiny random encoder.

A tiny random encoder is exported once per module and then read back the ways TF Hub
users read it: `hub.KerasLayer` in a tf_keras model (fine-tuned), `hub.load`,
`keras.layers.TFSMLayer`, our Keras 3 `HubEncoder` (fine-tuned with the project's
Trainer), `saved_model_cli`. The preprocessing model is checked against the Python
tokenizer and packing on the bundled MRPC text, the classifier export against the
in-memory model. A slow test runs export_tfhub.py's main (in this process) on a TF1
checkpoint of the tiny pre-trainer. Atomic export writing is in test_atomic_export.py,
export_tfhub.py on the real checkpoint in test_export_tfhub.py.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops the preprocessing model needs)

from data_prep.text import tokenization
from modeling import checkpoint_writers, hub, models, training
from modeling.config import BertConfig
from modeling.encoder import INPUT_KEYS, BertEncoder
from modeling.objectives import ClassificationObjective
from serving import encoder as serving_encoder
from serving import exports as serving_exports, preprocessing
from tests.conftest import tiny_config
from tests.helpers.export_helpers import (
    ATOL,
    SeenLength,
    assert_encoder_outputs_equal,
    main_in_this_process,
    mrpc_pairs,
    python_pack,
    seen_length,
)


# Odd sizes catch transposes; the real vocabulary so that text tokenizes into range; a
# wide initializer so that the pooled output depends clearly on the input (at 0.02 it
# varies by 1e-4 between inputs, below what a parity test could see).
TINY = tiny_config(initializer_range=0.2)


def random_inputs(batch, seq, seed=0, vocab=TINY["vocab_size"]):
    """int32 encoder inputs with ragged lengths (row 0 full) and two segments."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, seq + 1, size=batch)
    lengths[0] = seq
    mask = (np.arange(seq)[None] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(1, vocab, size=(batch, seq)).astype(np.int32) * mask
    types = ((np.arange(seq)[None] >= lengths[:, None] // 2) & (mask == 1)).astype(np.int32)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


@pytest.fixture(scope="module")
def config():
    return BertConfig(**TINY)


@pytest.fixture(scope="module")
def pretrainer(config):
    keras.utils.set_random_seed(7)
    model = models.BertPretrainer(BertEncoder(config), config)
    # Non-trivial values where the initializers give constants.
    rng = np.random.default_rng(1)
    model.masked_lm.output_bias.assign(rng.normal(size=[config.vocab_size]).astype("f4"))
    model.encoder.embeddings.layer_norm.beta.assign(rng.normal(size=[32]).astype("f4"))
    return model


@pytest.fixture(scope="module")
def encoder(pretrainer):
    return pretrainer.encoder


@pytest.fixture(scope="module")
def encoder_path(pretrainer, vocab_file, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("hub") / "encoder")
    assert (
        serving_encoder.export_encoder(
            pretrainer.encoder, path, vocab_file, True, masked_lm=pretrainer.masked_lm
        )
        == path
    )
    return path


@pytest.fixture(scope="module")
def loaded_encoder(encoder_path):
    """The encoder export as `hub.load` reads it, loaded once: the tests that share it
    only call it and read it (fine-tuning tests load their own copy)."""
    return tf.saved_model.load(encoder_path)


# ---------------------------------------------------------------------------------
# The encoder SavedModel, read back by hub.load, TFSMLayer, saved_model_cli.


def test_export_holds_only_standard_ops(encoder_path):
    # Training fuses element-wise chains with XLA; an export must not (TF Serving,
    # TFLite and hub users without XLA). The encoder was built and called before export.
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(encoder_path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    functions = proto.meta_graphs[0].graph_def.library.function
    assert len(functions) > 5
    compiled = [
        f.signature.name
        for f in functions
        if f.attr["_XlaMustCompile"].b or "XlaLaunch" in str(f.node_def)
    ]
    assert not compiled


def test_hub_load_matches_in_memory_encoder(loaded_encoder, encoder, vocab_file):
    loaded = loaded_encoder
    for batch, seq in ((2, 5), (3, 64)):
        inputs = random_inputs(batch, seq, seed=seq)
        got, want = loaded(inputs, training=False), encoder(inputs, training=False)
        assert set(got) == set(serving_encoder.ENCODER_OUTPUT_KEYS)
        assert_encoder_outputs_equal(got, want, num_layers=2)
        np.testing.assert_array_equal(got["default"], got["pooled_output"])
        assert got["pooled_output"].dtype == tf.float32
    # Dropout is on at training=True only.
    inputs = random_inputs(2, 9)
    first, second = (loaded(inputs, training=True)["pooled_output"] for _ in range(2))
    assert np.abs(first - encoder(inputs)["pooled_output"]).max() > 1e-3
    assert np.abs(first - second).max() > 1e-3
    # Reusable SavedModel attributes: __call__ traced once per training value.
    assert sorted(
        f.structured_input_signature[0][1] for f in loaded.__call__.concrete_functions
    ) == [False, True]
    assert len(loaded.trainable_variables) == len(encoder.trainable_variables) == 39
    assert len(loaded.variables) == len(encoder.variables)
    assert list(loaded.regularization_losses) == []
    with open(loaded.vocab_file.asset_path.numpy(), "rb") as f, open(vocab_file, "rb") as g:
        assert f.read() == g.read()
    assert bool(loaded.do_lower_case.numpy())
    assert not loaded.do_lower_case.trainable
    config_file = loaded.bert_config_file.asset_path.numpy().decode()
    assert BertConfig.from_json_file(config_file) == encoder.config
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_position_embeddings"):
        loaded(random_inputs(1, 65), training=False)


def test_mlm_subobject_matches_pretrainer(loaded_encoder, pretrainer):
    loaded = loaded_encoder
    inputs = random_inputs(3, 11, seed=3)
    inputs["masked_lm_positions"] = np.array([[1, 2, 0], [0, 3, 4], [5, 1, 1]], np.int32)
    got = loaded.mlm(inputs, training=False)
    want = pretrainer(inputs, training=False)["mlm_logits"]
    assert got["mlm_logits"].shape == (3, 3, TINY["vocab_size"])
    np.testing.assert_allclose(got["mlm_logits"], want, atol=1e-4)
    assert_encoder_outputs_equal(got, pretrainer.encoder(inputs), num_layers=2)
    # The head's 5 variables on top of the encoder's 39.
    assert len(loaded.mlm.trainable_variables) == 44


def test_serving_signatures(loaded_encoder, encoder, pretrainer):
    loaded = loaded_encoder
    assert set(loaded.signatures) == {"serving_default", "mlm"}
    inputs = random_inputs(2, 6, seed=4)
    got = loaded.signatures["serving_default"](**{k: tf.constant(v) for k, v in inputs.items()})
    want = encoder(inputs)
    assert set(got) == {
        "sequence_output",
        "pooled_output",
        "default",
        "encoder_outputs_0",
        "encoder_outputs_1",
    }
    np.testing.assert_allclose(got["encoder_outputs_1"], want["sequence_output"], atol=ATOL)
    np.testing.assert_allclose(got["default"], want["pooled_output"], atol=ATOL)
    inputs["masked_lm_positions"] = np.array([[1], [2]], np.int32)
    got = loaded.signatures["mlm"](**{k: tf.constant(v) for k, v in inputs.items()})
    np.testing.assert_allclose(got["mlm_logits"], pretrainer(inputs)["mlm_logits"], atol=1e-4)


def test_keras3_tfsm_layer_matches(encoder_path, encoder):
    layer = keras.layers.TFSMLayer(encoder_path, call_endpoint="__call__")
    inputs = random_inputs(3, 8, seed=5)
    assert_encoder_outputs_equal(layer(inputs), encoder(inputs), num_layers=2)


@pytest.mark.slow
def test_saved_model_cli_lists_signatures(encoder_path):
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    result = subprocess.run(
        [cli, "show", "--all", "--dir", encoder_path],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    for text in (
        "signature_def['serving_default']",
        "signature_def['mlm']",
        "inputs['input_word_ids']",
        "inputs['masked_lm_positions']",
        "outputs['pooled_output']",
        "outputs['encoder_outputs_1']",
        "outputs['mlm_logits']",
        "Function Name: '__call__'",
    ):
        assert text in out, text


# ---------------------------------------------------------------------------------
# Fine-tuning through hub.KerasLayer (tf_keras) and HubEncoder (Keras 3).


def test_tf_keras_hub_layer_matches(encoder_path, encoder):
    hub_lib = pytest.importorskip("tensorflow_hub")
    layer = hub_lib.KerasLayer(encoder_path, trainable=True)
    inputs = random_inputs(4, 10, seed=6)
    assert_encoder_outputs_equal(layer(inputs), encoder(inputs), num_layers=2)
    assert_encoder_outputs_equal(layer(inputs, training=False), encoder(inputs), num_layers=2)
    assert len(layer.trainable_weights) == 39 and len(layer.non_trainable_weights) == 7


@pytest.mark.slow
def test_tf_keras_hub_layer_fine_tunes(encoder_path, encoder):
    hub_lib = pytest.importorskip("tensorflow_hub")
    tf_keras = pytest.importorskip("tf_keras")
    layer = hub_lib.KerasLayer(encoder_path, trainable=True)
    inputs = random_inputs(8, 10, seed=6)

    tf_keras.utils.set_random_seed(0)
    symbolic = {k: tf_keras.Input(shape=(None,), dtype=tf.int32, name=k) for k in inputs}
    logits = tf_keras.layers.Dense(2)(layer(symbolic)["pooled_output"])
    model = tf_keras.Model(symbolic, logits)
    assert len(layer.trainable_weights) == 39
    model.compile(
        optimizer=tf_keras.optimizers.Adam(3e-3),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    labels = np.array([0, 1] * 4)
    word_embeddings = [w for w in layer.trainable_weights if "word_embeddings" in w.name][0]
    before_weights = word_embeddings.numpy().copy()
    before = model.evaluate(inputs, labels, verbose=0)
    model.fit(inputs, labels, epochs=8, batch_size=8, verbose=0)
    after = model.evaluate(inputs, labels, verbose=0)
    assert after < before - 0.1, (before, after)
    assert np.abs(word_embeddings.numpy() - before_weights).max() > 1e-4
    # The fine-tuned encoder is what the layer computes with.
    assert np.abs(layer(inputs)["pooled_output"] - encoder(inputs)["pooled_output"]).max() > 1e-4


def test_hub_encoder_matches_and_carries_metadata(encoder_path, encoder, vocab_file):
    layer = hub.HubEncoder(encoder_path)
    assert layer.config == encoder.config
    assert layer.do_lower_case is True
    assert os.path.basename(layer.vocab_file) == os.path.basename(vocab_file)
    inputs = random_inputs(3, 12, seed=8)
    inputs["label_ids"] = np.zeros([3], np.int32)  # Extra keys are ignored.
    assert_encoder_outputs_equal(layer(inputs), encoder(inputs), num_layers=2)
    assert len(layer.trainable_variables) == 39
    assert all("/" not in v.name for v in layer.variables)
    assert sum("LayerNorm" in v.path for v in layer.trainable_variables) == 10
    frozen = hub.HubEncoder(encoder_path, trainable=False)
    assert not frozen.trainable_variables and len(frozen.non_trainable_variables) == 46


def test_hub_encoder_fine_tunes_in_keras3_model(encoder_path, encoder):
    keras.utils.set_random_seed(0)
    layer = hub.HubEncoder(encoder_path)
    model = models.BertClassifier(layer, layer.config, 2)
    inputs = random_inputs(8, 10, seed=10)
    labels = np.array([0, 1] * 4)
    variables = model.trainable_variables
    assert len(variables) == 39 + 2
    optimizer = keras.optimizers.Adam(3e-3)

    def loss_fn(training):
        logits = model(inputs, training=training)["logits"]
        return tf.reduce_mean(
            keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        )

    before = float(loss_fn(False))
    for _ in range(8):
        with tf.GradientTape() as tape:
            loss = loss_fn(True)
        grads = tape.gradient(loss, variables)
        assert all(g is not None for g in grads)
        optimizer.apply_gradients(zip(grads, variables))
    after = float(loss_fn(False))
    assert after < before - 0.1, (before, after)
    # The updates reach the weights the SavedModel's functions compute with.
    assert np.abs(layer(inputs)["pooled_output"] - encoder(inputs)["pooled_output"]).max() > 1e-3


def test_inferred_config_for_a_foreign_encoder(loaded_encoder):
    config = hub.read_config(loaded_encoder).config
    assert (
        config.hidden_size,
        config.num_hidden_layers,
        config.vocab_size,
        config.type_vocab_size,
        config.max_position_embeddings,
    ) == (32, 2, 30522, 2, 64)


def test_hub_encoder_errors(tmp_path, preprocess_path):
    with pytest.raises(FileNotFoundError, match="not a folder"):
        hub.HubEncoder(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="takes raw text .* not an encoder"):
        hub.HubEncoder(preprocess_path)


def classifier_features(inputs, labels):
    return dict({k: tf.constant(v) for k, v in inputs.items()}, label_ids=tf.constant(labels))


@pytest.mark.slow
def test_hub_encoder_fine_tunes_with_trainer_and_resumes(encoder_path, encoder, tmp_path):
    """The --hub_module_url path: HubEncoder in a BertClassifier under the Trainer."""
    inputs = random_inputs(8, 10, seed=9)
    labels = np.array([0, 1] * 4, np.int32)
    features = classifier_features(inputs, labels)

    def dataset_fn(context=None):
        return tf.data.Dataset.from_tensors(features).repeat()

    def build(output_dir):
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
        with strategy.scope():
            layer = hub.HubEncoder(encoder_path)
            model = models.BertClassifier(layer, layer.config, 2)
        trainer = training.Trainer(
            strategy,
            model,
            ClassificationObjective(),
            output_dir,
            learning_rate=3e-3,
            num_train_steps=6,
            steps_per_loop=3,
            save_checkpoints_steps=6,
        )
        return layer, model, trainer

    keras.utils.set_random_seed(0)
    output_dir = str(tmp_path / "run")
    layer, model, trainer = build(output_dir)
    assert not trainer.restore_or_initialize()
    eval_data = tf.data.Dataset.from_tensors(features)
    before = trainer.evaluate(eval_data)["eval_loss"]
    trainer.train(dataset_fn, 8)
    after = trainer.evaluate(eval_data)["eval_loss"]
    assert after < before - 0.1, (before, after)
    tuned = layer(inputs)["pooled_output"].numpy()
    assert np.abs(tuned - encoder(inputs)["pooled_output"]).max() > 1e-4

    # A restarted run restores the fine-tuned hub weights from output_dir.
    layer2, _, trainer2 = build(output_dir)
    assert trainer2.restore_or_initialize()
    np.testing.assert_allclose(layer2(inputs)["pooled_output"], tuned, atol=ATOL)


# ---------------------------------------------------------------------------------
# The preprocessing SavedModel.


@pytest.fixture(scope="module")
def preprocess_path(vocab_file, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("hub") / "preprocess")
    return preprocessing.export_preprocessing(path, vocab_file, do_lower_case=True, seq_length=24)


@pytest.fixture(scope="module")
def preprocessor(preprocess_path):
    """The preprocessing export, loaded once (the tests only call it)."""
    return tf.saved_model.load(preprocess_path)


@pytest.fixture(scope="module")
def python_tokenizer(vocab_file):
    return tokenization.FullTokenizer(vocab_file, do_lower_case=True)


def test_preprocessing_tokenize_matches_python_tokenizer(
    preprocessor, python_tokenizer, sample_data
):
    sentences = [s for pair in mrpc_pairs(sample_data) for s in pair] + ["", "Héllo, wörld!"]
    words = preprocessor.tokenize(tf.constant(sentences))
    assert words.shape.rank == 3 and words.dtype == tf.int32  # [B, (words), (pieces)]
    got = [[piece for word in row for piece in word] for row in words.to_list()]
    want = [python_tokenizer.convert_tokens_to_ids(python_tokenizer.tokenize(s)) for s in sentences]
    assert len(sentences) == 818 and got == want
    basic = tokenization.BasicTokenizer(do_lower_case=True)
    assert [len(row) for row in words.to_list()] == [len(basic.tokenize(s)) for s in sentences]
    assert bool(preprocessor.do_lower_case.numpy())


def test_preprocessing_call_and_pack_match_python_packing(
    preprocessor, python_tokenizer, sample_data
):
    pairs = mrpc_pairs(sample_data, count=40)
    texts_a = tf.constant([a for a, _ in pairs])
    texts_b = tf.constant([b for _, b in pairs])
    # __call__: one segment at the exported seq_length (24: many sentences truncated).
    want = python_pack(python_tokenizer, [(a, None) for a, _ in pairs], 24)
    assert (want["input_mask"].sum(1) == 24).sum() >= 10
    got = preprocessor(texts_a)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    # The same inside tf.data.
    batches = list(tf.data.Dataset.from_tensor_slices(texts_a).batch(16).map(preprocessor))
    np.testing.assert_array_equal(
        np.concatenate([b["input_word_ids"] for b in batches]), want["input_word_ids"]
    )
    # bert_pack_inputs: one and two segments, truncated, rank-2 and rank-3 segments,
    # seq_length as a Python int and as a tensor.
    words_a, words_b = preprocessor.tokenize(texts_a), preprocessor.tokenize(texts_b)
    flat_a, flat_b = words_a.merge_dims(1, 2), words_b.merge_dims(1, 2)
    for seq_length, segments, examples in (
        (24, [words_a, words_b], pairs),
        (tf.constant(50), [flat_a, words_b], pairs),
        (30, [flat_a, flat_b], pairs),
        (9, [flat_a], [(a, None) for a, _ in pairs]),
        (tf.constant(128), [words_a], [(a, None) for a, _ in pairs]),
    ):
        want = python_pack(python_tokenizer, examples, int(seq_length))
        got = preprocessor.bert_pack_inputs(segments, seq_length=seq_length)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{key} {seq_length}")
    with pytest.raises(tf.errors.InvalidArgumentError, match="seq_length is too short"):
        preprocessor.bert_pack_inputs([words_a, words_b], seq_length=2)
    # Without seq_length: the exported default.
    got = preprocessor.bert_pack_inputs([words_a, words_b])
    np.testing.assert_array_equal(
        got["input_word_ids"], python_pack(python_tokenizer, pairs, 24)["input_word_ids"]
    )


@pytest.mark.slow
def test_preprocessing_in_tf_data_feeds_the_encoder(
    preprocessor, loaded_encoder, sample_data, python_tokenizer, encoder
):
    loaded = loaded_encoder
    pairs = mrpc_pairs(sample_data, count=12)

    def pack(a, b):
        segments = [preprocessor.tokenize(a), preprocessor.tokenize(b)]
        return preprocessor.bert_pack_inputs(segments, seq_length=32)

    dataset = (
        tf.data.Dataset.from_tensor_slices(([a for a, _ in pairs], [b for _, b in pairs]))
        .batch(5)
        .map(pack)
    )
    batches = list(dataset)
    assert [int(b["input_word_ids"].shape[0]) for b in batches] == [5, 5, 2]
    got = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    want = python_pack(python_tokenizer, pairs, 32)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])
    outputs = dataset.map(lambda x: loaded(x, training=False)["pooled_output"])
    np.testing.assert_allclose(
        np.concatenate(list(outputs)), encoder(want)["pooled_output"], atol=ATOL
    )


# ---------------------------------------------------------------------------------
# Task exports.


def centered_classifier(encoder, config, inputs, num_labels, seed=2):
    """A BertClassifier whose head is centred on `inputs` (the pooled outputs share a
    large common part), so that the most probable label differs between them."""
    model = models.BertClassifier(encoder, config, num_labels=num_labels)
    kernel = np.random.default_rng(seed).normal(scale=3.0, size=[32, num_labels])
    mean = encoder(inputs)["pooled_output"].numpy().mean(0)
    model.classifier.dense.kernel.assign(kernel.astype("f4"))
    model.classifier.dense.bias.assign((-mean @ kernel).astype("f4"))
    return model


@pytest.mark.slow
def test_classifier_export_answers_raw_text(
    encoder, config, vocab_file, python_tokenizer, sample_data, tmp_path
):
    """The export answers as the in-memory model on the offline packing, each request
    batch cut to its longest input; the build padded to seq_length answers the same."""
    pairs = mrpc_pairs(sample_data, count=10) + [("A sentence alone.", "")]
    packed = python_pack(python_tokenizer, pairs, 32)
    classifier = centered_classifier(encoder, config, packed, 3)
    labels = ["not_paraphrase", "paraphrase", "other"]
    loaded, padded = (
        tf.saved_model.load(
            serving_exports.export_task_model(
                SeenLength(classifier),
                str(tmp_path / name),
                vocab_file,
                True,
                seq_length=32,
                kind="classifier",
                labels=labels,
                pad_to_max_seq_length=name == "padded",
            )
        )
        for name in ("cut", "padded")
    )
    assert set(loaded.signatures) == {"serving_default", "serving_text_a"}
    assert not loaded.pad_to_max_seq_length.numpy() and padded.pad_to_max_seq_length.numpy()
    text = {
        "text_a": tf.constant([a for a, _ in pairs]),
        "text_b": tf.constant([b for _, b in pairs]),
    }
    got = loaded.signatures["serving_default"](**text)
    assert packed["input_mask"].sum(1).max() == 32 and packed["input_type_ids"][-1].max() == 0
    want = tf.nn.softmax(classifier(packed, training=False)["logits"]).numpy()
    np.testing.assert_allclose(got["probabilities"], want, atol=1e-5)
    assert [s.decode() for s in got["labels"].numpy()] == [labels[i] for i in want.argmax(1)]
    assert len(set(want.argmax(1))) > 1  # The test tells labels apart.
    full = padded.signatures["serving_default"](**text)
    np.testing.assert_allclose(full["probabilities"], got["probabilities"], atol=1e-5)
    assert seen_length(loaded) == seen_length(padded) == 32  # this batch needs 32

    # A batch of short texts: the cut build computes its longest input alone.
    short = [a for a, _ in pairs[:2]] + ["Yes.", ""]
    want_packed = python_pack(python_tokenizer, [(a, None) for a in short], 32)
    want = tf.nn.softmax(classifier(want_packed)["logits"]).numpy()
    for export in (loaded, padded):
        single = export.signatures["serving_text_a"](text_a=tf.constant(short))
        np.testing.assert_allclose(single["probabilities"], want, atol=1e-5)
    assert seen_length(padded) == 32
    assert seen_length(loaded) == want_packed["input_mask"].sum(1).max() < 32
    loaded.signatures["serving_text_a"](text_a=tf.constant(["Yes."]))
    assert seen_length(loaded) == 4  # [CLS] yes . [SEP]
    assert [s.decode() for s in loaded.labels.numpy()] == labels


@pytest.mark.slow
def test_regression_export_and_errors(encoder, config, vocab_file, python_tokenizer, tmp_path):
    regressor = models.BertClassifier(encoder, config, num_labels=1)
    path = serving_exports.export_task_model(
        regressor, str(tmp_path / "reg"), vocab_file, True, seq_length=16, labels=None
    )
    texts = ["The cat sat.", "A dog ran away from the house"]
    got = tf.saved_model.load(path).signatures["serving_text_a"](text_a=tf.constant(texts))
    want = regressor(python_pack(python_tokenizer, [(t, None) for t in texts], 16))
    np.testing.assert_allclose(got["predictions"], want["logits"][:, 0], atol=1e-6)
    with pytest.raises(ValueError, match="2 labels"):
        serving_exports.export_task_model(
            models.BertClassifier(encoder, config, 3),
            str(tmp_path / "x"),
            vocab_file,
            True,
            16,
            labels=["a", "b"],
        )
    with pytest.raises(ValueError, match="unknown export kind 'swag'"):
        serving_exports.export_task_model(
            regressor, str(tmp_path / "x"), vocab_file, True, 16, kind="swag"
        )
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------------------------
# export_tfhub.py on a TF1 checkpoint (slow).


@pytest.mark.slow
def test_export_tfhub_tf1_checkpoint_with_mlm(pretrainer, config, vocab_file, tmp_path):
    """export_tfhub.py --export_type=encoder_with_mlm from an original-layout TF1
    checkpoint (bert_model.ckpt + bert_config.json) reproduces the pre-trainer (its
    main, flags parsed from the command line, in this process)."""
    import export_tfhub

    checkpoint_dir = tmp_path / "tf1"
    checkpoint_dir.mkdir()
    prefix = checkpoint_writers.write_original_checkpoint(
        str(checkpoint_dir / "bert_model.ckpt"), pretrainer.encoder, pretrainer
    )
    config.to_json_file(str(checkpoint_dir / "bert_config.json"))
    export_path = tmp_path / "encoder_mlm"
    main_in_this_process(
        export_tfhub,
        [
            f"--init_checkpoint={prefix}",
            f"--vocab_file={vocab_file}",
            "--export_type=encoder_with_mlm",
            f"--export_path={export_path}",
        ],
    )
    loaded = tf.saved_model.load(str(export_path))
    inputs = random_inputs(2, 13, seed=12)
    inputs["masked_lm_positions"] = np.array([[0, 5, 12], [1, 2, 3]], np.int32)
    got = loaded.mlm(inputs, training=False)
    np.testing.assert_allclose(got["mlm_logits"], pretrainer(inputs)["mlm_logits"], atol=1e-4)
    encoder_inputs = {k: inputs[k] for k in INPUT_KEYS}
    assert_encoder_outputs_equal(loaded(encoder_inputs), pretrainer.encoder(inputs), num_layers=2)
