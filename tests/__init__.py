"""The test suite. A package, so that its modules are imported under one name
(`tests.conftest`, `tests.helpers...`) by pytest, by each other and by the benchmarks
that run the suite's harnesses at scale (`python -m benchmarks.robustness.kill_resume`)."""
