"""A sweep's rows summarised: mean and 95 % confidence interval per policy and value, and the chart.

The interval is Student's t: ``mean +- t(0.975, n - 1) * s / sqrt(n)``, with
``s`` the sample standard deviation over the seeds, as the EG-EDF paper's
Fig. 1 draws means over its 20 repetitions. The t quantiles are tabulated
(:data:`T975`, from any statistics table; e.g. ``t(0.975, 19) = 2.093``) so
that no statistics library is needed for one column of numbers; above 30
degrees of freedom the table's nearest lower entry is used, which errs on the
wide side, and beyond 120 the normal 1.960.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from accordion.experiments.sweep import METRIC_COLUMNS, Row

T975: dict[int, float] = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
    16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
    23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
    30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip
"""Two-sided 95 % quantiles of Student's t by degrees of freedom."""

CHART_METRICS: tuple[tuple[str, str, float], ...] = (
    ("deadline_miss_rate", "late jobs (%)", 100.0),
    ("system_usage", "system usage (%)", 100.0),
    ("slowdown_mean", "mean slowdown", 1.0),
    ("wait_mean", "mean wait (s)", 1.0),
    ("response_mean", "mean response (s)", 1.0),
    ("bounded_slowdown_mean", "mean bounded slowdown", 1.0),
)
"""(column, label, scale) of the chart's panels; Fig. 1's two first."""


def t975(df: int) -> float:
    if df < 1:
        return math.nan
    if df in T975:
        return T975[df]
    if df > 120:
        return 1.960
    return T975[max(k for k in T975 if k <= df)]


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and half-width of its 95 % interval (NaN half-width for one value)."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, math.nan
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, t975(n - 1) * math.sqrt(var / n)


Stat = tuple[str, float, str, int, float, float]
"""(policy, value, metric, n, mean, half-width)."""


def summarise(rows: Iterable[Row]) -> list[Stat]:
    groups: dict[tuple[str, float], list[Row]] = defaultdict(list)
    for r in rows:
        groups[(r["policy"], float(r["value"]))].append(r)
    out: list[Stat] = []
    for (policy, value), members in sorted(groups.items()):
        for metric in METRIC_COLUMNS:
            mean, half = mean_ci([float(r[metric]) for r in members])
            out.append((policy, value, metric, len(members), mean, half))
    return out


def write_summary(path: Path, parameter: str, stats: Sequence[Stat]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["policy", parameter, "metric", "n", "mean", "ci95_low", "ci95_high"])
        for policy, value, metric, n, mean, half in stats:
            lo, hi = (mean, mean) if math.isnan(half) else (mean - half, mean + half)
            writer.writerow(
                [policy, repr(value), metric, n, f"{mean:.6g}", f"{lo:.6g}", f"{hi:.6g}"]
            )


def write_chart(path: Path, title: str, parameter: str, stats: Sequence[Stat]) -> None:
    """Each metric against the parameter, one line per policy, 95 % intervals as bars."""
    import matplotlib  # noqa: PLC0415 (slow to import; only a sweep's last step draws)

    matplotlib.use("Agg")  # no display here or in CI
    import matplotlib.pyplot as plt  # noqa: PLC0415

    by: dict[tuple[str, str], list[tuple[float, float, float]]] = defaultdict(list)
    for policy, value, metric, _, mean, half in stats:
        by[(metric, policy)].append((value, mean, 0.0 if math.isnan(half) else half))
    policies = sorted({s[0] for s in stats})
    fig, axes = plt.subplots(2, 3, figsize=(14, 8), constrained_layout=True)
    for ax, (metric, label, scale) in zip(axes.flat, CHART_METRICS, strict=True):
        for i, policy in enumerate(policies):
            points = sorted(by.get((metric, policy), []))
            if not points:
                continue
            xs = [p[0] for p in points]
            ys = [p[1] * scale for p in points]
            err = [p[2] * scale for p in points]
            ax.errorbar(xs, ys, yerr=err, label=policy, color=f"C{i}", marker="o", capsize=3)
        ax.set_title(label)
        ax.set_xlabel(parameter)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
