"""What several tests share, and the harnesses (fuzzing, kill -9) that the benchmarks
under benchmarks/robustness/ run at scale."""

import os
import pathlib

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def repo_pythonpath() -> str:
    """The PYTHONPATH of a process a test or harness starts: what this process was given
    (under pytest, conftest.py's, which hides the test-only packages), then the repository."""
    paths = [os.environ.get("PYTHONPATH", ""), str(REPO_ROOT)]
    return os.pathsep.join(p for p in paths if p)
