"""An availability profile: free CPUs per machine as a step function of time.

Theory of operation. Conservative backfilling (``scheduler.policies.conservative``)
plans every waiting job into the future, so it needs to know how many CPUs of
each machine are free at every instant from ``now`` on, given the running
jobs' estimated ends and the reservations already booked. The profile is that
step function: a sorted list of breakpoint times and, for every machine, a
column of free-CPU counts, one per breakpoint; the value at a breakpoint
holds until the next one, and the last value holds for ever. The step
function's own operations (search, split, merge) are
``scheduler.planning.step_function``'s, shared with EG-EDF's one-machine timelines.

It starts as the snapshot's free map at ``now`` plus every running job's CPUs
given back at its planned end: its expected end, or for a job that outlived
its estimate the instant ``scheduler.planning.overdue`` plans (the rule EASY's
shadow time uses too; build the ends with
:func:`~scheduler.planning.overdue.planned_releases`). A release before ``now``
is refused: the profile has no rule of its own for overdue jobs.

Storage is column-major, one ``list[int]`` per machine position, rather than
one vector per breakpoint: the questions asked of the profile are "the least
free CPUs of machine k over a window" (a C-level ``min`` over a list slice)
and "free CPUs of the one machine over time" (a flat list, no per-step
indexing of small vectors), and a one-machine cluster, the common case of a
trace replay, is a single flat list. On several machines one more column
holds the total over machines: a job needs that many CPUs in total over its
shortest possible run, a necessary condition checked as cheaply as on one
machine before the placement rule is asked at all. The search on several
machines is ``scheduler.planning.profile_search``'s: a sharper necessary
condition per machine speed, bounds that let a laying start each search
where the last similar job's began to fit, and a memo of the rule's answers.
Equal adjacent values are
merged after every change, so breakpoints are exactly the instants where
something changes; that keeps the lists short and, on one machine, makes
every earliest fit start at ``now`` or at an instant where CPUs are given back
(see :meth:`Profile.earliest_fit`).

Complexity, with ``B`` breakpoints, ``M`` machines and ``W`` the breakpoints a
job's window covers (``B`` is at most one more than the running jobs plus two
per booked reservation):

* building: ``O(R log R + R M)`` for ``R`` running jobs;
* :meth:`Profile.earliest_fit`: ``O(B)`` on one machine (each breakpoint is
  looked at about once: a failed window lets the search skip past the
  breakpoint that broke it); on several machines the same scan over the
  totals, from the job's bound when a laying has one, plus, at each
  candidate it lets through, ``O(W M)`` for the necessary condition and,
  where that holds, one (remembered) placement and ``O(W M)`` for the
  window's minimum;
* :meth:`Profile.book_earliest`: the search, then the booking without
  checking again what the search found free;
* :meth:`Profile.reserve`, :meth:`Profile.release`: ``O(log B + B M)``, the
  ``B M`` being at most two list inserts per column (memory moves), plus
  ``O(W)`` per part to update the window;
* :meth:`Profile.reserve_all`: ``O((B + K) log(B + K))`` for ``K`` bookings,
  one sort and one sweep instead of ``K`` rounds of inserts
  (``scheduler.planning.profile_batch``);
* :meth:`Profile.fits`: ``O(log B + W)`` per part;
* :meth:`Profile.may_fit_before`: ``O(B)`` at C speed, a cheap necessary
  condition that lets a policy skip the search for most jobs of a busy queue.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence

from model.allocation import pace
from model.job import Job
from model.machine import Machine, Part
from scheduler.planning.placement import Placement, machines_for
from scheduler.planning.profile_batch import Booking, sweep_many, sweep_one
from scheduler.planning.profile_search import SeveralMachines
from scheduler.planning.step_function import merge, scan, split


class Profile:
    """Free CPUs per machine from ``now`` on; see the module docstring.

    ``machines`` fixes the machine positions; the ``machines`` later passed to
    :meth:`earliest_fit` (for the placement rule) must name the same machines
    in canonical order, which the snapshot's do.
    """

    __slots__ = ("_cols", "_ids", "_many", "_pos", "_times", "_total")

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
        for t, parts in sorted(ends, key=_time):
            if t < now:
                raise ValueError(
                    f"a release at {t} is before the profile's start {now}: plan overdue "
                    "jobs with scheduler.planning.overdue"
                )
            # Ends at the same instant share one breakpoint (releases are sorted),
            # and an end at ``now`` lands on ``now`` itself.
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
        self._total = self._totals(cols)
        # On several machines, the search's own state (scheduler.planning.profile_search).
        self._many = (
            None if len(cols) == 1 else SeveralMachines(machines, tuple([c[-1] for c in cols]))
        )

    @staticmethod
    def _totals(cols: list[list[int]]) -> list[int]:
        # One machine: the total *is* its column (the same list, updated once).
        return cols[0] if len(cols) == 1 else [sum(v) for v in zip(*cols, strict=True)]

    # -- reading ------------------------------------------------------------

    @property
    def now(self) -> float:
        """The profile's first instant."""
        return self._times[0]

    def __len__(self) -> int:
        return len(self._times)

    def breakpoints(self) -> list[tuple[float, dict[str, int]]]:
        """Every breakpoint with the free CPUs per machine from it on (for tests and display)."""
        return [
            (t, {mid: col[i] for mid, col in zip(self._ids, self._cols, strict=True)})
            for i, t in enumerate(self._times)
        ]

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
        ``before`` must have ``cpus`` free CPUs in total. It reads only the
        values before ``before``, so a job's own booking from ``before`` on does
        not matter.
        """
        stop = bisect_left(self._times, before)
        return stop > 0 and max(self._total[:stop]) >= cpus

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

        A job that needs capabilities is placed on the machines of ``machines``
        that have them (``scheduler.planning.placement.machines_for``); None if
        there are none. One that must run on one machine is placed by the
        ``single`` rule, whatever ``placement`` is (``Placement.for_job``).
        """
        fit = self._fit(job, cpus, placement, machines, speeds, not_before, before)
        return None if fit is None else (fit[0], fit[2])

    def book_earliest(
        self,
        job: Job,
        cpus: int,
        *,
        placement: Placement,
        machines: Sequence[Machine],
        speeds: Mapping[str, float],
        not_before: float,
    ) -> Booking | None:
        """``job`` on ``cpus`` CPUs at its :meth:`earliest_fit`, booked there: its
        ``(start, end, parts)``, the end its estimate on the parts; None (nothing
        booked) if it fits nowhere. What laying a queue does with each job, the
        prediction's and conservative backfilling's alike."""
        fit = self._fit(job, cpus, placement, machines, speeds, not_before, math.inf)
        if fit is not None:
            self._take(*fit)
        return fit

    def _fit(  # noqa: PLR0917 - earliest_fit's and book_earliest's arguments, passed on
        self,
        job: Job,
        cpus: int,
        placement: Placement,
        machines: Sequence[Machine],
        speeds: Mapping[str, float],
        not_before: float,
        before: float,
    ) -> Booking | None:
        """:meth:`earliest_fit` with the end of the job's run on its parts."""
        if cpus < 1:
            raise ValueError(f"job {job.id!r}: cannot place {cpus} CPUs")
        if job.needs:
            machines = machines_for(job, machines)
            if not machines:
                return None
        times = self._times
        nb = not_before if not_before > times[0] else times[0]
        if nb >= before:
            return None
        many = self._many
        if many is not None:
            return many.earliest(
                times,
                self._cols,
                self._total,
                job,
                cpus,
                placement.for_job(job),
                machines,
                speeds,
                nb,
                before,
            )
        first = bisect_right(times, nb) - 1
        stop = bisect_left(times, before, first + 1)
        only = self._ids[0]
        duration = job.estimate_on(speeds[only])
        i = self._scan(self._total, cpus, duration, first=first, stop=stop, nb=nb)
        if i < 0:
            return None
        t = times[i] if i > first else nb
        return t, t + duration, (Part(only, cpus),)

    def _scan(
        self,
        col: list[int],
        cpus: int,
        duration: float,
        *,
        first: int,
        stop: int,
        nb: float,
        cap: float = math.inf,
    ) -> int:
        """:func:`scheduler.planning.step_function.scan` over this profile's breakpoints."""
        return scan(self._times, col, cpus, duration, first, stop, nb, cap)

    def move_earlier(
        self,
        job: Job,
        booking: Booking,
        *,
        placement: Placement,
        machines: Sequence[Machine],
        speeds: Mapping[str, float],
        not_before: float,
    ) -> Booking | None:
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
        cpus = parts[0].cpus if len(parts) == 1 else sum(p.cpus for p in parts)
        if job.needs and not machines_for(job, machines):
            return None
        times = self._times
        # ``may_fit_before`` inlined: called for every promise at every event.
        stop = bisect_left(times, start)
        if stop == 0 or max(self._total[:stop]) < cpus:
            return None
        nb = not_before if not_before > times[0] else times[0]
        if nb >= start:
            return None
        many = self._many
        if many is None:
            only = self._ids[0]
            duration = job.estimate_on(speeds[only])
            first = bisect_right(times, nb, 0, stop) - 1
            i = self._scan(self._total, cpus, duration, first=first, stop=stop, nb=nb, cap=start)
            if i < 0:
                return None
            t = times[i] if i > first else nb
            moved: Booking = (t, t + duration, (Part(only, cpus),))
            self.release(*booking)
            self.reserve(*moved)
            return moved
        # Several machines: the same reasoning on the totals column, with the
        # job's shortest possible run, rules out most jobs before anything is
        # released; candidates before the first it lets through fail for good.
        first = bisect_right(times, nb, 0, stop) - 1
        shortest = job.estimate_on(many.fastest)
        i = self._scan(self._total, cpus, shortest, first=first, stop=stop, nb=nb, cap=start)
        if i < 0:
            return None
        from_t = times[i] if i > first else nb  # before releasing moves the indices
        self.release(*booking)
        fit = self.earliest_fit(
            job,
            cpus,
            placement=placement,
            machines=machines,
            speeds=speeds,
            not_before=from_t,
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

    def reserve(self, start: float, end: float, parts: tuple[Part, ...]) -> None:
        """Book ``parts`` over ``[start, end)``; raises ``ValueError`` if they are not free."""
        self._add(start, end, parts, -1)

    def release(self, start: float, end: float, parts: tuple[Part, ...]) -> None:
        """Give back a booking made with :meth:`reserve` (the same arguments)."""
        self._add(start, end, parts, 1)

    def reserve_all(self, bookings: Sequence[Booking]) -> bool:
        """Book every ``(start, end, parts)`` at once if together they fit; else change nothing.

        One sort and one sweep over the breakpoints instead of two list
        inserts per booking (``scheduler.planning.profile_batch``): a policy that
        re-books every promise at every event calls this first and books one
        by one only when it returns False. The result is the same canonical
        profile as booking one by one.
        """
        if not bookings:
            return True
        if len(self._cols) == 1:
            one = sweep_one(self._times, self._cols[0], self._ids[0], bookings)
            if one is None:
                return False
            self._times, col = one
            self._cols = [col]
            self._total = col
            return True
        many = sweep_many(self._times, self._cols, self._pos, bookings)
        if many is None:
            return False
        self._times, self._cols = many
        self._total = self._totals(self._cols)
        return True

    def _add(self, start: float, end: float, parts: tuple[Part, ...], sign: int) -> None:
        if sign < 0:
            # Check every part before changing any, so a refusal leaves the profile as it was.
            for p in parts:
                if end > start and not self.fits(start, end, (p,)):
                    raise ValueError(
                        f"{p.cpus} CPUs of {p.machine!r} are not free over [{start}, {end})"
                    )
        elif self._many is not None:
            self._many.bounds.clear()  # CPUs given back: a job may now fit before its bound
        self._shift(start, end, parts, sign)

    def _take(self, start: float, end: float, parts: tuple[Part, ...]) -> None:
        """Book ``parts`` over ``[start, end)``, known to be free there (a fit just found)."""
        self._shift(start, end, parts, -1)

    def _shift(self, start: float, end: float, parts: tuple[Part, ...], sign: int) -> None:
        """Add ``sign`` times ``parts`` over ``[start, end)``, unchecked."""
        if not end > start:
            return  # an empty interval books nothing
        lists = self._lists()
        times = self._times
        i = split(times, lists, start)
        e = split(times, lists, end)
        cols = self._cols
        pos = self._pos
        total = 0
        for p in parts:
            col = cols[pos[p.machine]]
            c = sign * p.cpus
            col[i:e] = [x + c for x in col[i:e]]
            total += c
        if len(cols) > 1:
            tot = self._total
            tot[i:e] = [x + total for x in tot[i:e]]
        # Only the two ends of the interval can now equal their neighbour: inside
        # it every value moved by the same amount. The later one first, so ``i``
        # still points at the same breakpoint.
        merge(times, lists, e)
        merge(times, lists, i)

    def _segment(self, t: float) -> int:
        """Index of the breakpoint whose value holds at ``t``."""
        i = bisect_right(self._times, t) - 1
        if i < 0:
            raise ValueError(f"time {t} is before the profile's start {self._times[0]}")
        return i

    def _lists(self) -> list[list[int]]:
        """Every column the breakpoints index: the machines', and the totals' if apart."""
        return self._cols if len(self._cols) == 1 else [*self._cols, self._total]


def _time(release: tuple[float, object]) -> float:
    return release[0]
