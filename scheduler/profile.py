"""An availability profile: free CPUs per machine as a step function of time.

Theory of operation. Conservative backfilling (``scheduler.policies.conservative``)
plans every waiting job into the future, so it needs to know how many CPUs of
each machine are free at every instant from ``now`` on, given the running
jobs' estimated ends and the reservations already booked. The profile is that
step function: a sorted list of breakpoint times and, for every machine, a
column of free-CPU counts, one per breakpoint; the value at a breakpoint
holds until the next one, and the last value holds for ever.

It starts as the snapshot's free map at ``now`` plus every running job's CPUs
given back at its estimated end. An overdue end (a job that outlived its
estimate) counts as ``now``, like :func:`scheduler.reservation.releases_in_order`
and EASY's shadow time: the job is expected to end any moment. The value at
``now`` is therefore an optimistic *plan*, not the CPUs free this instant; a
policy that starts a job now checks it against the real free map too.

Storage is column-major, one ``list[int]`` per machine position, rather than
one vector per breakpoint: the questions asked of the profile are "the least
free CPUs of machine k over a window" (a C-level ``min`` over a list slice)
and "free CPUs of the one machine over time" (a flat list, no per-step
indexing of small vectors), and a one-machine cluster, the common case of a
trace replay, is a single flat list. Equal adjacent values are merged after
every change, so breakpoints are exactly the instants where something
changes; that keeps the lists short and makes every reservation start at
``now`` or at an instant where CPUs are given back (see
:meth:`Profile.earliest_fit`).

Complexity, with ``B`` breakpoints, ``M`` machines and ``W`` the breakpoints a
job's window covers (``B`` is at most one more than the running jobs plus two
per booked reservation):

* building: ``O(R log R + R M)`` for ``R`` running jobs;
* :meth:`Profile.earliest_fit`: ``O(B)`` on one machine (each breakpoint is
  looked at about once: a failed window lets the search skip past the
  breakpoint that broke it); ``O(B (M + W M))`` plus one placement per
  candidate on several machines;
* :meth:`Profile.reserve`, :meth:`Profile.release`: ``O(log B + B M)``, the
  ``B M`` being at most two list inserts per column (memory moves), plus
  ``O(W)`` per part to update the window;
* :meth:`Profile.fits`: ``O(log B + W)`` per part;
* :meth:`Profile.may_fit_before`: ``O(B M)`` at C speed, a cheap necessary
  condition that lets a policy skip the search for most jobs of a busy queue.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence

from model.job import Job
from model.machine import Machine, Part
from scheduler.alloc import pace
from scheduler.placement import Placement
from scheduler.reservation import releases_in_order


class Profile:
    """Free CPUs per machine from ``now`` on; see the module docstring.

    ``machines`` fixes the machine positions; the ``machines`` later passed to
    :meth:`earliest_fit` (for the placement rule) must name the same machines
    in canonical order, which the snapshot's do.
    """

    __slots__ = ("_cols", "_ids", "_pos", "_times")

    def __init__(
        self,
        *,
        now: float,
        machines: Sequence[Machine],
        free: Mapping[str, int],
        ends: Iterable[tuple[float, tuple[Part, ...]]],
    ) -> None:
        if not machines:
            raise ValueError("a profile needs at least one machine")
        ids = [m.id for m in machines]
        pos = {mid: k for k, mid in enumerate(ids)}
        times = [now]
        cols = [[free[mid]] for mid in ids]
        for t, parts in releases_in_order(now, ends):
            # Ends at the same instant share one breakpoint (releases are sorted),
            # and an overdue end lands on ``now`` itself.
            if t != times[-1]:
                times.append(t)
                for col in cols:
                    col.append(col[-1])
            for p in parts:
                cols[pos[p.machine]][-1] += p.cpus
        self._times = times
        self._cols = cols
        self._ids = ids
        self._pos = pos

    # -- reading ------------------------------------------------------------

    @property
    def now(self) -> float:
        """The profile's first instant."""
        return self._times[0]

    def breakpoints(self) -> list[tuple[float, dict[str, int]]]:
        """Every breakpoint with the free CPUs per machine from it on (for tests and display)."""
        return [
            (t, {mid: col[i] for mid, col in zip(self._ids, self._cols, strict=True)})
            for i, t in enumerate(self._times)
        ]

    def __len__(self) -> int:
        return len(self._times)

    def free_at(self, t: float) -> dict[str, int]:
        """Free CPUs per machine at instant ``t`` (``t >= now``)."""
        i = self._segment(t)
        return {mid: col[i] for mid, col in zip(self._ids, self._cols, strict=True)}

    def fits(self, start: float, end: float, parts: tuple[Part, ...]) -> bool:
        """Whether ``parts`` stay free over ``[start, end)``."""
        i = self._segment(start)
        e = bisect_left(self._times, end, i + 1)
        cols = self._cols
        pos = self._pos
        for p in parts:
            k = pos.get(p.machine)
            # A machine the profile does not know (it left) has no CPUs to give.
            if k is None or min(cols[k][i:e]) < p.cpus:
                return False
        return True

    def may_fit_before(self, cpus: int, before: float) -> bool:
        """False only if no job of ``cpus`` CPUs can start at an instant before ``before``.

        A necessary condition, not a sufficient one: some breakpoint before
        ``before`` must have ``cpus`` free CPUs in total (bounded above by the
        sum of each machine's best). It reads only the values before
        ``before``, so a job's own booking from ``before`` on does not matter.
        """
        stop = bisect_left(self._times, before)
        if stop == 0:
            return False
        cols = self._cols
        if len(cols) == 1:
            return max(cols[0][:stop]) >= cpus
        return sum(max(col[:stop]) for col in cols) >= cpus

    # -- searching ----------------------------------------------------------

    def earliest_fit(
        self,
        job: Job,
        cpus: int,
        *,
        placement: Placement,
        machines: Sequence[Machine],
        speeds: Mapping[str, float],
        not_before: float,
        before: float = math.inf,
    ) -> tuple[float, tuple[Part, ...]] | None:
        """The earliest ``(start, parts)`` with ``parts`` free for the job's whole estimate.

        Candidates are ``not_before`` and every later breakpoint, below
        ``before``. At a candidate ``t`` the placement rule picks parts from
        the free CPUs at ``t``; the job's duration on them is
        ``job.estimate_on(pace(parts))`` (MPL 1: ``cpus`` is meant to be
        ``job.procs``). If the parts do not stay free over ``[t, t + d)``, the
        rule is asked again on the element-wise minimum of free CPUs over the
        window, which only ever decreases, so the loop ends; then the next
        breakpoint is tried. None if no candidate fits, e.g. a ``single``
        rule and a job wider than every machine.

        On one machine the earliest fit is ``not_before`` or an instant where
        free CPUs go up (a fit at a breakpoint where they go down would fit at
        the previous one too), that is, a running or booked job's end.
        """
        if cpus < 1:
            raise ValueError(f"job {job.id!r}: cannot place {cpus} CPUs")
        times = self._times
        nb = max(not_before, times[0])
        if nb >= before:
            return None
        if len(self._cols) == 1:
            only = self._ids[0]
            start = self._earliest_one(cpus, job.estimate_on(speeds[only]), nb, before)
            return None if start is None else (start, (Part(only, cpus),))
        return self._earliest_many(
            job, cpus, placement=placement, machines=machines, speeds=speeds, nb=nb, before=before
        )

    def _earliest_one(
        self, cpus: int, duration: float, nb: float, before: float, cap: float = math.inf
    ) -> float | None:
        # The hot loop of a one-machine trace replay: locals only, no allocation.
        # Windows are checked up to ``cap`` only (see ``move_earlier``).
        times = self._times
        col = self._cols[0]
        n = len(times)
        # Candidates are the breakpoints before ``before`` (the first one clipped to ``nb``).
        stop = n if before == math.inf else bisect_left(times, before)
        i = first = bisect_right(times, nb) - 1
        while i < stop:
            if col[i] < cpus:
                i += 1
                continue
            t = times[i] if i > first else nb
            end = t + duration if t + duration < cap else cap
            j = i + 1
            while j < n and times[j] < end:
                if col[j] < cpus:
                    break
                j += 1
            else:
                return t
            # Every candidate up to j has j inside its window: resume after it.
            i = j + 1
        return None

    def _earliest_many(
        self,
        job: Job,
        cpus: int,
        *,
        placement: Placement,
        machines: Sequence[Machine],
        speeds: Mapping[str, float],
        nb: float,
        before: float,
    ) -> tuple[float, tuple[Part, ...]] | None:
        times = self._times
        cols = self._cols
        ids = self._ids
        pos = self._pos
        n = len(times)
        # After every running job and booking has ended the profile holds its
        # last value for ever: a job the rule cannot place there never fits.
        if (
            placement.place(
                cpus, {mid: col[-1] for mid, col in zip(ids, cols, strict=True)}, machines
            )
            is None
        ):
            return None
        stop = n if before == math.inf else bisect_left(times, before)
        i = bisect_right(times, nb) - 1
        while i < stop:
            t = max(times[i], nb)
            here = [col[i] for col in cols]
            if sum(here) < cpus:
                i += 1
                continue
            parts = placement.place(cpus, dict(zip(ids, here, strict=True)), machines)
            while parts is not None:
                e = bisect_left(times, t + job.estimate_on(pace(parts, speeds)), i + 1)
                if all(min(cols[pos[p.machine]][i:e]) >= p.cpus for p in parts):
                    return t, parts
                # Lower ``here`` to the window's minimum and ask the rule again; some
                # part did not fit, so ``here`` strictly decreases and this ends.
                for k, col in enumerate(cols):
                    here[k] = min(here[k], *col[i:e])
                parts = placement.place(cpus, dict(zip(ids, here, strict=True)), machines)
            i += 1
        return None

    def move_earlier(
        self,
        job: Job,
        booking: tuple[float, float, tuple[Part, ...]],
        *,
        placement: Placement,
        machines: Sequence[Machine],
        speeds: Mapping[str, float],
        not_before: float,
    ) -> tuple[float, float, tuple[Part, ...]] | None:
        """Re-book ``job``'s ``booking`` at its earliest start before the current one.

        Returns the new ``(start, end, parts)``, booked, or None when nothing
        earlier fits, and then the profile is exactly as it was. This is the
        compression step of conservative backfilling, done without touching
        the lists for the many jobs that cannot move.

        On one machine the job's own booking need not even be released to
        search: a window starting before ``start`` ends before the booking's
        end (same job, same duration), and inside the booking its own CPUs are
        free, so only the part of the window before ``start`` needs checking.
        """
        start, _, parts = booking
        cpus = sum(p.cpus for p in parts)
        if not self.may_fit_before(cpus, start):
            return None
        if len(self._cols) == 1:
            only = self._ids[0]
            duration = job.estimate_on(speeds[only])
            nb = max(not_before, self._times[0])
            if nb >= start:
                return None
            t = self._earliest_one(cpus, duration, nb, start, cap=start)
            if t is None:
                return None
            moved: tuple[float, float, tuple[Part, ...]] = (t, t + duration, (Part(only, cpus),))
            self.release(*booking)
            self.reserve(*moved)
            return moved
        self.release(*booking)
        fit = self.earliest_fit(
            job,
            cpus,
            placement=placement,
            machines=machines,
            speeds=speeds,
            not_before=not_before,
            before=start,
        )
        if fit is None:
            self.reserve(*booking)
            return None
        t, new_parts = fit
        moved = (t, t + job.estimate_on(pace(new_parts, speeds)), new_parts)
        self.reserve(*moved)
        return moved

    # -- booking ------------------------------------------------------------

    def reserve_all(self, bookings: Sequence[tuple[float, float, tuple[Part, ...]]]) -> bool:
        """Book every ``(start, end, parts)`` at once if together they fit; else change nothing.

        One sort and one sweep over the breakpoints instead of two list
        inserts per booking: a policy that re-books every promise at every
        event calls this first and books one by one only when it returns False.
        """
        if not bookings:
            return True
        times = self._times
        cols = self._cols
        pos = self._pos
        now = times[0]
        if len(cols) == 1:
            return self._reserve_all_one(bookings)
        events: list[tuple[float, int, int]] = []
        for start, end, parts in bookings:
            if not end > start:
                continue
            if start < now:
                raise ValueError(f"booking at {start} is before the profile's start {now}")
            for p in parts:
                k = pos.get(p.machine)
                if k is None:
                    return False
                events.append((start, k, -p.cpus))
                events.append((end, k, p.cpus))
        events.sort()
        width = len(cols)
        new_times: list[float] = []
        new_cols: list[list[int]] = [[] for _ in cols]
        shift = [0] * width
        inf = math.inf
        n = len(times)
        ne = len(events)
        i = j = 0
        base = 0
        while i < n or j < ne:
            ta = times[i] if i < n else inf
            tb = events[j][0] if j < ne else inf
            t = ta if ta <= tb else tb
            if ta == t:
                base = i
                i += 1
            while j < ne and events[j][0] == t:
                shift[events[j][1]] += events[j][2]
                j += 1
            changed = not new_times
            for k in range(width):
                v = cols[k][base] + shift[k]
                if v < 0:
                    return False
                if not changed and v != new_cols[k][-1]:
                    changed = True
            # Equal neighbours merge, so the result is the same canonical profile
            # that booking one by one gives.
            if changed:
                new_times.append(t)
                for k in range(width):
                    new_cols[k].append(cols[k][base] + shift[k])
        self._times = new_times
        self._cols = new_cols
        return True

    def _reserve_all_one(self, bookings: Sequence[tuple[float, float, tuple[Part, ...]]]) -> bool:
        # One machine: the profile as a dict of steps (time -> change), the
        # bookings' steps added in, then one cumulative sum in time order.
        times = self._times
        col = self._cols[0]
        now = times[0]
        only = self._ids[0]
        steps: dict[float, int] = {now: col[0]}
        prev = col[0]
        for i in range(1, len(times)):
            v = col[i]
            steps[times[i]] = v - prev
            prev = v
        get = steps.get
        for start, end, parts in bookings:
            if not end > start:
                continue
            if start < now:
                raise ValueError(f"booking at {start} is before the profile's start {now}")
            c = 0
            for p in parts:
                if p.machine != only:
                    return False
                c += p.cpus
            steps[start] = get(start, 0) - c
            steps[end] = get(end, 0) + c
        new_times: list[float] = []
        new_col: list[int] = []
        level = 0
        for t in sorted(steps):
            step = steps[t]
            if step == 0 and new_times:
                continue  # a booking's end meeting another's start: no breakpoint
            level += step
            if level < 0:
                return False
            new_times.append(t)
            new_col.append(level)
        self._times = new_times
        self._cols = [new_col]
        return True

    def reserve(self, start: float, end: float, parts: tuple[Part, ...]) -> None:
        """Book ``parts`` over ``[start, end)``; raises ``ValueError`` if they are not free."""
        self._add(start, end, parts, -1)

    def release(self, start: float, end: float, parts: tuple[Part, ...]) -> None:
        """Give back a booking made with :meth:`reserve` (the same arguments)."""
        self._add(start, end, parts, 1)

    def _add(self, start: float, end: float, parts: tuple[Part, ...], sign: int) -> None:
        if not end > start:
            return  # an empty interval books nothing
        i = self._split(start)
        e = self._split(end)
        cols = self._cols
        pos = self._pos
        if sign < 0:
            # Check every part before changing any, so a refusal leaves the profile as it was.
            for p in parts:
                if min(cols[pos[p.machine]][i:e]) < p.cpus:
                    self._merge(e)
                    self._merge(i)
                    raise ValueError(
                        f"{p.cpus} CPUs of {p.machine!r} are not free over [{start}, {end})"
                    )
        for p in parts:
            col = cols[pos[p.machine]]
            c = sign * p.cpus
            col[i:e] = [x + c for x in col[i:e]]
        # Only the two ends of the interval can now equal their neighbour: inside
        # it every value moved by the same amount. The later one first, so ``i``
        # still points at the same breakpoint.
        self._merge(e)
        self._merge(i)

    def _segment(self, t: float) -> int:
        """Index of the breakpoint whose value holds at ``t``."""
        i = bisect_right(self._times, t) - 1
        if i < 0:
            raise ValueError(f"time {t} is before the profile's start {self._times[0]}")
        return i

    def _split(self, t: float) -> int:
        """Index of a breakpoint at ``t``, inserting one (same values as before it) if needed."""
        times = self._times
        i = bisect_left(times, t)
        if i < len(times) and times[i] == t:
            return i
        if i == 0:
            raise ValueError(f"time {t} is before the profile's start {times[0]}")
        times.insert(i, t)
        for col in self._cols:
            col.insert(i, col[i - 1])
        return i

    def _merge(self, i: int) -> None:
        """Drop breakpoint ``i`` if it changes nothing (never the first one, ``now``)."""
        times = self._times
        if not 0 < i < len(times):
            return
        cols = self._cols
        for col in cols:
            if col[i] != col[i - 1]:
                return
        del times[i]
        for col in cols:
            del col[i]
