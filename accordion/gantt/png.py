"""The Gantt chart as a PNG (matplotlib, Agg backend, as the ``compare`` chart).

Machines and their CPUs up the y axis (one band per machine, labelled with
its id and size), time along the x axis in the unit ``style.time_unit``
picks. Rectangles go into one ``PolyCollection`` per kind (run, planned)
and one for the red outlines of late jobs, so 10,000 jobs draw in about a
second rather than one patch at a time.
"""

from __future__ import annotations

from pathlib import Path

from accordion.gantt.bars import Gantt
from accordion.gantt.layout import Layout, lay_out
from accordion.gantt.style import (
    LATE,
    NOW,
    PLANNED_ALPHA,
    RUN_ALPHA,
    Table,
    is_planned,
    table,
    time_unit,
)


def write_png(path: Path, gantt: Gantt, *, layout: Layout | None = None) -> None:
    """Draw ``gantt`` to ``path``."""
    import matplotlib

    matplotlib.use("Agg")  # no display here or in CI
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    layout = layout or lay_out(gantt)
    rows = table(gantt, layout)
    lo, hi = gantt.span()
    unit, unit_name = time_unit(hi - lo)
    height = layout.height
    fig, ax = plt.subplots(
        figsize=(14, min(12.0, 3.0 + 0.25 * len(layout.bands) + height / 200)),
        constrained_layout=True,
    )

    def polys(t: Table) -> list[list[tuple[float, float]]]:
        return [
            [(a / unit, b), (c / unit, b), (c / unit, d), (a / unit, d)]
            for a, c, b, d in zip(t.left, t.right, t.bottom, t.top, strict=True)
        ]

    planned = [is_planned(k) for k in rows.kind]
    run = rows.where([not p for p in planned])
    plan = rows.where(planned)
    ax.add_collection(
        PolyCollection(
            polys(run), facecolors=run.colour, edgecolors="white", linewidths=0.3, alpha=RUN_ALPHA
        )
    )
    ax.add_collection(
        PolyCollection(
            polys(plan),
            facecolors=plan.colour,
            edgecolors=plan.colour,
            alpha=PLANNED_ALPHA,
            hatch="//",
            linewidths=0.5,
        )
    )
    late = rows.where(rows.late)
    ax.add_collection(
        PolyCollection(polys(late), facecolors="none", edgecolors=LATE, linewidths=1.2)
    )
    for band in layout.bands:
        ax.axhline(band.bottom, color="#999999", linewidth=0.6)
        if band.height > band.cpus > 0:
            # Rows above the machine's CPUs: held at once beyond its size (layout docstring).
            ax.axhline(band.bottom + band.cpus, color=LATE, linewidth=0.6, linestyle=":")
    ax.set_yticks(
        [b.bottom + b.height / 2 for b in layout.bands], [b.label for b in layout.bands], fontsize=8
    )
    if gantt.now is not None:
        ax.axvline(gantt.now / unit, color=NOW, linestyle="--", linewidth=1.2)
        ax.annotate("now", (gantt.now / unit, height), xytext=(3, -12), textcoords="offset points")
    ax.set_xlim(lo / unit, hi / unit)
    ax.set_ylim(0, height)
    ax.set_xlabel(f"time ({unit_name}; {gantt.time_base})")
    ax.set_ylabel("machines and their CPUs")
    ax.set_title(f"{gantt.title}: {gantt.jobs} jobs")
    fig.legend(
        handles=[
            Patch(facecolor="#7f7f7f", alpha=RUN_ALPHA, label="ran / running"),
            Patch(facecolor="#7f7f7f", alpha=PLANNED_ALPHA, hatch="//", label="planned"),
            Patch(facecolor="none", edgecolor=LATE, label="deadline missed"),
        ],
        loc="outside lower right",
        ncols=3,
        fontsize=8,
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)
