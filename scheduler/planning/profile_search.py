"""The availability profile's earliest fit on several machines.

Theory of operation. On several machines the profile
(``scheduler.planning.profile``) finds a job's earliest fit by asking the
placement rule at candidate instants: ``not_before`` and every later
breakpoint, in time order. At a candidate the rule picks parts from the free
CPUs there; if they do not stay free for the job's run on them, it is asked
again on the least free CPUs over that run, until it fits or gives up (the
rule is :meth:`~scheduler.planning.profile.Profile.earliest_fit`'s). A live
queue of thousands of jobs is laid one job after another this way, so the
search must not walk every breakpoint from ``now`` for every job nor ask the
rule where nothing can fit. Three things keep it short, none of which changes
what it finds:

* *A necessary condition* (:func:`could_fit`). Parts whose slowest machine
  has speed ``s`` lie on machines at least that fast and hold their CPUs for
  the job's estimate at ``s``; each part is at most its machine's least free
  CPUs over that window. Unless, for some ``s``, those least free CPUs add up
  to the job's width, no parts fit at that candidate and the rule is not
  asked. Before it, the totals column over the job's shortest possible run
  (on the fastest machine) rules out most candidates in one scan
  (``scheduler.planning.step_function.scan``).
* *Bounds* (``scheduler.planning.fit_bounds``). The condition fails on a
  profile with fewer free CPUs too, and for a wider or longer job: once a
  search from ``not_before`` finds it first holds at ``t``, no job as wide
  and at least as long can fit in ``[not_before, t)`` while the profile only
  loses CPUs, so a later search starts at ``t``. The profile forgets its
  bounds when it gets CPUs back. Lengths are compared as wall times of jobs of
  one reference speed, for which a longer wall time is a longer estimate on
  every machine, to the last bit.
* *A memo of the rule's answers*, by width and free CPUs per machine: laying a
  queue asks it about the same few vectors over and over, and the answer is
  a function of them, of the machines it may use (the profile's, fixed for
  its life, or a job's capable subset of them) and of the rule (the profile's
  caller's, or ``single`` for a job that must run on one machine,
  ``Placement.for_job``), each pair with a memo of its own.

A job that may use only some machines (``scheduler.planning.placement.machines_for``)
is searched with the condition and the bounds of all of them: both are
necessary for a fit on any subset too, so they still skip only candidates
where the rule would have found nothing.

The condition is checked at a candidate before the rule is asked there and
before anything is recorded, so a skipped candidate is one where the rule
would have found nothing, and the search returns what the plain walk would.
A bound that falls inside a step (its breakpoint since merged away) is no
candidate of the plain walk; the condition fails there as it fails at the
step's start, so the search moves on to the next breakpoint as the walk does.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence

from model.job import Job
from model.machine import Machine, Part
from scheduler.planning.fit_bounds import FitBounds
from scheduler.planning.placement import Placement
from scheduler.planning.step_function import scan

Parts = tuple[Part, ...]
#: Per speed, fastest first: the speed, the positions of the machines at least that
#: fast, and their CPUs (a job wider never runs at that speed).
Level = tuple[float, list[int], int]


#: The placement rule's answers by width and free CPUs per machine position.
_Memo = dict[tuple[int, tuple[int, ...]], Parts | None]


class SeveralMachines:
    """What a profile of several machines keeps for its searches (module docstring):
    the machines by speed, its bounds and its memo of the placement rule's answers.

    The columns themselves stay the profile's and are passed to each search.
    """

    __slots__ = ("_ids", "_last", "_levels", "_placed", "_pos", "bounds", "fastest")

    def __init__(self, machines: Sequence[Machine], last: tuple[int, ...]) -> None:
        self._ids = [m.id for m in machines]
        self._pos = {m.id: k for k, m in enumerate(machines)}
        self.fastest = max(m.speed for m in machines)
        self._levels: list[Level] = [
            (
                s,
                [k for k, m in enumerate(machines) if m.speed >= s],
                sum(m.cpus for m in machines if m.speed >= s),
            )
            for s in sorted({m.speed for m in machines}, reverse=True)
        ]
        # Free CPUs once every running job and booking has ended: bookings are of
        # finite intervals, so this never changes.
        self._last = last
        self.bounds = FitBounds()
        #: The rule's answers, per rule (rules are compared by value, so the ``single``
        #: rule of a one-machine job has its own) and per set of machines it may use
        #: (the whole profile's, or a job's capable subset: ``placement.machines_for``).
        self._placed: dict[tuple[Placement, tuple[str, ...] | None], _Memo] = {}

    def earliest(  # noqa: PLR0917 - one search over the profile's lists, per job
        self,
        times: list[float],
        cols: list[list[int]],
        total: list[int],
        job: Job,
        cpus: int,
        placement: Placement,
        machines: Sequence[Machine],
        speeds: Mapping[str, float],
        nb: float,
        before: float,
    ) -> tuple[float, float, Parts] | None:
        """The earliest ``(start, end, parts)`` of ``job`` on ``cpus`` CPUs in
        ``[nb, before)``, ``nb`` no earlier than the profile's start; None if none."""
        ids = self._ids
        # The same rule answers differently on a subset of the machines: a memo of its own.
        subset = None if len(machines) == len(ids) else tuple(m.id for m in machines)
        placed = self._placed.get((placement, subset))
        if placed is None:
            placed = self._placed[placement, subset] = {}
        # After every running job and booking has ended the profile holds its last
        # value for ever: a job the rule cannot place there never fits.
        if _place(placed, placement, machines, ids, cpus, self._last) is None:
            return None
        key = (cpus, job.ref_speed)
        walltime = job.walltime
        bounds = self.bounds
        nb = bounds.start(key, walltime, nb)
        if nb >= before:
            return None
        first = bisect_right(times, nb) - 1
        stop = bisect_left(times, before, first + 1)
        # Written as ``Job.estimate_on`` computes it, so the same estimate to the last bit.
        ref = job.ref_speed
        levels = [(walltime / (s / ref), ks) for s, ks, most in self._levels if most >= cpus]
        shortest = walltime / (self.fastest / ref)
        pos = self._pos
        recorded = False
        i = first
        while True:
            i = scan(times, total, cpus, shortest, i, stop, nb)
            if i < 0:
                return None
            t = times[i] if times[i] > nb else nb
            if not could_fit(times, cols, levels, cpus, i, t):
                i += 1
                continue
            if not recorded:
                bounds.record(key, walltime, t)
                recorded = True
            here = [col[i] for col in cols]
            parts = _place(placed, placement, machines, ids, cpus, tuple(here))
            while parts is not None:
                if len(parts) == 1:
                    speed = speeds[parts[0].machine]
                else:
                    speed = min([speeds[p.machine] for p in parts])
                end = t + walltime / (speed / ref)
                e = bisect_left(times, end, i + 1)
                for p in parts:
                    if min(cols[pos[p.machine]][i:e]) < p.cpus:
                        break
                else:
                    return t, end, parts
                # Lower ``here`` to the window's minimum and ask the rule again; some
                # part did not fit, so ``here`` strictly decreases and this ends.
                for k, col in enumerate(cols):
                    here[k] = min(here[k], *col[i:e])
                parts = _place(placed, placement, machines, ids, cpus, tuple(here))
            i += 1


def could_fit(  # noqa: PLR0917 - the search's hot test, on its locals
    times: list[float],
    cols: list[list[int]],
    levels: list[tuple[float, list[int]]],
    cpus: int,
    i: int,
    t: float,
) -> bool:
    """Whether any parts of ``cpus`` CPUs in total could stay free from candidate ``i``
    (at ``t``) for the job's run on them: for some speed (``levels``: the job's
    estimate at it, and the positions of the machines at least that fast), the least
    free CPUs of those machines over that run add up to ``cpus`` (module docstring).

    A level is first summed at the candidate alone: the least free CPUs over a run
    are no more than those at its start, so a level short there fails without
    taking a minimum over the run (most candidates the totals scan lets through fail
    every level), and one whose run ends within the candidate's step holds."""
    for duration, ks in levels:
        got = 0
        for k in ks:
            got += cols[k][i]
        if got < cpus:
            continue
        e = bisect_left(times, t + duration, i + 1)
        if e == i + 1:
            return True
        got = 0
        for k in ks:
            got += min(cols[k][i:e])
        if got >= cpus:
            return True
    return False


def _place(  # noqa: PLR0917 - the memo's lookup, on the search's locals
    placed: _Memo,
    placement: Placement,
    machines: Sequence[Machine],
    ids: list[str],
    cpus: int,
    here: tuple[int, ...],
) -> Parts | None:
    """``placement.place`` on the free CPUs ``here`` (by machine position), remembered."""
    key = (cpus, here)
    try:
        return placed[key]
    except KeyError:
        parts = placed[key] = placement.place(cpus, dict(zip(ids, here, strict=True)), machines)
        return parts
