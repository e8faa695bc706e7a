#!/usr/bin/env bash
# Sets up a virtual environment with the test dependencies and runs the test suite:
# first the fast default suite, then the tests marked slow.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3.11}
[ -d .venv ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
pip install -q -r requirements-test.txt -e .
export TF_CPP_MIN_LOG_LEVEL=2
python -m pytest -q -m "not slow" "$@"
# Exit code 5 means no slow test was collected, which is fine.
python -m pytest -q -m slow "$@" || [ $? -eq 5 ]
