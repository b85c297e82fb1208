"""Benchmarks of the twin: replays beside a textbook EASY loop, instructions, schedule hashes."""
