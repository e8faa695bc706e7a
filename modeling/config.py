"""BertConfig: exactly the keys of the original release's `bert_config.json`."""

from __future__ import annotations

import dataclasses
import difflib
import json
import math

from common.errors import MissingFileError, UserError
from common import file_io

# Activations this project computes. "gelu" is the tanh approximation the original
# release computes; "gelu_exact" is the erf form (Hugging Face calls it "gelu").
ACTIVATIONS = ("gelu", "gelu_exact", "relu", "tanh", "linear")

# Hugging Face activation names -> ours, so each checkpoint runs with the activation it
# was trained with.
_HF_ACTIVATIONS = {
    "gelu": "gelu_exact",
    "gelu_new": "gelu",
    "gelu_pytorch_tanh": "gelu",
    "gelu_fast": "gelu",
    "relu": "relu",
    "tanh": "tanh",
    "linear": "linear",
}


def _is_number(value) -> bool:
    """An int or float of JSON (not a bool), and not NaN."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Configuration of a BERT encoder, with the original `bert_config.json` keys.

    Attributes:
      vocab_size: size of the WordPiece vocabulary.
      hidden_size: width H of the encoder layers and the pooler.
      num_hidden_layers: number L of Transformer layers.
      num_attention_heads: number N of attention heads per layer.
      intermediate_size: width of the feed-forward layer.
      hidden_act: feed-forward activation, one of ACTIVATIONS.
      hidden_dropout_prob: dropout on embeddings and every sub-layer output.
      attention_probs_dropout_prob: dropout on the attention probabilities.
      max_position_embeddings: the longest sequence the model accepts.
      type_vocab_size: number of token types (segments).
      initializer_range: stddev of the truncated-normal initializer.
    """

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 16
    initializer_range: float = 0.02

    def __post_init__(self):
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise UserError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not _is_number(value) or not 0.0 <= value < 1.0:
                raise UserError(f"BertConfig.{name} must be in [0, 1), got {value!r}")
        if not _is_number(self.initializer_range) or not 0.0 < self.initializer_range < math.inf:
            raise UserError(
                f"BertConfig.initializer_range must be a positive number, got "
                f"{self.initializer_range!r}"
            )
        if self.hidden_size % self.num_attention_heads:
            raise UserError(
                f"BertConfig.hidden_size ({self.hidden_size}) is not a multiple of "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise UserError(
                f"BertConfig.hidden_act {self.hidden_act!r} is not supported; "
                f"choose one of {', '.join(ACTIVATIONS)}"
            )

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, values: dict, source: str = "config") -> "BertConfig":
        """Builds a config from a dict with exactly the `bert_config.json` keys.

        An unknown or misspelt key is an error (with the closest known key), never ignored.
        """
        known = [f.name for f in dataclasses.fields(cls)]
        for key in values:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise UserError(
                    f"{source}: unknown BERT config key {key!r}{hint} "
                    f"(known keys: {', '.join(known)})"
                )
        if "vocab_size" not in values:
            raise UserError(f"{source}: the BERT config has no 'vocab_size'")
        try:
            return cls(**values)
        except UserError as e:
            raise UserError(f"{source}: {e}") from None

    @classmethod
    def from_json_file(cls, path: str) -> "BertConfig":
        try:
            values = file_io.read_json_object(path, "a BERT config (a JSON object)")
        except FileNotFoundError:
            raise MissingFileError(f"BERT config file not found: {path}") from None
        if "model_type" in values or "layer_norm_eps" in values:
            return cls.from_hf_dict(values, source=path)
        return cls.from_dict(values, source=path)

    @classmethod
    def from_hf_dict(cls, values: dict, source: str = "config.json") -> "BertConfig":
        """Reads a Hugging Face BERT `config.json`, converting activation names."""
        model_type = values.get("model_type", "bert")
        if model_type != "bert":
            raise UserError(f"{source}: model_type {model_type!r} is not a BERT model")
        if values.get("position_embedding_type", "absolute") != "absolute":
            raise UserError(f"{source}: only absolute position embeddings are supported")
        eps = values.get("layer_norm_eps", 1e-12)
        if not _is_number(eps) or abs(eps - 1e-12) > 1e-15:
            raise UserError(f"{source}: layer_norm_eps {eps!r} differs from BERT's 1e-12")
        act = values.get("hidden_act", "gelu")
        if not isinstance(act, str) or act not in _HF_ACTIVATIONS:
            raise UserError(f"{source}: hidden_act {act!r} is not supported")
        known = [f.name for f in dataclasses.fields(cls)]
        kept = {k: values[k] for k in known if k in values}
        kept["hidden_act"] = _HF_ACTIVATIONS[act]
        return cls.from_dict(kept, source=source)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, path: str) -> None:
        """Writes the config atomically (`common.file_io`)."""
        file_io.write_text(path, self.to_json_string())
