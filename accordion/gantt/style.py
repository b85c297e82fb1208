"""How both outputs of the Gantt chart look alike: colours, the time unit, the rectangles.

A job's colour is its user's (so one user's jobs read as one), chosen by a
stable hash of the name from a 20-colour palette: the same user has the same
colour in every chart and every run. Planned bars are the same colour, faint
and hatched; a late job has a red outline. The time axis is in the largest
unit (seconds, minutes, hours, days) that keeps a few ticks on the span.

:func:`table` turns a laid-out chart into columns (one row per rectangle),
what the PNG's collections and the HTML's data source are both built from.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from accordion.gantt.bars import BarKind, Gantt
from accordion.gantt.layout import Layout

#: matplotlib's and Bokeh's ``tab20`` (Category20) palette, in its order.
PALETTE = (
    "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896",
    "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7",
    "#bcbd22", "#dbdb8d", "#17becf", "#9edae5",
)  # fmt: skip
LATE = "#d00000"
NOW = "#222222"
PLANNED_ALPHA = 0.35
RUN_ALPHA = 0.9

UNITS = ((86_400.0, "d"), (3_600.0, "h"), (60.0, "min"), (1.0, "s"))


def colour_of(user: str) -> str:
    return PALETTE[zlib.crc32(user.encode()) % len(PALETTE)]


def time_unit(span: float) -> tuple[float, str]:
    """``(seconds per unit, unit name)`` for a time axis ``span`` seconds wide."""
    for seconds, name in UNITS:
        if span >= 3 * seconds:
            return seconds, name
    return 1.0, "s"


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    """One entry per rectangle, in columns; times in seconds."""

    left: list[float]
    right: list[float]
    bottom: list[int]
    top: list[int]
    job: list[str]
    user: list[str]
    machine: list[str]
    cpus: list[int]
    kind: list[str]
    late: list[bool]
    deadline: list[str]
    colour: list[str]

    def where(self, keep: list[bool]) -> Table:
        """The rows for which ``keep`` is true."""
        return Table(
            **{
                name: [v for v, k in zip(getattr(self, name), keep, strict=True) if k]
                for name in self.__slots__
            }
        )


def table(gantt: Gantt, layout: Layout) -> Table:
    bars = gantt.bars
    cols: dict[str, list[object]] = {name: [] for name in Table.__slots__}
    for rect in layout.rects:
        bar = bars[rect.bar]
        cols["left"].append(bar.start)
        cols["right"].append(bar.end)
        cols["bottom"].append(rect.bottom)
        cols["top"].append(rect.top)
        cols["job"].append(bar.job_id)
        cols["user"].append(bar.user)
        cols["machine"].append(bar.machine or "(not placed yet)")
        cols["cpus"].append(bar.cpus)
        cols["kind"].append(bar.kind.value)
        cols["late"].append(bar.late)
        cols["deadline"].append(_deadline_text(bar.deadline, bar.late))
        cols["colour"].append(colour_of(bar.user))
    return Table(**cols)  # type: ignore[arg-type]


def _deadline_text(deadline: float | None, late: bool) -> str:
    if deadline is None:
        return "none"
    return f"{deadline:,.0f} s" + (" (missed)" if late else "")


def is_planned(kind: str) -> bool:
    return kind == BarKind.PLANNED.value
