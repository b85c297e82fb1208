"""Benchmarks of the live runtime: throughput, latency, launches, the MPI-like workload's speed."""
