"""TF Hub encoders as users have them (modeling/hub.py): official-format encoders (made
by the TF Model Garden: a `vocab_file` asset, a `do_lower_case` variable, no
bert_config.json) and tfhub.dev / Kaggle handles resolved through tensorflow_hub's own
cache, offline.

tf-models-official does not install beside TensorFlow 2.21 (it pins tensorflow~=2.20), so
`save_official_encoder` builds the official layout here: a reusable SavedModel whose
variables carry the Model Garden's names and shapes (attention kernels [H, N, H/N],
`word_embeddings/embeddings`, `type_embeddings/embeddings`,
`position_embedding/embeddings`, `transformer/layer_N/...`, `pooler_transform`), whose
__call__ computes BERT from them, and, optionally, the Keras metadata file in which
Keras-saved official encoders record the encoder's config (class `Text>BertEncoder`,
`inner_activation: "Text>gelu"`...). The names, shapes and metadata keys were checked
against an encoder written by tf-models-official 2.20's `export_tfhub_lib` (run once
outside the suite, where HubEncoder read its config completely and our BertEncoder with
that config and its weights matched its outputs to 1e-6).

Shape legend: B batch, S sequence, H hidden, N heads, D head size, I intermediate.
"""

import hashlib
import json
import os
import pathlib
import shutil
import urllib.request

import keras
import numpy as np
import pytest
import tensorflow as tf

from common.errors import UserError
from modeling import hub, models
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from tests.conftest import tiny_config

# Hidden 32 with 4 heads: the old inference (hidden / 64) said 1. A wide initializer, so
# that outputs depend clearly on every weight.
CONFIG = BertConfig(
    **tiny_config(
        hidden_dropout_prob=0.05, attention_probs_dropout_prob=0.15, initializer_range=0.2
    )
)
TFHUB_HANDLE = "https://tfhub.dev/tensorflow/bert_en_uncased_L-12_H-768_A-12/4"
KAGGLE_HANDLE = (
    "https://www.kaggle.com/models/tensorflow/bert/tensorFlow2/en-uncased-l-12-h-768-a-12/4"
)


def _official_weights(encoder: BertEncoder) -> dict[str, np.ndarray]:
    """Our encoder's weights under the Model Garden's names and shapes."""
    c = encoder.config
    n, d = c.num_attention_heads, c.head_size
    e = encoder.embeddings
    weights = {
        "word_embeddings/embeddings": e.word_embeddings,
        "type_embeddings/embeddings": e.token_type_embeddings,
        "position_embedding/embeddings": e.position_embeddings,
        "embeddings/layer_norm/gamma": e.layer_norm.gamma,
        "embeddings/layer_norm/beta": e.layer_norm.beta,
        "pooler_transform/kernel": encoder.pooler.kernel,
        "pooler_transform/bias": encoder.pooler.bias,
    }
    weights = {k: v.numpy() for k, v in weights.items()}
    for i, layer in enumerate(encoder.encoder_layers):
        p = f"transformer/layer_{i}/"
        for part in ("query", "key", "value"):
            dense = getattr(layer.attention_self, part)
            weights[p + f"self_attention/{part}/kernel"] = dense.kernel.numpy().reshape(
                c.hidden_size, n, d
            )  # [H, N, D]
            weights[p + f"self_attention/{part}/bias"] = dense.bias.numpy().reshape(n, d)
        output = layer.attention_output
        weights[p + "self_attention/attention_output/kernel"] = output.dense.kernel.numpy().reshape(
            n, d, c.hidden_size
        )  # [N, D, H]
        weights[p + "self_attention/attention_output/bias"] = output.dense.bias.numpy()
        weights[p + "self_attention_layer_norm/gamma"] = output.layer_norm.gamma.numpy()
        weights[p + "self_attention_layer_norm/beta"] = output.layer_norm.beta.numpy()
        weights[p + "intermediate/kernel"] = layer.intermediate.kernel.numpy()  # [H, I]
        weights[p + "intermediate/bias"] = layer.intermediate.bias.numpy()
        weights[p + "output/kernel"] = layer.output_block.dense.kernel.numpy()  # [I, H]
        weights[p + "output/bias"] = layer.output_block.dense.bias.numpy()
        weights[p + "output_layer_norm/gamma"] = layer.output_block.layer_norm.gamma.numpy()
        weights[p + "output_layer_norm/beta"] = layer.output_block.layer_norm.beta.numpy()
    return weights


def _layer_norm(x, w, prefix):
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(variance + 1e-12) * w[prefix + "gamma"] + w[prefix + "beta"]


def _official_call(w: dict, num_layers: int, inputs: dict) -> dict:
    """BERT on the official variables (post-LayerNorm, tanh GELU, einsum attention)."""
    ids, types = inputs["input_word_ids"], inputs["input_type_ids"]
    mask = tf.cast(inputs["input_mask"], tf.float32)
    x = (
        tf.gather(w["word_embeddings/embeddings"], ids)
        + tf.gather(w["type_embeddings/embeddings"], types)
        + w["position_embedding/embeddings"][: tf.shape(ids)[1]]
    )
    x = _layer_norm(x, w, "embeddings/layer_norm/")
    bias = (1.0 - mask[:, tf.newaxis, tf.newaxis, :]) * -10000.0  # [B, 1, 1, S]
    outputs = []
    for i in range(num_layers):
        p = f"transformer/layer_{i}/self_attention"
        q, k, v = (
            tf.einsum("bsh,hnd->bsnd", x, w[f"{p}/{part}/kernel"]) + w[f"{p}/{part}/bias"]
            for part in ("query", "key", "value")
        )
        scale = tf.math.rsqrt(tf.cast(tf.shape(q)[-1], tf.float32))
        probs = tf.nn.softmax(tf.einsum("bsnd,btnd->bnst", q, k) * scale + bias)
        context = tf.einsum("bnst,btnd->bsnd", probs, v)
        attention = (
            tf.einsum("bsnd,ndh->bsh", context, w[f"{p}/attention_output/kernel"])
            + w[f"{p}/attention_output/bias"]
        )
        x = _layer_norm(x + attention, w, f"{p}_layer_norm/")
        p = f"transformer/layer_{i}/"
        inner = tf.nn.gelu(
            x @ w[p + "intermediate/kernel"] + w[p + "intermediate/bias"], approximate=True
        )
        x = _layer_norm(
            x + inner @ w[p + "output/kernel"] + w[p + "output/bias"], w, p + "output_layer_norm/"
        )
        outputs.append(x)
    pooled = tf.tanh(x[:, 0] @ w["pooler_transform/kernel"] + w["pooler_transform/bias"])
    return {
        "sequence_output": x,
        "pooled_output": pooled,
        "default": pooled,
        "encoder_outputs": outputs,
    }


def _write_keras_metadata(path: str, config: BertConfig) -> None:
    """keras_metadata.pb with the encoder node as a Keras-saved official encoder has it."""
    from tf_keras.protobuf import saved_metadata_pb2

    saved = saved_metadata_pb2.SavedMetadata()
    saved.nodes.add(
        node_id=1,
        node_path="root.layer_with_weights-0",
        identifier="_tf_keras_network",
        metadata=json.dumps(
            {
                "name": "bert_encoder",
                "class_name": "Text>BertEncoder",
                "config": {
                    "vocab_size": config.vocab_size,
                    "hidden_size": config.hidden_size,
                    "num_layers": config.num_hidden_layers,
                    "num_attention_heads": config.num_attention_heads,
                    "max_sequence_length": config.max_position_embeddings,
                    "type_vocab_size": config.type_vocab_size,
                    "inner_dim": config.intermediate_size,
                    "inner_activation": "Text>gelu",
                    "output_dropout": config.hidden_dropout_prob,
                    "attention_dropout": config.attention_probs_dropout_prob,
                    "initializer": {
                        "class_name": "TruncatedNormal",
                        "config": {"mean": 0.0, "stddev": config.initializer_range, "seed": None},
                    },
                },
            }
        ),
    )
    with open(os.path.join(path, "keras_metadata.pb"), "wb") as f:
        f.write(saved.SerializeToString())


class _ReusableModule(tf.Module):
    # Class attributes shadow tf.Module's computed properties, so that the lists can be
    # set and saved, as reusable SavedModels have them.
    variables = None
    trainable_variables = None
    regularization_losses = None


def save_official_encoder(
    path: str,
    encoder: BertEncoder,
    vocab_file: str,
    do_lower_case: bool,
    with_keras_metadata: bool = True,
) -> str:
    """Saves `encoder`'s weights as an official-format TF Hub BERT encoder."""
    module = _ReusableModule()
    variables = {
        name: tf.Variable(value, name=name) for name, value in _official_weights(encoder).items()
    }
    num_layers = encoder.config.num_hidden_layers

    @tf.function
    def call(inputs, training=False):
        del training  # No dropout: the tests compare outputs.
        return _official_call(variables, num_layers, inputs)

    specs = {
        k: tf.TensorSpec([None, None], tf.int32, name=k)
        for k in ("input_word_ids", "input_mask", "input_type_ids")
    }
    for training in (False, True):
        call.get_concrete_function(specs, training=training)
    module.__call__ = call
    module.variables = list(variables.values())
    module.trainable_variables = list(variables.values())
    module.regularization_losses = []
    module.vocab_file = tf.saved_model.Asset(vocab_file)
    module.do_lower_case = tf.Variable(do_lower_case, trainable=False)  # unnamed
    tf.saved_model.save(module, path)
    if with_keras_metadata:
        _write_keras_metadata(path, encoder.config)
    return path


@pytest.fixture(scope="module")
def encoder():
    keras.utils.set_random_seed(4)
    return BertEncoder(CONFIG)


@pytest.fixture(scope="module")
def official_dir(encoder, vocab_file, tmp_path_factory):
    return save_official_encoder(
        str(tmp_path_factory.mktemp("official") / "bert"), encoder, vocab_file, do_lower_case=True
    )


def _inputs(batch=3, seq=12, seed=0):
    rng = np.random.default_rng(seed)
    mask = (np.arange(seq)[None] < rng.integers(3, seq + 1, size=[batch, 1])).astype("i4")
    return {
        "input_word_ids": rng.integers(1, CONFIG.vocab_size, [batch, seq]).astype("i4") * mask,
        "input_mask": mask,
        "input_type_ids": (np.arange(seq)[None] >= seq // 2).astype("i4") * mask,
    }


def _assert_outputs_equal(got, want, mask):
    keep = mask[..., None].astype(bool)
    np.testing.assert_allclose(
        np.where(keep, got["sequence_output"], 0),
        np.where(keep, want["sequence_output"], 0),
        atol=2e-5,
    )
    np.testing.assert_allclose(got["pooled_output"], want["pooled_output"], atol=2e-5)


def test_official_encoder_config_vocab_and_case_are_read(official_dir, encoder, vocab_file):
    layer = hub.HubEncoder(official_dir)
    assert layer.config == CONFIG  # num_attention_heads 4, where hidden / 64 gave 1
    assert layer.config_is_complete and layer.inferred_fields == ()
    sources = layer.config_sources
    assert sources["num_attention_heads"] == (
        "transformer/layer_0/self_attention/query/kernel [32, 4, 8]"
    )
    assert sources["intermediate_size"] == "transformer/layer_0/intermediate/kernel [32, 37]"
    assert sources["hidden_act"] == "keras_metadata inner_activation='Text>gelu'"
    assert layer.do_lower_case is True
    with open(layer.vocab_file, "rb") as f, open(vocab_file, "rb") as g:
        assert f.read() == g.read()
    # The module computes what a BertEncoder of the config read computes.
    inputs = _inputs()
    _assert_outputs_equal(layer(inputs), encoder(inputs), inputs["input_mask"])


def test_without_metadata_the_activation_is_not_claimed(official_dir, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(official_dir, bare)
    os.remove(bare / "keras_metadata.pb")
    layer = hub.HubEncoder(str(bare))
    assert not layer.config_is_complete
    assert set(layer.inferred_fields) == {
        "hidden_act",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "initializer_range",
    }
    for field in (
        "num_attention_heads",
        "intermediate_size",
        "num_hidden_layers",
        "vocab_size",
        "type_vocab_size",
        "max_position_embeddings",
    ):
        assert getattr(layer.config, field) == getattr(CONFIG, field), field


def test_official_encoder_fine_tunes_in_keras3_model(official_dir):
    keras.utils.set_random_seed(0)
    layer = hub.HubEncoder(official_dir)
    model = models.BertClassifier(layer, layer.config, 2)
    inputs, labels = _inputs(batch=8, seq=10, seed=2), np.array([0, 1] * 4)
    optimizer = keras.optimizers.Adam(3e-3)

    def loss_fn():
        logits = model(inputs, training=True)["logits"]
        return tf.reduce_mean(
            keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        )

    before = float(loss_fn())
    for _ in range(6):
        with tf.GradientTape() as tape:
            loss = loss_fn()
        grads = tape.gradient(loss, model.trainable_variables)
        assert all(g is not None for g in grads)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    assert float(loss_fn()) < before - 0.1
    assert len(model.trainable_variables) == 39 + 2


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    """A TFHUB_CACHE_DIR, and no network: a download attempt fails."""
    cache = tmp_path / "tfhub_cache"
    cache.mkdir()
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(cache))

    def no_network(*args, **kwargs):
        raise urllib.error.URLError("no network in tests")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    return cache


def test_tfhub_and_kaggle_handles_resolve_from_the_cache(official_dir, offline_cache):
    """tensorflow_hub keeps a download of HANDLE in $TFHUB_CACHE_DIR/<SHA-1 of HANDLE>
    (compressed_module_resolver._module_dir); a cached module loads without network."""
    for handle in (TFHUB_HANDLE, KAGGLE_HANDLE):
        folder = offline_cache / hashlib.sha1(handle.encode("utf8")).hexdigest()
        shutil.copytree(official_dir, folder)
        assert hub.cache_folder(handle) == str(folder)
        layer = hub.HubEncoder(handle)
        assert layer.module_path == str(folder) and layer.handle == handle
        assert layer.config == CONFIG and layer.config_is_complete
        assert layer.vocab_file.startswith(str(folder))


def test_handle_errors_name_the_handle_and_the_cache(offline_cache, tmp_path):
    handle = "https://tfhub.dev/tensorflow/small_bert/bert_en_uncased_L-2_H-128_A-2/2"
    with pytest.raises(UserError, match="small_bert.*not in the cache") as error:
        hub.HubEncoder(handle)
    assert hub.cache_folder(handle) in str(error.value)
    assert "no network in tests" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        hub.HubEncoder(str(tmp_path / "missing"))


@pytest.mark.parametrize("damage", ["no_saved_model", "cut_saved_model", "no_variables"])
def test_a_half_written_cache_folder_is_named_with_what_to_do(
    official_dir, offline_cache, tmp_path, damage
):
    """A download cut short, or a cache folder copied in part: tensorflow_hub hands any
    non-empty cache folder over as the module."""
    handle = "https://tfhub.dev/tensorflow/small_bert/bert_en_uncased_L-2_H-128_A-2/2"
    folder = pathlib.Path(hub.cache_folder(handle))
    shutil.copytree(official_dir, folder)
    if damage == "no_saved_model":
        (folder / "saved_model.pb").unlink()
    elif damage == "cut_saved_model":
        data = (folder / "saved_model.pb").read_bytes()
        (folder / "saved_model.pb").write_bytes(data[: len(data) // 3])
    else:
        shutil.rmtree(folder / "variables")
    with pytest.raises(UserError, match="incomplete or damaged") as error:
        hub.HubEncoder(handle)
    message = str(error.value)
    assert handle in message and str(folder) in message and "\n" not in message
    assert "delete that folder and run again" in message
    # The same folder given as a local path: named, with what to do for a local copy.
    local = tmp_path / "copy"
    shutil.copytree(folder, local)
    with pytest.raises(UserError, match=f"TF Hub encoder {local} is incomplete.*export it again"):
        hub.HubEncoder(str(local))
