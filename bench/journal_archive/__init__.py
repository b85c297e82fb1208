"""Benchmark: restart time and journal size, ended jobs hot or archived."""
