"""Builds an imbalanced MRPC: the training set keeps every negative pair ("0") and a
seeded sample of the positive ones ("1") so that positives are `--positive_fraction`
of it; dev.tsv and test.tsv are copied unchanged. For run_classifier.py --task_name=MRPC
with and without --class_weights (docs/own_task.md).

  python -m benchmarks.study.make_imbalanced_mrpc --mrpc_dir=sample_data/glue/MRPC \\
      --output_dir=mrpc_10pc --positive_fraction=0.1 --seed=0

The rows kept stay in the file's order, bytes unchanged; the same arguments give the
same files. The counts are printed.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mrpc_dir", required=True, help="GLUE's MRPC folder")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--positive_fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not 0.0 < args.positive_fraction < 1.0:
        parser.error("--positive_fraction must be in (0, 1)")
    with open(os.path.join(args.mrpc_dir, "train.tsv"), "rb") as f:
        header, *rows = [line for line in f.read().split(b"\n") if line]
    label = [row.split(b"\t", 1)[0].lstrip(b"\xef\xbb\xbf") for row in rows]
    negatives = [i for i, value in enumerate(label) if value == b"0"]
    positives = [i for i, value in enumerate(label) if value == b"1"]
    wanted = round(len(negatives) * args.positive_fraction / (1.0 - args.positive_fraction))
    kept = set(negatives) | set(random.Random(args.seed).sample(positives, wanted))
    os.makedirs(args.output_dir, exist_ok=True)
    with open(os.path.join(args.output_dir, "train.tsv"), "wb") as f:
        f.write(b"\n".join([header] + [row for i, row in enumerate(rows) if i in kept]) + b"\n")
    for name in ("dev.tsv", "test.tsv"):
        shutil.copyfile(os.path.join(args.mrpc_dir, name), os.path.join(args.output_dir, name))
    print(
        f"train.tsv: {len(kept)} pairs, {wanted} positive ({wanted / len(kept):.1%}), "
        f"{len(negatives)} negative; dev.tsv and test.tsv copied"
    )


if __name__ == "__main__":
    main()
