"""WordPiece tokenization speed: this project's tokenizers against Hugging Face `tokenizers`.

The text is real: every sentence of the bundled MRPC (train, dev, test), and every
question and context paragraph of the bundled SQuAD sample, repeated `--repeat`
times. Each implementation runs in its own process (so thread pools and caches do
not leak between them), alternating within each repetition; the best of
`--repeats` runs is reported as strings/s and word pieces/s, with the ratio to Hugging
Face's batched Rust tokenizer. Every implementation's ids are checked equal to the
Python tokenizer's (the original release's algorithm), string by string.

  .venv-bench/bin/python -m benchmarks.speed.bench_tokenization
  .venv-bench/bin/python -m benchmarks.speed.bench_tokenization --repeat=4 --batch=1024

Implementations:
  python       data_prep.tokenization.FullTokenizer, one string at a time.
  tf_graph     data_prep.text.tf_tokenization.TFBertTokenizer.tokenize, one tf.function call
               per batch of `--batch` strings (the exported preprocessing model's path).
  tf_data      the same op in a tf.data pipeline: batch, then a parallel map
               (num_parallel_calls=AUTOTUNE), as an input pipeline runs it.
  hf           tokenizers.BertWordPieceTokenizer (lower-casing, accent stripping, CJK
               spacing, as BERT uncased) `encode_batch` without special tokens: Rust,
               multi-threaded.
  tf_fast_bert tensorflow_text.FastBertTokenizer(lower_case_nfd_strip_accents=True), for
               reference: not used by this project, because its lower-casing applies
               compatibility mappings the original does not ("½" -> "1⁄2", "…" -> "...",
               "µ" -> "μ", "″" -> "′′", "´" -> a space and a stripped accent; the
               mismatch count shows how often). TFBertTokenizer.tokenize keeps the
               original's normalization and takes the rest of its speed: the same
               FastWordpieceTokenizer, splitting words itself.

Set up the environment with `bash benchmarks/setup_bench_env.sh`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pickle
import sys
import tempfile
import time

from benchmarks.speed.bench_training import cpu_description, run_worker

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VOCAB = os.path.join(REPO, "sample_data", "vocab", "uncased_vocab.txt")
IMPLS = ("python", "tf_graph", "tf_data", "hf", "tf_fast_bert")


def load_texts(repeat: int) -> list[str]:
    """MRPC sentences and SQuAD questions and contexts, `repeat` times."""
    texts = []
    for split in ("train", "dev", "test"):
        path = os.path.join(REPO, "sample_data", "glue", "MRPC", f"{split}.tsv")
        with open(path, encoding="utf-8-sig") as f:
            for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                texts += [row["#1 String"], row["#2 String"]]
    with open(
        os.path.join(REPO, "sample_data", "squad", "dev-v2.0-first5articles.json"), encoding="utf-8"
    ) as f:
        for article in json.load(f)["data"]:
            for paragraph in article["paragraphs"]:
                texts.append(paragraph["context"])
                texts += [qa["question"] for qa in paragraph["qas"]]
    return texts * repeat


# ------------------------------------------------------------------ worker side


def run_python(texts, batch):
    from data_prep.text import tokenization

    tokenizer = tokenization.FullTokenizer(VOCAB, do_lower_case=True)
    start = time.perf_counter()
    ids = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in texts]
    return time.perf_counter() - start, ids


def _tf_batches(texts, batch):
    return [texts[i : i + batch] for i in range(0, len(texts), batch)]


def run_tf_graph(texts, batch):
    import tensorflow as tf
    from data_prep.text.tf_tokenization import TFBertTokenizer

    tokenizer = TFBertTokenizer(VOCAB, do_lower_case=True)
    batches = [tf.constant(b) for b in _tf_batches(texts, batch)]
    tokenizer.tokenize(batches[0])  # Traces the function.
    start = time.perf_counter()
    out = [tokenizer.tokenize(b) for b in batches]
    out = [r.to_list() for r in out]  # Included: the values reach Python.
    seconds = time.perf_counter() - start
    return seconds, [ids for rows in out for ids in rows]


def run_tf_data(texts, batch):
    import tensorflow as tf
    from data_prep.text.tf_tokenization import TFBertTokenizer

    tokenizer = TFBertTokenizer(VOCAB, do_lower_case=True)
    tokenizer.tokenize(tf.constant(texts[:2]))
    dataset = (
        tf.data.Dataset.from_tensor_slices(texts)
        .batch(batch)
        .map(tokenizer.tokenize, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
    )
    start = time.perf_counter()
    out = [r.to_list() for r in dataset]
    seconds = time.perf_counter() - start
    return seconds, [ids for rows in out for ids in rows]


def run_hf(texts, batch):
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(
        VOCAB, lowercase=True, clean_text=True, handle_chinese_chars=True, strip_accents=None
    )
    tokenizer.encode_batch(texts[:2], add_special_tokens=False)
    start = time.perf_counter()
    out = []
    for chunk in _tf_batches(texts, batch):
        out += [e.ids for e in tokenizer.encode_batch(chunk, add_special_tokens=False)]
    return time.perf_counter() - start, out


def run_tf_fast_bert(texts, batch):
    import tensorflow as tf
    import tensorflow_text as tf_text

    with open(VOCAB, encoding="utf-8") as f:
        vocab = f.read().splitlines()
    tokenizer = tf_text.FastBertTokenizer(
        vocab=vocab, token_out_type=tf.int32, lower_case_nfd_strip_accents=True
    )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(text):
        ids = tokenizer.tokenize(text)  # [B, (T)], or [B, (W), (P)] in older releases.
        return ids.merge_dims(1, -1) if ids.shape.rank > 2 else ids

    batches = [tf.constant(b) for b in _tf_batches(texts, batch)]
    tokenize(batches[0])
    start = time.perf_counter()
    out = [tokenize(b).to_list() for b in batches]
    seconds = time.perf_counter() - start
    return seconds, [ids for rows in out for ids in rows]


def worker(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    texts = load_texts(args.repeat)
    fn = globals()[f"run_{args.impl}"]
    seconds, ids = fn(texts, args.batch)
    with open(args.ids_out, "wb") as f:
        pickle.dump(ids, f)
    print(
        json.dumps({"seconds": seconds, "strings": len(texts), "pieces": sum(len(i) for i in ids)})
    )


# ------------------------------------------------------------------ driver side


def spawn(impl, args, ids_out):
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.speed.bench_tokenization",
        "--worker",
        f"--impl={impl}",
        f"--repeat={args.repeat}",
        f"--batch={args.batch}",
        f"--ids_out={ids_out}",
    ]
    return run_worker(cmd)


def mismatches(reference, ids) -> int:
    if len(reference) != len(ids):
        return max(len(reference), len(ids))
    return sum(1 for a, b in zip(reference, ids) if list(a) != list(b))


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--impl", default="python")
    parser.add_argument("--ids_out", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--repeat", type=int, default=2, help="Times the bundled text is repeated.")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3, help="Runs per implementation.")
    parser.add_argument("--json_out", default=None)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    impls = args.impls.split(",")
    runs = {impl: [] for impl in impls}
    with tempfile.TemporaryDirectory() as scratch:
        for rep in range(args.repeats):
            for impl in impls if rep % 2 == 0 else impls[::-1]:
                out = spawn(impl, args, os.path.join(scratch, f"{impl}.pkl"))
                runs[impl].append(out)
                print(f"rep {rep} {impl:12s} -> {out}", file=sys.stderr, flush=True)
        ids = {}
        for impl in impls:
            path = os.path.join(scratch, f"{impl}.pkl")
            if os.path.exists(path):
                with open(path, "rb") as f:
                    ids[impl] = pickle.load(f)
    reference = ids.get("python")
    rows = []
    for impl in impls:
        good = [r for r in runs[impl] if "seconds" in r]
        if not good:
            rows.append({"impl": impl, "error": runs[impl][0]["error"]})
            continue
        best = min(r["seconds"] for r in good)
        rows.append(
            {
                "impl": impl,
                "seconds": best,
                "strings_per_s": good[0]["strings"] / best,
                "pieces_per_s": good[0]["pieces"] / best,
                "strings": good[0]["strings"],
                "mismatched_strings": (
                    mismatches(reference, ids[impl])
                    if reference is not None and impl in ids
                    else None
                ),
            }
        )
    hf = next((r for r in rows if r["impl"] == "hf" and "seconds" in r), None)
    print(f"\nCPU: {cpu_description()}")
    print(
        f"{rows[0].get('strings', '?')} strings (bundled MRPC + SQuAD text x "
        f"{args.repeat}), batch {args.batch}, best of {args.repeats}\n"
    )
    print(
        "| tokenizer | strings/s | word pieces/s | vs HF tokenizers | strings whose ids "
        "differ from the Python tokenizer |"
    )
    print("|---|---|---|---|---|")
    for row in rows:
        if "error" in row:
            print(f"| {row['impl']} | error: {row['error']} | | | |")
            continue
        ratio = f"{row['strings_per_s'] / hf['strings_per_s']:.2f}x" if hf else ""
        print(
            f"| {row['impl']} | {row['strings_per_s']:.0f} | {row['pieces_per_s']:.0f} | "
            f"{ratio} | {row['mismatched_strings']} |"
        )
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
