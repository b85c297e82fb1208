"""The prediction's laying on a cluster of one machine, in plain lists: its hot path.

On one machine every placement rule fits a job exactly when enough CPUs are
free, so laying a queue onto the availability profile
(``scheduler.planning.prediction``) is integer work on one step function: a
sorted list of breakpoint times and the free CPUs from each on. This module
does that work with the general profile's rule (``Profile.earliest_fit`` on
one machine: a job starts at ``not_before`` or at a breakpoint, the earliest
whose CPUs stay free for its whole estimate; then it is booked), in one loop
over local lists, without the general profile's method calls, merges and
per-machine maps: a live queue of 10,000 jobs is predicted in one pass
(``bench/live/prediction.py``). A test holds its plans equal to the general
path's.

Two things make a long queue cheap. A breakpoint is inserted only where a
booking starts or ends; most bookings of a deep queue go near the end of the
plan, where an insert moves little. And the laying remembers where a search
ended: once a job of width ``c`` and duration ``d`` is found to fit no
earlier than ``t``, no job at least as wide and as long can fit before ``t``
for the rest of the pass, since bookings only take CPUs. So for each width it
keeps these lower bounds, by duration (``scheduler.planning.fit_bounds``),
and the search for the next job starts at the bound of the longest
duration not above its own, instead of at ``now``: the jobs of a deep queue,
which look alike, are each found in a few steps. (Not under ``in-order``
laying, whose search starts after the job ahead anyway.)
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence, Set

from model.job import Job
from scheduler.planning.fit_bounds import bound

#: ``(start, end, cpus, reserved)`` of each job laid.
Laid = tuple[float, float, int, bool]


def lay_one_machine(
    *,
    now: float,
    cpus: int,
    free_now: int,
    releases: Iterable[tuple[float, int]],
    speed: float,
    held: Iterable[tuple[Job, float]],
    order: Sequence[Job],
    in_order: bool,
    folds: bool,
    until: Set[str] | None = None,
) -> dict[str, Laid]:
    """Lay ``order`` on one machine of ``cpus`` CPUs, ``free_now`` free and ``releases``
    (``(time, CPUs)``, sorted, none before ``now``) to come: the jobs of ``held`` at
    their reserved start first (where they still fit), then every other job at its
    earliest fit in ``order`` (under ``in_order``, no earlier than the one ahead).
    ``until``: stop once those jobs are laid. Returns each job's place by id."""
    times = [now]
    free = [free_now]
    for t, c in releases:
        if t == times[-1]:
            free[-1] += c
        else:
            times.append(t)
            free.append(free[-1] + c)

    def point(t: float) -> int:
        """The index of a breakpoint at ``t``, inserted if there is none."""
        k = bisect_left(times, t)
        if k < len(times) and times[k] == t:
            return k
        times.insert(k, t)
        free.insert(k, free[k - 1])
        return k

    laid: dict[str, Laid] = {}
    for job, promised in held:
        if job.procs > cpus:
            continue
        start = promised if promised > now else now
        end = start + job.walltime / (speed / job.ref_speed)
        i = point(start)
        e = point(end)
        c = job.procs
        if min(free[i:e]) >= c:
            free[i:e] = [x - c for x in free[i:e]]
            laid[job.id] = (start, end, c, True)
    # Per width, the lower bounds of the module docstring: durations ascending, and
    # the instants before which nothing that long fits, ascending too.
    bounds: dict[int, tuple[list[float], list[float]]] = {}
    left = None if until is None else set(until)
    not_before = now
    for job in order:
        if left is not None:
            if not left:
                break
            left.discard(job.id)
        got = laid.get(job.id)
        if got is None:
            c = job.procs
            d = job.walltime / (speed / job.ref_speed)
            if c > cpus:
                if not folds or job.min_cpus > cpus:
                    continue  # never fits here: no place
                # On its floor of CPUs, for its estimate times its MPL (prediction).
                d = d * c / job.min_cpus
                c = job.min_cpus
            nb = not_before
            known = None
            first = False
            if not in_order:
                known = bounds.get(c)
                if known is None:
                    known = bounds[c] = ([], [])
                k = bisect_right(known[0], d) - 1
                if k >= 0 and known[1][k] > nb:
                    nb = known[1][k]
                # Searching from a bound for any length (or from now), the first
                # breakpoint found with c free bounds every length (below).
                first = k < 0 or known[0][k] == 0.0
            n = len(times)
            i = bisect_right(times, nb) - 1
            while True:
                while free[i] < c:  # the last value is all CPUs: this ends
                    i += 1
                t = times[i] if times[i] > nb else nb
                if first:
                    # Every breakpoint before has fewer than c CPUs free: no job of
                    # that width, however short, fits before (a bound for length 0).
                    first = False
                    bound(known, 0.0, t)  # type: ignore[arg-type]
                end = t + d
                j = i + 1
                while j < n and times[j] < end:
                    if free[j] < c:
                        break
                    j += 1
                else:
                    break
                i = j + 1
            if known is not None:
                bound(known, d, t)
            s = point(t)
            e = point(end)
            free[s:e] = [x - c for x in free[s:e]]
            got = laid[job.id] = (t, end, c, False)
        if in_order and got[0] > not_before:
            not_before = got[0]
    return laid
