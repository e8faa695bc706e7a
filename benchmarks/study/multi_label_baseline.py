"""Frequency baselines of a multi-label set in run_classifier.py's generic layout
(train.tsv and dev.tsv, a header, the labels of a row separated by --label_separator):
what a classifier that never reads the text scores on dev, with the runner's metrics
(`evaluation.glue_metrics.multi_label_metrics`).

  python -m benchmarks.study.multi_label_baseline --data_dir=wikigold_multilabel \\
      --label_column=labels

Two baselines: "frequent" predicts, for every sentence, each label that more than half
of the training rows have (the set that maximises the expected per-label accuracy; it
may be empty); "most frequent" predicts the single most frequent training label for
every sentence. Prints their micro and macro F1 and subset accuracy.
"""

from __future__ import annotations

import argparse
import collections
import csv
import os

import numpy as np

from evaluation import glue_metrics


def read_label_sets(path: str, column: str, separator: str) -> list[set[str]]:
    with open(path, encoding="utf-8", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(rows)
        at = header.index(column)
        return [{x.strip() for x in row[at].split(separator) if x.strip()} for row in rows if row]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--label_column", default="labels")
    parser.add_argument("--label_separator", default=",")
    args = parser.parse_args()
    train, dev = (
        read_label_sets(os.path.join(args.data_dir, f"{split}.tsv"), args.label_column,
                        args.label_separator)
        for split in ("train", "dev")
    )  # fmt: skip
    labels = sorted(set().union(*train))
    counts = collections.Counter(label for row in train for label in row)
    truth = np.array([[label in row for label in labels] for row in dev])
    frequent = {label for label in labels if counts[label] / len(train) > 0.5}
    top = counts.most_common(1)[0][0]
    print(f"training frequencies: { {k: round(counts[k] / len(train), 3) for k in labels} }")
    for name, chosen in (("frequent (> 0.5)", frequent), (f"most frequent ({top})", {top})):
        predicted = np.array([[label in chosen for label in labels]] * len(dev))
        metrics = glue_metrics.multi_label_metrics(predicted, truth, labels)
        print(
            f"{name}: micro F1 {metrics['eval_micro_f1']:.4f}, macro F1 "
            f"{metrics['eval_macro_f1']:.4f}, subset accuracy {metrics['eval_subset_accuracy']:.4f}"
        )


if __name__ == "__main__":
    main()
