"""Grids of a few machines as the schedule-based policies' tests build them.

EG-EDF's and the Tabu search's tests (``test_eg_edf*.py``, ``test_tabu.py``)
hand-make snapshots of two or three machines with running jobs and the plan
of a previous decision (its reservations); these are their shared builders.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from model.job import Job
from model.machine import Machine, Part
from scheduler.core.snapshot import Decisions, Reservation, RunningJob, Snapshot
from scheduler.core.usage import UsageLedger
from scheduler.planning.placement import sort_machines

GRID = [
    Machine(id="fast", cpus=4, speed=2.0),
    Machine(id="big", cpus=8),
    Machine(id="small", cpus=2),
]
"""Three machines of different CPUs and speeds: the hand-made tests' usual grid."""


def job(
    jid: str,
    procs: int,
    walltime: float,
    *,
    submit: float = 0.0,
    deadline: float | None = None,
    runtime: float | None = None,
) -> Job:
    return Job(
        id=jid,
        submit=submit,
        procs=procs,
        walltime=walltime,
        deadline=deadline,
        runtime=walltime if runtime is None else runtime,
    )


def running(j: Job, machine: str, est_end: float) -> RunningJob:
    return RunningJob(
        job=j, parts=(Part(machine, j.procs),), start=0.0, est_end=est_end, cpus=j.procs
    )


def planned(j: Job, machine: str, start: float) -> Reservation:
    return Reservation(j, start, (Part(machine, j.procs),))


def snapshot(
    *,
    now: float = 0.0,
    machines: Sequence[Machine],
    queue: Sequence[Job],
    running_jobs: Sequence[RunningJob] = (),
    reservations: Sequence[Reservation] = (),
) -> Snapshot:
    free = {m.id: m.cpus for m in machines}
    for r in running_jobs:
        for p in r.parts:
            free[p.machine] -= p.cpus
    return Snapshot(
        now=now,
        machines=sort_machines(machines),
        free=free,
        running=sorted(running_jobs, key=lambda r: r.est_end),
        queue=list(queue),
        usage=UsageLedger(),
        total_cpus=sum(m.cpus for m in machines),
        speeds={m.id: m.speed for m in machines},
        reservations={r.job.id: r for r in reservations},
    )


def plan_of(d: Decisions) -> dict[str, tuple[str, float]]:
    """job id -> (machine, start) of every start (at "now") and reservation."""
    out = {s.job.id: (s.parts[0].machine, math.nan) for s in d.starts}
    out.update({r.job.id: (r.parts[0].machine, r.start) for r in d.reservations})
    return out


def order_on(d: Decisions, machine: str) -> list[tuple[str, float]]:
    return [(r.job.id, r.start) for r in d.reservations if r.parts[0].machine == machine]
