"""The test workers and every Python process they start, prewarmed or fresh, collect
garbage less often than Python's defaults (tests/helpers/runtime_only/gc_settings.py)."""

import gc
import json
import os
import subprocess
import sys

import pytest

from tests.helpers import prewarmed
from tests.helpers.runtime_only import gc_settings

# Imports TensorFlow, so that it may be forked from the prewarmed interpreter.
_THRESHOLDS = "import gc, json, tensorflow; print(json.dumps(gc.get_threshold()))"


def test_the_test_worker_collects_less_often():
    assert gc.get_threshold() == gc_settings.THRESHOLDS != (700, 10, 10)


@pytest.mark.parametrize("fresh", ["", "1"], ids=["prewarmed", "fresh"])
def test_the_processes_tests_start_collect_less_often(fresh):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **{prewarmed.OFF: fresh})
    out = subprocess.run(
        [sys.executable, "-c", _THRESHOLDS], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert tuple(json.loads(out)) == gc_settings.THRESHOLDS
