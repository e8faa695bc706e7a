#!/usr/bin/env bash
# Sets up a virtual environment with the test dependencies and runs the whole test suite
# (the tests marked slow included) on two pytest workers, with the slowest tests listed
# at the end so that the time budget stays visible. Extra arguments go to pytest, e.g.
# `bash run_tests.sh -m "not slow"` (the fast part) or `bash run_tests.sh tests/modeling/test_modeling.py`.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3.11}
fresh=
[ -d .venv ] || { "$PYTHON" -m venv .venv; fresh=1; }
. .venv/bin/activate
pip install -q --upgrade pip
# No byte-compiling of every installed file (about half the install's time): Python
# compiles the modules the tests import, once, on their first import. Unless it may not
# write what it compiles (PYTHONDONTWRITEBYTECODE): then every process the suite starts
# would compile TensorFlow again, so a new environment is compiled here, on all cores (a
# few files in the packages are not Python 3 and never compile).
# -qq: errors only (setuptools notes every editable install, "Editable installation.").
pip install -qq --no-compile -r requirements-test.txt -e .
if [ -n "$fresh" ] && [ -n "${PYTHONDONTWRITEBYTECODE:-}" ]; then
  python -m compileall -qq -j 0 "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || true
fi
export TF_CPP_MIN_LOG_LEVEL=2
ruff check .
ruff format --check .
python -m pytest -q -n 2 --dist loadfile --durations=30 "$@"
