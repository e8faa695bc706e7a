"""Fuzzing and kill -9 at scale: the large profiles of the suite's robustness tests."""
