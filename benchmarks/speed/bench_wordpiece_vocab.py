"""Learned WordPiece vocabularies on held-out real text: [UNK] rate and pieces per word.

Learning text: the bundled BERT paper (sample_data/corpus), the contexts and
questions of the first 4 SQuAD sample articles, and the MRPC training sentences.
Held-out text: the 5th SQuAD article (contexts and questions), MRPC dev and test.

Vocabularies, each read by this project's tokenizer (uncased):
  pipeline    data_prep.pretraining_pipeline --learn_vocab_size=N --stop_after=vocab
              (a distributed word count, then tensorflow-text's WordPiece learner);
  tokenizers  Hugging Face `tokenizers`' WordPieceTrainer at the same size, with the
              same 999 reserved entries first and BERT's normalizer and pre-tokenizer;
  original    the released uncased vocabulary (30,522 entries, learned by Google on
              Wikipedia and BooksCorpus), for scale.
On the held-out words (as BasicTokenizer splits them): the share that becomes [UNK]
and the word pieces per word. For the learned vocabularies, the Python and the
in-graph tokenizer (data_prep/text/tf_tokenization.py) are checked to give the same ids on
every held-out line.

    python -m benchmarks.speed.bench_wordpiece_vocab --sizes=8000,30522
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pathlib
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
SAMPLE = REPO / "sample_data"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def squad_lines(articles) -> list[str]:
    lines = []
    for article in articles:
        for paragraph in article["paragraphs"]:
            lines.append(paragraph["context"])
            lines += [qa["question"] for qa in paragraph["qas"]]
    return lines


def mrpc_lines(name: str) -> list[str]:
    with open(SAMPLE / "glue" / "MRPC" / ("%s.tsv" % name), encoding="utf-8-sig", newline="") as f:
        return [
            text
            for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            for text in (row["#1 String"], row["#2 String"])
        ]


def texts() -> tuple[list[str], list[str]]:
    """(learning lines, held-out lines)."""
    squad = json.loads((SAMPLE / "squad" / "dev-v2.0-first5articles.json").read_text())
    learning = [
        line
        for path in sorted((SAMPLE / "corpus").glob("*.txt"))
        for line in path.read_text(encoding="utf-8").split("\n")
    ]
    learning += squad_lines(squad["data"][:4]) + mrpc_lines("train")
    held_out = squad_lines(squad["data"][4:]) + mrpc_lines("dev") + mrpc_lines("test")
    return (
        [line.strip() for line in learning if line.strip()],
        [line.strip() for line in held_out if line.strip()],
    )


def pipeline_vocab(lines, size: int, directory: pathlib.Path) -> str:
    """The pipeline's vocabulary of `size` learned from `lines`; its path."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from data_prep.pretraining import corpus_pipeline as cp
    from data_prep.pretraining import corpus_settings
    from data_prep.pretraining import pretraining_records as ptr

    text = directory / "learning.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    vocab = str(directory / ("pipeline_%d.txt" % size))
    settings = corpus_settings.PipelineSettings(
        input_files=tuple(cp.match_input_files(str(text))),
        input_format="sentences",
        output_dir=str(directory / ("out_%d" % size)),
        sentences_dir=str(directory / "sentences"),
        vocab_file=vocab,
        run=ptr.RunOptions(input_files=(), output_files=(), vocab_file=vocab),
        learn_vocab_size=size,
        stop_after="vocab",
    )
    cp.run(settings, PipelineOptions(["--runner=DirectRunner"]))
    return vocab


def hf_vocab(lines, size: int, directory: pathlib.Path) -> str:
    """`tokenizers`' WordPiece vocabulary of `size`, the reserved entries first."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from data_prep.text import wordpiece_vocab

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=size,
        special_tokens=wordpiece_vocab.original_reserved_tokens(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(lines, trainer)
    vocab = tokenizer.get_vocab()
    path = directory / ("tokenizers_%d.txt" % size)
    path.write_text(
        "".join(token + "\n" for token in sorted(vocab, key=vocab.get)), encoding="utf-8"
    )
    return str(path)


def evaluate(vocab_file: str, held_out: list[str], check_graph: bool) -> dict:
    from data_prep.text import tokenization

    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    words = pieces = unknown = 0
    for line in held_out:
        for word in tokenizer.basic_tokenizer.tokenize(line):
            word_pieces = tokenizer.wordpiece_tokenizer.tokenize_word(word)
            words += 1
            pieces += len(word_pieces)
            unknown += word_pieces == [tokenization.UNK_TOKEN]
    result = {
        "size": len(tokenizer.vocab),
        "words": words,
        "unknown": unknown,
        "unk_rate": unknown / words,
        "pieces_per_word": pieces / words,
    }
    if check_graph:
        import tensorflow as tf
        from data_prep.text import tf_tokenization

        graph = tf_tokenization.TFBertTokenizer(vocab_file, do_lower_case=True)
        ours = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)) for line in held_out]
        theirs = graph.tokenize(tf.constant(held_out)).to_list()
        result["graph_mismatches"] = sum(a != b for a, b in zip(ours, theirs))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8000,30522")
    args = parser.parse_args()
    learning, held_out = texts()
    print(
        "learning text: %d lines, %d characters; held-out: %d lines, %d characters"
        % (len(learning), sum(map(len, learning)), len(held_out), sum(map(len, held_out)))
    )
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        directory = pathlib.Path(scratch)
        for size in map(int, args.sizes.split(",")):
            for name, learn in (("pipeline", pipeline_vocab), ("tokenizers", hf_vocab)):
                start = time.perf_counter()
                path = learn(learning, size, directory)
                seconds = time.perf_counter() - start
                with open(path, encoding="utf-8") as f:
                    entries = f.read().split("\n")[:-1]
                learned = sum(not token.startswith("[unused") for token in entries[999:])
                rows.append(
                    dict(
                        evaluate(path, held_out, True), name=name, seconds=seconds, learned=learned
                    )
                )
        original = str(SAMPLE / "vocab" / "uncased_vocab.txt")
        rows.append(
            dict(
                evaluate(original, held_out, False),
                name="original",
                seconds=0.0,
                learned=30522 - 999,
            )
        )
    print("held-out words: %d" % rows[0]["words"])
    print(
        "| vocabulary | entries | learned tokens | learning s | held-out [UNK] words "
        "| pieces per word | Python = in-graph ids |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            "| %s | %d | %d | %.1f | %d (%.3f%%) | %.3f | %s |"
            % (
                r["name"],
                r["size"],
                r["learned"],
                r["seconds"],
                r["unknown"],
                100 * r["unk_rate"],
                r["pieces_per_word"],
                "-"
                if "graph_mismatches" not in r
                else (
                    "every line"
                    if not r["graph_mismatches"]
                    else "%d lines differ" % r["graph_mismatches"]
                ),
            )
        )


if __name__ == "__main__":
    main()
