"""modeling.model_files: a model's config, vocabulary and case, found and checked before
any work; output folders that carry them."""

import json
import shutil

import pytest

from modeling import model_files
from modeling.config import BertConfig
from tests.conftest import SAMPLE_DATA

VOCAB = str(SAMPLE_DATA / "vocab" / "uncased_vocab.txt")


def _config(path, vocab_size=30522):
    path.write_text(
        BertConfig(
            vocab_size=vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=37,
        ).to_json_string()
    )
    return str(path)


def test_an_uncased_hugging_face_directory_refuses_do_lower_case_false(minilm_dir):
    with pytest.raises(
        ValueError,
        match=r"--do_lower_case=False does not match the model: "
        r".*tokenizer_config.json says do_lower_case=True",
    ):
        model_files.resolve(None, None, minilm_dir, do_lower_case=False)
    files = model_files.resolve(None, None, minilm_dir, do_lower_case=None)
    assert files.do_lower_case is True and files.vocab_file.endswith("vocab.txt")
    assert files.config.hidden_size == 384


def test_case_from_the_original_checkpoint_names_and_the_vocabulary(tmp_path):
    uncased = tmp_path / "uncased_L-12_H-768_A-12"
    uncased.mkdir()
    config = _config(uncased / "bert_config.json")
    shutil.copy(VOCAB, uncased / "vocab.txt")
    checkpoint = str(uncased / "bert_model.ckpt")
    with pytest.raises(ValueError, match="checkpoint name"):
        model_files.resolve(config, None, checkpoint, do_lower_case=False)
    # A folder named otherwise: the vocabulary alone says uncased.
    other = tmp_path / "my_model"
    shutil.copytree(uncased, other)
    with pytest.raises(ValueError, match="has no upper-case entry"):
        model_files.resolve(None, None, str(other / "bert_model.ckpt"), do_lower_case=False)
    cased_vocab = tmp_path / "cased_vocab.txt"
    cased_vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nThe\nthe\nParis\n##s\n")
    with pytest.raises(ValueError, match="cased vocabulary"):
        model_files.resolve(config, str(cased_vocab), None, do_lower_case=True)
    assert not model_files.resolve(config, str(cased_vocab), None, None).do_lower_case


def test_vocabulary_larger_than_the_config_fails_before_any_work(tmp_path, caplog):
    small = _config(tmp_path / "small.json", vocab_size=1000)
    with pytest.raises(
        ValueError,
        match=r"has 30522 entries but the model's config has "
        r"vocab_size=1000",
    ):
        model_files.resolve(small, VOCAB, None, None)
    large = _config(tmp_path / "large.json", vocab_size=30600)
    files = model_files.resolve(large, VOCAB, None, None)
    assert files.config.vocab_size == 30600


def test_missing_files_are_named(tmp_path):
    with pytest.raises(
        ValueError,
        match="--bert_config_file is required: the checkpoint folder .* has no bert_config.json",
    ):
        model_files.resolve(None, None, str(tmp_path / "model.ckpt"), None)
    config = _config(tmp_path / "bert_config.json")
    with pytest.raises(ValueError, match="--vocab_file is required"):
        model_files.resolve(config, None, None, None)
    with pytest.raises(FileNotFoundError, match="--vocab_file not found"):
        model_files.resolve(config, str(tmp_path / "nope.txt"), None, None)


def test_an_output_folder_is_self_contained(tmp_path):
    files = model_files.ModelFiles(
        BertConfig.from_json_file(_config(tmp_path / "c.json")), VOCAB, do_lower_case=True
    )
    out = tmp_path / "run"
    model_files.write_model_files(str(out), files, "classifier", labels=["0", "1"])
    assert sorted(p.name for p in out.iterdir()) == [
        "bert_config.json",
        "model_info.json",
        "vocab.txt",
    ]
    info = json.loads((out / "model_info.json").read_text())
    assert info == {
        "model_kind": "classifier",
        "do_lower_case": True,
        "preserve_unused_tokens": False,
        "labels": ["0", "1"],
        "vocab_sha256": model_files.vocab_fingerprint(VOCAB),
        "vocab_size": 30522,
    }
    again = model_files.resolve(None, None, str(out), None)
    assert again.config == files.config and again.do_lower_case
    assert not again.preserve_unused_tokens
    assert (out / "vocab.txt").read_bytes() == open(VOCAB, "rb").read()
    # A checkpoint prefix inside the folder, or in its best/ sub-folder, finds it too.
    (out / "best").mkdir()
    assert model_files.read_model_info(str(out / "best" / "best-3"))["labels"] == ["0", "1"]
    with pytest.raises(ValueError, match="model_info.json .* says do_lower_case=True"):
        model_files.resolve(None, None, str(out / "ckpt-5"), do_lower_case=False)


def test_preserve_unused_tokens_goes_with_the_model(tmp_path, caplog):
    """Recorded in model_info.json; a later run uses it unless the flag says otherwise."""
    config = BertConfig.from_json_file(_config(tmp_path / "c.json"))
    files = model_files.ModelFiles(config, VOCAB, True, preserve_unused_tokens=True)
    out = tmp_path / "run"
    model_files.write_model_files(str(out), files, "classifier", labels=["0", "1"])
    assert json.loads((out / "model_info.json").read_text())["preserve_unused_tokens"] is True
    again = model_files.resolve(None, None, str(out), None)
    assert again.preserve_unused_tokens
    assert again.tokenizer().tokenize("[unused0] a") == ["[unused0]", "a"]
    with caplog.at_level("WARNING"):
        off = model_files.resolve(None, None, str(out), None, preserve_unused_tokens=False)
    assert not off.preserve_unused_tokens
    assert "trained with True" in caplog.text
    assert off.tokenizer().tokenize("[unused0]") == ["[", "unused", "##0", "]"]
    # No record (a released checkpoint): the flag, else False.
    assert not model_files.resolve(
        _config(tmp_path / "d.json"), VOCAB, None, None
    ).preserve_unused_tokens
    assert model_files.resolve_preserve_unused_tokens(True, None)


def test_a_vocabulary_accepted_by_flag_keeps_the_models_other_settings(tmp_path):
    """--allow_vocab_mismatch lets another vocabulary through and changes nothing else
    (an export once passed it where preserve_unused_tokens belongs: the options are
    keyword-only now)."""
    config = BertConfig.from_json_file(_config(tmp_path / "c.json"))
    files = model_files.ModelFiles(config, VOCAB, True, preserve_unused_tokens=True)
    out = tmp_path / "run"
    model_files.write_model_files(str(out), files, "classifier", labels=["0", "1"])
    lines = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    other = tmp_path / "other.txt"
    other.write_text("\n".join(lines[:-1] + ["[other]"]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="--allow_vocab_mismatch"):
        model_files.resolve(None, str(other), str(out), None)
    accepted = model_files.resolve(None, str(other), str(out), None, allow_vocab_mismatch=True)
    assert accepted.vocab_file == str(other) and accepted.preserve_unused_tokens
    with pytest.raises(TypeError):
        model_files.resolve(None, str(other), str(out), None, True)
    # Pre-training from shards needs no vocabulary; the case is then the model's.
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(out / "bert_config.json", bare / "bert_config.json")
    assert model_files.resolve(None, None, str(bare), None, vocab_required=False).vocab_file is None
    with pytest.raises(ValueError, match="--vocab_file is required"):
        model_files.resolve(None, None, str(bare), None)
