"""Kill -9 anywhere, then the same command again, at many points of every long job.

    python -m benchmarks.robustness.kill_resume                  # every job, 12 kill points each
    python -m benchmarks.robustness.kill_resume --jobs=run_squad --points=30 --seed=3
    python -m benchmarks.robustness.kill_resume --signal=INT     # Ctrl-C instead of kill -9

For each job (tests/helpers/kill_helpers.py: create_pretraining_data, the Beam pipeline,
pre-training, the three fine-tuning runners with their feature caches, evaluation and
prediction, the TF Hub export, checkpoint conversion) it runs the command once
uninterrupted, then kills it (SIGKILL, its whole process group) after seeded delays
spread over that run's wall time, checks that no visible file differs from the
uninterrupted run's (nothing half-written looks complete), runs the same command
again and compares every output byte for byte. It prints the kill table and exits 1
if any trial left a half-written file or a rerun differed.

With --signal=INT (Ctrl-C, to the process group as a terminal sends it) or TERM, a
job stopped by the signal must also exit 130 or 143 with one line saying it stopped
and no traceback (a run that ended first, 0), and may leave a train_summary.json that
says "complete": false.

The default suite runs a few of these points (tests/robustness/test_kill_resume.py,
and Ctrl-C during training in tests/robustness/test_ctrl_c.py).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import signal
import sys
import tempfile
import time

from modeling.kernels import cpu_model_name
from tests.helpers import kill_helpers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default=",".join(kill_helpers.JOBS), help="Comma-separated.")
    parser.add_argument("--points", type=int, default=12, help="Kill points per job.")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work_dir", default=None, help="Default: a temporary folder.")
    parser.add_argument("--json", default=None, help="Also write the trials here.")
    parser.add_argument(
        "--signal", default="KILL", choices=("KILL", "INT", "TERM"), help="The signal sent."
    )
    args = parser.parse_args()
    root = pathlib.Path(args.work_dir or tempfile.mkdtemp(prefix="kill_resume_"))
    rows, trials, failed = [], {}, False
    signum = getattr(signal, "SIG" + args.signal)
    start = time.time()
    for name in args.jobs.split(","):
        job = kill_helpers.JOBS[name]
        work = root / name
        ref, seconds = kill_helpers.reference(job, work)
        results = []
        for delay in kill_helpers.kill_delays(seconds, args.points, args.seed):
            result = kill_helpers.trial(job, work, ref, delay, signum)
            if args.signal != "KILL" and not _ended_as_said(result, signum):
                result["left"].append(f"exit {result['code']}: {result['said']}")
            results.append(result)
            mark = "ok" if not (result["left"] or result["rerun"]) else "FAILED"
            print(f"{name}: kill at {result['delay']:.1f}s killed={result['killed']} {mark}")
            for problem in result["left"] + result["rerun"]:
                print(f"    {problem}")
        trials[name] = results
        killed = [r for r in results if r["killed"]]
        clean = [r for r in killed if not r["left"]]
        identical = [r for r in killed if not r["rerun"]]
        failed |= len(clean) < len(killed) or len(identical) < len(killed)
        rows.append((name, seconds, len(killed), len(clean), len(identical)))
    print()
    print(
        f"Kill table (SIG{args.signal}, {time.strftime('%Y-%m-%d')}, {cpu_model_name()}, "
        f"seed {args.seed}):"
    )
    print()
    print(
        "| job | uninterrupted run (s) | kill points | nothing half-written visible | "
        "reruns with identical outputs |"
    )
    print("|---|---|---|---|---|")
    for name, seconds, killed, clean, identical in rows:
        print(f"| {name} | {seconds:.1f} | {killed} | {clean}/{killed} | {identical}/{killed} |")
    print(f"\n{time.time() - start:.0f} s in all; work folder {root}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(trials, indent=2), encoding="utf-8")
    return 1 if failed else 0


def _ended_as_said(result: dict, signum: int) -> bool:
    """A job stopped by SIGINT or SIGTERM exits 130 or 143 with one line saying it
    stopped, and no traceback. One that had ended first exits 0; one whose work was done
    when the signal came, as the interpreter exited (its handlers already gone), is
    ended by the signal itself (the shell says 130 or 143 too)."""
    if result["traceback"]:
        return False
    if result["code"] in (0, -signum):
        return True
    return result["code"] == 128 + signum and "stopped by" in result["said"].lower()


if __name__ == "__main__":
    sys.exit(main())
