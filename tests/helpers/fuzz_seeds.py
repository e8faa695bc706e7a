"""The real files the reader fuzzing damages: slices of the bundled sample data, in
each reader's layout, and small files made from them once per process (pre-training
shards, a feature cache, checkpoints in the three formats) in `scratch()`."""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import pathlib
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
SAMPLE = REPO / "sample_data"
VOCAB_FILE = str(SAMPLE / "vocab" / "uncased_vocab.txt")
SWAG_HEADER = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source"]
SWAG_HEADER += [f"ending{i}" for i in range(4)] + ["label"]
SHARD_SEQ, SHARD_PREDICTIONS = 32, 5
TINY_CONFIG = dict(
    vocab_size=99,
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=19,
    hidden_act="gelu",
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    max_position_embeddings=16,
    type_vocab_size=2,
    initializer_range=0.02,
)


def dump(value) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


def load(data: bytes):
    return json.loads(data.decode("utf-8"))


@functools.cache
def scratch() -> str:
    """A folder for this process's seed files (removed with the system's temp files)."""
    return tempfile.mkdtemp(prefix="fuzz-seeds-")


def head(path: pathlib.Path, lines: int) -> bytes:
    with open(path, "rb") as f:
        return b"".join(f.readlines()[:lines])


@functools.cache
def mrpc_rows() -> list[list[str]]:
    text = (SAMPLE / "glue" / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig")
    return [line.split("\t") for line in text.splitlines()[1:13]]


def tsv(rows) -> bytes:
    return "".join("\t".join(map(str, row)) + "\n" for row in rows).encode("utf-8")


def mrpc() -> bytes:
    return head(SAMPLE / "glue" / "MRPC" / "train.tsv", 13)


def stsb() -> bytes:
    header = "index genre filename year old_index source1 source2 sentence1 sentence2 score"
    rows = [
        [i, "main-news", "news", "2012", i, "none", "none", r[3], r[4], f"{(i * 0.7) % 5:.1f}"]
        for i, r in enumerate(mrpc_rows())
    ]
    return tsv([header.split()] + rows)


def cola() -> bytes:
    return tsv([["gj04", r[0], "", r[3]] for r in mrpc_rows()])


def xnli() -> bytes:
    labels = ("contradiction", "entailment", "neutral")
    rows = [
        [("en", "zh")[i % 2], labels[i % 3], r[3], r[4], str(i)] for i, r in enumerate(mrpc_rows())
    ]
    return tsv([["language", "gold_label", "sentence1", "sentence2", "pairID"]] + rows)


def _csv(rows) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode("utf-8")


def swag() -> bytes:
    rows = [
        [i, "v", i, r[3], r[3], r[4][:20], "gold", r[4], r[3], r[4], r[3], str(i % 4)]
        for i, r in enumerate(mrpc_rows()[:6])
    ]
    return _csv([SWAG_HEADER] + rows)


def generic_csv() -> bytes:
    return _csv([["text", "label"]] + [[r[3], ("yes", "no")[int(r[0])]] for r in mrpc_rows()])


def generic_tsv() -> bytes:
    return tsv([[r[0], r[3]] for r in mrpc_rows()])


@functools.cache
def squad_v2() -> dict:
    sample = json.loads((SAMPLE / "squad" / "dev-v2.0-first5articles.json").read_text("utf-8"))
    article = sample["data"][0]
    paragraphs = [dict(p, qas=p["qas"][:5]) for p in article["paragraphs"][:2]]
    return {"version": "v2.0", "data": [{"title": article["title"], "paragraphs": paragraphs}]}


@functools.cache
def squad_v1() -> dict:
    v2 = squad_v2()
    paragraphs = [
        dict(p, qas=[{k: v for k, v in qa.items() if k != "is_impossible"} for qa in p["qas"]])
        for p in v2["data"][0]["paragraphs"]
    ]
    paragraphs = [dict(p, qas=[qa for qa in p["qas"] if qa["answers"]]) for p in paragraphs]
    return {"version": "1.1", "data": [dict(v2["data"][0], paragraphs=paragraphs)]}


def squad_predictions() -> tuple[dict, dict]:
    """(predictions.json, null_odds.json) for the questions of `squad_v2`."""
    predictions, odds = {}, {}
    for paragraph in squad_v2()["data"][0]["paragraphs"]:
        for i, qa in enumerate(paragraph["qas"]):
            predictions[qa["id"]] = qa["answers"][0]["text"] if qa["answers"] else ""
            odds[qa["id"]] = i - 2.5
    return predictions, odds


def conll(scheme: str) -> bytes:
    if scheme == "iob1":
        return head(SAMPLE / "sciner_iob1" / "train.txt", 60)
    data = head(SAMPLE / "sciner" / "train.txt", 60)
    if scheme == "iob2":
        return data
    from data_prep.ner import conll as conll_lib, tag_schemes

    lines = []
    for sentence in conll_lib.parse_conll(data.decode("utf-8")):
        tags = tag_schemes.from_iob2(sentence.tags, scheme)
        lines += [f"{w} {t}\n" for w, t in zip(sentence.words, tags)] + ["\n"]
    return "".join(lines).encode("utf-8")


def conlleval_input() -> bytes:
    lines = []
    for line in head(SAMPLE / "sciner" / "dev.txt", 60).decode("utf-8").split("\n"):
        fields = line.split()
        if len(fields) == 2:
            guess = "O" if len(lines) % 7 == 3 else fields[1]
            line = f"{fields[0]} {fields[1]} {guess}"
        lines.append(line)
    return "\n".join(lines).encode("utf-8")


def sentences() -> bytes:
    return head(SAMPLE / "corpus" / "bert_paper_v1.txt", 40)


@functools.cache
def raw_articles() -> list[dict]:
    with open(SAMPLE / "raw" / "squad_dev_articles.jsonl", encoding="utf-8") as f:
        articles = [json.loads(line) for line in f][:2]
    return [dict(a, text=a["text"][:1200]) for a in articles]


def raw_text() -> bytes:
    return "\n\n".join(a["text"] for a in raw_articles()).encode("utf-8")


def jsonl() -> bytes:
    return b"".join(dump(a) + b"\n" for a in raw_articles())


def vocab() -> bytes:
    return head(SAMPLE / "vocab" / "uncased_vocab.txt", 400)


def bert_config() -> dict:
    return dict(TINY_CONFIG, vocab_size=30522)


def hf_config() -> dict:
    return dict(
        bert_config(),
        architectures=["BertModel"],
        model_type="bert",
        layer_norm_eps=1e-12,
        position_embedding_type="absolute",
        pad_token_id=0,
    )


def read_files(directory: str) -> dict[str, bytes]:
    files = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, directory)] = f.read()
    return files


@functools.cache
def pretraining_shard() -> dict[str, bytes]:
    """A shard of create_pretraining_data (S 32, P 5) and its metadata."""
    from data_prep.pretraining import pretraining_instances as pti, pretraining_records as ptr

    directory = os.path.join(scratch(), "shard")
    os.makedirs(directory)
    text = os.path.join(directory, "corpus.txt")
    with open(text, "wb") as f:
        f.write(sentences())
    output = os.path.join(directory, "out", "shard.tfrecord")
    ptr.run(
        ptr.RunOptions(
            input_files=(text,),
            output_files=(output,),
            vocab_file=VOCAB_FILE,
            dupe_factor=1,
            instance=pti.InstanceOptions(max_seq_length=SHARD_SEQ),
            masking=pti.MaskingOptions(max_predictions_per_seq=SHARD_PREDICTIONS),
        )
    )
    return read_files(os.path.dirname(output))


@functools.cache
def feature_cache() -> dict[str, bytes]:
    """MRPC's train.tsv and its classifier feature cache (S 32) with metadata."""
    from data_prep.classifier import classifier_features, classifier_tasks
    from data_prep.text import tokenization

    directory = os.path.join(scratch(), "cache")
    os.makedirs(directory)
    with open(os.path.join(directory, "train.tsv"), "wb") as f:
        f.write(mrpc())
    classifier_features.create_features(
        classifier_tasks.get_processor("mrpc"),
        directory,
        "train",
        os.path.join(directory, "train.tf_record"),
        tokenization.FullTokenizer(VOCAB_FILE, True),
        32,
    )
    return read_files(directory)


@functools.cache
def checkpoints() -> dict[str, dict[str, bytes]]:
    """A tiny encoder written in each format: {"tf1" | "tf2" | "hf": files}."""
    from modeling import checkpoint_writers
    from modeling.config import BertConfig
    from modeling.encoder import BertEncoder

    encoder = BertEncoder(BertConfig(**TINY_CONFIG))
    vocab_file = os.path.join(scratch(), "tiny_vocab.txt")
    with open(vocab_file, "w", encoding="utf-8") as f:
        special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        f.write("\n".join(special + [f"w{i}" for i in range(99 - len(special))]) + "\n")
    writers = {
        "tf1": checkpoint_writers.write_original_directory,
        "tf2": checkpoint_writers.write_tf2_directory,
        "hf": checkpoint_writers.write_hf_directory,
    }
    written = {}
    for kind, writer in writers.items():
        directory = os.path.join(scratch(), "checkpoint-" + kind)
        writer(directory, encoder, vocab_file, True)
        written[kind] = read_files(directory)
    return written


def tfrecord_bytes(examples: list[dict]) -> bytes:
    """A TFRecord file of Examples with the given int64 features."""
    import tensorflow as tf

    path = os.path.join(scratch(), "generated.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for features in examples:
            feature = {
                name: tf.train.Feature(int64_list=tf.train.Int64List(value=values))
                for name, values in features.items()
            }
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    with open(path, "rb") as f:
        return f.read()
