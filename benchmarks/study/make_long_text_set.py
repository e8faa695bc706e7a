"""A document classification set of texts longer than a window, from SQuAD's contexts:
each text is made of paragraphs of Wikipedia articles, and its label is an article's
title. --task=article (the default): an excerpt of consecutive paragraphs of one
article. --task=majority: two consecutive paragraphs of the labelled article and one
paragraph of another article put before, between or after them, so that the text's
first paragraph alone is wrong a third of the time.

  python -m benchmarks.study.make_long_text_set \
      --squad_file=sample_data/squad/dev-v2.0-first5articles.json --output_dir=long_text

Each article's paragraphs are split in order into train (the first 60%), dev (the next
20%) and test (the rest), so no paragraph is in two splits; every run of
--paragraphs_per_text consecutive paragraphs of a split is one text (excerpts of the
same split overlap). Writes train.tsv, dev.tsv and test.tsv with a header `label text`
(tab-separated, whitespace in the text collapsed to single spaces), the layout
`run_classifier.py --task_name=generic --text_a_column=text --label_column=label` reads,
and prints each split's texts and their mean length in words.

  python -m benchmarks.study.make_long_text_set --output_dir=long_text --score=out/long

prints the test accuracy of a run_classifier.py --do_predict (its output_dir) on the set.
"""

from __future__ import annotations

import argparse
import json
import os
import random

SPLITS = (("train", 0.0, 0.6), ("dev", 0.6, 0.8), ("test", 0.8, 1.0))


def article_paragraphs(squad_file: str) -> list[tuple[str, list[str]]]:
    """(title, its paragraphs' contexts) of every article of a SQuAD json file."""
    with open(squad_file, encoding="utf-8") as f:
        data = json.load(f)["data"]
    return [
        (article["title"], [" ".join(p["context"].split()) for p in article["paragraphs"]])
        for article in data
    ]


def excerpts(paragraphs: list[str], per_text: int) -> list[str]:
    """Every run of `per_text` consecutive paragraphs, joined by a space."""
    return [" ".join(paragraphs[i : i + per_text]) for i in range(len(paragraphs) - per_text + 1)]


def make_splits(
    articles: list[tuple[str, list[str]]], per_text: int, max_texts_per_article: int = 0
) -> dict[str, list[tuple[str, str]]]:
    """split -> [(label, text)], articles in file order; at most max_texts_per_article
    texts of each article per split (their first ones; 0: all)."""
    splits = {name: [] for name, _, _ in SPLITS}
    for title, paragraphs in articles:
        n = len(paragraphs)
        for name, begin, end in SPLITS:
            texts = excerpts(paragraphs[round(begin * n) : round(end * n)], per_text)
            if max_texts_per_article:
                texts = texts[:max_texts_per_article]
            splits[name] += [(title, text) for text in texts]
    return splits


def make_majority_splits(
    articles: list[tuple[str, list[str]]], seed: int
) -> dict[str, list[tuple[str, str]]]:
    """split -> [(label, text)] of the task "majority": each text is two consecutive
    paragraphs of one article (its label) with one paragraph of another article of the
    same split put before, between or after them (seeded draws), so that no single
    paragraph, and so no first window alone, tells the label for sure."""
    rng = random.Random(seed)
    splits = {name: [] for name, _, _ in SPLITS}
    for name, begin, end in SPLITS:
        parts = [(title, p[round(begin * len(p)) : round(end * len(p))]) for title, p in articles]
        for index, (title, paragraphs) in enumerate(parts):
            for i in range(len(paragraphs) - 1):
                others = [p for j, (_, p) in enumerate(parts) if j != index]
                intruder = rng.choice(rng.choice(others))
                text = paragraphs[i : i + 2]
                text.insert(rng.randrange(3), intruder)
                splits[name].append((title, " ".join(text)))
    return splits


def write_splits(splits: dict[str, list[tuple[str, str]]], output_dir: str) -> None:
    os.makedirs(output_dir, exist_ok=True)
    for name, rows in splits.items():
        with open(os.path.join(output_dir, f"{name}.tsv"), "w", encoding="utf-8") as f:
            f.write("label\ttext\n")
            for label, text in rows:
                f.write(f"{label}\t{text}\n")


def test_accuracy(test_file: str, results_file: str, labels: list[str]) -> float:
    """Accuracy of run_classifier.py's test_results.tsv (a row of probabilities per
    text, in `labels` order) against the labels of the set's test.tsv."""
    with open(test_file, encoding="utf-8") as f:
        gold = [line.split("\t", 1)[0] for line in f.read().splitlines()[1:]]
    with open(results_file, encoding="utf-8") as f:
        rows = [[float(x) for x in line.split("\t")] for line in f.read().splitlines()]
    if len(rows) != len(gold):
        raise SystemExit(f"{results_file}: {len(rows)} rows for {len(gold)} texts of {test_file}")
    predicted = [labels[max(range(len(row)), key=row.__getitem__)] for row in rows]
    return sum(p == g for p, g in zip(predicted, gold)) / len(gold)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--squad_file", help="A SQuAD v1.1 or v2.0 json file.")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument(
        "--task",
        choices=("article", "majority"),
        default="article",
        help="article: excerpts of one article; majority: two paragraphs of the "
        "labelled article and one of another, in a random place.",
    )
    parser.add_argument("--seed", type=int, default=1, help="The draws of --task=majority.")
    parser.add_argument("--paragraphs_per_text", type=int, default=3)
    parser.add_argument("--max_texts_per_article", type=int, default=0, help="Per split (0: all).")
    parser.add_argument(
        "--score",
        default=None,
        help="Instead of building the set: the output_dir of a run_classifier.py "
        "--do_predict on --output_dir's set; prints its test accuracy.",
    )
    args = parser.parse_args(argv)
    if args.score:
        with open(os.path.join(args.score, "model_info.json"), encoding="utf-8") as f:
            labels = json.load(f)["labels"]
        accuracy = test_accuracy(
            os.path.join(args.output_dir, "test.tsv"),
            os.path.join(args.score, "test_results.tsv"),
            labels,
        )
        print(f"test accuracy {accuracy:.4f} ({args.score})")
        return
    if not args.squad_file:
        parser.error("--squad_file is required to build the set")
    if args.paragraphs_per_text < 1:
        parser.error("--paragraphs_per_text must be at least 1")
    articles = article_paragraphs(args.squad_file)
    if args.task == "majority":
        splits = make_majority_splits(articles, args.seed)
    else:
        splits = make_splits(articles, args.paragraphs_per_text, args.max_texts_per_article)
    write_splits(splits, args.output_dir)
    for name, rows in splits.items():
        words = sum(len(text.split()) for _, text in rows) / max(len(rows), 1)
        print(f"{name}: {len(rows)} texts, {words:.0f} words on average")


if __name__ == "__main__":
    main()
