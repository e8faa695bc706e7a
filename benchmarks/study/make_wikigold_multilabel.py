"""Builds a multi-label sentence classification set from WikiGold's CoNLL files: each
sentence labelled with the set of entity types it mentions (PER, LOC, ORG, MISC;
possibly none), for run_classifier.py --task_name=generic --multi_label.

  python -m benchmarks.study.make_wikigold_multilabel \\
      --train=wikigold/train.txt --dev=wikigold/dev.txt --output_dir=wikigold_multilabel

writes train.tsv and dev.tsv (header `sentence<TAB>labels`, the labels sorted and
comma-separated, empty for a sentence without an entity) and test.tsv (dev's sentences
again, to show --do_predict's test_results.tsv). `--max_sentences=N` keeps the first
N sentences of each file (the bundled sample_data/wikigold_multilabel is N=60 for
train, 30 for dev). Document starts (-DOCSTART-) are not sentences. Tags may be IOB1,
IOB2 or IOBES: the type is what follows the first "-". The counts of each label are
printed.
"""

from __future__ import annotations

import argparse
import collections
import os


def read_sentences(path: str) -> list[tuple[list[str], list[str]]]:
    """(words, tags) of each sentence of a CoNLL file (the first and last column)."""
    sentences, words, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if not fields:
                if words:
                    sentences.append((words, tags))
                words, tags = [], []
                continue
            if fields[0] == "-DOCSTART-":
                continue
            words.append(fields[0])
            tags.append(fields[-1])
    if words:
        sentences.append((words, tags))
    return sentences


def entity_types(tags: list[str]) -> list[str]:
    """The sorted entity types that a sentence's tags mention."""
    return sorted({tag.split("-", 1)[1] for tag in tags if tag != "O" and "-" in tag})


def write_tsv(path: str, sentences) -> collections.Counter:
    counts = collections.Counter()
    lines = ["sentence\tlabels\n"]
    for words, tags in sentences:
        labels = entity_types(tags)
        counts.update(labels or ["(none)"])
        text = " ".join(words).replace("\t", " ")
        lines.append(f"{text}\t{','.join(labels)}\n")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", required=True, help="WikiGold train.txt (CoNLL)")
    parser.add_argument("--dev", required=True, help="WikiGold dev.txt (CoNLL)")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--max_sentences", type=int, default=None)
    args = parser.parse_args()
    os.makedirs(args.output_dir, exist_ok=True)
    train = read_sentences(args.train)[: args.max_sentences]
    dev_limit = args.max_sentences // 2 if args.max_sentences else None
    dev = read_sentences(args.dev)[:dev_limit]
    for name, sentences in (("train", train), ("dev", dev), ("test", dev)):
        counts = write_tsv(os.path.join(args.output_dir, f"{name}.tsv"), sentences)
        print(f"{name}.tsv: {len(sentences)} sentences; {dict(sorted(counts.items()))}")


if __name__ == "__main__":
    main()
