"""Many generated requests to every serving export, on demand: the default test suite
tries 80 per export (tests/serving/test_serving_requests.py), this script as many as asked.

  python -m benchmarks.robustness.fuzz_serving --examples=10000 [--seed=0] [--exports=squad,ner]
  python -m benchmarks.robustness.fuzz_serving --xla_single_requests   # the XLA exports

Each export (classifier, multiple_choice, ner, squad, preprocessing: of a tiny random
model) runs in its own process (`python -m tests.helpers.serving_fuzz`), so that a crash ends
only that export's run and is counted. The contract and the requests (empty strings and
batches, bytes that are not UTF-8, 10,000-word texts, batches of different sizes,
malformed segments, mixed batches) are in tests/helpers/serving_fuzz.py. Prints per export:
examples tried, answered, rejected with a clear error (a request check's
InvalidArgumentError), anything else (must be 0: other errors, wrong answers, refused
valid requests, crashes, hangs), with up to 5 examples of anything else. Exits 1 if
anything else happened.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORTS = ("classifier", "multiple_choice", "ner", "squad", "preprocessing")


def run_export(export: str, args, scratch: str) -> dict:
    out = os.path.join(scratch, f"{export}.json")
    progress = os.path.join(scratch, f"{export}.progress")
    start = time.time()
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.helpers.serving_fuzz",
            f"--exports={export}",
            f"--examples={args.examples}",
            f"--seed={args.seed}",
            f"--timeout={args.timeout}",
            f"--out={out}",
            f"--progress={progress}",
            *(["--xla_single_requests"] if args.xla_single_requests else []),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO),
    )
    if process.returncode != 0 or not os.path.exists(out):
        running = open(progress, encoding="utf-8").read() if os.path.exists(progress) else ""
        return {
            "tried": None,
            "answered": None,
            "rejected": None,
            "other": 1,
            "other_examples": [
                f"the process ended with exit code {process.returncode} while running "
                f"{running.strip()}: {process.stderr[-2000:]}"
            ],
            "seconds": time.time() - start,
        }
    with open(out, encoding="utf-8") as f:
        results = json.load(f)
    counts = results["generated"][export]
    named = [
        f"hand-made case {name!r}: {value['details']}"
        for name, value in results["named"].items()
        if value["outcome"] == "other"
    ]
    counts["other"] += len(named)
    counts["other_examples"] = named + counts["other_examples"]
    counts["seconds"] = time.time() - start
    return counts


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=10_000, help="Requests per export.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--exports", default=",".join(EXPORTS))
    parser.add_argument("--timeout", type=float, default=300, help="Seconds per request.")
    parser.add_argument(
        "--xla_single_requests",
        action="store_true",
        help="Task exports that run a request of one example through XLA "
        "(--export_xla_single_requests).",
    )
    args = parser.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as scratch:
        for export in args.exports.split(","):
            rows[export] = run_export(export, args, scratch)
            print(f"{export}: {json.dumps(rows[export])[:300]}", file=sys.stderr, flush=True)
    xla = ", task exports with xla_single_requests" if args.xla_single_requests else ""
    print(f"\n{args.examples} generated requests per export, seed {args.seed}{xla}\n")
    print("| export | tried | answered | rejected with a clear error | anything else | s |")
    print("|---|---|---|---|---|---|")
    for export, row in rows.items():
        print(
            f"| {export} | {row['tried']} | {row['answered']} | {row['rejected']} | "
            f"{row['other']} | {row['seconds']:.0f} |"
        )
    failed = False
    for export, row in rows.items():
        for example in row["other_examples"]:
            failed = True
            print(f"\n{export}: {example}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
