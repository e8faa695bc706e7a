"""Checkpoints both ways against Hugging Face transformers, on the real MiniLM weights:
a BertForPreTraining saved by transformers restores our heads (same logits); our models
converted by convert_checkpoint.py load in transformers (same outputs); conversions
round-trip bit for bit; the command line's errors; run_pretraining from the heads."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import convert_checkpoint
from data_prep.text import tokenization
from modeling import checkpoint_names, checkpoint_writers, checkpoints, models
from modeling.checkpoint_readers import read_safetensors
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from tests.conftest import REPO_ROOT, tiny_config
from tests.helpers.export_helpers import main_in_this_process
from tests.helpers import repo_pythonpath
from tests.compat.test_parity_real_checkpoint import encode, real_pairs, real_sentences

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ATOL = 1e-4
HF_TASK_CLASSES = {
    "classifier": "AutoModelForSequenceClassification",
    "span": "AutoModelForQuestionAnswering",
    "token_classifier": "AutoModelForTokenClassification",
    "multiple_choice": "AutoModelForMultipleChoice",
}


def seeded_heads(model, seed):
    """Random head weights of a useful scale (the initializer's 0.02 would make every
    logit nearly zero); the encoder keeps the real weights."""
    rng = np.random.RandomState(seed)
    encoder = {id(v) for v in model.encoder.variables}
    for v in model.variables:
        if id(v) not in encoder and "seed_generator" not in v.path:
            v.assign(0.3 * rng.standard_normal(v.shape).astype(np.float32))
    return model


@pytest.fixture(scope="module")
def real(minilm_dir):
    config = BertConfig.from_json_file(minilm_dir + "/config.json")
    encoder = BertEncoder(config)
    checkpoints.restore_model(minilm_dir, encoder)
    tokenizer = tokenization.FullTokenizer(minilm_dir + "/vocab.txt", do_lower_case=True)
    ours = {
        "classifier": models.BertClassifier(encoder, config, 3),
        "span": models.BertSpanLabeler(encoder, config),
        "token_classifier": models.BertTokenClassifier(encoder, config, 5),
        "multiple_choice": models.BertMultipleChoice(encoder, config),
    }
    for seed, model in enumerate(ours.values()):
        seeded_heads(model, seed)
    return config, tokenizer, ours


def to_torch(batch):
    names = {
        "input_word_ids": "input_ids",
        "input_mask": "attention_mask",
        "input_type_ids": "token_type_ids",
    }
    return {names[k]: torch.tensor(v, dtype=torch.long) for k, v in batch.items()}


def max_diff(ours, theirs, mask=None):
    diff = np.abs(np.asarray(ours) - theirs.detach().numpy())
    return float(diff[mask].max() if mask is not None else diff.max())


# ------------------------------------------------------------ Hugging Face heads in


def save_with_seeded_heads(model, directory, vocab_file) -> str:
    """Seeds the heads of transformers' BertForPreTraining `model` (at a useful scale),
    then save_pretrained to `directory` with the vocabulary; returns the folder."""
    with torch.no_grad():
        for name, parameter in model.cls.named_parameters():
            if name != "predictions.decoder.weight":  # Tied to the word embeddings.
                parameter.normal_(0.0, 0.3)
    model.save_pretrained(str(directory))
    shutil.copy(vocab_file, directory / "vocab.txt")
    return str(directory)


@pytest.fixture(scope="module")
def hf_pretraining_dir(minilm_dir, tmp_path_factory):
    """transformers' BertForPreTraining: real encoder, seeded heads, save_pretrained."""
    torch.manual_seed(0)
    model = transformers.BertForPreTraining.from_pretrained(minilm_dir).eval()
    directory = tmp_path_factory.mktemp("hf") / "pretraining"
    return save_with_seeded_heads(model, directory, minilm_dir + "/vocab.txt"), model


def test_pretraining_heads_of_hugging_face_give_transformers_logits(
    real, hf_pretraining_dir, capsys
):
    config, tokenizer, _ = real
    directory, theirs = hf_pretraining_dir
    saved = read_safetensors(os.path.join(directory, "model.safetensors"))
    assert "cls.seq_relationship.bias" in saved and "cls.predictions.bias" in saved
    ours = models.BertPretrainer(real[2]["classifier"].encoder, config)  # The same weights.
    info = checkpoints.restore_model(directory, ours)
    assert info["restored"] == ["encoder", "masked_lm", "next_sentence"]

    batch = encode(tokenizer, real_pairs(4) + real_sentences(4))
    lengths = batch["input_mask"].sum(1)
    positions = np.stack([np.linspace(1, n - 2, 5).astype(np.int32) for n in lengths])
    with torch.no_grad():
        ref = theirs(**to_torch(batch))
    out = ours({**batch, "masked_lm_positions": positions})
    their_mlm = ref.prediction_logits[np.arange(len(positions))[:, None], positions]
    mlm, nsp = (
        max_diff(out["mlm_logits"], their_mlm),
        max_diff(out["next_sentence_logits"], ref.seq_relationship_logits),
    )
    print(f"max |diff| masked-LM logits {mlm:.2e}, next-sentence logits {nsp:.2e}")
    assert mlm < ATOL and nsp < ATOL
    assert float(np.abs(out["next_sentence_logits"]).max()) > 0.1  # Not a vacuous test.


# ------------------------------------------------------------ our models out


@pytest.fixture(scope="module")
def converted(real, minilm_dir, tmp_path_factory):
    """{kind: Hugging Face folder} made by convert_checkpoint from our TF2 output."""
    root = tmp_path_factory.mktemp("converted")
    vocab = minilm_dir + "/vocab.txt"
    folders = {}
    for kind in ("classifier", "span", "token_classifier"):
        labels = {
            "classifier": ["neg", "neu", "pos"],
            "token_classifier": ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"],
        }.get(kind)
        tf2 = str(root / f"{kind}-tf2")
        checkpoint_writers.write_tf2_directory(tf2, real[2][kind], vocab, True, labels)
        folders[kind] = convert_checkpoint.convert(tf2, str(root / f"{kind}-hf"), "hf")
    # Multiple choice through the writer alone (the converter's last step).
    folders["multiple_choice"] = checkpoint_writers.write_hf_directory(
        str(root / "multiple_choice-hf"), real[2]["multiple_choice"], vocab, True
    )
    return folders


@pytest.mark.parametrize("kind", ["classifier", "span", "token_classifier", "multiple_choice"])
def test_converted_to_hugging_face_gives_our_outputs_in_transformers(real, converted, kind, capsys):
    _, tokenizer, ours = real
    folder = converted[kind]
    theirs = getattr(transformers, HF_TASK_CLASSES[kind]).from_pretrained(folder).eval()
    batch = encode(tokenizer, real_pairs(4) + real_sentences(4))
    real_tokens = batch["input_mask"].astype(bool)
    with torch.no_grad():
        if kind == "multiple_choice":  # Two examples of four choices each.
            stacked = {k: v.reshape(2, 4, -1) for k, v in batch.items()}
            out, ref = ours[kind](stacked), theirs(**to_torch(stacked))
            diffs = [max_diff(out["logits"], ref.logits)]
        elif kind == "span":
            out, ref = ours[kind](batch), theirs(**to_torch(batch))
            diffs = [
                max_diff(out["start_logits"], ref.start_logits, real_tokens),
                max_diff(out["end_logits"], ref.end_logits, real_tokens),
            ]
        else:
            out, ref = ours[kind](batch), theirs(**to_torch(batch))
            diffs = [
                max_diff(
                    out["logits"], ref.logits, real_tokens if kind == "token_classifier" else None
                )
            ]
    print(f"{kind}: max |diff| {max(diffs):.2e}")
    assert max(diffs) < ATOL
    if kind == "classifier":
        assert theirs.config.id2label == {0: "neg", 1: "neu", 2: "pos"}
        base = transformers.AutoModel.from_pretrained(folder).eval()
        with torch.no_grad():
            ref = base(**to_torch(batch))
        encoded = ours[kind].encoder(batch)
        diff = max(
            max_diff(encoded["sequence_output"], ref.last_hidden_state, real_tokens),
            max_diff(encoded["pooled_output"], ref.pooler_output),
        )
        print(f"AutoModel: max |diff| {diff:.2e}")
        assert diff < ATOL
        hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        for a, b in real_pairs(3):
            assert (
                hf_tokenizer(a, b)["input_ids"]
                == encode(tokenizer, [(a, b)])["input_word_ids"][0].tolist()
            )


def tf1_tensors(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_conversions_round_trip_bit_for_bit(real, converted, tmp_path):
    """Our classifier, converted to Hugging Face, then to TF1 and to ours: the same
    values under every name (the tables' transposes included)."""
    source = converted["classifier"]
    tf1 = convert_checkpoint.convert(
        source, str(tmp_path / "tf1"), "tf1", preserve_unused_tokens=True
    )
    # The setting goes on with the model (model_info.json), with no flag given.
    tf2 = convert_checkpoint.convert(str(tmp_path / "tf1"), str(tmp_path / "tf2"), "tf2")
    hf = read_safetensors(os.path.join(source, "model.safetensors"))
    stored = tf1_tensors(tf1)
    assert set(stored) == {"output_weights", "output_bias"} | {
        original
        for original, _, _ in checkpoint_names.original_variable_table(
            real[2]["classifier"].encoder
        )
    }
    for original, value in stored.items():
        name, transpose = checkpoint_names.hf_name(original, "bert.")
        np.testing.assert_array_equal(value.T if transpose else value, hf[name], err_msg=original)
    ours = real[2]["classifier"]
    reader = tf.train.load_checkpoint(tf2)
    for variable, key in [
        (ours.classifier.dense.kernel, "model/classifier/dense/_kernel"),
        (ours.classifier.dense.bias, "model/classifier/dense/bias"),
        (ours.encoder.embeddings.word_embeddings, "model/encoder/embeddings/word_embeddings"),
        (
            ours.encoder.layer_5.output_block.layer_norm.gamma,
            "model/encoder/layer_5/output_block/layer_norm/gamma",
        ),
    ]:
        np.testing.assert_array_equal(
            reader.get_tensor(key + "/.ATTRIBUTES/VARIABLE_VALUE"), variable.numpy(), err_msg=key
        )
    info = json.loads((tmp_path / "tf2" / "model_info.json").read_text())
    assert info["labels"] == ["neg", "neu", "pos"] and info["model_kind"] == "classifier"
    assert info["preserve_unused_tokens"] is True


def test_every_kind_goes_round_all_formats_unchanged(tmp_path):
    """Tiny models of every kind: Hugging Face -> TF1 -> ours -> Hugging Face, each
    step detecting the kind and labels from what the previous one wrote."""
    from tests.modeling.test_checkpoints import KINDS, build, randomized

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"w{i}\n" for i in range(99)))
    for kind in KINDS:
        labels = ["x", "y", "z"] if kind in ("classifier", "token_classifier") else None
        start = checkpoint_writers.write_hf_directory(
            str(tmp_path / f"{kind}-hf"), randomized(build(kind)), str(vocab), False, labels
        )
        folder = start
        for fmt in ("tf1", "tf2", "hf"):
            convert_checkpoint.convert(folder, str(tmp_path / f"{kind}-{fmt}-2"), fmt)
            folder = str(tmp_path / f"{kind}-{fmt}-2")
        before = read_safetensors(os.path.join(start, "model.safetensors"))
        after = read_safetensors(os.path.join(folder, "model.safetensors"))
        assert before.keys() == after.keys(), kind
        for key in before:
            np.testing.assert_array_equal(before[key], after[key], err_msg=f"{kind} {key}")
        for name in ("config.json", "tokenizer_config.json", "vocab.txt"):
            assert (tmp_path / f"{kind}-hf" / name).read_text() == (
                tmp_path / f"{kind}-hf-2" / name
            ).read_text(), name


# ------------------------------------------------------------ the command line


def convert_in_this_process(argv: list[str]) -> list[str]:
    """convert_checkpoint's main on `argv` (its flags parsed as the command line parses
    them) in this process: ["no error", ""] or [error type, message]."""
    try:
        main_in_this_process(convert_checkpoint, argv)
    except Exception as e:
        return [type(e).__name__, str(e)]
    return ["no error", ""]


def test_command_line_reads_beside_the_input_and_says_what_is_wrong(tmp_path, monkeypatch):
    """Several command lines, one after the other, in this process (from tmp_path)."""
    tiny = tiny_config(vocab_size=99)
    config = BertConfig(**tiny)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"w{i}\n" for i in range(99)))
    source = str(tmp_path / "run_classifier_output")
    checkpoint_writers.write_original_directory(
        source, models.BertClassifier(BertEncoder(config), config, 3), str(vocab), True
    )
    os.remove(os.path.join(source, "model_info.json"))  # As the original release's.
    wide = tmp_path / "wide_config.json"
    wide.write_text(BertConfig(**dict(tiny, hidden_size=48)).to_json_string())
    (tmp_path / "users").mkdir()
    (tmp_path / "users" / "notes.txt").write_text("mine")
    prefix = os.path.join(source, "bert_model.ckpt")
    runs = {
        "ambiguous": [
            f"--init_checkpoint={prefix}",
            f"--output_dir={tmp_path / 'a'}",
            "--output_format=hf",
        ],
        "classifier": [
            f"--init_checkpoint={prefix}",
            f"--output_dir={tmp_path / 'hf'}",
            "--output_format=hf",
            "--model_kind=classifier",
        ],
        "missing": [
            f"--init_checkpoint={tmp_path / 'nowhere'}",
            f"--output_dir={tmp_path / 'b'}",
            "--output_format=tf2",
        ],
        "wide": [
            f"--init_checkpoint={prefix}",
            f"--output_dir={tmp_path / 'c'}",
            "--output_format=tf2",
            "--model_kind=classifier",
            f"--bert_config_file={wide}",
        ],
        "no_span": [
            f"--init_checkpoint={prefix}",
            f"--output_dir={tmp_path / 'd'}",
            "--output_format=tf2",
            "--model_kind=span",
        ],
        "case": [
            f"--init_checkpoint={tmp_path / 'hf'}",
            f"--output_dir={tmp_path / 'e'}",
            "--output_format=tf1",
            "--do_lower_case=false",
        ],
        "users": [
            f"--init_checkpoint={tmp_path / 'hf'}",
            f"--output_dir={tmp_path / 'users'}",
            "--output_format=tf1",
        ],
    }
    monkeypatch.chdir(tmp_path)
    results = {name: convert_in_this_process(argv) for name, argv in runs.items()}
    assert results["classifier"] == ["no error", ""]
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert written["architectures"] == ["BertForSequenceClassification"]
    assert len(written["id2label"]) == 3
    assert (
        json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["do_lower_case"] is True
    )
    assert (tmp_path / "hf" / "vocab.txt").read_text() == vocab.read_text()

    kind, message = results["ambiguous"]
    assert kind == "UserError" and "--model_kind" in message
    assert "classifier, token_classifier" in message
    kind, message = results["missing"]
    assert kind == "MissingFileError" and "nowhere" in message
    kind, message = results["wide"]
    assert kind == "CheckpointMismatchError"
    assert "bert/embeddings/word_embeddings" in message and "[99, 32]" in message
    assert "[99, 48]" in message
    kind, message = results["no_span"]
    assert kind == "UserError" and "has no span head" in message
    kind, message = results["case"]
    assert kind == "UserError" and "do_lower_case=False" in message
    assert "do_lower_case=True" in message
    kind, message = results["users"]
    assert kind == "OutputExistsError" and os.listdir(tmp_path / "users") == ["notes.txt"]
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()


# ------------------------------------------------------------ run_pretraining


def write_pretraining_records(path, tokenizer, seq, preds):
    """A few real sentence pairs as original-format pre-training records."""
    rng = np.random.RandomState(0)
    batch = encode(tokenizer, real_pairs(4), max_seq_length=seq)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(len(batch["input_word_ids"])):
            ids = np.zeros(seq, np.int64)
            mask = np.zeros(seq, np.int64)
            types = np.zeros(seq, np.int64)
            length = int(batch["input_mask"][i].sum())
            ids[:length] = batch["input_word_ids"][i][:length]
            mask[:length] = 1
            types[:length] = batch["input_type_ids"][i][:length]
            positions = np.sort(rng.choice(np.arange(1, length - 1), preds, replace=False))
            labels = ids[positions].copy()
            ids[positions] = tokenizer.vocab["[MASK]"]
            ints = {
                "input_ids": ids,
                "input_mask": mask,
                "segment_ids": types,
                "masked_lm_positions": positions,
                "masked_lm_ids": labels,
                "next_sentence_labels": [i % 2],
            }
            feature = {
                k: tf.train.Feature(int64_list=tf.train.Int64List(value=list(v)))
                for k, v in ints.items()
            }
            feature["masked_lm_weights"] = tf.train.Feature(
                float_list=tf.train.FloatList(value=[1.0] * preds)
            )
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )


@pytest.fixture(scope="module")
def tiny_hf_pretraining_dir(vocab_file, tmp_path_factory):
    """transformers' BertForPreTraining of the tiny config (random encoder, seeded
    heads), save_pretrained with the bundled vocabulary: what the runner reads from a
    Hugging Face folder is the same at any size (the real weights' parity is above)."""
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(transformers.BertConfig(**tiny_config())).eval()
    directory = tmp_path_factory.mktemp("tiny_hf") / "pretraining"
    return save_with_seeded_heads(model, directory, vocab_file)


@pytest.mark.slow
def test_run_pretraining_starts_from_hugging_face_heads(
    tiny_hf_pretraining_dir, tokenizer, tmp_path
):
    """--init_checkpoint=<BertForPreTraining folder>, no --bert_config_file: one step at
    learning rate 0 saves exactly the heads transformers saved."""
    directory = tiny_hf_pretraining_dir
    shard = tmp_path / "shard.tfrecord"
    write_pretraining_records(shard, tokenizer, seq=32, preds=4)
    output = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "run_pretraining.py"),
            f"--input_file={shard}",
            f"--output_dir={output}",
            f"--init_checkpoint={directory}",
            "--do_train",
            "--max_seq_length=32",
            "--max_predictions_per_seq=4",
            "--train_batch_size=2",
            "--num_train_steps=1",
            "--num_warmup_steps=0",
            "--learning_rate=0",
            "--steps_per_loop=1",
            "--alsologtostderr",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=repo_pythonpath()),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        f"Restored encoder, masked_lm, next_sentence from hf checkpoint {directory}; "
        f"starting fresh: nothing"
    ) in result.stderr
    saved = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(output)))
    hf = read_safetensors(os.path.join(directory, "model.safetensors"))
    suffix = "/.ATTRIBUTES/VARIABLE_VALUE"
    for ours, theirs, transpose in [
        ("model/masked_lm/output_bias", "cls.predictions.bias", False),
        ("model/masked_lm/transform_dense/_kernel", "cls.predictions.transform.dense.weight", True),
        (
            "model/masked_lm/transform_layer_norm/gamma",
            "cls.predictions.transform.LayerNorm.weight",
            False,
        ),
        ("model/next_sentence/dense/_kernel", "cls.seq_relationship.weight", True),
        ("model/next_sentence/dense/bias", "cls.seq_relationship.bias", False),
    ]:
        value = saved.get_tensor(ours + suffix)
        np.testing.assert_array_equal(value.T if transpose else value, hf[theirs], err_msg=ours)
