"""A Hugging Face BERT checkpoint (config.json, model.safetensors, vocab.txt) in
keras-hub's `BertBackbone`, for comparing with keras-hub on the same weights.

keras-hub's layers (read from its source, keras_hub/src/models/bert/bert_backbone.py
and layers/modeling/transformer_encoder.py): `token_embedding`, `position_embedding`
(its `position_embeddings`), `segment_embedding`, `embeddings_layer_norm`, then
`transformer_layer_{i}`, each a `TransformerEncoder` (post-LayerNorm, as BERT) holding
`_self_attention_layer` (a Keras `MultiHeadAttention`: query/key/value kernels
[hidden, heads, head size] and biases [heads, head size], the output kernel [heads,
head size, hidden]), `_self_attention_layer_norm`, `_feedforward_intermediate_dense`,
`_feedforward_output_dense` and `_feedforward_layer_norm`; and `pooled_dense` (tanh)
on the first position. Hugging Face stores a dense kernel as [out, in], Keras as
[in, out].

One difference remains by design: keras-hub's `BertBackbone` computes GELU with its
tanh approximation, Hugging Face's `hidden_act: gelu` exactly; `check` prints how far
the two encoders' outputs part on real sentences.

  python -m benchmarks.compare.keras_hub_port   (needs keras-hub: benchmarks/setup_bench_env.sh)
"""

from __future__ import annotations

import json
import os

import numpy as np


def backbone_config(checkpoint: str) -> dict:
    """keras-hub `BertBackbone` arguments from a Hugging Face config.json."""
    with open(os.path.join(checkpoint, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    return {
        "vocabulary_size": config["vocab_size"],
        "num_layers": config["num_hidden_layers"],
        "num_heads": config["num_attention_heads"],
        "hidden_dim": config["hidden_size"],
        "intermediate_dim": config["intermediate_size"],
        "dropout": config["hidden_dropout_prob"],
        "max_sequence_length": config["max_position_embeddings"],
        "num_segments": config["type_vocab_size"],
    }


def _read_weights(checkpoint: str) -> dict[str, np.ndarray]:
    """The checkpoint's tensors by name, without a model prefix such as `bert.`."""
    from safetensors.numpy import load_file

    weights = load_file(os.path.join(checkpoint, "model.safetensors"))
    return {name.removeprefix("bert."): value for name, value in weights.items()}


def _assign(variable, value: np.ndarray, name: str) -> None:
    value = np.asarray(value, dtype="float32")
    if tuple(variable.shape) != value.shape:
        raise ValueError(f"{name}: checkpoint {value.shape} for keras-hub {tuple(variable.shape)}")
    variable.assign(value)


def load_backbone(backbone, checkpoint: str) -> None:
    """Sets every weight of keras-hub `backbone` from the Hugging Face checkpoint; fails
    on a missing tensor or a shape that differs, and if a backbone weight is left."""
    weights = _read_weights(checkpoint)
    done = set()

    def put(variable, name: str, transform=None) -> None:
        value = weights[name]
        _assign(variable, transform(value) if transform is not None else value, name)
        done.add(id(variable))

    def layer_norm(layer, prefix: str) -> None:
        put(layer.gamma, f"{prefix}.weight")
        put(layer.beta, f"{prefix}.bias")

    def dense(layer, prefix: str) -> None:
        put(layer.kernel, f"{prefix}.weight", np.transpose)
        put(layer.bias, f"{prefix}.bias")

    heads = backbone.num_heads
    head_size = backbone.hidden_dim // heads

    def to_heads(value):  # [out = heads * head size, in] -> [in, heads, head size].
        return np.transpose(value).reshape(-1, heads, head_size)

    put(backbone.get_layer("token_embedding").embeddings, "embeddings.word_embeddings.weight")
    put(
        backbone.get_layer("position_embedding").position_embeddings,
        "embeddings.position_embeddings.weight",
    )
    put(
        backbone.get_layer("segment_embedding").embeddings,
        "embeddings.token_type_embeddings.weight",
    )
    layer_norm(backbone.get_layer("embeddings_layer_norm"), "embeddings.LayerNorm")
    for i in range(backbone.num_layers):
        block = backbone.get_layer(f"transformer_layer_{i}")
        attention = block._self_attention_layer
        prefix = f"encoder.layer.{i}"
        for part, dense_layer in (
            ("query", attention._query_dense),
            ("key", attention._key_dense),
            ("value", attention._value_dense),
        ):
            put(dense_layer.kernel, f"{prefix}.attention.self.{part}.weight", to_heads)
            put(
                dense_layer.bias,
                f"{prefix}.attention.self.{part}.bias",
                lambda v: v.reshape(heads, head_size),
            )
        put(
            attention._output_dense.kernel,
            f"{prefix}.attention.output.dense.weight",
            # [hidden out, heads * head size in] -> [heads, head size, hidden out].
            lambda v: np.transpose(v).reshape(heads, head_size, -1),
        )
        put(attention._output_dense.bias, f"{prefix}.attention.output.dense.bias")
        layer_norm(block._self_attention_layer_norm, f"{prefix}.attention.output.LayerNorm")
        dense(block._feedforward_intermediate_dense, f"{prefix}.intermediate.dense")
        dense(block._feedforward_output_dense, f"{prefix}.output.dense")
        layer_norm(block._feedforward_layer_norm, f"{prefix}.output.LayerNorm")
    dense(backbone.get_layer("pooled_dense"), "pooler.dense")
    left = [v.path for v in backbone.weights if id(v) not in done]
    if left:
        raise ValueError(f"keras-hub weights not in the checkpoint: {left}")


def tokenizer(checkpoint: str):
    """keras-hub's `BertTokenizer` on the checkpoint's vocab.txt (uncased, lowercased
    as the checkpoint's tokenizer_config says)."""
    import keras_hub

    lowercase = True
    config_file = os.path.join(checkpoint, "tokenizer_config.json")
    if os.path.isfile(config_file):
        with open(config_file, encoding="utf-8") as f:
            lowercase = json.load(f).get("do_lower_case", True)
    return keras_hub.models.BertTokenizer(
        vocabulary=os.path.join(checkpoint, "vocab.txt"), lowercase=lowercase
    )


def recipe_optimizer(args, warmup: int, total: int):
    """Keras' AdamW on the comparisons' recipe (`finetune_compare`): Hugging Face's
    schedule (linear warmup over `warmup` steps, then linear decay to 0 at `total`),
    args.weight_decay but on biases and LayerNorm, gradients clipped to a global norm
    of 1.0. (keras-hub's own `compile()` default is Adam at a constant 5e-5.)"""
    import keras

    peak = args.learning_rate

    class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = keras.ops.cast(step, "float32")
            rising = step / max(warmup, 1)
            falling = keras.ops.maximum(0.0, (total - step) / max(total - warmup, 1))
            return peak * keras.ops.where(step < warmup, rising, falling)

    optimizer = keras.optimizers.AdamW(
        learning_rate=WarmupLinearDecay(), weight_decay=args.weight_decay, global_clipnorm=1.0
    )
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer


def check(checkpoint: str, pairs: list[tuple[str, str]], sequence_length: int = 128) -> dict:
    """Max abs difference between keras-hub's `BertBackbone` (ported weights, its
    preprocessor) and transformers' `BertModel` (its tokenizer) on sentence pairs:
    the sequence output at the real tokens and the pooled output; and whether both
    tokenizers gave the same ids."""
    import keras_hub
    import tensorflow as tf
    import torch
    from transformers import BertModel, BertTokenizerFast

    backbone = keras_hub.models.BertBackbone(**{**backbone_config(checkpoint), "dropout": 0.0})
    load_backbone(backbone, checkpoint)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        tokenizer(checkpoint), sequence_length=sequence_length
    )
    first, second = [a for a, _ in pairs], [b for _, b in pairs]
    inputs = preprocessor(x=(tf.constant(first), tf.constant(second)))
    ours = backbone(inputs)

    hf_tokenizer = BertTokenizerFast.from_pretrained(checkpoint)
    encoded = hf_tokenizer(
        first,
        second,
        padding="max_length",
        max_length=sequence_length,
        truncation="longest_first",
        return_tensors="pt",
    )
    mask = encoded["attention_mask"].numpy().astype(bool)
    sequence = np.asarray(ours["sequence_output"])[mask]
    result = {
        "same_token_ids": bool(
            np.array_equal(np.asarray(inputs["token_ids"]), encoded["input_ids"].numpy())
        ),
        "sequence_max_abs": float(np.max(np.abs(sequence))),
    }
    # As the checkpoint is (exact GELU), and with keras-hub's tanh GELU: the second
    # isolates the port itself.
    for name, activation in (("", None), ("tanh_gelu_", "gelu_new")):
        extra = {"hidden_act": activation} if activation else {}
        model = BertModel.from_pretrained(checkpoint, **extra).eval()
        with torch.no_grad():
            theirs = model(**encoded)
        result[f"{name}sequence_max_abs_diff"] = float(
            np.max(np.abs(sequence - theirs.last_hidden_state.numpy()[mask]))
        )
        result[f"{name}pooled_max_abs_diff"] = float(
            np.max(np.abs(np.asarray(ours["pooled_output"]) - theirs.pooler_output.numpy()))
        )
    return result


CHECK_PAIRS = [
    ("The company said profits rose 12 percent.", "Profits were up 12% the firm said."),
    ("He walked to the station in the rain.", "It rained as he walked to the station."),
    ("Shares of Acme Corp. fell $1.25, or 3 percent.", "Acme's stock dropped sharply."),
]


def main() -> None:
    from benchmarks.compare import finetune_compare

    result = check(finetune_compare.default_checkpoint(), CHECK_PAIRS)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
