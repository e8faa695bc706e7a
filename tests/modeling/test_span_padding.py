"""SQuAD's span loss counts the padding positions (its softmax runs over the whole
window, as in the original release and Hugging Face), so fine-tuning keeps SQuAD's
training batches padded unless told otherwise; prediction batches are cut, since the
logits at the real positions do not depend on the padding."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from data_prep import input_pipeline
from data_prep.squad import squad_features, squad_reader
from data_prep.text import tokenization
from modeling import finetuning, models
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.objectives import (
    ClassificationObjective,
    SpanObjective,
    TokenClassificationObjective,
)
from tests.conftest import SAMPLE_DATA, tiny_config

SEQ = 128


def _padded_batch() -> dict:
    """8 training windows of the bundled SQuAD sample's answerable questions (the
    short last windows of their paragraphs), padded to SEQ, as one batch."""
    examples = squad_reader.read_squad_examples(
        str(SAMPLE_DATA / "squad" / "dev-v2.0-first5articles.json"), True, True
    )
    examples = [e for e in examples if not e.is_impossible][:40]
    tokenizer = tokenization.FullTokenizer(str(SAMPLE_DATA / "vocab" / "uncased_vocab.txt"))
    features = squad_features.convert_examples_to_features(examples, tokenizer, SEQ, 64, 32, True)
    features = [f for f in features if sum(f.input_mask) <= 96][:8]
    assert len(features) == 8
    return {
        "input_word_ids": tf.constant([f.input_ids for f in features]),
        "input_mask": tf.constant([f.input_mask for f in features]),
        "input_type_ids": tf.constant([f.segment_ids for f in features]),
        "start_positions": tf.constant([f.start_position for f in features]),
        "end_positions": tf.constant([f.end_position for f in features]),
    }


def test_cut_batches_change_the_span_loss_but_not_the_logits():
    keras.utils.set_random_seed(3)
    config = BertConfig(**tiny_config(0.0, max_position_embeddings=SEQ))
    model = models.BertSpanLabeler(BertEncoder(config), config)
    padded = _padded_batch()
    cut = input_pipeline.cut_batch(padded, SEQ)
    width = cut["input_word_ids"].shape[1]
    assert width < SEQ  # The sample's windows are shorter than SEQ.
    out_padded, out_cut = model(padded), model(cut)
    for key in ("start_logits", "end_logits"):
        real = padded["input_mask"].numpy()[:, :width].astype(bool)
        np.testing.assert_allclose(
            out_cut[key].numpy()[real], out_padded[key].numpy()[:, :width][real], atol=1e-5
        )
    objective = SpanObjective()
    loss_padded = float(objective.loss_sums(padded, out_padded)["loss"])
    loss_cut = float(objective.loss_sums(cut, out_cut)["loss"])
    # The padded softmax also spreads probability over SEQ - width more positions.
    assert loss_padded > loss_cut + 1.0


@pytest.mark.parametrize(
    "flag, span, others, inference",
    [
        (None, True, False, False),  # The default: SQuAD trains padded, the rest cut.
        (False, False, False, False),  # --nopad_to_max_seq_length: everything cut.
        (True, True, True, True),  # --pad_to_max_seq_length: everything padded.
    ],
)
def test_training_batches_stay_padded_where_the_loss_sees_padding(flag, span, others, inference):
    settings = finetuning.Settings(output_dir="out", pad_to_max_seq_length=flag)
    assert settings.training_input_options(SpanObjective())["pad_to_max_seq_length"] is span
    for objective in (ClassificationObjective(False), TokenClassificationObjective()):
        assert settings.pads_training(objective) is others
    assert settings.pads_inference is inference
