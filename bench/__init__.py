"""Benchmarks, each printed beside its yardstick in one run."""
