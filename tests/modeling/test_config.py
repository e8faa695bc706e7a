"""BertConfig: exactly the original bert_config.json keys."""

import json

import pytest

from modeling.config import BertConfig

ORIGINAL_BASE = {  # bert_config.json of the original uncased_L-12_H-768_A-12 release
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 768,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 512,
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "type_vocab_size": 2,
    "vocab_size": 30522,
}


def test_reads_and_writes_the_original_file(tmp_path):
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(ORIGINAL_BASE))
    config = BertConfig.from_json_file(str(path))
    assert config.hidden_size == 768 and config.hidden_act == "gelu"
    assert config.head_size == 64
    out = tmp_path / "out.json"
    config.to_json_file(str(out))
    assert json.loads(out.read_text()) == ORIGINAL_BASE
    assert BertConfig.from_json_file(str(out)) == config


def test_misspelt_key_is_an_error_with_a_suggestion(tmp_path):
    values = dict(ORIGINAL_BASE)
    values["num_hiden_layers"] = values.pop("num_hidden_layers")
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(values))
    with pytest.raises(
        ValueError,
        match=r"bert_config.json.*'num_hiden_layers'.*"
        r"did you mean 'num_hidden_layers'",
    ):
        BertConfig.from_json_file(str(path))


@pytest.mark.parametrize(
    "change,message",
    [
        ({"hidden_act": "swish"}, "hidden_act"),
        ({"hidden_size": 100}, "multiple of num_attention_heads"),
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
        ({"hidden_dropout_prob": 1.5}, "hidden_dropout_prob"),
    ],
)
def test_invalid_values(change, message):
    with pytest.raises(ValueError, match=message):
        BertConfig.from_dict(dict(ORIGINAL_BASE, **change))


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        BertConfig.from_json_file(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        BertConfig.from_json_file(str(bad))
    with pytest.raises(ValueError, match="vocab_size"):
        BertConfig.from_dict({"hidden_size": 768})


@pytest.mark.parametrize(
    "hf_act,ours", [("gelu", "gelu_exact"), ("gelu_new", "gelu"), ("relu", "relu")]
)
def test_hugging_face_config_activation_names(tmp_path, hf_act, ours):
    hf = dict(
        ORIGINAL_BASE,
        hidden_act=hf_act,
        model_type="bert",
        layer_norm_eps=1e-12,
        pad_token_id=0,
        architectures=["BertModel"],
        position_embedding_type="absolute",
    )
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf))
    config = BertConfig.from_json_file(str(path))
    assert config.hidden_act == ours
    assert config.vocab_size == 30522


def test_hugging_face_config_of_another_model_is_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(ORIGINAL_BASE, model_type="roberta")))
    with pytest.raises(ValueError, match="roberta"):
        BertConfig.from_json_file(str(path))
