"""The SQuAD export cut to each request's longest window (the default) against the one
padded to --max_seq_length (`pad_to_max_seq_length=True`): how often their answers
differ on a fine-tuned model, and what each request costs.

  python -m benchmarks.compare.compare_squad_builds --init_checkpoint=out/squad \
      --predict_file=dev-v1.1.json --max_seq_length=384 --doc_stride=128

--init_checkpoint is a fine-tuned SQuAD model (a run_squad.py output_dir, or any
checkpoint with a span head that `modeling.checkpoints.restore_model` reads). The padded
build ranks each window's n_best_size highest logits as the original release does,
padding positions included (never valid spans); the cut build ranks the window's tokens
alone, so the two differ only where padding positions crowded a valid span out of that
ranking. Prints the questions whose answers differ (with both scores), the answers'
exact match against each other, and the seconds each build took for all questions one
at a time and in batches of --batch_size.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--init_checkpoint", required=True)
    parser.add_argument("--predict_file", required=True, help="SQuAD JSON (v1.1 or v2.0).")
    parser.add_argument("--max_seq_length", type=int, default=384)
    parser.add_argument("--doc_stride", type=int, default=128)
    parser.add_argument("--max_query_length", type=int, default=64)
    parser.add_argument("--max_answer_length", type=int, default=30)
    parser.add_argument("--n_best_size", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=16)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops the export needs)

    from modeling import checkpoints, kernels, model_files, models
    from modeling.encoder import BertEncoder
    from serving import exports

    with open(args.predict_file, encoding="utf-8") as f:
        data = json.load(f)["data"]
    rows = [
        (qa["id"], qa["question"], paragraph["context"])
        for article in data
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]
    files = model_files.resolve(None, None, args.init_checkpoint, do_lower_case=None)
    model = models.BertSpanLabeler(BertEncoder(files.config), files.config)
    restored = checkpoints.restore_model(args.init_checkpoint, model)
    if "span" not in restored["restored"]:
        sys.exit(f"{args.init_checkpoint} holds no SQuAD head (restored: {restored['restored']})")
    loaded = {}
    with tempfile.TemporaryDirectory() as scratch:
        for build in ("padded", "cut"):
            path = exports.export_task_model(
                model,
                os.path.join(scratch, build),
                files.vocab_file,
                files.do_lower_case,
                args.max_seq_length,
                kind="squad",
                max_query_length=args.max_query_length,
                max_answer_length=args.max_answer_length,
                n_best_size=args.n_best_size,
                doc_stride=args.doc_stride,
                pad_to_max_seq_length=build == "padded",
            )
            loaded[build] = tf.saved_model.load(path).signatures["serving_default"]

        def ask(build, part):
            answer = loaded[build](
                question=tf.constant([q for _, q, _ in part]),
                context=tf.constant([c for _, _, c in part]),
            )
            return [a.decode() for a in answer["answer"].numpy()], answer["score"].numpy()

        answers, seconds = {}, {}
        for build in ("padded", "cut", "padded", "cut"):  # the second round is timed
            start = time.perf_counter()
            single = [ask(build, [row]) for row in rows]
            seconds[build, "one at a time"] = time.perf_counter() - start
            start = time.perf_counter()
            for i in range(0, len(rows), args.batch_size):
                ask(build, rows[i : i + args.batch_size])
            seconds[build, f"batches of {args.batch_size}"] = time.perf_counter() - start
            answers[build] = (
                [a for (texts, _) in single for a in texts],
                np.concatenate([s for _, s in single]),
            )
    (padded, padded_scores), (cut, cut_scores) = answers["padded"], answers["cut"]
    differ = [i for i in range(len(rows)) if padded[i] != cut[i]]
    print(f"\nCPU: {kernels.cpu_model_name()} ({os.cpu_count()} cores)")
    print(
        f"{args.init_checkpoint}, {args.predict_file}: {len(rows)} questions, "
        f"max_seq_length={args.max_seq_length}, doc_stride={args.doc_stride}, "
        f"n_best_size={args.n_best_size}"
    )
    print(f"answers that differ: {len(differ)} of {len(rows)}")
    for i in differ:
        print(
            f"  {rows[i][0]}: padded {padded[i]!r} ({padded_scores[i]:.3f}), "
            f"cut {cut[i]!r} ({cut_scores[i]:.3f})"
        )
    lower = [i for i in differ if cut_scores[i] < padded_scores[i] - 1e-4]
    print(f"cut answers scoring lower than the padded ones: {len(lower)}")
    print("\n| build | " + " | ".join(k for b, k in seconds if b == "padded") + " |")
    print("|---|---|---|")
    for build in ("padded", "cut"):
        cells = [f"{v:.1f} s" for (b, _), v in seconds.items() if b == build]
        print(f"| {build} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
