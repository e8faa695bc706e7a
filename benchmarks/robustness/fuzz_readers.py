"""Fuzzes every reader of user files at scale and prints the table of docs/robustness.md.

Each reader (tests/helpers/fuzz_targets.py: GLUE, XNLI, SWAG and generic TSV/CSV, SQuAD,
CoNLL in three tag schemes, corpora as sentences, text and JSON lines, plain or
compressed, vocabularies, configs, pre-training shards, a feature cache, checkpoints
in three formats, conlleval input, SQuAD evaluation files) reads `--examples`
hypothesis cases: damaged copies of the bundled sample files and generated input.
Per reader it prints the examples tried, those accepted, those rejected with the
project's error (a UserError naming the file), and anything else (a bug: must be 0),
with the CPU seconds; then the first few "other" failures in full.

  python -m benchmarks.robustness.fuzz_readers --examples=10000
  python -m benchmarks.robustness.fuzz_readers --examples=200 --readers=CoNLL,SQuAD --seed=3

The default test suite runs the same readers on the "ci" profile
(tests/robustness/test_fuzz_readers.py: 200 fixed examples each, 50 to 100 for the costliest).
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import sys
import time

from modeling.kernels import cpu_model_name

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=10_000, help="Examples per reader.")
    parser.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: random).")
    parser.add_argument(
        "--readers", default="", help="Comma-separated parts of reader names (default: all)."
    )
    parser.add_argument("--show", type=int, default=3, help="'Other' failures shown per reader.")
    args = parser.parse_args()

    from absl import logging as absl_logging

    from tests.helpers import fuzz_targets

    absl_logging.set_verbosity(absl_logging.ERROR)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    wanted = [part.strip().lower() for part in args.readers.split(",") if part.strip()]
    readers = [
        reader
        for name, reader in fuzz_targets.READERS.items()
        if not wanted or any(part in name.lower() for part in wanted)
    ]
    print(
        f"# {datetime.date.today()}, {cpu_model_name()}, {args.examples} examples per reader, "
        f"seed {args.seed}"
    )
    print("| reader | tried | accepted | rejected (UserError) | other | CPU s |")
    print("|---|---:|---:|---:|---:|---:|")
    failures, total_other, start_all = {}, 0, time.process_time()
    for reader in readers:
        start = time.process_time()
        counts, others = fuzz_targets.fuzz(
            reader, args.examples, seed=args.seed, raise_on_other=False, profile="large"
        )
        seconds = time.process_time() - start
        tried = sum(counts.values())
        total_other += counts["other"]
        print(
            f"| {reader.name} | {tried:,} | {counts['accepted']:,} | {counts['rejected']:,} | "
            f"{counts['other']:,} | {seconds:.0f} |",
            flush=True,
        )
        if others:
            failures[reader.name] = others
    print(f"\nTotal CPU: {time.process_time() - start_all:.0f} s (this process).")
    for name, others in failures.items():
        print(f"\n## {name}: {len(others)} other")
        for detail in others[: args.show]:
            print(detail)
    return 1 if total_other else 0


if __name__ == "__main__":
    sys.exit(main())
