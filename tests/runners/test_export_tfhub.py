"""Slow test of export_tfhub.py on the real checkpoint (MiniLM): its encoder and
preprocessing exports against the in-memory model and the Python tokenizer and
packing on the bundled MRPC text.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops the preprocessing model needs)

import export_tfhub

# Another command's flags in this process (run_classifier's --max_seq_length=128) must
# not concern the export: the tiny checkpoint below has max_position_embeddings=64.
import run_classifier  # noqa: F401
from common.errors import UserError
from data_prep.text import tokenization
from modeling import checkpoint_writers, checkpoints, hub
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from tests.conftest import write_tiny_config
from tests.helpers.export_helpers import (
    assert_encoder_outputs_equal,
    main_in_this_process,
    mrpc_pairs,
    python_pack,
)


@pytest.mark.slow
def test_export_tfhub_real_checkpoint_parity(minilm_dir, sample_data, vocab_file, tmp_path):
    """export_tfhub.py on the real checkpoint: text -> preprocessing export -> encoder
    export (hub.KerasLayer, hub.load, HubEncoder) equals our in-memory encoder and
    Hugging Face transformers (an independent implementation)."""
    encoder_path, preprocess_path = str(tmp_path / "encoder"), str(tmp_path / "preprocess")
    # A checkpoint without a masked-LM head (as this one; a tiny one here, the same
    # check at any size): a clear error and no export.
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    tiny_config = BertConfig.from_json_file(write_tiny_config(tiny / "bert_config.json"))
    prefix = checkpoint_writers.write_original_checkpoint(
        str(tiny / "bert_model.ckpt"), BertEncoder(tiny_config)
    )
    mlm_path = tmp_path / "mlm"
    # The command lines' main in this process (TensorFlow is started already).
    main_in_this_process(
        export_tfhub,
        [
            f"--init_checkpoint={minilm_dir}",
            "--export_type=encoder",
            f"--export_path={encoder_path}",
        ],
    )
    main_in_this_process(
        export_tfhub,
        [
            f"--init_checkpoint={minilm_dir}",
            "--export_type=preprocessing",
            "--seq_length=128",
            f"--export_path={preprocess_path}",
        ],
    )
    with pytest.raises(UserError, match="no masked-LM head"):
        main_in_this_process(
            export_tfhub,
            [
                f"--init_checkpoint={prefix}",
                f"--vocab_file={vocab_file}",
                "--export_type=encoder_with_mlm",
                f"--export_path={mlm_path}",
            ],
        )
    assert not mlm_path.exists()

    pairs = mrpc_pairs(sample_data, count=16)
    preprocessor = tf.saved_model.load(preprocess_path)
    texts_a, texts_b = (tf.constant([p[i] for p in pairs]) for i in (0, 1))
    inputs = preprocessor.bert_pack_inputs(
        [preprocessor.tokenize(texts_a), preprocessor.tokenize(texts_b)], seq_length=128
    )
    python_tokenizer = tokenization.FullTokenizer(os.path.join(minilm_dir, "vocab.txt"))
    want_ids = python_pack(python_tokenizer, pairs, 128)
    np.testing.assert_array_equal(inputs["input_word_ids"], want_ids["input_word_ids"])

    config = BertConfig.from_json_file(os.path.join(minilm_dir, "config.json"))
    ours = BertEncoder(config)
    checkpoints.restore_model(minilm_dir, ours)
    want = ours(inputs, training=False)
    got = tf.saved_model.load(encoder_path)(inputs, training=False)
    # Six real layers in float32 whose hidden states reach magnitudes of several units:
    # on a Xeon with AMX, one element of 786,432 (4.33) differed by 4.7e-5 of itself
    # between the export's kernels and the in-memory model's.
    close = {"num_layers": 6, "atol": 1e-4, "rtol": 1e-4}
    assert_encoder_outputs_equal(got, want, **close)
    assert_encoder_outputs_equal(hub.HubEncoder(encoder_path)(inputs), want, **close)
    hub_lib = pytest.importorskip("tensorflow_hub")
    assert_encoder_outputs_equal(hub_lib.KerasLayer(encoder_path)(inputs), want, **close)

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    reference = transformers.BertModel.from_pretrained(minilm_dir).eval()
    with torch.no_grad():
        hf = reference(
            input_ids=torch.tensor(want_ids["input_word_ids"], dtype=torch.long),
            attention_mask=torch.tensor(want_ids["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(want_ids["input_type_ids"], dtype=torch.long),
        )
    mask = want_ids["input_mask"][..., None].astype(bool)
    np.testing.assert_allclose(
        np.where(mask, got["sequence_output"], 0),
        np.where(mask, hf.last_hidden_state.numpy(), 0),
        atol=1e-4,
    )
    np.testing.assert_allclose(got["pooled_output"], hf.pooler_output.numpy(), atol=1e-4)
