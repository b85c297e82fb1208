"""Free CPUs as a step function of time: the one implementation both planners use.

Conservative backfilling (``scheduler.planning.profile``, every machine at once) and
EG-EDF (``scheduler.policies.eg_edf``, one :class:`Timeline` per machine) both
plan into the future on the same object: a sorted list of breakpoint
``times`` and, per machine, a column of free-CPU counts, one per breakpoint;
the value at a breakpoint holds until the next one, and the last holds for
ever. Equal neighbours are merged after every change, so every breakpoint
after the first is an instant where something changes. One implementation, so
that a fix or a speed-up of the one is one of both.

The functions below are that step function's three operations, on plain
lists so that the hot loops run on locals:

* :func:`scan`: the earliest candidate breakpoint with enough CPUs free over a
  window (each breakpoint looked at about once);
* :func:`split`: a breakpoint at ``t``, inserted with the values before it;
* :func:`merge`: drop a breakpoint that changes nothing.

:class:`Timeline` is the step function of one machine with bookings of a
number of CPUs, built in one pass from the running jobs' releases and the
booked slots (a trace replay rebuilds it at every event).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from itertools import accumulate


def scan(  # noqa: PLR0917 - the hot loop of a replay; keywords would cost per call
    times: Sequence[float],
    col: Sequence[int],
    cpus: int,
    duration: float,
    first: int,
    stop: int,
    nb: float,
    cap: float = math.inf,
) -> int:
    """Index of the first candidate in ``[first, stop)`` with ``col >= cpus`` over its window.

    Candidate ``i`` starts at ``max(times[i], nb)``; its window is
    ``[t, min(t + duration, cap))``. -1 if none.
    """
    n = len(times)
    i = first
    while i < stop:
        if col[i] < cpus:
            i += 1
            continue
        t = times[i] if times[i] > nb else nb
        end = t + duration
        if cap < end:  # noqa: PLR1730 -- no builtin call per candidate in the hot loop
            end = cap
        j = i + 1
        while j < n and times[j] < end:
            if col[j] < cpus:
                break
            j += 1
        else:
            return i
        # Every candidate up to j has j inside its window: resume after it.
        i = j + 1
    return -1


def split(times: list[float], cols: Sequence[list[int]], t: float) -> int:
    """Index of a breakpoint at ``t``, inserting one (same values as before it) if needed."""
    i = bisect_left(times, t)
    if i < len(times) and times[i] == t:
        return i
    if i == 0:
        raise ValueError(f"time {t} is before the profile's start {times[0]}")
    times.insert(i, t)
    for col in cols:
        col.insert(i, col[i - 1])
    return i


def merge(times: list[float], cols: Sequence[list[int]], i: int) -> None:
    """Drop breakpoint ``i`` if it changes nothing (never the first one, ``now``)."""
    if not 0 < i < len(times):
        return
    for col in cols:
        if col[i] != col[i - 1]:
            return
    del times[i]
    for col in cols:
        del col[i]


class Timeline:
    """Free CPUs of one machine from now on (EG-EDF's plan of a machine).

    ``free[i]`` CPUs are free from ``times[i]`` until ``times[i + 1]``; the last
    value holds for ever; ``times[0]`` is now. Besides the profile's questions
    it answers "most CPUs free between two instants", which compaction asks of
    every slot.
    """

    __slots__ = ("free", "times")

    def __init__(self, times: list[float], free: list[int]) -> None:
        """The step function as it is: ``times`` ascending, ``times[0]`` now, and the
        CPUs free from each (built by :meth:`of`, :meth:`constant` or :meth:`of_releases`)."""
        self.times = times
        self.free = free

    @classmethod
    def of(
        cls,
        now: float,
        free_now: int,
        releases: Iterable[tuple[float, int]],
        bookings: Iterable[tuple[float, float, int]] = (),
    ) -> Timeline:
        """``releases``: ``(time, cpus)`` given back, ``time >= now``; ``bookings``:
        ``(start, end, cpus)`` held. Infeasible bookings are allowed here (see
        :meth:`feasible`)."""
        steps: dict[float, int] = {now: free_now}
        get = steps.get
        for t, c in releases:
            steps[t] = get(t, 0) + c
        for start, end, c in bookings:
            steps[start] = get(start, 0) - c
            steps[end] = get(end, 0) + c
        # Instants where nothing changes in sum (one booking ends as another of the
        # same width starts) are no breakpoints; now always is.
        times = sorted([t for t, d in steps.items() if d or t == now])
        return cls(times, list(accumulate([steps[t] for t in times])))

    @classmethod
    def constant(cls, now: float, free_now: int) -> Timeline:
        """The timeline of a machine with nothing running or booked: ``free_now``
        CPUs from now on (what ``Timeline.of(now, free_now, ())`` builds, without the
        general pass; EG-EDF builds one per idle machine at every event)."""
        return cls([now], [free_now])

    @classmethod
    def of_releases(
        cls, now: float, free_now: int, releases: Sequence[tuple[float, int]]
    ) -> Timeline:
        """What ``Timeline.of(now, free_now, releases)`` builds, for ``releases`` already in
        time order (``time >= now``), in one pass without a dict or a sort (out of
        order, it falls back to the general pass): EG-EDF
        builds one per busy machine at every event, from the running jobs, which the
        snapshot keeps sorted by estimated end."""
        times = [now]
        free = [free_now]
        last = now
        total = free_now
        for t, c in releases:
            total += c
            if t == last:
                free[-1] = total
            elif t > last:
                times.append(t)
                free.append(total)
                last = t
            else:
                return cls.of(now, free_now, releases)  # not in time order after all
        return cls(times, free)

    @property
    def end(self) -> float:
        """The last change: the end of everything running or booked (now if nothing)."""
        return self.times[-1]

    def feasible(self) -> bool:
        return min(self.free) >= 0

    def earliest(
        self,
        cpus: int,
        duration: float,
        not_before: float,
        *,
        before: float = math.inf,
        cap: float = math.inf,
    ) -> float | None:
        """Earliest start ``t`` in ``[not_before, before)`` with ``cpus`` free over
        ``[t, min(t + duration, cap))``; None if there is none."""
        times = self.times
        nb = not_before if not_before > times[0] else times[0]
        if nb >= before:
            return None
        first = bisect_right(times, nb) - 1
        stop = bisect_left(times, before, first + 1)
        i = scan(times, self.free, cpus, duration, first, stop, nb, cap)
        if i < 0:
            return None
        return times[i] if i > first else nb

    def move_earlier(
        self, start: float, end: float, cpus: int, duration: float, not_before: float
    ) -> float | None:
        """Re-book the booking ``[start, end)`` at its earliest start in
        ``[not_before, start)``; the new start, or None (nothing changed).

        The window need not be checked past ``start``: the job's own CPUs are
        booked there and a window that starts earlier ends earlier. Most slots
        cannot move; the C-level ``max`` over the candidates turns them away.
        """
        times = self.times
        i0 = bisect_right(times, not_before) - 1
        i1 = bisect_left(times, start, i0 + 1)
        if max(self.free[i0:i1]) < cpus:
            return None
        t = self.earliest(cpus, duration, not_before, before=start, cap=start)
        if t is None:
            return None
        self.release(start, end, cpus)
        self.reserve(t, t + duration, cpus)
        return t

    def reserve(self, start: float, end: float, cpus: int) -> None:
        """Book ``cpus`` over ``[start, end)``; a local bug if they are not free."""
        self._add(start, end, -cpus)

    def release(self, start: float, end: float, cpus: int) -> None:
        """Give back a booking made with :meth:`reserve`."""
        self._add(start, end, cpus)

    def _add(self, start: float, end: float, delta: int) -> None:
        if not end > start:
            return
        times = self.times
        cols = (self.free,)
        i = split(times, cols, start)
        e = split(times, cols, end)
        free = self.free
        seg = [x + delta for x in free[i:e]]
        if delta < 0 and min(seg) < 0:
            raise ValueError(f"{-delta} CPUs are not free over [{start}, {end})")
        free[i:e] = seg
        # Only the two ends can now equal a neighbour; the later first, so ``i`` holds.
        merge(times, cols, e)
        merge(times, cols, i)
