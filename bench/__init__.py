"""Benchmark tooling: workloads to load (bench.workloads) and pilot load to drive (bench.pilots)."""
