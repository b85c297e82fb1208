"""What the Gantt chart draws: bars of CPUs on machines over time.

A :class:`Bar` is one part of one job during one placement: ``cpus`` CPUs
of ``machine`` from ``start`` to ``end``. A job on two machines is two bars
side by side; a job resized (FCFS-malleable's shrink and expand) is a new
bar from the instant of the resize, narrower or wider, which the layout
(:mod:`accordion.gantt.layout`) keeps on the same CPU rows so the change
reads as a change of width. ``kind`` tells what ran (or runs, up to now)
from what the plan says will run; a planned bar whose machines the plan does
not name has ``machine`` :data:`UNPLACED` and is drawn in a lane of its own.

A :class:`Gantt` is the bars with the machines they are drawn against, the
instant "now" (a live cluster's, or none for a finished twin run) and the
time base of the numbers. Both sources build one: a twin run's output
(:mod:`accordion.gantt.twin_run`) and a live cluster
(:mod:`accordion.gantt.live`); both outputs draw one
(:mod:`accordion.gantt.png`, :mod:`accordion.gantt.html`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from model.machine import Part

UNPLACED = ""
"""The ``machine`` of a planned bar whose plan names no machine yet."""


class GanttError(ValueError):
    """Bars or machines that cannot be drawn (names what is wrong)."""


class BarKind(StrEnum):
    RUN = "run"
    PLANNED = "planned"


@dataclass(frozen=True, slots=True, kw_only=True)
class Bar:
    """``cpus`` CPUs of ``machine`` held by ``job_id`` from ``start`` to ``end``.

    ``late``: the job missed its deadline (planned: it will, if the plan holds);
    ``deadline`` is that deadline, for the tooltip.
    """

    job_id: str
    user: str
    machine: str
    cpus: int
    start: float
    end: float
    kind: BarKind = BarKind.RUN
    late: bool = False
    deadline: float | None = None

    def __post_init__(self) -> None:
        if self.cpus < 1:
            raise GanttError(f"job {self.job_id!r}: a bar needs cpus >= 1, got {self.cpus}")
        if not (math.isfinite(self.start) and math.isfinite(self.end)):
            raise GanttError(f"job {self.job_id!r}: a bar needs finite times")
        if self.end < self.start:
            raise GanttError(
                f"job {self.job_id!r}: a bar ends at {self.end} before it starts at {self.start}"
            )


@dataclass(frozen=True, slots=True)
class MachineRow:
    """A machine as the chart's y axis shows it: its id and CPU count (0: a machine
    no longer in the cluster, shown for its past bars)."""

    id: str
    cpus: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Gantt:
    """Everything one chart shows (module docstring)."""

    title: str
    machines: tuple[MachineRow, ...]
    bars: tuple[Bar, ...]
    #: Where the "now" line goes; None for a finished run.
    now: float | None = None
    time_base: str = "seconds"
    #: The span of time to show (a window of a long run); a None side: the bars'.
    view: tuple[float | None, float | None] = (None, None)

    def __post_init__(self) -> None:
        known = {m.id for m in self.machines}
        if len(known) != len(self.machines):
            raise GanttError("a machine is listed twice")
        if UNPLACED in known:
            raise GanttError("a machine needs a non-empty id")
        for bar in self.bars:
            if bar.machine not in known and not (
                bar.machine == UNPLACED and bar.kind is BarKind.PLANNED
            ):
                raise GanttError(f"job {bar.job_id!r} has a bar on unknown machine {bar.machine!r}")

    @property
    def jobs(self) -> int:
        return len({b.job_id for b in self.bars})

    def span(self) -> tuple[float, float]:
        """The span to show: ``view``, its open sides from the earliest start and the
        latest end (``now`` included); (0, 1) for no bar at all."""
        if not self.bars:
            lo, hi = (0.0, 1.0) if self.now is None else (self.now, self.now + 1.0)
        else:
            lo = min(b.start for b in self.bars)
            hi = max(b.end for b in self.bars)
            if self.now is not None:
                lo, hi = min(lo, self.now), max(hi, self.now)
        first, last = self.view
        lo = lo if first is None else first
        hi = hi if last is None else last
        return (lo, hi if hi > lo else lo + 1.0)


def placement_bars(
    job_id: str,
    user: str,
    steps: Sequence[tuple[float, tuple[Part, ...]]],
    end: float,
    *,
    kind: BarKind = BarKind.RUN,
    late: bool = False,
    deadline: float | None = None,
) -> list[Bar]:
    """The bars of a job placed on ``steps`` (each ``(instant, parts)`` lasting until
    the next, the last until ``end``): one per part and placement. Placements of no
    length are left out."""
    bars: list[Bar] = []
    for i, (at, parts) in enumerate(steps):
        until = steps[i + 1][0] if i + 1 < len(steps) else end
        if until <= at:
            continue
        bars += [
            Bar(
                job_id=job_id,
                user=user,
                machine=p.machine,
                cpus=p.cpus,
                start=at,
                end=until,
                kind=kind,
                late=late,
                deadline=deadline,
            )
            for p in merged(parts)
        ]
    return bars


def merged(parts: Iterable[Part]) -> tuple[Part, ...]:
    """``parts`` with two parts on one machine made one (a bar per machine)."""
    cpus: dict[str, int] = {}
    for p in parts:
        cpus[p.machine] = cpus.get(p.machine, 0) + p.cpus
    return tuple(Part(m, c) for m, c in cpus.items())
