"""The Beam pipeline against the original script and --num_workers: speed and memory.

Corpus: distinct documents made of real sentences. The pool is every sentence of
the bundled text: the BERT paper (sample_data/corpus, one sentence a line), the
SQuAD sample (contexts split by data_prep.text.sentences, and the questions) and MRPC
(train, dev and test strings), about 1.3 MB. Documents of 3 to 30 sentences are
drawn with a seeded generator from the pool, reshuffled after each pass, so no two
documents are alike; they are written to files of `--file_mb` MB in the original
format (a blank line between documents) until the corpus has `--corpus_mb` MB.

Settings, each its own process tree, one after the other:
  original     the original release (bert-tensorflow 1.0.4) on each file alone with
               the run's seed, in one process: its own functions called per file
               as its main() calls them (so its start-up is paid once);
  num_workers  python -m data_prep.create_pretraining_data --num_workers=2;
  pipeline     python -m data_prep.pretraining_pipeline, DirectRunner,
               --direct_num_workers=2 --direct_running_mode=multi_processing,
               --shard_size_mb=--file_mb (each file is one document shard);
  in_memory    (in --settings) the same in the DirectRunner's default mode: one
               process, no worker start-up;
  one_file     (--one_file) the pipeline on the same corpus as one file, which it
               cuts into document shards of --file_mb MB (memory only: other
               records, since the pieces differ).
The records of all but one_file are checked equal file by file (the original's
after re-serializing with sorted feature keys).

Reported: wall time (start-up included), instances per second of wall time, the
ratio to the original, and the peak resident memory (VmHWM, sampled every 50 ms)
of the largest worker process and of the runner/parent process.

    python -m benchmarks.speed.bench_pretraining_pipeline --corpus_mb=10
    python -m benchmarks.speed.bench_pretraining_pipeline --corpus_mb=100 --one_file
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
SAMPLE = REPO / "sample_data"
VOCAB = SAMPLE / "vocab" / "uncased_vocab.txt"
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

# The original, run on each file alone in one process (as its main() does).
ORIGINAL_PER_FILE = """
import random, sys
from absl import flags
from bert import create_pretraining_data as original
from bert import tokenization
flags.FLAGS.mark_as_parsed()
vocab, seed, dupe, seq, preds, out_dir = sys.argv[1:7]
tokenizer = tokenization.FullTokenizer(vocab_file=vocab, do_lower_case=True)
for path in sys.argv[7:]:
    rng = random.Random(int(seed))
    instances = original.create_training_instances(
        [path], tokenizer, int(seq), int(dupe), 0.1, 0.15, int(preds), rng)
    name = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    original.write_instance_to_example_files(
        instances, tokenizer, int(seq), int(preds), [out_dir + "/" + name + ".tfrecord"])
"""


def sentence_pool() -> list[str]:
    """Every distinct sentence of the bundled real text."""
    from data_prep.text import sentences

    pool = []
    for path in sorted((SAMPLE / "corpus").glob("*.txt")):
        pool += [line.strip() for line in path.read_text(encoding="utf-8").split("\n")]
    squad = json.loads((SAMPLE / "squad" / "dev-v2.0-first5articles.json").read_text())
    for article in squad["data"]:
        for paragraph in article["paragraphs"]:
            pool += sentences.split_sentences(paragraph["context"])
            pool += [qa["question"].strip() for qa in paragraph["qas"]]
    for name in ("train", "dev", "test"):
        with open(
            SAMPLE / "glue" / "MRPC" / ("%s.tsv" % name), encoding="utf-8-sig", newline=""
        ) as f:
            for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                pool += [row["#1 String"].strip(), row["#2 String"].strip()]
    return sorted({sentence for sentence in pool if sentence})


def make_corpus(directory: pathlib.Path, corpus_mb: float, file_mb: float, seed: int) -> list[str]:
    """Files of distinct documents (see the module docstring); their paths."""
    pool = sentence_pool()
    rng = random.Random(seed)
    order, position = [], 0
    paths, written = [], 0
    while written < corpus_mb * 1e6:
        path = directory / ("part-%04d.txt" % len(paths))
        size = 0
        with open(path, "w", encoding="utf-8") as f:
            while written + size < corpus_mb * 1e6:
                document = []
                for _ in range(rng.randint(3, 30)):
                    if position == len(order):
                        order = list(range(len(pool)))
                        rng.shuffle(order)
                        position = 0
                    document.append(pool[order[position]])
                    position += 1
                data = ("\n".join(document) + "\n\n").encode("utf-8")
                if size + len(data) > file_mb * 1e6:
                    break  # Files stay within one document shard of file_mb.
                f.write(data.decode("utf-8"))
                size += len(data)
        paths.append(str(path))
        written += size
    return paths


def _process_tree(pid: int) -> list[int]:
    pids, pending = [], [pid]
    while pending:
        current = pending.pop()
        pids.append(current)
        try:
            for task in os.listdir("/proc/%d/task" % current):
                with open("/proc/%d/task/%s/children" % (current, task)) as f:
                    pending.extend(int(child) for child in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return pids


def _peak_kb(pid: int) -> tuple[int, str]:
    """(VmHWM in KiB, command line) of a process, or (0, "") once it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        return hwm, cmdline
    except (FileNotFoundError, ProcessLookupError, StopIteration):
        return 0, ""


def run_measured(command: list[str], cwd: pathlib.Path) -> dict:
    """Runs a command; its wall time and the peak RSS of each of its processes."""
    peaks = {}
    with tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=ENV, stdout=log, stderr=log)
        while process.poll() is None:
            for pid in _process_tree(process.pid):
                hwm, cmdline = _peak_kb(pid)
                if hwm:
                    peaks[pid] = (max(hwm, peaks.get(pid, (0, ""))[0]), cmdline)
            time.sleep(0.05)
        wall = time.perf_counter() - start
        log.seek(0)
        output = log.read().decode(errors="replace")
    if process.returncode:
        raise RuntimeError("%s failed:\n%s" % (" ".join(command), output[-3000:]))
    root = peaks.pop(process.pid, (0, ""))[0]
    workers = [kb for kb, cmdline in peaks.values() if "python" in cmdline]
    return {
        "wall": wall,
        "root_mb": root / 1024,
        "worker_mb": max(workers, default=0) / 1024,
        "workers": len(workers),
    }


def read_records(directory: pathlib.Path, canonical: bool) -> dict:
    import tensorflow as tf

    result = {}
    for path in sorted(directory.glob("*.tfrecord")):
        records = []
        for record in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
            if canonical:
                record = tf.train.Example.FromString(record).SerializeToString(deterministic=True)
            records.append(bytes(record))
        result[path.stem] = records
    return result


def commands(files, out: pathlib.Path, args) -> dict:
    common = [
        "--vocab_file=%s" % VOCAB,
        "--dupe_factor=%d" % args.dupe_factor,
        "--max_seq_length=%d" % args.max_seq_length,
        "--max_predictions_per_seq=%d" % args.max_predictions_per_seq,
        "--random_seed=%d" % args.random_seed,
        "--do_lower_case",
    ]
    script = out / "original_per_file.py"
    script.write_text(ORIGINAL_PER_FILE)
    return {
        "original": [
            sys.executable,
            str(script),
            str(VOCAB),
            str(args.random_seed),
            str(args.dupe_factor),
            str(args.max_seq_length),
            str(args.max_predictions_per_seq),
            str(out / "original"),
        ]
        + files,
        "num_workers": [
            sys.executable,
            "-m",
            "data_prep.create_pretraining_data",
            "--input_file=%s" % ",".join(files),
            "--output_file=%s/" % (out / "num_workers"),
            "--num_workers=%d" % args.workers,
        ]
        + common,
        "pipeline": [
            sys.executable,
            "-m",
            "data_prep.pretraining_pipeline",
            "--input_file=%s" % ",".join(files),
            "--output_dir=%s" % (out / "pipeline"),
            "--shard_size_mb=%s" % args.file_mb,
            "--runner=DirectRunner",
            "--direct_num_workers=%d" % args.workers,
            "--direct_running_mode=multi_processing",
        ]
        + common,
        "in_memory": [
            sys.executable,
            "-m",
            "data_prep.pretraining_pipeline",
            "--input_file=%s" % ",".join(files),
            "--output_dir=%s" % (out / "in_memory"),
            "--shard_size_mb=%s" % args.file_mb,
            "--runner=DirectRunner",
        ]
        + common,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus_mb", type=float, default=10)
    parser.add_argument("--file_mb", type=float, default=2.5)
    parser.add_argument("--dupe_factor", type=int, default=2)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_predictions_per_seq", type=int, default=20)
    parser.add_argument("--random_seed", type=int, default=12345)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--settings", default="original,num_workers,pipeline")
    parser.add_argument(
        "--one_file", action="store_true", help="also the pipeline on the corpus as one file"
    )
    parser.add_argument("--corpus_seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = pathlib.Path(scratch_dir)
        (scratch / "corpus").mkdir()
        files = make_corpus(scratch / "corpus", args.corpus_mb, args.file_mb, args.corpus_seed)
        size = sum(os.path.getsize(f) for f in files) / 1e6
        (scratch / "original").mkdir()
        runs = commands(files, scratch, args)
        results = {}
        for name in args.settings.split(","):
            results[name] = run_measured(runs[name], REPO)
            print("%s: %.1f s" % (name, results[name]["wall"]), flush=True)
        outputs = {
            name: read_records(scratch / name, canonical=name == "original") for name in results
        }
        instances = sum(map(len, next(iter(outputs.values())).values()))
        reference = next(iter(outputs.values()))
        for name, records in outputs.items():
            if records != reference:
                raise RuntimeError("The records of %s differ." % name)
        if args.one_file:
            one = scratch / "one_file.txt"
            with open(one, "wb") as f:
                for path in files:
                    f.write(pathlib.Path(path).read_bytes())
            command = list(runs["pipeline"])
            command[3] = "--input_file=%s" % one
            command[4] = "--output_dir=%s" % (scratch / "one_file")
            results["one_file"] = run_measured(command, REPO)
        print(
            "\ncorpus: %d files, %.1f MB of distinct documents, %d instances "
            "(dupe_factor %d, max_seq_length %d), identical records in %s"
            % (
                len(files),
                size,
                instances,
                args.dupe_factor,
                args.max_seq_length,
                ", ".join(outputs),
            )
        )
        print(
            "| setting | wall s | instances/s | vs original | peak RSS largest "
            "worker MB | peak RSS parent MB |"
        )
        print("|---|---|---|---|---|---|")
        base = results.get("original", {}).get("wall")
        for name, r in results.items():
            print(
                "| %s | %.1f | %.0f | %s | %.0f | %.0f |"
                % (
                    name,
                    r["wall"],
                    instances / r["wall"],
                    "%.2fx" % (base / r["wall"]) if base else "-",
                    r["worker_mb"],
                    r["root_mb"],
                )
            )


if __name__ == "__main__":
    main()
