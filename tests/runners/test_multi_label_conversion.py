"""A multi-label classifier converted to Hugging Face (`convert_checkpoint.convert`, what
convert_checkpoint.py --output_format=hf runs) on the real MiniLM weights: config.json says
`problem_type: multi_label_classification`, transformers' BertForSequenceClassification
gives our probabilities (a sigmoid per label), and converting back keeps it multi-label."""

import json

import numpy as np
import pytest

import convert_checkpoint
from modeling import checkpoint_writers, checkpoints, models
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from data_prep.text import tokenization
from tests.compat.test_parity_real_checkpoint import encode, real_sentences
from tests.runners.test_convert_checkpoint import seeded_heads, to_torch

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

LABELS = ["LOC", "MISC", "ORG", "PER"]


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


@pytest.mark.slow
def test_multi_label_classifier_in_transformers_gives_our_probabilities(minilm_dir, tmp_path):
    config = BertConfig.from_json_file(minilm_dir + "/config.json")
    encoder = BertEncoder(config)
    checkpoints.restore_model(minilm_dir, encoder)
    ours = seeded_heads(models.BertClassifier(encoder, config, 4, multi_label=True), 7)
    vocab = minilm_dir + "/vocab.txt"
    tf2 = str(tmp_path / "tf2")
    checkpoint_writers.write_tf2_directory(tf2, ours, vocab, True, LABELS)
    assert json.loads(open(tf2 + "/model_info.json").read())["multi_label"] is True
    # The converter the command line calls (its flags are tested in
    # test_convert_checkpoint.py), in this process.
    hf = tmp_path / "hf"
    convert_checkpoint.convert(tf2, str(hf), "hf")
    written = json.loads((hf / "config.json").read_text())
    assert written["problem_type"] == "multi_label_classification"
    assert written["id2label"] == {str(i): label for i, label in enumerate(LABELS)}

    theirs = transformers.BertForSequenceClassification.from_pretrained(str(hf)).eval()
    assert theirs.config.problem_type == "multi_label_classification"
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    batch = encode(tokenizer, real_sentences(6))
    with torch.no_grad():
        their_logits = theirs(**to_torch(batch)).logits.numpy()
    our_probabilities = sigmoid(ours(batch)["logits"])
    diff = np.abs(our_probabilities - sigmoid(their_logits)).max()
    print(f"max |diff| of the probabilities {diff:.2e}")
    assert diff < 1e-5
    assert our_probabilities.std() > 0.05  # Not a vacuous test: the labels differ.

    # Back from Hugging Face to ours, as from a folder transformers wrote (no
    # model_info.json: its problem_type says it): still a multi-label classifier.
    (hf / "model_info.json").unlink()
    back = convert_checkpoint.convert(str(hf), str(tmp_path / "back"), "tf2")
    info = json.loads(open(str(tmp_path / "back" / "model_info.json")).read())
    assert info["multi_label"] is True and info["labels"] == LABELS, back
