"""EASY's reservation for one job: the shadow time and the CPUs left over at it.

Shared by every policy that keeps one reservation for its top job (EASY,
Flexible backfilling, DPSA). The free CPUs are replayed forward through the
expected ends of the running jobs (including those started in this very
decision): the first instant the placement rule fits the job is its *shadow
time*; the CPUs free at that instant beyond the reserved parts are the
*extra* CPUs that a backfilled job may keep past the shadow time (Mu'alem and
Feitelson's formulation of EASY, the one the DPSA paper's Fig. 1 describes).

A running job gives its CPUs back at its *planned* end: its expected end,
or, once it has outlived its estimate, the instant ``scheduler.planning.overdue``
plans for it (the one rule every planner shares).

A job that needs capabilities (``Job.needs``) is reserved on the machines
that have them only (``scheduler.planning.placement.machines_for``); the CPUs
of the others are still replayed forward, for the extra CPUs at its start;
one that must run on one machine is reserved by the ``single`` rule
(``Placement.for_job``).

A reservation once given is kept if the new computation would move it later
(on heterogeneous machines the placement rule can pick other machines as the
profile changes); with exact estimates that keeps EASY's promise that
backfilling never delays the top job.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from model.allocation import pace
from model.job import Job
from model.machine import Machine, Part, parts_cpus
from scheduler.core.snapshot import Reservation, RunningJob, SnapshotView, Start
from scheduler.planning.overdue import in_planned_order, planned_end
from scheduler.planning.placement import Placement, machines_for


@dataclass(frozen=True, slots=True)
class Shadow:
    """The reservation and the per-machine CPUs free at its start beyond its own parts."""

    reservation: Reservation
    extra: dict[str, int]


Release = tuple[float, tuple[Part, ...]]


def merged_releases(
    now: float, running: Sequence[RunningJob], started: Sequence[Release] = ()
) -> Iterator[Release]:
    """Releases in time order, lazily: ``running`` at their planned ends (already in
    that order unless a job is overdue, ``scheduler.planning.overdue``) and ``started``
    (this decision's own starts) sorted here. Lazy because the walk usually stops
    after a few releases."""
    extra = sorted(started, key=_time)
    j, m = 0, len(extra)
    for r in in_planned_order(now, running):
        t = r.est_end
        if t < now:  # overdue: ``planned_end`` is ``est_end`` otherwise
            t = planned_end(t, now)
        while j < m and extra[j][0] < t:
            yield extra[j]
            j += 1
        yield t, r.parts
    yield from extra[j:]


def shadow_for(
    job: Job,
    *,
    now: float,
    free: Mapping[str, int],
    running: Sequence[RunningJob],
    started: Sequence[Release] = (),
    machines: Sequence[Machine],
    placement: Placement,
    cpus: int | None = None,
    previous: Reservation | None = None,
) -> Shadow | None:
    """The earliest reservation for ``job`` as the running jobs end; None if never."""
    need = job.procs if cpus is None else cpus
    found: tuple[float, tuple[Part, ...]] | None = None
    able = machines_for(job, machines)
    if not able:
        return None
    placement = placement.for_job(job)
    if len(machines) == 1:
        only = machines[0].id
        ends = [(t, parts_cpus(parts)) for t, parts in started]
        at, left = _one_machine(need, now, free[only], running, ends)
        avail = {only: left}
        if at is not None:
            found = (at, (Part(only, need),))
    else:
        found, avail = _walk(need, now, free, running, started, able, placement)
    if (
        previous is not None
        and (found is None or previous.start < found[0])
        and (able is machines or _on(previous.parts, able))
    ):
        # Keep an earlier promise when its CPUs are still free at its start.
        earlier = _avail_at(previous.start, free, merged_releases(now, running, started))
        if _fits(previous.parts, earlier):
            found, avail = (previous.start, previous.parts), earlier
    if found is None:
        return None
    start, parts = found
    extra = dict(avail)
    for p in parts:
        extra[p.machine] -= p.cpus
    return Shadow(Reservation(job, start, parts), extra)


def _walk(  # noqa: PLR0917 - shadow_for's general case, its own arguments
    need: int,
    now: float,
    free: Mapping[str, int],
    running: Sequence[RunningJob],
    started: Sequence[Release],
    machines: Sequence[Machine],
    placement: Placement,
) -> tuple[tuple[float, tuple[Part, ...]] | None, dict[str, int]]:
    """The earliest ``(time, parts)`` the placement rule fits ``need`` CPUs as the
    running jobs end, and the CPUs free per machine then (all released if never)."""
    avail = dict(free)
    total = sum(avail.values())
    found: tuple[float, tuple[Part, ...]] | None = None
    pending: float | None = None
    for t, parts in merged_releases(now, running, started):
        if pending is not None and t > pending and total >= need:
            # Every release up to ``pending`` is in ``avail`` and none after it.
            placed = placement.place(need, avail, machines)
            if placed is not None:
                found = (pending, placed)
                break
        for p in parts:
            avail[p.machine] += p.cpus
            total += p.cpus
        pending = t
    else:
        if pending is not None and total >= need:
            placed = placement.place(need, avail, machines)
            if placed is not None:
                found = (pending, placed)
    return found, avail


def _one_machine(
    need: int,
    now: float,
    free: int,
    running: Sequence[RunningJob],
    started: Sequence[tuple[float, int]],
) -> tuple[float | None, int]:
    """:func:`_walk` on one machine: every placement rule fits a job there exactly
    when enough CPUs are free, so the walk adds integers (the textbook's) instead
    of placing at every release. ``started`` is this decision's starts as
    ``(expected end, CPUs)``, merged in as :func:`merged_releases` merges them
    (sorted by time, a start before a running job that ends at the same instant
    only if strictly earlier), but read in place: this walk runs at most events of
    a busy trace, so it takes no generator and no tuple per release."""
    avail = free
    pending: float | None = None
    extra = sorted(started, key=_time) if len(started) > 1 else started
    j, m = 0, len(extra)
    for r in in_planned_order(now, running):
        t = r.est_end
        if t < now:  # overdue: ``planned_end`` is ``est_end`` otherwise
            t = planned_end(t, now)
        while j < m and extra[j][0] < t:
            at, cpus = extra[j]
            if pending is not None and at > pending and avail >= need:
                return pending, avail
            avail += cpus
            pending = at
            j += 1
        if pending is not None and t > pending and avail >= need:
            return pending, avail
        avail += r.cpus
        pending = t
    while j < m:
        at, cpus = extra[j]
        if pending is not None and at > pending and avail >= need:
            return pending, avail
        avail += cpus
        pending = at
        j += 1
    return (pending if avail >= need else None), avail


def _time(release: tuple[float, object]) -> float:
    return release[0]


def _avail_at(t: float, free: Mapping[str, int], releases: Iterable[Release]) -> dict[str, int]:
    avail = dict(free)
    for when, parts in releases:
        if when > t:
            break
        for p in parts:
            avail[p.machine] += p.cpus
    return avail


def _on(parts: tuple[Part, ...], machines: Sequence[Machine]) -> bool:
    """Whether every part is on one of ``machines``."""
    ids = {m.id for m in machines}
    return all(p.machine in ids for p in parts)


def _fits(parts: tuple[Part, ...], avail: Mapping[str, int]) -> bool:
    return all(avail.get(p.machine, 0) >= p.cpus for p in parts)


def head_shadow(
    snapshot: SnapshotView,
    head: Job,
    *,
    free: Mapping[str, int],
    starts: Sequence[Start],
    placement: Placement,
) -> Shadow | None:
    """EASY's reservation for ``head`` after this decision's ``starts``: they give
    their CPUs back at their estimated ends too. Keeps an earlier promise to
    ``head`` (``snapshot.reservations``) when it still holds."""
    now = snapshot.now
    speeds = snapshot.speeds
    started = [(now + s.job.estimate_on(pace(s.parts, speeds)), s.parts) for s in starts]
    return shadow_for(
        head,
        now=now,
        free=free,
        running=snapshot.running,
        started=started,
        machines=snapshot.machines,
        placement=placement,
        previous=snapshot.reservations.get(head.id),
    )


def one_machine_shadow(
    snapshot: SnapshotView, head: Job, *, free: int, starts: Sequence[Start]
) -> tuple[Reservation | None, int]:
    """:func:`head_shadow` on a snapshot of one machine, in integers: the reservation
    (None if the head never fits) and the extra CPUs at its start.

    The same rule and the same numbers as :func:`shadow_for`'s one-machine case;
    what it saves is building a per-machine map and a :class:`Shadow` at every
    event, and it hands back the earlier :class:`Reservation` itself when the
    promise is unchanged (most events), instead of an equal new one.
    """
    now = snapshot.now
    (machine,) = snapshot.machines
    only = machine.id
    need = head.procs
    running = snapshot.running
    ends: list[tuple[float, int]] = []
    if starts:
        speed = machine.speed
        ends = [(now + s.job.estimate_on(speed), parts_cpus(s.parts)) for s in starts]
    at, left = _one_machine(need, now, free, running, ends)
    previous = snapshot.reservations.get(head.id)
    if previous is not None and (at is None or previous.start < at):
        # Keep an earlier promise when its CPUs are still free at its start.
        started = [(t, (Part(only, cpus),)) for t, cpus in ends]
        earlier = _avail_at(previous.start, {only: free}, merged_releases(now, running, started))
        if _fits(previous.parts, earlier):
            return previous, earlier[only] - parts_cpus(previous.parts)
    if at is None:
        return None, left
    if previous is not None and previous.start == at:
        # ``previous.parts == (Part(only, need),)``, field by field: no Part built and
        # compared at every event for the usual answer (the promise unchanged).
        (kept,) = previous.parts if len(previous.parts) == 1 else (None,)
        if kept is not None and kept.cpus == need and kept.machine == only:
            return previous, left - need
    return Reservation(head, at, (Part(only, need),)), left - need
