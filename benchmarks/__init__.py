"""Scripts that print figures, each run from the repository's root as a module:
`python -m benchmarks.speed.bench_serving` (docs/performance.md lists them)."""
