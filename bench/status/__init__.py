"""Benchmark: status and bulk cancel with one user's 90,000 queued jobs.

Run as ``python -m bench.status``; see its ``__main__``.
"""
