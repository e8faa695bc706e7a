#!/usr/bin/env bash
# Sets up a virtual environment with the test dependencies and runs the whole test suite
# (the tests marked slow included) on two pytest workers, with the slowest tests listed
# at the end so that the time budget stays visible. Extra arguments go to pytest, e.g.
# `bash run_tests.sh -m "not slow"` (the fast part) or `bash run_tests.sh tests/modeling/test_modeling.py`.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3.11}
[ -d .venv ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
pip install -q -r requirements-test.txt -e .
export TF_CPP_MIN_LOG_LEVEL=2
ruff check .
ruff format --check .
python -m pytest -q -n 2 --dist loadfile --durations=30 "$@"
