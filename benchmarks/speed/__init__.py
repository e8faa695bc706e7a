"""Throughput and latency, against the peers where there are some."""
