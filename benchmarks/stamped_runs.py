"""A benchmark's child process, timed by its progress lines: what `bench_training.py`
(pre-training) and the `compare/` scripts (fine-tuning) measure of a whole command
besides its wall time: when its training steps ended and its peak memory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

# A training loop's progress line: the runners write "train: step 20/62 (32%)  loss
# 0.6931 ..." to stderr (and "step 20/62  loss ..." to their log), the peers' loops of
# the fine-tuning comparisons print "hf seed 1 step 20/343 loss ...".
STEP_LINE = re.compile(r"\bstep (\d+)/\d+\b")


def run_stamped(
    command: list[str], *, cwd=None, env=None, echo=None, step_line=STEP_LINE, keep: int = 5
) -> dict:
    """Runs `command` with its stdout and stderr in one pipe, writing each line to `echo`
    as it comes (None: not shown), and stamps its progress lines (`step_line`, group 1
    the step) with the seconds since the process started. Returns its exit code (as subprocess's
    returncode), the stamps [(step, seconds)], its last `keep` lines and its peak memory
    in MB (ru_maxrss: the largest resident set of the process or of a child it waited
    for)."""
    echo = sys.stderr if echo is None else echo
    start = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=dict(env or os.environ, PYTHONUNBUFFERED="1"),
    )
    stamps, tail = [], []
    try:
        for line in process.stdout:
            match = step_line.search(line)
            if match:
                stamps.append((int(match.group(1)), time.perf_counter() - start))
            tail = (tail + [line.rstrip()])[-keep:]
            if echo:
                echo.write(line)
                echo.flush()
    except BaseException:  # e.g. Ctrl-C: as subprocess.run, the child does not outlive us.
        process.kill()
        process.wait()
        raise
    process.stdout.close()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return {
        "code": process.returncode,
        "stamps": stamps,
        "tail": tail,
        "seconds": time.perf_counter() - start,
        "peak_mb": usage.ru_maxrss / 1024,  # KB on Linux.
    }


def steady_step_seconds(stamps: list[tuple[int, float]]) -> float | None:
    """Seconds per step from the first progress line to the last; None with fewer than
    two lines of different steps."""
    if len(stamps) < 2 or stamps[-1][0] <= stamps[0][0]:
        return None
    (first_step, first_time), (last_step, last_time) = stamps[0], stamps[-1]
    return (last_time - first_time) / (last_step - first_step)


def first_step_seconds(stamps: list[tuple[int, float]]) -> float | None:
    """The seconds from the process's start to the end of its first training step:
    the first progress line's time less the steps before it at the steady step time
    (`steady_step_seconds`): imports, data, model, tracing or compiling and the first
    step. None with fewer than two progress lines."""
    step_time = steady_step_seconds(stamps)
    if step_time is None:
        return None
    first_step, first_time = stamps[0]
    return first_time - (first_step - 1) * step_time
