"""Why a queued job waits: one reason from a small fixed vocabulary, and a detail in words.

Theory of operation. The reasons are read off a :class:`~scheduler.planning.prediction.Plan`
(worked out after the policy decided, so every job in the queue is one it
left waiting) and two questions asked of each job: does it fit the free CPUs
*now*, and when would it start if it were alone, the only job waiting (its
earliest fit on the running jobs' profile, with nothing booked before it)?
In the order below, the first that holds is the job's reason (Slurm's
``squeue`` reason codes are the model: one code, the most telling):

``held``
    The scheduler starts nothing now (a restarted scheduler reconciling with
    its agents): every queued job waits, whatever else holds.
``user_limit``
    Its user's running jobs hold so many CPUs that it would take them past
    the per-user CPU limit (``scheduler.core.user_limit``; Slurm's
    ``AssocGrpCpuLimit``): the core offers it to no policy, so it has no
    predicted start, until enough of its user's jobs end. Detail: the CPUs its
    user runs, the limit and what it needs.
``no_capable_machine``
    It needs capabilities of its machines (``Job.needs``: a user's command
    needs a machine that runs commands, an MPI program one that also runs its
    library) and the machines online that have them cannot hold it: there are
    none, they hold fewer CPUs than it needs, or, for a job that must run on
    one machine (``Job.one_machine``), none of them has that many CPUs (the
    core hides it from the policy until enough of them are online), or the
    placement rule finds no place on them. Detail: what it needs, and the
    CPUs of such machines online (of the largest, for a one-machine job).
``wider_than_online``
    It needs more CPUs than the machines online can give (the core hides it
    from the policy until enough machines are back), or more than any place
    the policy's placement rule can find on them (one machine per job, and
    none that wide; or a job that must run on one machine, and none online
    that wide). Detail: the CPUs it needs and the CPUs online (of the largest
    machine, for a one-machine job).
``cordoned``
    It fits only with the CPUs of cordoned machines (suspect or held agents,
    where nothing new starts): now, or ever. Detail: those machines.
``reservation``
    Its CPUs are free now, but starting it would delay a reservation the
    policy keeps for a job of higher priority (EASY's head, conservative's
    promises): it would run past that reservation's start on CPUs it needs.
    Detail: that job and its reserved start.
``priority``
    Jobs of higher priority are planned first and it waits behind them: it
    fits now, but the policy starts jobs in order (FCFS), or it would start
    earlier if it were alone. Detail: how many jobs rank before it.
``resources``
    It waits for running jobs to end: alone it would start no earlier than
    it is planned to. Detail: when its CPUs are planned free (its
    reservation, for a job the policy reserved).

A job the plan holds and that fits now with no job ahead of it waits for
the next decision (it is ``resources``, "free now"): it does not happen at a
decision, only when the CPUs freed since the last one.

Cost: the answers depend on a job's width only (alone, the running jobs'
profile only gains CPUs as time goes on, so a job fits from the first
instant its width fits, whatever its length), so they are worked out once
per width: one placement on the free CPUs now and a bisection over the
running jobs' ends. Per job, what is left is picking the reason and writing
its detail.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from model.job import Job
from model.machine import Capability, Machine
from scheduler.core.snapshot import Policy, SnapshotView
from scheduler.planning.placement import Placement, machines_for
from scheduler.planning.prediction import (
    Meaning,
    Plan,
    PlannedJob,
    placement_of,
    running_profile,
)

#: At most this many machine ids are named in a detail (a cluster may have hundreds).
_NAMED = 5


class WaitWhy(StrEnum):
    """The reason a queued job waits (module docstring); the wire's ``WaitReason``
    has the same values (``broker.messages``)."""

    PRIORITY = "priority"
    RESOURCES = "resources"
    RESERVATION = "reservation"
    WIDER_THAN_ONLINE = "wider_than_online"
    CORDONED = "cordoned"
    HELD = "held"
    USER_LIMIT = "user_limit"
    NO_CAPABLE_MACHINE = "no_capable_machine"


class Wait(NamedTuple):
    """Why one job waits, and the detail in words (a named tuple: a pass builds one per
    queued job)."""

    why: WaitWhy
    detail: str


def when(t: float) -> str:
    """An instant of cluster time as a detail writes it."""
    return f"t={t:,.0f} s"


def wait_reasons(
    plan: Plan,
    snapshot: SnapshotView,
    policy: Policy,
    *,
    cordoned: Set[str] = frozenset(),
    hidden: Sequence[Job] = (),
    limited: Sequence[Job] = (),
    user_cpus: Mapping[str, int] | None = None,
    max_user_cpus: int | None = None,
    held: str | None = None,
) -> dict[str, Wait]:
    """Every queued job's :class:`Wait`, by id (module docstring).

    ``plan`` is :func:`~scheduler.planning.prediction.predict`'s on ``snapshot``;
    ``hidden`` the queued jobs the core hides from the policy as wider than the
    CPUs online, ``limited`` those it hides for the per-user CPU limit
    (``max_user_cpus``; ``user_cpus``: the CPUs each user runs); ``held``, when
    the scheduler starts nothing now, says why.
    """
    if held is not None:
        return {j.id: Wait(WaitWhy.HELD, held) for j in (*plan.order, *hidden, *limited)}
    online = sum(m.cpus for m in snapshot.machines)
    reasons = {j.id: _hidden(j, snapshot.machines, online) for j in hidden}
    running = user_cpus or {}
    for j in limited:
        reasons[j.id] = Wait(
            WaitWhy.USER_LIMIT,
            f"{j.user} runs {running.get(j.user, 0)} CPUs of the {max_user_cpus} one user "
            f"may hold; it needs {j.procs}",
        )
    machines = list(plan.machines)
    free_now = {m.id: snapshot.free[m.id] for m in machines}
    steps: list[tuple[float, dict[str, int]]] = (
        running_profile(snapshot, machines, free_now).breakpoints() if machines else []
    )
    asker = _Asker(
        snapshot=snapshot,
        placement=placement_of(policy),
        machines=machines,
        free_now=free_now,
        cordoned=sorted(cordoned & {m.id for m in snapshot.machines}),
        times=[t for t, _ in steps],
        frees=[f for _, f in steps],
    )
    reserved: PlannedJob | None = None
    queued = plan.queued
    why = asker.why
    for k, job in enumerate(plan.order):
        planned = queued.get(job.id)
        reasons[job.id] = why(job, k, planned, reserved)
        if reserved is None and planned is not None and planned.meaning is Meaning.RESERVED:
            reserved = planned
    return reasons


#: What the answers of :class:`_Asker` depend on: a job's width, what it needs of its
#: machines (fewer of them) and whether it must run on one (another placement rule).
_Width = tuple[int, frozenset[Capability], bool]


@dataclass(slots=True, kw_only=True)
class _Asker:
    """The questions :func:`wait_reasons` asks of each job, over one snapshot; the
    answers that depend on a job's width only are kept by width (module docstring)."""

    snapshot: SnapshotView
    placement: Placement
    machines: list[Machine]
    free_now: dict[str, int]
    cordoned: list[str]
    #: The running jobs' profile (on the usable machines): its breakpoints and the
    #: free CPUs from each, which only grow.
    times: list[float]
    frees: list[dict[str, int]]
    _fits: dict[_Width, bool] = field(default_factory=dict)
    _alone: dict[_Width, float | None] = field(default_factory=dict)

    def why(
        self, job: Job, k: int, planned: PlannedJob | None, reserved: PlannedJob | None
    ) -> Wait:
        """The reason of ``job``, ``k``-th in the policy's order (module docstring)."""
        if planned is None:
            if self.cordoned and self._fits_with_cordoned(job, ever=True):
                return Wait(WaitWhy.CORDONED, self._cordoned_detail("fits only with"))
            widest = max((m.cpus for m in machines_for(job, self.machines)), default=0)
            if job.needs:
                return Wait(
                    WaitWhy.NO_CAPABLE_MACHINE,
                    f"needs {job.procs} CPUs on {_where(job)}; no place on those "
                    f"usable now (widest: {widest})",
                )
            return Wait(
                WaitWhy.WIDER_THAN_ONLINE,
                f"needs {job.procs} CPUs; no place on the machines online (widest: {widest})",
            )
        parts = planned.parts
        cpus = parts[0].cpus if len(parts) == 1 else sum(p.cpus for p in parts)
        width = (cpus, job.needs, job.one_machine)
        fits_now = self._fits.get(width)
        if fits_now is None:
            place = self.placement.for_job(job).place
            fits_now = self._fits[width] = (
                place(cpus, self.free_now, machines_for(job, self.machines)) is not None
            )
        if not fits_now and self.cordoned and self._fits_with_cordoned(job, ever=False):
            return Wait(WaitWhy.CORDONED, self._cordoned_detail("would start now on"))
        if fits_now:
            if reserved is not None:
                return Wait(
                    WaitWhy.RESERVATION,
                    f"starting now would delay job {reserved.job.id}'s reservation at "
                    f"{when(reserved.start)}",
                )
            if k > 0:
                return Wait(WaitWhy.PRIORITY, _behind(k))
            return Wait(WaitWhy.RESOURCES, "its CPUs are free now: it starts at the next decision")
        if k > 0:
            alone = self._alone_start(job, cpus)
            if alone is not None and planned.start > alone:
                return Wait(WaitWhy.PRIORITY, _behind(k))
        if planned.meaning is Meaning.RESERVED:
            return Wait(WaitWhy.RESOURCES, f"its reservation at {when(planned.start)}")
        return Wait(WaitWhy.RESOURCES, f"its CPUs are planned free at {when(planned.start)}")

    def _alone_start(self, job: Job, cpus: int) -> float | None:
        """When ``job`` on ``cpus`` CPUs would start were it the only job waiting: the
        first breakpoint of the running jobs' profile where the placement rule fits it
        (the profile only gains CPUs, so it fits from then on, for any duration)."""
        width = (cpus, job.needs, job.one_machine)
        if width in self._alone:
            return self._alone[width]
        frees = self.frees
        times = self.times
        found: float | None = None
        # A job with a place in the plan can run on one machine at least: a cluster
        # of one machine runs it.
        if len(self.machines) == 1:
            (only,) = self.machines
            counts = [f[only.id] for f in frees]
            i = bisect_left(counts, cpus)
            found = times[i] if i < len(times) else None
        else:
            place = self.placement.for_job(job).place
            machines = machines_for(job, self.machines)
            lo, hi = 0, len(times)
            while lo < hi:
                mid = (lo + hi) // 2
                if place(cpus, frees[mid], machines) is None:
                    lo = mid + 1
                else:
                    hi = mid
            found = times[lo] if lo < len(times) else None
        self._alone[width] = found
        return found

    def _fits_with_cordoned(self, job: Job, *, ever: bool) -> bool:
        """Whether ``job`` fits once the cordoned machines count: on their free CPUs
        now, or (``ever``) on all their CPUs."""
        snapshot = self.snapshot
        everything: Mapping[str, int] = (
            {m.id: m.cpus for m in snapshot.machines}
            if ever
            else {m.id: snapshot.free[m.id] for m in snapshot.machines}
        )
        if not ever:
            # The snapshot shows a cordoned machine's CPUs as none free: count the
            # machine's CPUs its running jobs do not hold.
            held: dict[str, int] = {}
            for r in snapshot.running:
                for p in r.parts:
                    held[p.machine] = held.get(p.machine, 0) + p.cpus
            everything = {
                m.id: m.cpus - held.get(m.id, 0) if m.id in self.cordoned else everything[m.id]
                for m in snapshot.machines
            }
        machines = machines_for(job, snapshot.machines)
        return self.placement.for_job(job).place(job.procs, everything, machines) is not None

    def _cordoned_detail(self, how: str) -> str:
        names = self.cordoned
        more = f" and {len(names) - _NAMED} more" if len(names) > _NAMED else ""
        return f"{how} cordoned machines: {', '.join(names[:_NAMED])}{more}"


def _hidden(job: Job, machines: Sequence[Machine], online: int) -> Wait:
    """Why ``job``, hidden by the core, waits: too few CPUs on the machines it may run
    on (``no_capable_machine``), or on all of them (``wider_than_online``); for a job
    that must run on one machine, on the largest of them."""
    able = machines_for(job, machines)
    if job.needs and not able:
        return Wait(
            WaitWhy.NO_CAPABLE_MACHINE,
            f"needs machines {_that(job)}; none of the {len(machines)} online does",
        )
    if job.one_machine:
        largest = max((m.cpus for m in able), default=0)
        # Where the largest machine of all has what it needs, it is simply too wide.
        why = (
            WaitWhy.NO_CAPABLE_MACHINE
            if job.needs and largest < max((m.cpus for m in machines), default=0)
            else WaitWhy.WIDER_THAN_ONLINE
        )
        return Wait(
            why, f"needs {job.procs} CPUs on {_where(job)}; the largest online has {largest}"
        )
    if job.needs:
        capacity = sum(m.cpus for m in able)
        # Where every machine has what it needs, it is simply too wide.
        if capacity < min(job.procs, online):
            return Wait(
                WaitWhy.NO_CAPABLE_MACHINE,
                f"needs {job.procs} CPUs on machines {_that(job)}; {capacity} online",
            )
    return Wait(WaitWhy.WIDER_THAN_ONLINE, f"needs {job.procs} CPUs; {online} online")


def _that(job: Job, *, one: bool = False) -> str:
    """The machines ``job`` needs, in words: "that run commands and openmpi" (each
    capability's value is the word for what such a machine runs)."""
    return f"that {'runs' if one else 'run'} " + " and ".join(sorted(job.needs))


def _where(job: Job) -> str:
    """Where ``job`` may run, in words: "machines that run commands", "one machine
    that runs commands and openmpi", "one machine"."""
    if not job.one_machine:
        return f"machines {_that(job)}"
    return f"one machine {_that(job, one=True)}" if job.needs else "one machine"


def _behind(k: int) -> str:
    return f"behind {k} higher-priority job{'s' if k != 1 else ''}"
