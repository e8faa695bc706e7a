"""Damaged input named, not read silently or failed on deep inside: compressed corpora
cut short or bit-flipped, TFRecord shards cut short or corrupted, checkpoints cut
short or garbled, a directory or blank lines as a corpus, ids beyond the vocabulary,
a flag of layers that is not a list of numbers, a batch larger than the data.

Each case is one of the "bad cases" of the robustness issue; docs/robustness.md lists
them with their messages. The fuzzing of every reader is tests/robustness/test_fuzz_readers.py.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import logging
import pathlib
import pickle
import shutil

import numpy as np
import pytest
import tensorflow as tf

from common.errors import DamagedFileError, UserError
from common import file_io
from data_prep.pretraining import corpus, pretraining_data
from data_prep import damage, input_pipeline, records
from data_prep.pretraining import pretraining_instances as pti
from tests.conftest import tiny_config
from modeling import checkpoint_readers, feature_based
from modeling.config import BertConfig
from tests.data_prep.test_pretraining_pipeline import run_in_process, settings

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
CORPUS = REPO_ROOT / "sample_data" / "corpus" / "bert_paper_v1.txt"
TEXT = CORPUS.read_bytes()[:20000]


def flipped(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :]


# ----------------------------------------------------------------------------
# Compressed text.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("suffix, compress", [(".gz", gzip.compress), (".bz2", bz2.compress)])
def test_decompressed_text_is_whole_or_named(suffix, compress):
    data = compress(TEXT)

    def read(raw: bytes) -> bytes:
        return damage.open_decompressed(io.BytesIO(raw), "corpus.txt" + suffix).read()

    assert read(data) == TEXT
    assert read(data + data) == TEXT + TEXT  # Concatenated streams (cat a.gz b.gz).
    with pytest.raises(DamagedFileError, match="ends before its end marker") as cut:
        read(data[: len(data) // 2])
    assert str(cut.value).startswith(f"corpus.txt{suffix}: line ")
    # Whole across worker processes (create_pretraining_data --num_workers).
    assert str(pickle.loads(pickle.dumps(cut.value))) == str(cut.value)
    # The line named is where the text stops: the lines before it are whole (bzip2
    # gives no text of a block, 900 kB, before its end).
    line = int(str(cut.value).split("line ")[1].split(":")[0])
    assert (1 if suffix == ".bz2" else 10) <= line <= TEXT.count(b"\n")
    with pytest.raises(DamagedFileError, match=f"corpus.txt{suffix}: line .*not valid"):
        read(flipped(data, len(data) // 2))
    with pytest.raises(DamagedFileError, match="empty"):
        read(b"")


def test_compressed_corpus_of_create_pretraining_data(tmp_path, tokenizer):
    path = tmp_path / "corpus.txt.gz"
    path.write_bytes(gzip.compress(TEXT))
    stats = pti.Stats()
    documents = pti.read_documents([str(path)], tokenizer, 125, stats)
    plain = tmp_path / "corpus.txt"
    plain.write_bytes(TEXT)
    assert documents == pti.read_documents([str(plain)], tokenizer, 125, pti.Stats())
    path.write_bytes(flipped(gzip.compress(TEXT), 3000))
    with pytest.raises(UserError, match=r"corpus.txt.gz: line \d+: not valid gzip data"):
        pti.read_documents([str(path)], tokenizer, 125, pti.Stats())


@pytest.mark.slow
def test_pipeline_names_or_counts_a_damaged_gz_and_refuses_to_write_nothing(tmp_path, vocab_file):
    """A truncated .gz was read as if whole (exit 0, "bad input none"); a bit-flipped
    one failed with a bare zlib.error; a corpus of blank lines wrote nothing, exit 0."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    data = gzip.compress(TEXT)
    (inputs / "cut.txt.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(corpus.BadInputError, match=r"cut.txt.gz: line \d+: the gzip data ends"):
        run_in_process(settings(tmp_path / "a", [inputs / "cut.txt.gz"], vocab_file, dupe_factor=1))

    (inputs / "good.txt").write_bytes(TEXT)
    (inputs / "flip.txt.gz").write_bytes(flipped(data, len(data) // 2))
    skip = settings(tmp_path / "b", [inputs / "*"], vocab_file, dupe_factor=1, bad_input="skip")
    summary = run_in_process(skip)
    assert summary["bad_input"] == {"damaged_file": 2}
    examples = "\n".join(summary["bad_input_examples"])
    assert "cut.txt.gz: line" in examples and "flip.txt.gz: line" in examples
    assert [p.name for p in (tmp_path / "b" / "shards").glob("*.tfrecord")] == ["good.tfrecord"]

    (inputs / "blank.txt").write_text("\n \n\t\n\n")
    with pytest.raises(UserError, match=r"No shard written .* no document with a token"):
        run_in_process(settings(tmp_path / "c", [inputs / "blank.txt"], vocab_file))
    assert not (tmp_path / "c" / "shards" / "summary.json").exists()


def test_a_directory_as_corpus_is_named(tmp_path):
    (tmp_path / "corpus").mkdir()
    with pytest.raises(UserError, match=r"--input_file '.*corpus': .*corpus is a directory"):
        records.expand_globs(str(tmp_path / "corpus"), original_order=True)


# ----------------------------------------------------------------------------
# TFRecord shards.
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shard(tmp_path_factory, vocab_file):
    """A pre-training shard (S 32, P 5) of the paper's first lines, with metadata."""
    from data_prep.pretraining import pretraining_records as ptr

    directory = tmp_path_factory.mktemp("shard")
    text = directory / "corpus.txt"
    text.write_bytes(b"".join(CORPUS.read_bytes().splitlines(keepends=True)[:40]))
    output = directory / "shard.tfrecord"
    ptr.run(
        ptr.RunOptions(
            input_files=(str(text),),
            output_files=(str(output),),
            vocab_file=vocab_file,
            dupe_factor=2,
            instance=pti.InstanceOptions(max_seq_length=32),
            masking=pti.MaskingOptions(max_predictions_per_seq=5),
        )
    )
    return output


def copy_shard(shard, directory, data: bytes, metadata: bool) -> str:
    path = directory / "damaged.tfrecord"
    path.write_bytes(data)
    if metadata:
        shutil.copy(records.metadata_path(str(shard)), records.metadata_path(str(path)))
    return str(path)


def test_truncated_shard_names_file_and_record(shard, tmp_path):
    data = shard.read_bytes()
    offsets = list(damage.record_offsets(str(shard)))
    count = len(offsets)
    assert pretraining_data.shards_metadata([str(shard)], 32, 5, 30522, True).num_records == count
    for metadata in (True, False):
        path = copy_shard(shard, tmp_path, data[: offsets[7] + 20], metadata)
        with pytest.raises(DamagedFileError) as error:
            pretraining_data.shards_metadata([path], 32, 5, 30522)
        assert str(error.value) == (
            f"{path}: record 8 (byte {offsets[7]:,}): the file ends inside this record: "
            "it was cut short: make it again"
        )
    # Whole records dropped: the metadata's count no longer holds.
    path = copy_shard(shard, tmp_path, data[: offsets[7]], metadata=True)
    with pytest.raises(UserError, match=f"holds 7 records but its metadata .* says {count}"):
        pretraining_data.shards_metadata([path], 32, 5, 30522)


def test_corrupted_record_is_named_when_it_is_read(shard, tmp_path):
    offsets = list(damage.record_offsets(str(shard)))
    path = copy_shard(shard, tmp_path, flipped(shard.read_bytes(), offsets[5] + 40), True)
    metadata = pretraining_data.shards_metadata([path], 32, 5, 30522)  # Framing, metadata hold.
    dataset = pretraining_data.pretraining_dataset([path], metadata, 4, is_training=False)
    with pytest.raises(tf.errors.DataLossError):
        list(dataset)  # What TensorFlow says: "corrupted record at 1234", no file.
    with pytest.raises(DamagedFileError) as error:
        with damage.naming_damaged_records([str(shard), path]):
            list(dataset)
    assert str(error.value) == (
        f"{path}: record 6 (byte {offsets[5]:,}): the record is damaged (checksum "
        "mismatch): make the file again"
    )


def test_ids_beyond_the_vocabulary_are_named_without_metadata(shard, tmp_path):
    path = copy_shard(shard, tmp_path, shard.read_bytes(), metadata=False)
    first = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(path))).numpy())
    top = max(first.features.feature["input_ids"].int64_list.value)
    with pytest.raises(UserError) as error:
        pretraining_data.shards_metadata([path], 32, 5, vocab_size=top)
    assert str(error.value).startswith(f"{path}: record 1: holds token id {top}, outside ")
    assert "vocab_size" in str(error.value)
    with pytest.raises(UserError, match="has length 32 but --max_seq_length=64"):
        pretraining_data.shards_metadata([path], 64, 5, 30522)


def test_damaged_feature_cache_is_made_again(tmp_path, mrpc_dir, tokenizer, caplog):
    from data_prep.classifier import classifier_features, classifier_tasks

    processor = classifier_tasks.get_processor("mrpc")
    cache = str(tmp_path / "train.tf_record")

    def features():
        return classifier_features.get_or_create_features(
            processor, str(mrpc_dir), "train", cache, tokenizer, 32
        )

    features()
    whole = pathlib.Path(cache).read_bytes()
    pathlib.Path(cache).write_bytes(flipped(whole, len(whole) // 2))  # Same size.
    with caplog.at_level(logging.WARNING):
        metadata = features()
    assert "Making" in caplog.text and "checksum mismatch" in caplog.text
    assert pathlib.Path(cache).read_bytes() == whole
    assert metadata["num_examples"] == damage.verify_tfrecord_file(cache)


# ----------------------------------------------------------------------------
# Checkpoints.
# ----------------------------------------------------------------------------


def test_damaged_safetensors_name_the_file_and_the_tensor(tmp_path):
    from safetensors.numpy import save

    weights = tmp_path / "model.safetensors"
    data = save(
        {
            "embeddings.word_embeddings.weight": np.ones((99, 8), np.float32),
            "pooler.dense.bias": np.ones(8, np.float32),
        }
    )
    weights.write_bytes(data)
    reader = checkpoint_readers.open_checkpoint(str(tmp_path))
    assert reader.shapes == {
        "embeddings.word_embeddings.weight": (99, 8),
        "pooler.dense.bias": (8,),
    }
    cases = [
        (data[:4], "4 bytes, less than its 8-byte header size"),
        (data[:100], "the header size says"),
        (data[:1000], "tensor 'embeddings.word_embeddings.weight' needs bytes"),
        (data[:20] + b"\xff" + data[21:], "its header is not JSON"),
        (
            data.replace(b"[99,8]", b"[98,8]"),
            "of shape \\[98, 8\\] and dtype F32 is not 3168 bytes",
        ),
    ]
    for content, message in cases:
        weights.write_bytes(content)
        with pytest.raises(DamagedFileError, match=message) as error:
            checkpoint_readers.open_checkpoint(str(tmp_path))
        assert str(error.value).startswith(f"{weights}: not a valid safetensors file: ")


def test_damaged_tf1_checkpoint_names_the_file_and_the_variable(tmp_path):
    prefix = str(tmp_path / "bert_model.ckpt")
    names = ["bert/embeddings/word_embeddings", "bert/pooler/dense/kernel"]
    values = [np.ones((99, 8), np.float32), np.ones((8, 8), np.float32)]
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=["", ""], tensors=values)
    data_file = prefix + ".data-00000-of-00001"
    data = pathlib.Path(data_file).read_bytes()
    pathlib.Path(data_file).write_bytes(data[: len(data) // 2])
    reader = checkpoint_readers.open_checkpoint(prefix)
    with pytest.raises(DamagedFileError) as error:
        for name in sorted(reader.shapes):
            reader.get(name)
    assert str(error.value).startswith(
        f"{prefix}.data-*: variable bert/embeddings/word_embeddings: "
    )
    assert "the data file ends before its bytes" in str(error.value)
    pathlib.Path(prefix + ".index").write_bytes(b"not an index")
    with pytest.raises(DamagedFileError, match=r"bert_model.ckpt.index: its index"):
        checkpoint_readers.open_checkpoint(prefix)


# ----------------------------------------------------------------------------
# Flags.
# ----------------------------------------------------------------------------


def test_layers_flag_is_named():
    with pytest.raises(UserError) as error:
        feature_based.parse_layer_numbers("0,abc", 12, "--layers")
    assert str(error.value).startswith("--layers='0,abc': 'abc' is not a layer number")
    assert feature_based.parse_layer_numbers("-1,0,-1", 12, "--layers") == [-1, 0, -1]
    with pytest.raises(UserError, match="--feature_layers='0,x': 'x' is not a layer"):
        feature_based.parse_feature_layers("0,x", 12)


def test_a_batch_larger_than_the_data_is_warned_about(caplog):
    with caplog.at_level(logging.WARNING):
        assert not input_pipeline.warn_if_batch_exceeds_data(32, 32, "--train_batch_size")
        assert input_pipeline.warn_if_batch_exceeds_data(10, 32, "--train_batch_size")
    assert "--train_batch_size=32 is larger than the 10 training examples" in caplog.text


def test_length_grouping_of_a_set_smaller_than_one_group_is_warned_about(caplog):
    with caplog.at_level(logging.WARNING):
        assert not input_pipeline.warn_if_one_group(1601, 32, 50)
        assert input_pipeline.warn_if_one_group(449, 32, 50)
    assert "--group_by_length on 449 training examples, no more than one group of 1600" in (
        caplog.text
    )


def test_json_readers_name_the_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps([1, 2]))
    with pytest.raises(UserError, match=f"{path}: expected a BERT config"):
        BertConfig.from_json_file(str(path))
    path.write_text(json.dumps(dict(tiny_config(), hidden_dropout_prob="0.1")))
    with pytest.raises(UserError, match=f"{path}: BertConfig.hidden_dropout_prob must be"):
        BertConfig.from_json_file(str(path))
    path.write_text("[" * 100_000)
    with pytest.raises(UserError, match="nested too deeply"):
        file_io.read_json(str(path))


# ----------------------------------------------------------------------------
# Conversion and the model's files.
# ----------------------------------------------------------------------------


def _ltr_classifier_dir(path: pathlib.Path, vocab_file: str) -> str:
    """A left-to-right classifier's folder, as fine-tuning an --objective=ltr model
    leaves it (model_info.json: classifier, causal_attention)."""
    from modeling import checkpoint_writers, models
    from modeling.encoder import BertEncoder

    config = BertConfig(**tiny_config())
    model = models.BertClassifier(BertEncoder(config, causal_attention=True), config, 2)
    checkpoint_writers.write_tf2_directory(str(path), model, vocab_file, True, ["0", "1"])
    return str(path)


def test_a_left_to_right_classifier_converts_to_tf2_only(tmp_path, vocab_file, caplog):
    """The TF1 bert_config.json cannot say "causal": the original release's code would
    read the classifier as a bidirectional [CLS] one. Refused before anything is written,
    as for Hugging Face; its encoder converts (with a warning for TF1)."""
    import convert_checkpoint

    source = _ltr_classifier_dir(tmp_path / "ltr_mrpc", vocab_file)
    for output_format, says in (("tf1", "has no TF1 form"), ("hf", "has no Hugging Face class")):
        out = tmp_path / output_format
        with pytest.raises(UserError, match=f"left-to-right classifier {says}") as error:
            convert_checkpoint.convert(source, str(out), output_format)
        assert "convert its encoder alone (--model_kind=encoder)" in str(error.value)
        assert "TF1" not in str(error.value).split("Keep")[1]  # Only tf2 is offered.
        assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["ltr_mrpc"]
    with caplog.at_level(logging.WARNING):
        prefix = convert_checkpoint.convert(
            source, str(tmp_path / "enc"), "tf1", model_kind="encoder"
        )
    assert "TF1 bert_config.json cannot" in caplog.text
    info = json.loads((tmp_path / "enc" / "model_info.json").read_text())
    assert info["model_kind"] == "encoder" and info["causal_attention"] is True
    assert prefix == str(tmp_path / "enc" / "bert_model.ckpt")
    # tf2 keeps the classifier whole.
    convert_checkpoint.convert(source, str(tmp_path / "tf2"), "tf2")
    assert json.loads((tmp_path / "tf2" / "model_info.json").read_text())["causal_attention"]


def test_an_earlier_conversion_is_replaced_only_with_overwrite(tmp_path, vocab_file):
    import convert_checkpoint

    source = _ltr_classifier_dir(tmp_path / "ltr_mrpc", vocab_file)
    out = str(tmp_path / "out")
    convert_checkpoint.convert(source, out, "tf2")
    with pytest.raises(UserError) as error:
        convert_checkpoint.convert(source, out, "tf2")
    assert str(error.value) == (
        f"output folder {out} holds an earlier conversion to the TF2 format; pass "
        f"--overwrite (overwrite=True) to replace it"
    )
    convert_checkpoint.convert(source, out, "tf2", overwrite=True)
    with pytest.raises(UserError, match="not an earlier conversion to the TF1 format"):
        convert_checkpoint.convert(source, out, "tf1", model_kind="encoder", overwrite=True)


def test_a_vocabulary_larger_than_the_config_is_refused_without_a_checkpoint(tmp_path, vocab_file):
    """export_tfhub.py --export_type=preprocessing --vocab_file --bert_config_file: no
    checkpoint whose vocabulary it could differ from, but ids past vocab_size."""
    from absl import flags

    import model_flags
    import runner_flags
    from tests.conftest import write_tiny_config

    big = tmp_path / "vocab_plus_one.txt"
    big.write_text(pathlib.Path(vocab_file).read_text() + "newword\n")
    config = write_tiny_config(tmp_path / "bert_config.json")
    fv = flags.FlagValues()
    runner_flags.define_model_flags(None, fv)
    fv(["export_tfhub.py", f"--vocab_file={big}", f"--bert_config_file={config}"])
    with pytest.raises(UserError) as error:
        model_flags.resolve_vocabulary(fv)
    assert str(error.value).startswith(
        f"the vocabulary {big} has 30523 entries but the model's config has vocab_size=30522"
    )
    assert "Use the vocabulary the model was trained with" in str(error.value)
    fv(["export_tfhub.py", f"--vocab_file={vocab_file}", f"--bert_config_file={config}"])
    assert model_flags.resolve_vocabulary(fv).vocab_file == vocab_file
    fv.unparse_flags()
    fv(["export_tfhub.py", f"--vocab_file={big}"])  # No model: nothing to fit.
    assert model_flags.resolve_vocabulary(fv).vocab_file == str(big)


def test_lstm_units_past_any_memory_are_a_flag_error():
    """--bilstm_units=100000 asked for a [400000, 100000] kernel: TensorFlow's
    ResourceExhaustedError, deep in building the model, named a shape."""
    from absl import flags

    import runner_flags

    fv = flags.FlagValues()
    runner_flags.define_bilstm_flag(fv)
    with pytest.raises(flags.IllegalFlagValueError) as error:
        fv(["run_ner.py", "--bilstm_units=100000"])
    assert str(error.value) == (
        "flag --bilstm_units=100000: 100000 is not an integer in the range [0, 4096]"
    )
    fv(["run_ner.py", "--bilstm_units=768"])  # The paper's.
    import run_ner

    with pytest.raises(flags.IllegalFlagValueError, match=r"in the range \[1, 4096\]"):
        run_ner.FLAGS["lstm_units"].parse("100000")


# ----------------------------------------------------------------------------
# What a run says.
# ----------------------------------------------------------------------------


def test_squad_2_data_without_the_flag_says_which_flag(tmp_path):
    from data_prep.squad import squad_reader

    def squad(qa: dict) -> str:
        path = tmp_path / f"{qa['id']}.json"
        paragraph = {"context": "BERT reads text.", "qas": [dict(qa, question="What?")]}
        path.write_text(json.dumps({"version": "v2.0", "data": [{"paragraphs": [paragraph]}]}))
        return str(path)

    marked = squad({"id": "q1", "answers": [], "is_impossible": True})
    with pytest.raises(UserError) as error:
        squad_reader.read_squad_examples(marked, True, False)
    assert str(error.value) == (
        f"{marked}: question q1 is marked is_impossible (SQuAD 2.0 data): pass "
        f"--version_2_with_negative to train on unanswerable questions."
    )
    assert len(squad_reader.read_squad_examples(marked, True, True)) == 1
    unmarked = squad({"id": "q2", "answers": []})
    with pytest.raises(UserError) as error:
        squad_reader.read_squad_examples(unmarked, True, False)
    assert str(error.value) == (
        f"{unmarked}: question q2 has no answer and is not marked is_impossible (SQuAD 2.0 "
        f"data: --version_2_with_negative)."
    )


def test_thousands_of_long_lines_are_one_line_at_the_end(tmp_path, vocab_file):
    """create_pretraining_data on a corpus of long lines: no warning per line, one line
    at the end with how many and where the first is."""
    import os
    import subprocess
    import sys

    corpus = tmp_path / "long.txt"
    long_line = " ".join(["word"] * 40)
    corpus.write_text("short line.\n" + "".join(f"{long_line}\n" for _ in range(3000)))
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "data_prep.create_pretraining_data",
            f"--input_file={corpus}",
            f"--output_file={tmp_path / 'shard.tfrecord'}",
            f"--vocab_file={vocab_file}",
            "--max_seq_length=32",
            "--max_predictions_per_seq=5",
            "--dupe_factor=1",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-2000:]
    lines = process.stderr.splitlines()
    assert not [line for line in lines if line.startswith("warning:")], process.stderr
    assert lines[-1] == (
        f"3000 lines longer than the 29 tokens an instance holds were truncated (the first: "
        f"{corpus}:2, 40 tokens)"
    )
