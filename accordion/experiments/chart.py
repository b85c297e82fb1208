"""The ``compare`` chart: key metrics per policy as bars, the baseline first (PNG)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

CHART_METRICS: tuple[tuple[str, str], ...] = (
    ("wait_mean", "mean wait (s)"),
    ("bounded_slowdown_mean", "mean bounded slowdown"),
    ("response_mean", "mean response (s)"),
    ("utilisation", "utilisation"),
    ("fragmentation", "fragmentation"),
    ("deadline_miss_rate", "deadline miss rate"),
)


def write_chart(
    path: Path, title: str, rows: Sequence[Mapping[str, float | int | str]], policies: Sequence[str]
) -> None:
    """A grid of bar charts, one per metric, one bar per policy."""
    import matplotlib

    matplotlib.use("Agg")  # no display here or in CI
    import matplotlib.pyplot as plt

    panels = list(CHART_METRICS)
    if all(float(r.get("deadline_jobs", 0)) == 0 for r in rows):
        # No job has a deadline: an empty panel says nothing, the MPL does.
        panels[-1] = ("average_mpl", "average MPL")
    fig, axes = plt.subplots(2, 3, figsize=(13, 7), constrained_layout=True)
    colours = [f"C{i}" for i in range(len(policies))]
    for ax, (key, label) in zip(axes.flat, panels, strict=True):
        values = [float(r[key]) for r in rows]
        ax.bar(range(len(policies)), values, color=colours)
        ax.set_title(label)
        ax.set_xticks(range(len(policies)), policies, rotation=30, ha="right", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.savefig(path, dpi=110)
    plt.close(fig)
