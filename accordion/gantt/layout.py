"""Where each bar goes on the y axis: CPU rows within its machine's band.

Theory of operation. The y axis stacks the machines, each a band as tall
as its CPUs (row 0 at the bottom of the band). Neither the twin nor the
live cluster says *which* CPUs a part holds, only how many, so the layout
chooses rows: a sweep over each machine's bars in time order, ends before
starts at the same instant, gives every starting bar the lowest free rows
(the lowest run of free rows side by side that fits it, else the lowest free
rows wherever they are). Rows need not be contiguous when the machine is
fragmented: such a bar is drawn as several rectangles, one per run of rows,
all with the same tooltip.

A bar that continues another of the same job on the same machine at the
instant the other ends (a resize, or a running job's estimated rest after
"now") keeps that bar's rows: a shrink gives back its highest rows, an
expand adds the lowest free ones. So a resize reads as a change of width in
place, not a jump.

A machine whose bars hold more CPUs at once than it has (a live cluster's
plan against a job that overran its estimate) gets rows above its top: its
band grows to show the excess rather than drawing over its neighbour. The
planned bars that name no machine (``bars.UNPLACED``) are laid out the same
way in a lane of their own, as tall as they need.

Cost: each bar is one allocation over the machine's free intervals, whose
number is at most the bars running there at once plus one; 10,000 jobs lay
out in well under a second.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass

from accordion.gantt.bars import UNPLACED, Gantt

_TOP = 1 << 62
"""The free space above every machine's rows (rows past its CPUs: see above)."""


@dataclass(frozen=True, slots=True)
class Band:
    """One machine's (or the unplaced lane's) place on the y axis."""

    machine: str
    label: str
    bottom: int
    height: int
    cpus: int


@dataclass(frozen=True, slots=True)
class Rect:
    """One rectangle of bar ``bar`` (an index into ``Gantt.bars``)."""

    bar: int
    bottom: int
    top: int


@dataclass(frozen=True, slots=True)
class Layout:
    bands: tuple[Band, ...]
    rects: tuple[Rect, ...]

    @property
    def height(self) -> int:
        return max((b.bottom + b.height for b in self.bands), default=1)


class _FreeRows:
    """Free rows as sorted disjoint intervals ``[a, b)``; the last reaches ``_TOP``."""

    __slots__ = ("_cpus", "_ends", "_starts", "peak")

    def __init__(self, cpus: int) -> None:
        self._cpus = cpus
        self._starts = [0]
        self._ends = [_TOP]
        #: The highest row ever handed out, plus one.
        self.peak = 0

    def take(self, n: int) -> list[tuple[int, int]]:
        """``n`` free rows, as intervals: the lowest run of ``n`` side by side within the
        machine's CPUs if there is one (one rectangle to draw), else the lowest rows."""
        starts, ends = self._starts, self._ends
        for i, (a, b) in enumerate(zip(starts, ends, strict=True)):
            if a + n > self._cpus:
                break
            if b - a >= n:
                if a + n == b:
                    del starts[i], ends[i]
                else:
                    starts[i] = a + n
                self.peak = max(self.peak, a + n)
                return [(a, a + n)]
        got: list[tuple[int, int]] = []
        while n > 0:
            a, b = starts[0], ends[0]
            k = min(n, b - a)
            got.append((a, a + k))
            n -= k
            if a + k == b:
                del starts[0], ends[0]
            else:
                starts[0] = a + k
        self.peak = max(self.peak, got[-1][1])
        return got

    def give(self, rows: list[tuple[int, int]]) -> None:
        starts, ends = self._starts, self._ends
        for a, b in rows:
            i = bisect.bisect_left(starts, a)
            # Merge with the interval before (ending at a) and the one after (starting at b).
            if i > 0 and ends[i - 1] == a:
                if i < len(starts) and starts[i] == b:
                    ends[i - 1] = ends[i]
                    del starts[i], ends[i]
                else:
                    ends[i - 1] = b
            elif i < len(starts) and starts[i] == b:
                starts[i] = a
            else:
                starts.insert(i, a)
                ends.insert(i, b)


Rows = list[tuple[int, int]]


def _keep_lowest(rows: Rows, n: int) -> tuple[Rows, Rows]:
    """``rows`` split into their lowest ``n`` rows and the rest."""
    kept: list[tuple[int, int]] = []
    rest: list[tuple[int, int]] = []
    for a, b in sorted(rows):
        if n <= 0:
            rest.append((a, b))
        elif b - a <= n:
            kept.append((a, b))
            n -= b - a
        else:
            kept.append((a, a + n))
            rest.append((a + n, b))
            n = 0
    return kept, rest


def _lay_machine(
    gantt: Gantt, indices: list[int], cpus: int
) -> tuple[dict[int, list[tuple[int, int]]], int]:
    """Rows of each bar of one machine, and the rows the machine needs."""
    bars = gantt.bars
    # A bar of no length covers no row (and would end before it starts in the sweep).
    indices = [i for i in indices if bars[i].end > bars[i].start]
    # A bar that starts where another of its job ends on this machine continues it.
    starting = {(bars[i].job_id, bars[i].start): i for i in indices}
    events = sorted(
        [(bars[i].end, 0, i) for i in indices] + [(bars[i].start, 1, i) for i in indices]
    )
    free = _FreeRows(cpus)
    rows: dict[int, list[tuple[int, int]]] = {}
    handed: dict[int, list[tuple[int, int]]] = {}
    for _, is_start, i in events:
        bar = bars[i]
        if not is_start:
            held = rows[i]
            nxt = starting.get((bar.job_id, bar.end))
            if nxt is not None and nxt != i:
                kept, rest = _keep_lowest(held, bars[nxt].cpus)
                handed[nxt] = kept
                free.give(rest)
            else:
                free.give(held)
            continue
        got = handed.pop(i, [])
        have = sum(b - a for a, b in got)
        if have < bar.cpus:
            got = got + free.take(bar.cpus - have)
        rows[i] = _coalesce(got)
    return rows, free.peak


def _coalesce(rows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(rows):
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def lay_out(gantt: Gantt) -> Layout:
    """The bands and rectangles of ``gantt`` (module docstring)."""
    by_machine: dict[str, list[int]] = defaultdict(list)
    for i, bar in enumerate(gantt.bars):
        by_machine[bar.machine].append(i)
    bands: list[Band] = []
    rects: list[Rect] = []
    bottom = 0
    lanes = [
        (m.id, f"{m.id} ({m.cpus} CPUs)" if m.cpus else f"{m.id} (gone)", m.cpus)
        for m in gantt.machines
    ]
    if by_machine.get(UNPLACED):
        # Below the machines: planned jobs the plan has not placed yet.
        lanes.insert(0, (UNPLACED, "planned, no machine yet", 0))
    for machine, label, cpus in lanes:
        rows, peak = _lay_machine(gantt, by_machine.get(machine, []), cpus)
        height = max(cpus, peak, 1)
        bands.append(Band(machine=machine, label=label, bottom=bottom, height=height, cpus=cpus))
        for i, held in sorted(rows.items()):
            rects += [Rect(i, bottom + a, bottom + b) for a, b in held]
        bottom += height
    return Layout(bands=tuple(bands), rects=tuple(rects))
