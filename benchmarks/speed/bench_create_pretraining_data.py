"""create_pretraining_data: this project's against the original release.

Both run as separate processes on the same corpus (the bundled BERT-paper text,
each file repeated `--repeat` times into a scratch directory), alternating
ours / original, `--runs` times each, in two settings:

  num_workers=1  both scripts on both files pooled into one corpus;
  num_workers=2  ours with --num_workers=2 (one shard per input file, two
                 processes) against the original run on each file in turn,
                 which gives the same shards.

Every run's records are checked equal to the original's (after re-serializing
them with sorted feature keys: see data_prep/create_pretraining_data.py).

  python -m benchmarks.speed.bench_create_pretraining_data --repeat=20 --dupe_factor=5

Reported per setting (median over runs): wall time of the whole command(s),
instances per second of wall time, the throughput ratio ours / original, the
peak RSS of the largest process (GNU /usr/bin/time %M, which is getrusage of
the children) and the peak private memory (USS) summed over the process tree
(sampled from /proc every 20 ms). Wall times include Python and TensorFlow start-up (a
few seconds per process; ours with workers starts TensorFlow in each worker).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
CORPUS = sorted((REPO / "sample_data" / "corpus").glob("*.txt"))
VOCAB = REPO / "sample_data" / "vocab" / "uncased_vocab.txt"
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
TIME = "/usr/bin/time"  # GNU time: %M is the peak RSS of the largest process.
RSS_MARKER = "BENCH_MAX_RSS_KB="


def make_corpus(directory: pathlib.Path, repeat: int) -> list[str]:
    """Each bundled corpus file repeated `repeat` times (documents stay whole)."""
    paths = []
    for source in CORPUS:
        text = source.read_text(encoding="utf-8").rstrip("\n") + "\n\n"
        path = directory / source.name
        path.write_text(text * repeat, encoding="utf-8")
        paths.append(str(path))
    return paths


def _tree_private_kb(pid: int) -> int:
    """Private resident memory (USS) of `pid` and its descendants, in KiB.

    USS leaves out pages shared with other processes (shared libraries, a
    fork's copy-on-write pages), so the sum counts what the processes allocated
    themselves, once, whatever else runs on the machine.
    """
    total = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            with open("/proc/%d/smaps_rollup" % current) as f:
                for line in f:
                    if line.startswith(("Private_Clean:", "Private_Dirty:")):
                        total += int(line.split()[1])
            for task in os.listdir("/proc/%d/task" % current):
                with open("/proc/%d/task/%s/children" % (current, task)) as f:
                    pending.extend(int(child) for child in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def run_command(command: list[str]) -> tuple[float, int, int]:
    """Runs a command under /usr/bin/time.

    Returns:
        (wall seconds, peak RSS of its largest process in KiB, peak private
        memory summed over its process tree in KiB).
    """
    # The logs go to a file: a pipe left unread would fill up and block.
    with tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        process = subprocess.Popen(
            [TIME, "-f", RSS_MARKER + "%M"] + command, cwd=REPO, env=ENV, stdout=log, stderr=log
        )
        peak = 0
        while process.poll() is None:
            peak = max(peak, _tree_private_kb(process.pid))
            time.sleep(0.02)
        wall = time.perf_counter() - start
        log.seek(0)
        stderr = log.read().decode(errors="replace")
    if process.returncode:
        raise RuntimeError("%s failed:\n%s" % (" ".join(command), stderr[-3000:]))
    max_process = int(stderr.rsplit(RSS_MARKER, 1)[1].split()[0])
    return wall, max_process, peak


def common_flags(args) -> list[str]:
    return [
        "--vocab_file=%s" % VOCAB,
        "--dupe_factor=%d" % args.dupe_factor,
        "--max_seq_length=%d" % args.max_seq_length,
    ]


def ours_commands(inputs, outputs, workers, args) -> list[list[str]]:
    return [
        [
            sys.executable,
            "-m",
            "data_prep.create_pretraining_data",
            "--input_file=%s" % ",".join(inputs),
            "--output_file=%s" % ",".join(outputs),
            "--num_workers=%d" % workers,
        ]
        + common_flags(args)
    ]


def original_commands(inputs, outputs, workers, args) -> list[list[str]]:
    pairs = [(",".join(inputs), outputs[0])] if workers == 1 else list(zip(inputs, outputs))
    return [
        [
            sys.executable,
            "-m",
            "bert.create_pretraining_data",
            "--input_file=%s" % i,
            "--output_file=%s" % o,
        ]
        + common_flags(args)
        for i, o in pairs
    ]


def measure(commands) -> dict:
    """Runs commands one after the other (one process each at a time)."""
    wall, max_process, tree_rss = 0.0, 0, 0
    for command in commands:
        seconds, process_peak, tree_peak = run_command(command)
        wall += seconds
        max_process = max(max_process, process_peak)
        tree_rss = max(tree_rss, tree_peak)
    return {"wall": wall, "max_process": max_process, "tree_rss": tree_rss}


def read_records(paths, canonical: bool):
    import tensorflow as tf  # Imported late: the parent stays small while timing.

    records = []
    for path in paths:
        for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
            if canonical:
                record = tf.train.Example.FromString(record).SerializeToString(deterministic=True)
            records.append(bytes(record))
    return records


def bench_setting(workers: int, inputs, scratch: pathlib.Path, args) -> dict:
    n_out = 1 if workers == 1 else len(inputs)
    ours_out = [str(scratch / ("ours_w%d_%d.tfrecord" % (workers, i))) for i in range(n_out)]
    orig_out = [str(scratch / ("orig_w%d_%d.tfrecord" % (workers, i))) for i in range(n_out)]
    results = {"ours": [], "original": []}
    for _ in range(args.runs):
        for name, commands in (
            ("ours", ours_commands(inputs, ours_out, workers, args)),
            ("original", original_commands(inputs, orig_out, workers, args)),
        ):
            results[name].append(measure(commands))
    ours_records = read_records(ours_out, canonical=False)
    if ours_records != read_records(orig_out, canonical=True):
        raise RuntimeError("Outputs differ with num_workers=%d." % workers)
    summary = {}
    for name in results:
        wall = statistics.median(r["wall"] for r in results[name])
        summary[name] = {
            "wall": wall,
            "instances_per_s": len(ours_records) / wall,
            "max_process_rss_mb": max(r["max_process"] for r in results[name]) / 1024,
            "tree_rss_mb": max(r["tree_rss"] for r in results[name]) / 1024,
            "walls": [r["wall"] for r in results[name]],
        }
    summary["instances"] = len(ours_records)
    return summary


def print_table(rows: dict, args, corpus_mb: float) -> None:
    print(
        "\ncorpus: %d files, %.1f MB (bundled corpus x%d), dupe_factor %d, "
        "max_seq_length %d, %d runs each (median)"
        % (len(CORPUS), corpus_mb, args.repeat, args.dupe_factor, args.max_seq_length, args.runs)
    )
    header = (
        "| workers | script | instances | wall s | instances/s | "
        "ratio ours/orig | peak RSS max process MB | peak USS tree MB |"
    )
    print(header)
    print("|" + "---|" * 8)
    for workers, summary in rows.items():
        ratio = summary["original"]["wall"] / summary["ours"]["wall"]
        for name in ("ours", "original"):
            s = summary[name]
            print(
                "| %d | %s | %d | %.2f | %.0f | %s | %.0f | %.0f |"
                % (
                    workers,
                    name,
                    summary["instances"],
                    s["wall"],
                    s["instances_per_s"],
                    "%.2fx" % ratio if name == "ours" else "1.00x",
                    s["max_process_rss_mb"],
                    s["tree_rss_mb"],
                )
            )
        print(
            "|  | walls ours %s / original %s |"
            % (
                ", ".join("%.1f" % w for w in summary["ours"]["walls"]),
                ", ".join("%.1f" % w for w in summary["original"]["walls"]),
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeat", type=int, default=20, help="copies of the bundled corpus in each input file"
    )
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", default="1,2", help="comma list of --num_workers settings")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = pathlib.Path(scratch_dir)
        inputs = make_corpus(scratch, args.repeat)
        corpus_mb = sum(os.path.getsize(p) for p in inputs) / 1e6
        rows = {}
        for workers in map(int, args.workers.split(",")):
            rows[workers] = bench_setting(workers, inputs, scratch, args)
            print(
                "num_workers=%d done: %s"
                % (
                    workers,
                    {
                        k: round(v["wall"], 2)
                        for k, v in rows[workers].items()
                        if isinstance(v, dict)
                    },
                ),
                flush=True,
            )
        print_table(rows, args, corpus_mb)


if __name__ == "__main__":
    main()
