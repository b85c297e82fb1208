"""Shared by the fair-share tests: a head-first policy, job and snapshot builders, and
the scheduling-algorithms text's jack/jill cluster driven through the real core."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from model.job import Job
from model.machine import Machine, Part
from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Decisions, RunningJob, Snapshot, Start
from scheduler.core.usage import UsageLedger
from scheduler.planning.placement import Placement
from scheduler.priority.fairshare import FairShare

DAY = 86400.0
HOUR = 3600.0


# -- helpers ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HeadFirst:
    """Minimal FCFS-like policy: start the first job of the priority order if it fits."""

    priority: FairShare
    name: str = "head-first"

    def decide(self, snapshot: Snapshot) -> Decisions:
        order = self.priority.order(snapshot)
        if not order:
            return Decisions()
        head = order[0]
        parts = Placement().place(head.procs, snapshot.free, snapshot.machines)
        return Decisions(starts=[Start(head, parts)] if parts is not None else [])


def job(
    job_id: str,
    *,
    user: str = "u",
    group: str = "g",
    procs: int = 1,
    submit: float = 0.0,
    walltime: float = HOUR,
) -> Job:
    return Job(id=job_id, submit=submit, procs=procs, walltime=walltime, user=user, group=group)


def snapshot(
    *,
    now: float,
    queue: Sequence[Job] = (),
    running: Sequence[RunningJob] = (),
    usage: UsageLedger | None = None,
    total_cpus: int = 4,
) -> Snapshot:
    machine = Machine(id="m", cpus=max(total_cpus, 1))
    return Snapshot(
        now=now,
        machines=[machine],
        free={"m": machine.cpus},
        running=list(running),
        queue=list(queue),
        usage=usage if usage is not None else UsageLedger(DAY),
        total_cpus=total_cpus,
        speeds={"m": 1.0},
        reservations={},
    )


def running(j: Job, *, start: float, cpus: int, charged_from: float | None = None) -> RunningJob:
    return RunningJob(
        job=j,
        parts=(Part("m", cpus),),
        start=start,
        est_end=start + j.walltime,
        cpus=cpus,
        changed=start,
        charged_from=start if charged_from is None else charged_from,
    )


JACK_JILL = FairShare(shares=(("jack", 0.25), ("jill", 0.75)), decay=0.7)


def jack_jill_core() -> SchedulerCore:
    """Four one-CPU nodes; jack then jill each submit six whole-cluster six-hour jobs at 0.

    Jack submits first, so arrival order alone would start jack: fair-share must
    override it.
    """
    core = SchedulerCore(
        policy=HeadFirst(priority=JACK_JILL),
        machines=[Machine(id=f"node{i}", cpus=1) for i in range(1, 5)],
    )
    for user in ("jack", "jill"):
        for n in range(6):
            core.submit(job(f"{user}-{n}", user=user, procs=4, walltime=6 * HOUR))
    return core
