"""Predicted starts: when and where every queued job is planned to run, and what that means.

Theory of operation. A prediction is worked out on a snapshot after the
policy has decided (so every job in the queue is one the policy left
waiting): the *availability profile* (``scheduler.planning.profile``) starts
from the free CPUs now and gives every running job's CPUs back at its
planned end; then every queued job is laid onto it in the policy's own order
(its priority source's), at the earliest instant its CPUs stay free for its
whole estimate, on the machines the policy's placement rule would give it,
and booked there so the jobs after it plan around it. The result is a
:class:`Plan`: each queued job's start, end and parts, and what the start
means (:class:`Meaning`).

*Running jobs past their estimate.* A running job gives its CPUs back at its
expected end (``RunningJob.est_end``: the wall time, or the run-time
prediction the policy plans with, through the execution model). Once it has
outlived that, it is planned to end by the one rule every planner shares,
``scheduler.planning.overdue`` (the doubling allowance: 1, 2, 4, ... seconds
past its expected end), never "now": a job far past its estimate would
otherwise be planned to free its CPUs at every instant, and every job
waiting for them to start at once.

*What a prediction means* depends on the policy, which says so with a
:class:`PlanRule` (an attribute ``plan_rule``; the policies here use a property,
as ``idle_on_empty_queue`` in ``scheduler.core.snapshot.Policy`` says why):

``reservations`` (conservative backfilling, EG-EDF, EG-EDF with Tabu search)
    The policy keeps a reservation for every waiting job and hands them back
    to the core; the prediction *is* that plan (:attr:`Meaning.RESERVED`).
    With estimates that hold, conservative backfilling never moves a
    reservation later. A job the policy could not place has no prediction.
``backfill`` (EASY, DPSA, Flexible backfilling, FIFO with backfill)
    The policy's own reservations (EASY's, DPSA's and Flexible's one, for
    the job at the head) are booked first and are :attr:`Meaning.RESERVED`:
    with estimates that hold, the head starts no later. Every other job is
    laid at its earliest fit around them (:attr:`Meaning.ESTIMATED`): the
    conservative plan of the same queue. It is an estimate, not a promise:
    the policy protects only the head, so a job may start earlier (a gap
    opens when a job ends early) or later (a job submitted after it
    backfills into the CPUs it was planned on, or ranks before it).
``in-order`` (FCFS, FCFS-malleable)
    No job starts before the one ahead of it: each is laid at its earliest
    fit no earlier than the previous job's planned start. With estimates
    that hold this is FCFS's schedule. For FCFS-malleable it is an
    estimate that leaves malleability out: the policy may start a job
    earlier, shrunk onto CPUs it takes from the running jobs (then it runs
    longer), and it expands shrunk jobs when the queue empties. A job
    wider than any place at full width is planned on its floor of CPUs
    (``ceil(p/2)``) for its estimate times its MPL.

Cordoned machines (the live scheduler's suspect and held agents) take no
part in the plan: their CPUs are never planned free, since nothing new may
start there until they are back. A job that needs capabilities is planned
only on the machines that have them (``scheduler.planning.placement``), and
has no place when none of the machines the plan uses does.

Cost: building the profile is ``O(R log R)`` for ``R`` running jobs; the
``reservations`` rule then reads the policy's reservations, ``O(Q)`` for
``Q`` queued jobs; the others book every job, ``O(B)`` each at worst for
``B`` breakpoints. On one machine (a trace's, a homogeneous partition) the
laying is ``scheduler.planning.one_machine_plan``'s, in plain lists with
lower bounds that keep most searches short; on several it is the general
profile's (``Profile.book_earliest``, the same call conservative backfilling
lays its newcomers with), whose search keeps the same kind of bounds
(``scheduler.planning.profile_search``): a job is found a few candidates
after where the last job of its width and no longer length began to fit.
``bench/live/prediction.py`` times a pass over a queue of 10,000 jobs on
both. The reasons each job waits are ``scheduler.planning.wait_reasons``'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import NamedTuple

from model.allocation import pace
from model.job import Job
from model.machine import Machine, Part
from scheduler.core.snapshot import Policy, Reservation, SnapshotView
from scheduler.planning.one_machine_plan import lay_one_machine
from scheduler.planning.overdue import planned_end, planned_releases
from scheduler.planning.placement import Placement, runs_on
from scheduler.planning.profile import Profile


class PlanRule(StrEnum):
    """How a policy's prediction is made, and so what it means (module docstring)."""

    RESERVATIONS = "reservations"
    BACKFILL = "backfill"
    IN_ORDER = "in-order"


class Meaning(StrEnum):
    """What one planned start is."""

    #: The policy's own reservation: its promise, kept while estimates hold.
    RESERVED = "reserved"
    #: Laid onto the profile by the prediction; the policy promised nothing.
    ESTIMATED = "estimated"
    #: A running job, at its planned end (``scheduler.planning.overdue`` past its estimate).
    RUNNING = "running"


class PlannedJob(NamedTuple):
    """One job of a :class:`Plan`: from ``start`` to ``end`` on ``parts``.

    A named tuple rather than a frozen dataclass: a pass builds one per queued job,
    and a tuple is several times cheaper to build.
    """

    job: Job
    start: float
    end: float
    parts: tuple[Part, ...]
    meaning: Meaning


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Every queued job's planned start, end and parts at ``now`` (module docstring);
    :func:`planned_running` gives the running jobs' planned ends."""

    now: float
    rule: PlanRule
    #: The queue the policy saw, in its own order (highest priority first).
    order: tuple[Job, ...]
    #: Queued jobs with a place in the plan, by id, in ``order``; a job the plan could
    #: not place (no machine can ever hold it) is missing.
    queued: Mapping[str, PlannedJob]
    #: The machines the plan used (the cordoned ones left out), in canonical order.
    machines: tuple[Machine, ...]

    def start_of(self, job_id: str) -> float | None:
        """The planned start of queued job ``job_id``; None if it has no place."""
        planned = self.queued.get(job_id)
        return None if planned is None else planned.start


def plan_rule(policy: Policy) -> PlanRule:
    """The policy's :class:`PlanRule` (its attribute or property ``plan_rule``;
    ``backfill`` if it states none: the conservative plan of its queue, an estimate)."""
    rule = getattr(policy, "plan_rule", PlanRule.BACKFILL)
    return PlanRule(rule)


def policy_order(policy: Policy, snapshot: SnapshotView) -> Sequence[Job]:
    """The queue in ``policy``'s order: its priority source's, or for a policy without
    one (EG-EDF) by reserved start, the jobs it reserved nothing for last."""
    source = getattr(policy, "priority", None)
    if source is not None:
        ordered: Sequence[Job] = source.order(snapshot)
        return ordered
    held = snapshot.reservations
    inf = math.inf
    ranked = sorted(
        enumerate(snapshot.queue),
        key=lambda e: (held[e[1].id].start if e[1].id in held else inf, e[0]),
    )
    return [job for _, job in ranked]


def placement_of(policy: Policy) -> Placement:
    """The placement rule the policy places jobs with (the default if it has none)."""
    placement = getattr(policy, "placement", None)
    return placement if isinstance(placement, Placement) else Placement()


def usable(snapshot: SnapshotView, cordoned: Set[str]) -> tuple[list[Machine], dict[str, int]]:
    """The machines a plan may use (the cordoned ones left out) and their free CPUs now."""
    machines = [m for m in snapshot.machines if m.id not in cordoned]
    free = snapshot.free
    return machines, {m.id: free[m.id] for m in machines}


def running_profile(
    snapshot: SnapshotView, machines: Sequence[Machine], free: Mapping[str, int]
) -> Profile:
    """The free CPUs of ``machines`` from now on as the running jobs end at their planned
    ends (``scheduler.planning.overdue``)."""
    now = snapshot.now
    if len(machines) == len(snapshot.machines):
        ends = planned_releases(now, snapshot.running)
    else:
        keep = {m.id for m in machines}
        ends = []
        for t, parts in planned_releases(now, snapshot.running):
            mine = tuple(p for p in parts if p.machine in keep)
            if mine:
                ends.append((t, mine))
    return Profile(now=now, machines=machines, free=free, ends=ends)


def predict(
    snapshot: SnapshotView,
    policy: Policy,
    *,
    cordoned: Set[str] = frozenset(),
    order: Sequence[Job] | None = None,
    until: Set[str] | None = None,
) -> Plan:
    """The :class:`Plan` of ``snapshot``'s queue under ``policy`` (module docstring).

    ``snapshot`` is the core's after the policy's decision at ``snapshot.now``;
    ``cordoned`` the machines nothing new may start on; ``order`` the queue in the
    policy's order when the caller has it already. With ``until``, laying stops once
    those jobs have their place (the twin wants only the jobs just submitted): the
    plan then holds them and the jobs before them in the order.
    """
    now = snapshot.now
    rule = plan_rule(policy)
    ordered = tuple(policy_order(policy, snapshot) if order is None else order)
    machines, free = usable(snapshot, cordoned)
    speeds = snapshot.speeds
    queued: dict[str, PlannedJob] = {}
    plan = Plan(now=now, rule=rule, order=ordered, queued=queued, machines=tuple(machines))
    if not ordered or not machines:
        return plan
    held = snapshot.reservations
    if rule is PlanRule.RESERVATIONS:
        for job in ordered:
            r = held.get(job.id)
            if r is None or not all(p.machine in free for p in r.parts):
                continue
            start = r.start if r.start > now else now
            end = start + job.estimate_on(pace(r.parts, speeds))
            queued[job.id] = PlannedJob(job, start, end, r.parts, Meaning.RESERVED)
        return plan
    folds = bool(getattr(policy, "folds", False))
    if len(machines) == 1:
        _lay_on_one(plan, snapshot, held, free, queued, folds=folds, until=until)
        return plan
    profile = running_profile(snapshot, machines, free)
    placement = placement_of(policy)
    # 1. The policy's own reservations first: its promises, kept where they still fit.
    if held:
        for job in ordered:
            r = held.get(job.id)
            if r is None:
                continue
            start = r.start if r.start > now else now
            end = start + job.estimate_on(pace(r.parts, speeds))
            if all(p.machine in free for p in r.parts) and profile.fits(start, end, r.parts):
                profile.reserve(start, end, r.parts)
                queued[job.id] = PlannedJob(job, start, end, r.parts, Meaning.RESERVED)
    # 2. Every other job at its earliest fit, in the policy's order.
    in_order = rule is PlanRule.IN_ORDER
    not_before = now
    left = None if until is None else set(until)
    for job in ordered:
        if left is not None:
            if not left:
                break
            left.discard(job.id)
        planned = queued.get(job.id)
        if planned is None:
            planned = _lay(job, profile, placement, machines, speeds, not_before, folds=folds)
            if planned is None:
                continue
            queued[job.id] = planned
        if in_order and planned.start > not_before:
            not_before = planned.start
    if held:
        # Reserved jobs were booked first: put the mapping in the policy's order.
        plan = replace(plan, queued={j.id: queued[j.id] for j in ordered if j.id in queued})
    return plan


def _lay_on_one(
    plan: Plan,
    snapshot: SnapshotView,
    held: Mapping[str, Reservation],
    free: Mapping[str, int],
    queued: dict[str, PlannedJob],
    *,
    folds: bool,
    until: Set[str] | None,
) -> None:
    """:func:`predict`'s laying on a cluster of one machine into ``queued``, the hot
    path (``scheduler.planning.one_machine_plan``): the same plan, in plain lists."""
    (machine,) = plan.machines
    mid = machine.id
    now = plan.now
    order = plan.order
    if len(snapshot.machines) > 1 and any(j.needs for j in order):
        # The one machine left (the others cordoned) may not run every job: the others
        # have no place, and hold nothing up. (On a cluster of one machine the core
        # shows the policy only the jobs it can run.)
        order = tuple(j for j in order if runs_on(j, machine))
    releases = [
        (t, sum(p.cpus for p in parts if p.machine == mid))
        for t, parts in planned_releases(now, snapshot.running)
    ]
    reserved = [
        (job, held[job.id].start)
        for job in order
        if job.id in held and all(p.machine == mid for p in held[job.id].parts)
    ]
    laid = lay_one_machine(
        now=now,
        cpus=machine.cpus,
        free_now=free[mid],
        releases=releases,
        speed=machine.speed,
        held=reserved,
        order=order,
        in_order=plan.rule is PlanRule.IN_ORDER,
        folds=folds,
        until=until,
    )
    parts: dict[int, tuple[Part, ...]] = {}
    reserved_ = Meaning.RESERVED
    estimated = Meaning.ESTIMATED
    # ``PlannedJob(...)`` without its Python-level ``__new__``: one per queued job.
    new = tuple.__new__
    for job in order:
        got = laid.get(job.id)
        if got is None:
            continue
        start, end, cpus, promised = got
        place = parts.get(cpus)
        if place is None:
            place = parts[cpus] = (Part(mid, cpus),)
        meaning = reserved_ if promised else estimated
        queued[job.id] = new(PlannedJob, (job, start, end, place, meaning))


def _lay(  # noqa: PLR0917 - the laying loop's state, passed once per job
    job: Job,
    profile: Profile,
    placement: Placement,
    machines: Sequence[Machine],
    speeds: Mapping[str, float],
    not_before: float,
    *,
    folds: bool,
) -> PlannedJob | None:
    """``job`` at its earliest fit on ``profile`` from ``not_before``, booked there."""
    booked = profile.book_earliest(
        job, job.procs, placement=placement, machines=machines, speeds=speeds, not_before=not_before
    )
    if booked is None and folds and job.min_cpus < job.procs:
        # Wider than any place at full width: on its floor of CPUs, for its estimate
        # times its MPL (module docstring).
        folded = replace(job, walltime=job.walltime * job.procs / job.min_cpus)
        booked = profile.book_earliest(
            folded,
            job.min_cpus,
            placement=placement,
            machines=machines,
            speeds=speeds,
            not_before=not_before,
        )
    if booked is None:
        return None
    start, end, parts = booked
    return PlannedJob(job, start, end, parts, Meaning.ESTIMATED)


def planned_running(snapshot: SnapshotView) -> dict[str, PlannedJob]:
    """Every running job from its start to its planned end (its expected end, or past
    it the rule of ``scheduler.planning.overdue``), by id: the rest of a Gantt chart's plan."""
    now = snapshot.now
    return {
        r.job.id: PlannedJob(r.job, r.start, planned_end(r.est_end, now), r.parts, Meaning.RUNNING)
        for r in snapshot.running
    }
