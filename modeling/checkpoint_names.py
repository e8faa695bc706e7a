"""The names each checkpoint format gives our variables: one declarative table each.

Three formats hold BERT weights:
  tf1  the original release's names (`bert/...`, `cls/...`, and the fine-tuning heads
       below); every table here is written in these names;
  hf   Hugging Face PyTorch names, derived from the original ones by `hf_name`;
  tf2  this project's object paths (`model/encoder/...`, `model/classifier/...`), read
       off the model itself by `tf2_entries`.

A table entry is `(name, variable, transposed)`: `transposed` marks a variable whose
stored layout is the transpose of ours (a [L, H] `output_weights` against a Dense
kernel [H, L]).

Fine-tuning heads in the original names:
  classifier        `output_weights` [L, H], `output_bias` [L] (run_classifier.py);
  span              `cls/squad/output_weights` [2, H], `cls/squad/output_bias` [2]
                    (run_squad.py);
  token_classifier  `output_weights` [L, H], `output_bias` [L] on every position: the
                    original release has no NER script; these are the names of the
                    widely used TF1 BERT-NER code, which reuses run_classifier's head;
  multiple_choice   `output_weights` [1, H], `output_bias` [1]: no official TF1 code
                    either; run_classifier's head with one output, the score of each
                    choice (as Hugging Face's BertForMultipleChoice `classifier` [1, H]).
The three heads on `output_weights` have the same names, so a TF1 checkpoint does not
say which of them it holds: the `model_info.json` beside it does when present.

Shape legend: H hidden size, L labels, V vocabulary size.
"""

from __future__ import annotations

import re

import keras
import tensorflow as tf

from modeling import model_kinds

# Model kinds, as `modeling.model_kinds` declares them.
ENCODER = model_kinds.ENCODER.name
PRETRAINER = model_kinds.PRETRAINER.name
CLASSIFIER = model_kinds.CLASSIFIER.name
MULTIPLE_CHOICE = model_kinds.MULTIPLE_CHOICE.name
SPAN = model_kinds.SPAN.name
TOKEN_CLASSIFIER = model_kinds.TOKEN_CLASSIFIER.name
FEATURE_BASED = model_kinds.FEATURE_BASED.name
MODEL_KINDS = tuple(kind.name for kind in model_kinds.KINDS)

# Hugging Face architecture <-> model kind; the first name of a kind is the one written.
HF_ARCHITECTURES = {
    architecture: kind.name for kind in model_kinds.KINDS for architecture in kind.hf_architectures
}
HF_ARCHITECTURE_OF = {
    kind.name: kind.hf_architectures[0] for kind in model_kinds.KINDS if kind.hf_architectures
}
# A left-to-right pre-trainer (causal attention) is written as Hugging Face's causal BERT.
HF_CAUSAL_PRETRAINER = model_kinds.PRETRAINER.hf_causal_architecture

# Our activation names -> Hugging Face's: the inverse of the table modeling.config reads
# Hugging Face configs with, taking Hugging Face's own name where several read as one of
# ours ("gelu_new" for the tanh approximation the original release calls "gelu").
HF_ACTIVATION_OF = {
    "gelu": "gelu_new",
    "gelu_exact": "gelu",
    "relu": "relu",
    "tanh": "tanh",
    "linear": "linear",
}


def model_kind(model) -> str:
    """The kind of `model` (`model_kinds.of_model`): its class's `MODEL_KIND`, or
    "encoder" for a bare encoder."""
    return model_kinds.of_model(model).name


def encoder_of(model):
    return model if model_kind(model) == ENCODER else model.encoder


# ---------------------------------------------------------------------------------
# Original TF1 names.


def _dense_entries(prefix: str, dense) -> list:
    return [(f"{prefix}/kernel", dense.kernel, False), (f"{prefix}/bias", dense.bias, False)]


def _layer_norm_entries(prefix: str, norm) -> list:
    return [(f"{prefix}/gamma", norm.gamma, False), (f"{prefix}/beta", norm.beta, False)]


def _output_entries(prefix: str, dense) -> list:
    """A head stored as `output_weights` [outputs, H] (transposed) and `output_bias`."""
    return [
        (f"{prefix}output_weights", dense.kernel, True),
        (f"{prefix}output_bias", dense.bias, False),
    ]


def original_variable_table(encoder, pretrainer=None) -> list:
    """(original TF1 name, our variable, transposed) for every encoder variable, and the
    pre-training heads' when `pretrainer` is given."""
    e = encoder.embeddings
    table = [
        ("bert/embeddings/word_embeddings", e.word_embeddings, False),
        ("bert/embeddings/token_type_embeddings", e.token_type_embeddings, False),
        ("bert/embeddings/position_embeddings", e.position_embeddings, False),
    ]
    table += _layer_norm_entries("bert/embeddings/LayerNorm", e.layer_norm)
    for i, layer in enumerate(encoder.encoder_layers):
        p = f"bert/encoder/layer_{i}"
        attention = layer.attention_self
        for part in ("query", "key", "value"):
            table += _dense_entries(f"{p}/attention/self/{part}", getattr(attention, part))
        table += _dense_entries(f"{p}/attention/output/dense", layer.attention_output.dense)
        table += _layer_norm_entries(
            f"{p}/attention/output/LayerNorm", layer.attention_output.layer_norm
        )
        table += _dense_entries(f"{p}/intermediate/dense", layer.intermediate)
        table += _dense_entries(f"{p}/output/dense", layer.output_block.dense)
        table += _layer_norm_entries(f"{p}/output/LayerNorm", layer.output_block.layer_norm)
    table += _dense_entries("bert/pooler/dense", encoder.pooler)
    if pretrainer is not None:
        for entries in pretraining_head_tables(pretrainer).values():
            table += entries
    return table


def pretraining_head_tables(pretrainer) -> dict:
    """{part: entries} of the masked-LM (`cls/predictions`) and next-sentence
    (`cls/seq_relationship`) heads; each part can be present without the other."""
    mlm, nsp = pretrainer.masked_lm, pretrainer.next_sentence
    return {
        "masked_lm": (
            _dense_entries("cls/predictions/transform/dense", mlm.transform_dense)
            + _layer_norm_entries("cls/predictions/transform/LayerNorm", mlm.transform_layer_norm)
            + [("cls/predictions/output_bias", mlm.output_bias, False)]
        ),
        "next_sentence": _output_entries("cls/seq_relationship/", nsp.dense),
    }


def has_bilstm_head(model) -> bool:
    """Whether a task model has the "+ BiLSTM" of `models` (a `bilstm` sub-layer)."""
    return getattr(model, "bilstm", None) is not None


def head_tables(model) -> dict:
    """{part name: [(original TF1 name, variable, transposed)]} of the model's heads
    that the TF1 and Hugging Face formats can hold; {} for an encoder, and for the
    feature-based tagger and a task model with a BiLSTM (their BiLSTM heads exist only
    in our TF2 format)."""
    kind = model_kind(model)
    if has_bilstm_head(model):
        return {}
    if kind == PRETRAINER:
        return pretraining_head_tables(model)
    declared = model_kinds.get(kind)
    if declared.original_prefix is None:
        return {}
    head = getattr(model, declared.head)
    return {declared.head: _output_entries(declared.original_prefix, head.dense)}


# ---------------------------------------------------------------------------------
# Hugging Face names.

# Original names whose Hugging Face name is not derived by the rules of `hf_name`.
# Hugging Face stores output_weights as a Linear weight [out, in]: the same layout.
_HF_SPECIAL = {
    "cls/predictions/output_bias": "cls.predictions.bias",
    "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
    "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
    # The one-layer task heads (`model_kinds`: original_prefix -> hf_head).
    **{
        f"{kind.original_prefix}output_{part}": f"{kind.hf_head}.{hf_part}"
        for kind in model_kinds.KINDS
        if kind.original_prefix is not None and kind.hf_head is not None
        for part, hf_part in (("weights", "weight"), ("bias", "bias"))
    },
}

# Names other Hugging Face checkpoints use -> the name `hf_name` gives. Older ones name
# LayerNorm weights gamma / beta, and the masked-LM bias the decoder's bias.
HF_ALIASES = (
    (re.compile(r"LayerNorm\.gamma$"), "LayerNorm.weight"),
    (re.compile(r"LayerNorm\.beta$"), "LayerNorm.bias"),
    (re.compile(r"^cls\.predictions\.decoder\.bias$"), "cls.predictions.bias"),
)

# Hugging Face tensors no table entry reads: the decoder tied to the word embeddings,
# and the position-id buffer some versions save.
HF_TIED_DECODER = "cls.predictions.decoder.weight"
HF_NOT_READ = re.compile(r"(^cls\.predictions\.decoder\.weight$|position_ids$)")


def hf_name(original: str, prefix: str) -> tuple[str, bool]:
    """Original TF1 name -> (Hugging Face PyTorch name, transpose needed).

    `prefix` is what the encoder's names start with: "bert." in task and pre-training
    models, "" in a bare BertModel. PyTorch Linear weights are [out, in], the transpose
    of TF kernels.
    """
    if original in _HF_SPECIAL:
        return _HF_SPECIAL[original], False
    name = re.sub(r"layer_(\d+)", r"layer.\1", original)
    transpose = name.endswith("/kernel")
    name = re.sub(r"/kernel$", "/weight", name)
    name = re.sub(r"LayerNorm/gamma$", "LayerNorm/weight", name)
    name = re.sub(r"LayerNorm/beta$", "LayerNorm/bias", name)
    if name.endswith("_embeddings"):
        name += "/weight"
    name = name.replace("/", ".")
    if name.startswith("bert."):
        name = prefix + name[len("bert.") :]
    return name, transpose


def canonical_hf_name(name: str) -> str:
    """A Hugging Face tensor name with the aliases of `HF_ALIASES` resolved."""
    for pattern, replacement in HF_ALIASES:
        name = pattern.sub(replacement, name)
    return name


# ---------------------------------------------------------------------------------
# Our TF2 object paths.

TF2_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def tf2_entries(model) -> dict:
    """{part: [(TF2 checkpoint key, variable, False)]}, parts being the model's direct
    children (`encoder`, `classifier`, `masked_lm`...), keys as `tf.train.Checkpoint(
    model=model)` writes them (the Trainer's layout): `model/<path of attributes>` +
    TF2_SUFFIX, the path being the first one a breadth-first walk meets, as TensorFlow
    names it. A bare encoder is keyed as the `encoder` of a task model.
    """
    root = tf.train.Checkpoint(encoder=model) if model_kind(model) == ENCODER else model
    view = tf.train.TrackableView(root)
    parts = {name: [] for name in view.children(root)}  # In the model's order.
    seen, queue = set(), [(root, ())]
    while queue:
        obj, path = queue.pop(0)
        for name, child in view.children(obj).items():
            if id(child) in seen:
                continue
            seen.add(id(child))
            child_path = path + (name,)
            if isinstance(child, (tf.Variable, keras.Variable)):
                key = "model/" + "/".join(child_path) + TF2_SUFFIX
                parts[child_path[0]].append((key, child, False))
            else:
                queue.append((child, child_path))
    return {name: entries for name, entries in parts.items() if entries}
