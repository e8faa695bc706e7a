"""What several tests share, and the harnesses (fuzzing, kill -9) that the benchmarks
under benchmarks/robustness/ run at scale."""
