#!/usr/bin/env bash
# Creates .venv-bench: this project's runtime plus the peers it is benchmarked against
# (keras-hub, Hugging Face transformers on PyTorch CPU, tokenizers).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
[ -d .venv-bench ] || "$PYTHON" -m venv .venv-bench
. .venv-bench/bin/activate
pip install -q --upgrade pip
pip install -q -r benchmarks/requirements-bench.txt
# The project itself, editable: benchmarks import the library, never a path hack.
# -qq: errors only (setuptools notes every editable install, "Editable installation.").
pip install -qq --no-deps -e .
echo "ready: .venv-bench/bin/python -m benchmarks.speed.bench_training (from the repository root)"
