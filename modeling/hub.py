"""A TF Hub BERT encoder SavedModel as a Keras 3 layer (`--hub_module_url`).

`HubEncoder(handle)` loads a reusable SavedModel and keeps the encoder contract of
`BertEncoder`, so the task models of `modeling.models` take it in place of one:

    encoder = hub.HubEncoder(hub_module_url)                # under strategy.scope()
    model = models.BertClassifier(encoder, encoder.config, num_labels)

Handles (`resolve`): a local folder; or a URL that tensorflow_hub resolves with its own
resolver and cache (`tensorflow_hub.resolve`): a tfhub.dev handle
(https://tfhub.dev/tensorflow/bert_en_uncased_L-12_H-768_A-12/4), a Kaggle model URL
(https://www.kaggle.com/models/tensorflow/bert/tensorFlow2/en-uncased-l-12-h-768-a-12/4),
a .tar.gz URL, a gs:// folder. A downloaded module is kept in $TFHUB_CACHE_DIR (default
<temp>/tfhub_modules) in the folder named by the SHA-1 of the handle, and read from there
without network afterwards.

Modules: ours (export_tfhub.py; the `bert_config_file` asset gives the exact config) and
the official TF Hub BERT encoders made by the TF Model Garden (a `vocab_file` asset, a
`do_lower_case` variable, no config). For those the config is read from the module
(`read_config`): see `ConfigFromModule` for what is read and what is not.

Its variables are the SavedModel's own (wrapped, not copied), trainable unless
`trainable=False`, so fine-tuning with `model.trainable_variables` updates the weights
the loaded functions compute with. The SavedModel computes in the dtype it was exported
in (float32 for ours).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import warnings

import keras
import tensorflow as tf
from absl import logging

from common.errors import MissingFileError, UserError
from modeling.config import BertConfig
from modeling.encoder import INPUT_KEYS, check_inputs

# The config fields that decide what the encoder computes; a config is complete (may be
# written out as the model's) when all of them were read from the module.
ARCHITECTURE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "max_position_embeddings",
    "type_vocab_size",
)
# Model Garden activation names (Keras serialization) -> ours. Its "gelu" ("Text>gelu")
# is the tanh approximation, the original release's; Keras' own "gelu" is exact.
_KERAS_ACTIVATIONS = {
    "Text>gelu": "gelu",
    "gelu": "gelu_exact",
    "relu": "relu",
    "tanh": "tanh",
    "linear": "linear",
}
_ENCODER_CLASSES = ("BertEncoder", "BertEncoderV2")
_LAYER = re.compile(r"(?:^|/)transformer/layer_(\d+)/")


def resolve(handle: str) -> str:
    """The local path of the module at `handle` (see the module docstring)."""
    if "://" not in handle:
        if not os.path.isdir(handle):
            raise MissingFileError(f"TF Hub encoder not found: {handle} is not a folder")
        return handle
    try:
        return _tensorflow_hub().resolve(handle)
    except (OSError, ValueError, tf.errors.OpError) as e:
        reason = " ".join(str(e).split())
        raise UserError(
            f"TF Hub handle {handle}: not in the cache ({cache_folder(handle)}) and it "
            f"could not be downloaded ({reason[:200]}): check the handle and the network, "
            f"set TFHUB_CACHE_DIR to a cache that holds it, or give the SavedModel's folder"
        ) from e


def _tensorflow_hub():
    """tensorflow_hub (it imports tf_keras: only where a URL is resolved), without the
    warning its import gives under setuptools >= 67 (pkg_resources is deprecated), which
    a user cannot act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="pkg_resources is deprecated")
        import tensorflow_hub  # pylint: disable=g-import-not-at-top
        from tensorflow_hub import resolver  # noqa: F401  pylint: disable=g-import-not-at-top

    return tensorflow_hub


def cache_folder(handle: str) -> str:
    """Where tensorflow_hub keeps the download of `handle`:
    $TFHUB_CACHE_DIR (default <temp>/tfhub_modules) / SHA-1 of the handle."""
    resolver = _tensorflow_hub().resolver
    return os.path.join(
        resolver.tfhub_cache_dir(use_temp=True), hashlib.sha1(handle.encode("utf8")).hexdigest()
    )


def _incomplete(path: str) -> str | None:
    """What a SavedModel folder lacks (an encoder has variables), or None."""
    if not any(
        tf.io.gfile.exists(os.path.join(path, name))
        for name in ("saved_model.pb", "saved_model.pbtxt")
    ):
        return "it has no saved_model.pb"
    if not tf.io.gfile.exists(os.path.join(path, "variables", "variables.index")):
        return "it has no variables/variables.index"
    return None


def _damaged(path: str, handle: str | None, reason: str) -> UserError:
    if handle is not None and "://" in handle:
        return UserError(
            f"TF Hub handle {handle}: its copy in the cache, {path}, is incomplete or "
            f"damaged ({reason}): delete that folder and run again to download it anew"
        )
    return UserError(
        f"TF Hub encoder {path} is incomplete or damaged ({reason}): export it again "
        f"(export_tfhub.py) or give another folder"
    )


def load_module(path: str, handle: str | None = None):
    """`tf.saved_model.load(path)` with a clear error for what is not an encoder, or a
    folder that is not a whole SavedModel (a download cut short in the cache of the URL
    `handle`, a copy cut short).

    A SavedModel that uses tensorflow_text ops (preprocessing models, task exports)
    needs `import tensorflow_text` before loading; encoders do not. Loading one
    without it fails with TensorFlow's "Op type not registered 'NormalizeUTF8'": the
    error here says what that means.
    """
    lacks = _incomplete(path)
    if lacks is not None:
        raise _damaged(path, handle, lacks)
    try:
        module = tf.saved_model.load(path)
    except (OSError, ValueError, tf.errors.OpError) as e:
        first = " ".join(str(e).split("\n", 1)[0].split())
        raise _damaged(path, handle, f"it cannot be loaded: {first[:200]}") from e
    except RuntimeError as e:
        if "Op type not registered" not in str(e):
            raise
        raise UserError(
            f"{path} holds ops this process does not know ({str(e).split(' in binary')[0]}): "
            f"it is not a BERT encoder. A preprocessing model or a task export uses "
            f"tensorflow_text's ops; load it after `import tensorflow_text`"
        ) from e
    missing = [a for a in ("variables", "trainable_variables") if not hasattr(module, a)]
    if (not callable(module) or missing) and _text_inputs(module):
        raise UserError(
            f"{path} is a model that takes raw text (its signatures take "
            f"{', '.join(_text_inputs(module))}): a preprocessing model or a fine-tuned "
            f"task's export, not an encoder. Give an encoder: a checkpoint with "
            f"--init_checkpoint, or an export of export_tfhub.py --export_type=encoder"
        )
    if not callable(module) or missing:
        raise UserError(
            f"{path} is not a reusable TF Hub SavedModel (callable with "
            f"variables and trainable_variables); missing: "
            f"{missing or ['__call__']}"
        )
    return module


def _text_inputs(module) -> list[str]:
    """The string inputs of a SavedModel's signatures (a task export's text_a,
    question...), which an encoder's signatures do not have."""
    names = set()
    for signature in getattr(module, "signatures", {}).values():
        for name, spec in signature.structured_input_signature[1].items():
            if getattr(spec, "dtype", None) == tf.string:
                names.add(name)
    return sorted(names)


def _asset_path(module, name: str) -> str | None:
    asset = getattr(module, name, None)
    return asset.asset_path.numpy().decode("utf-8") if asset is not None else None


def _keras_name(variable) -> str:
    # Keras variable names may not contain "/"; the path keeps "LayerNorm", "bias"...
    # so that weight decay still skips them.
    return variable.name.split(":")[0].replace("/", "_")


class HubEncoder(keras.layers.Layer):
    """A TF Hub BERT encoder with the `BertEncoder` call contract.

    Call with a dict of int [B, S] `input_word_ids`, `input_mask`, `input_type_ids`
    (other keys are ignored) and `training`. Returns a dict: float `sequence_output`
    [B, S, H], `pooled_output` [B, H], `encoder_outputs` (list of L [B, S, H]).

    Attributes:
      handle: the handle as given; module_path: the local folder it resolved to.
      config: a BertConfig: the module's `bert_config.json` (ours), else read from the
        module (`read_config`).
      config_is_complete: whether every field that decides what the encoder computes
        was read (always for ours). If not, `config` must not be written out as the
        model's config: `inferred_fields` holds defaults, not facts.
      inferred_fields: config fields not read from the module (BERT's defaults).
      config_sources: field -> where in the module it was read.
      vocab_file: path of the module's vocabulary asset, or None.
      do_lower_case: the module's `do_lower_case`, or None.
      causal_attention: the module's `causal_attention` (a left-to-right encoder of
        this project, whose left-only attention is inside its functions), else False.
    """

    def __init__(self, handle: str, trainable: bool = True, name: str = "hub_encoder", **kwargs):
        super().__init__(trainable=trainable, name=name, **kwargs)
        self.handle = handle
        self.module_path = resolve(handle)
        self._module = load_module(self.module_path, handle)
        trainable_ids = {id(v) for v in self._module.trainable_variables}
        # keras.Variable(initializer=tf.Variable) wraps that very variable, so gradients
        # and optimizer updates reach what the loaded functions read.
        self.hub_variables = [
            keras.Variable(v, trainable=id(v) in trainable_ids, name=_keras_name(v), dtype=v.dtype)
            for v in self._module.variables
        ]
        self.vocab_file = _asset_path(self._module, "vocab_file")
        lower = getattr(self._module, "do_lower_case", None)
        self.do_lower_case = None if lower is None else bool(lower.numpy())
        causal = getattr(self._module, "causal_attention", None)
        self.causal_attention = False if causal is None else bool(causal.numpy())
        read = read_config(self._module, self.module_path)
        self.config, self.config_sources = read.config, read.sources
        self.inferred_fields = read.inferred
        self.config_is_complete = read.is_complete
        self.built = True

    def call(self, inputs, training=False):
        check_inputs(inputs, self.config.max_position_embeddings)
        outputs = self._module(
            {k: tf.cast(inputs[k], tf.int32) for k in INPUT_KEYS}, training=bool(training)
        )
        return {
            "sequence_output": outputs["sequence_output"],
            "pooled_output": outputs["pooled_output"],
            "encoder_outputs": list(outputs["encoder_outputs"]),
        }

    def get_config(self):
        return {**super().get_config(), "handle": self.handle}


@dataclasses.dataclass(frozen=True)
class ConfigFromModule:
    """A module's BertConfig and where each field came from.

    For an official (Model Garden) encoder, from its variables:
      vocab_size, hidden_size: word_embeddings/embeddings [V, H];
      type_vocab_size: type_embeddings/embeddings [T, H];
      max_position_embeddings: position_embedding/embeddings [P, H];
      num_hidden_layers: the transformer/layer_N variables;
      num_attention_heads: transformer/layer_0/self_attention/query/kernel [H, N, H/N];
      intermediate_size: transformer/layer_0/intermediate/kernel [H, I];
    and, when the module carries its Keras metadata (keras_metadata.pb, as the official
    encoders saved by Keras do), from the encoder's saved config: hidden_act,
    hidden_dropout_prob, attention_probs_dropout_prob, initializer_range. What is not
    read is BERT's default and listed in `inferred`.

    Attributes:
      config: the BertConfig.
      sources: field -> where it was read.
      inferred: fields given BERT's defaults.
    """

    config: BertConfig
    sources: dict
    inferred: tuple

    @property
    def is_complete(self) -> bool:
        return not set(self.inferred) & set(ARCHITECTURE_FIELDS)


def read_config(module, path: str | None = None) -> ConfigFromModule:
    """The config of a loaded module: its `bert_config_file` asset, else what its
    variables and Keras metadata show (`ConfigFromModule`). `path`: its folder, where
    keras_metadata.pb is looked for."""
    config_file = _asset_path(module, "bert_config_file")
    if config_file:
        config = BertConfig.from_json_file(config_file)
        return ConfigFromModule(
            config, {k: "bert_config_file" for k in dataclasses.asdict(config)}, ()
        )
    values, sources = _shapes_from_variables(module)
    if "hidden_size" not in values:  # Not the Model Garden layout: call it.
        values, sources = _shapes_from_a_call(module)
    metadata = _encoder_metadata(path) if path else None
    if metadata:
        for key, (value, source) in _settings_from_metadata(metadata).items():
            values[key], sources[key] = value, source
    defaults = dataclasses.asdict(BertConfig(vocab_size=1))
    inferred = tuple(k for k in defaults if k not in values)
    if "num_attention_heads" not in values:
        # Unknown: a value the config accepts, flagged as inferred.
        hidden = values["hidden_size"]
        values["num_attention_heads"] = hidden // 64 if hidden % 64 == 0 else 1
    if "intermediate_size" not in values:
        values["intermediate_size"] = 4 * values["hidden_size"]
    config = BertConfig(**{**defaults, **values})
    logging.info(
        "TF Hub encoder without bert_config.json: read %s from %s; not read (BERT's defaults): %s",
        sorted(sources),
        path or "the module",
        list(inferred),
    )
    return ConfigFromModule(config, sources, inferred)


def _variable_shapes(module) -> dict[str, list[int]]:
    return {v.name.split(":")[0]: v.shape.as_list() for v in module.variables}


def _find(shapes: dict, suffix: str, rank: int) -> tuple[str, list[int]] | None:
    """The variable named `suffix` (after any prefix) with `rank` dimensions."""
    for name, shape in shapes.items():
        if (name == suffix or name.endswith("/" + suffix)) and len(shape) == rank:
            return name, shape
    return None


def _shapes_from_variables(module) -> tuple[dict, dict]:
    """Config fields from the variables of a Model Garden encoder (see
    `ConfigFromModule`); ({}, {}) for another layout."""
    shapes = _variable_shapes(module)
    words = _find(shapes, "word_embeddings/embeddings", 2)
    if words is None:
        return {}, {}
    values = {"vocab_size": words[1][0], "hidden_size": words[1][1]}
    sources = {"vocab_size": f"{words[0]} {words[1]}", "hidden_size": f"{words[0]} {words[1]}"}
    layers = {int(m.group(1)) for name in shapes for m in [_LAYER.search(name)] if m}
    if layers:
        values["num_hidden_layers"] = max(layers) + 1
        sources["num_hidden_layers"] = f"transformer/layer_0..{max(layers)}"
    for key, suffix, rank, axis in (
        ("type_vocab_size", "type_embeddings/embeddings", 2, 0),
        ("max_position_embeddings", "position_embedding/embeddings", 2, 0),
        ("num_attention_heads", "transformer/layer_0/self_attention/query/kernel", 3, 1),
        ("intermediate_size", "transformer/layer_0/intermediate/kernel", 2, 1),
    ):
        found = _find(shapes, suffix, rank)
        if found is not None:
            values[key], sources[key] = found[1][axis], f"{found[0]} {found[1]}"
    return values, sources


def _shapes_from_a_call(module) -> tuple[dict, dict]:
    """hidden_size and num_hidden_layers from a call on a [1, 2] input; the embedding
    sizes from variables named word_/token_type_/type_/position_embedding(s)."""
    ones = tf.ones([1, 2], tf.int32)
    outputs = module(
        {"input_word_ids": ones, "input_mask": ones, "input_type_ids": tf.zeros_like(ones)},
        training=False,
    )
    values = {
        "hidden_size": int(outputs["pooled_output"].shape[-1]),
        "num_hidden_layers": len(outputs["encoder_outputs"]),
    }
    sources = {k: "the outputs of a call" for k in values}
    names = {
        "vocab_size": ("word_embeddings",),
        "type_vocab_size": ("token_type_embeddings", "type_embeddings"),
        "max_position_embeddings": ("position_embedding",),
    }
    for key, parts in names.items():
        for name, shape in _variable_shapes(module).items():
            if len(shape) == 2 and any(p in name for p in parts):
                values[key], sources[key] = shape[0], f"{name} {shape}"
                break
    return values, sources


def _encoder_metadata(path: str) -> dict | None:
    """The saved Keras config of the module's BertEncoder, from keras_metadata.pb."""
    metadata_file = os.path.join(path, "keras_metadata.pb")
    if not tf.io.gfile.exists(metadata_file):
        return None
    try:
        from tf_keras.protobuf import saved_metadata_pb2  # pylint: disable=g-import-not-at-top
    except ImportError:
        logging.warning("tf_keras is not installed: %s is not read", metadata_file)
        return None
    saved = saved_metadata_pb2.SavedMetadata()
    with tf.io.gfile.GFile(metadata_file, "rb") as f:
        saved.ParseFromString(f.read())
    for node in saved.nodes:
        try:
            layer = json.loads(node.metadata) if node.metadata else {}
        except ValueError:
            continue
        if str(layer.get("class_name", "")).split(">")[-1] in _ENCODER_CLASSES:
            return layer.get("config") or None
    return None


def _settings_from_metadata(config: dict) -> dict[str, tuple]:
    """field -> (value, source) from a Model Garden BertEncoder's saved config (the
    current names, or the older ones)."""
    found = {}

    def first(*keys):
        return next(((k, config[k]) for k in keys if config.get(k) is not None), None)

    activation = first("inner_activation", "activation")
    if activation is not None:
        key, name = activation
        if isinstance(name, dict):  # {"class_name": "function", "config": "gelu", ...}
            name = name.get("registered_name") or name.get("config")
        if name in _KERAS_ACTIVATIONS:
            found["hidden_act"] = (_KERAS_ACTIVATIONS[name], f"keras_metadata {key}={name!r}")
    for field, keys in (
        ("hidden_dropout_prob", ("output_dropout", "dropout_rate")),
        ("attention_probs_dropout_prob", ("attention_dropout", "attention_dropout_rate")),
    ):
        value = first(*keys)
        if value is not None:
            found[field] = (float(value[1]), f"keras_metadata {value[0]}")
    stddev = (config.get("initializer") or {}).get("config", {}).get("stddev")
    if stddev is not None:
        found["initializer_range"] = (float(stddev), "keras_metadata initializer.stddev")
    return found
