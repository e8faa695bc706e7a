"""Python's cyclic garbage collector in the test processes: the test workers
(conftest.py) and every Python process a test starts (sitecustomize.py).

It collects the youngest generation every 10,000 allocations (Python: 700) and the
oldest after 50 collections of the middle one (10). With Python's defaults it swept
the whole heap of TensorFlow's modules and of the graphs the tests trace over and over:
8.0 s of 137 s of CPU in two test files (tests/modeling/test_training.py and
tests/serving/test_export.py, one process), against 2.8 s, its peak memory 4% higher.
What is collected is the same; only when it is collected changes.
"""

import gc

THRESHOLDS = (10_000, 50, 50)


def collect_less_often() -> None:
    gc.set_threshold(*THRESHOLDS)
