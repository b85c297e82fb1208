"""The twin's experiments: simulate and compare runs, sweeps, charts, and the live demo."""
