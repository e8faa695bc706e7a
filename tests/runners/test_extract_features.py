"""extract_features.py: output format, truncation and bad input (tiny model, fast)."""

import json

import numpy as np
import pytest

import extract_features
from data_prep.text import tokenization
from modeling.config import BertConfig
from modeling.encoder import BertEncoder

VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "cat",
    "sat",
    "on",
    "mat",
    "dog",
    "##s",
    ".",
    "a",
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("ef")
    vocab = d / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    config = BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=16,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=20,
        type_vocab_size=2,
        max_position_embeddings=32,
    )
    return BertEncoder(config), tokenization.FullTokenizer(str(vocab)), d


def test_output_format_and_values(setup, tmp_path):
    encoder, tokenizer, _ = setup
    src = tmp_path / "in.txt"
    src.write_text("The cat sat on the mat.\nthe dogs ||| a cat\n")
    out = tmp_path / "out.jsonl"
    assert (
        extract_features.extract(
            encoder, tokenizer, str(src), str(out), [-1, 0], max_seq_length=32, batch_size=1
        )
        == 2
    )
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["linex_index"] for line in lines] == [0, 1]
    assert [f["token"] for f in lines[0]["features"]] == [
        "[CLS]",
        "the",
        "cat",
        "sat",
        "on",
        "the",
        "mat",
        ".",
        "[SEP]",
    ]
    assert [f["token"] for f in lines[1]["features"]] == [
        "[CLS]",
        "the",
        "dog",
        "##s",
        "[SEP]",
        "a",
        "cat",
        "[SEP]",
    ]
    inputs = extract_features.batch_inputs(
        tokenizer, [[f["token"] for f in lines[1]["features"]]], [[0, 0, 0, 0, 0, 1, 1, 1]]
    )
    want = encoder(inputs)["encoder_outputs"]
    for position, feature in enumerate(lines[1]["features"]):
        assert [layer["index"] for layer in feature["layers"]] == [-1, 0]
        values = feature["layers"][0]["values"]
        assert len(values) == 16
        assert all(round(v, 6) == v for v in values)
        np.testing.assert_allclose(values, want[-1].numpy()[0, position], atol=1e-5)
        np.testing.assert_allclose(
            feature["layers"][1]["values"], want[0].numpy()[0, position], atol=1e-5
        )


def test_truncation_as_the_original(setup):
    _, tokenizer, _ = setup
    tokens, segments = extract_features.example_to_tokens(
        tokenizer, "the cat sat on the mat", None, 5
    )
    assert tokens == ["[CLS]", "the", "cat", "sat", "[SEP]"] and segments == [0] * 5
    tokens, segments = extract_features.example_to_tokens(tokenizer, "the cat sat on", "a dog", 7)
    assert tokens == ["[CLS]", "the", "cat", "[SEP]", "a", "dog", "[SEP]"]
    assert segments == [0, 0, 0, 0, 1, 1, 1]


def test_bad_input(setup, tmp_path):
    encoder, tokenizer, _ = setup
    out = tmp_path / "out.jsonl"
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        extract_features.extract(
            encoder, tokenizer, str(tmp_path / "missing.txt"), str(out), [-1], 16, 2
        )
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty"):
        extract_features.extract(encoder, tokenizer, str(empty), str(out), [-1], 16, 2)
    src = tmp_path / "in.txt"
    src.write_text("the cat\n")
    with pytest.raises(ValueError, match="out of range"):
        extract_features.extract(encoder, tokenizer, str(src), str(out), [3], 16, 2)
    with pytest.raises(ValueError, match="max_position_embeddings=32"):
        extract_features.extract(encoder, tokenizer, str(src), str(out), [-1], 64, 2)
    assert not out.exists() and not (tmp_path / "out.jsonl.tmp").exists()
    assert not list(tmp_path.glob(".out.jsonl.tmp-*"))  # records.atomic_open's
