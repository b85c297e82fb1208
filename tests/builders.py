"""The builders every test shares: a job, a job spec, a running job, a reservation, a snapshot.

Each takes keyword arguments and gives the rest a default, so a test states
only the values it is about. The defaults are the types' own where the type
has one (a job is malleable, owned by ``nobody``, of CPU utilisation 1 and
reference speed 1), and these where it has none:

- a job or job spec has one process and id ``"j"``;
- a job's estimate is exact: given its wall time or its run time, the other
  is the same (a test about a wrong estimate gives both, or ``runtime=None``
  for a job whose real run time is unknown, as a live submission's is).
  Given neither, both are :data:`WALLTIME`;
- a job spec does :data:`WORK` seconds of work within :data:`WALLTIME`;
- a running job holds its processes on machine ``"m"`` from ``start`` (0),
  is charged and estimated from then, and ends its wall time later;
- a snapshot is of one machine ``"m"`` of :data:`CPUS` CPUs unless given
  machines; its free CPUs are what the running jobs leave, its machines in
  the canonical order and its running jobs by expected end, as the core
  hands them to a policy.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence

from broker.messages import JobSpec, MpiSpec, Workload
from model.job import Job
from model.machine import Machine, Part
from scheduler.core.snapshot import Reservation, RunningJob, Snapshot, UsageView
from scheduler.core.usage import UsageLedger
from scheduler.planning.placement import sort_machines

#: A job's wall time when a test gives neither it nor the run time (seconds).
WALLTIME = 100.0
#: A job spec's work when a test gives none (seconds at the reference speed).
WORK = 50.0
#: The CPUs of a snapshot's one machine when a test gives no machines.
CPUS = 4


class _Same(enum.Enum):
    """The run time's default: the same as the wall time (an exact estimate)."""

    AS_WALLTIME = enum.auto()


AS_WALLTIME = _Same.AS_WALLTIME


def job(
    id: str = "j",
    procs: int = 1,
    *,
    walltime: float | None = None,
    runtime: float | _Same | None = AS_WALLTIME,
    submit: float = 0.0,
    user: str = "nobody",
    group: str = "nobody",
    deadline: float | None = None,
    malleable: bool = True,
    cpu_util: float = 1.0,
    qos: int = 0,
    ref_speed: float = 1.0,
    app: str | None = None,
) -> Job:
    """A job of ``procs`` processes, its estimate exact unless both times are given."""
    if walltime is None:
        # A job that does no work still needs a positive estimate.
        walltime = WALLTIME if not isinstance(runtime, float | int) else max(runtime, 1e-9)
    return Job(
        id=id,
        submit=submit,
        procs=procs,
        walltime=walltime,
        runtime=walltime if runtime is AS_WALLTIME else runtime,
        user=user,
        group=group,
        deadline=deadline,
        malleable=malleable,
        cpu_util=cpu_util,
        qos=qos,
        ref_speed=ref_speed,
        app=app,
    )


def spec(
    id: str = "j",
    procs: int = 1,
    *,
    work: float = WORK,
    walltime: float = WALLTIME,
    workload: Workload = "sleep",
    user: str = "nobody",
    group: str = "nobody",
    qos: int = 0,
    deadline: float | None = None,
    malleable: bool = True,
    cpu_util: float = 1.0,
    ref_speed: float = 1.0,
    mpi: MpiSpec | None = None,
) -> JobSpec:
    """A job as a client submits it: ``procs`` processes doing ``work`` seconds of work."""
    return JobSpec(
        id=id,
        procs=procs,
        walltime=walltime,
        work=work,
        workload=workload,
        user=user,
        group=group,
        qos=qos,
        deadline=deadline,
        malleable=malleable,
        cpu_util=cpu_util,
        ref_speed=ref_speed,
        mpi=mpi,
    )


def on(machine: str, cpus: int) -> tuple[Part, ...]:
    """An allocation of ``cpus`` CPUs on one machine."""
    return (Part(machine, cpus),)


def running(
    j: Job,
    *,
    parts: tuple[Part, ...] | None = None,
    machine: str = "m",
    cpus: int | None = None,
    start: float = 0.0,
    est_end: float | None = None,
    charged_from: float | None = None,
) -> RunningJob:
    """``j`` running on ``parts`` (default: ``cpus``, or its processes, on ``machine``).

    Its expected end defaults to its wall time after ``start`` (a machine of the
    reference speed); it is charged from ``start`` unless ``charged_from`` says
    where an earlier resize left its charge.
    """
    if parts is None:
        parts = on(machine, j.procs if cpus is None else cpus)
    return RunningJob(
        job=j,
        parts=parts,
        start=start,
        est_end=start + j.walltime if est_end is None else est_end,
        cpus=sum(p.cpus for p in parts),
        changed=start,
        charged_from=start if charged_from is None else charged_from,
    )


def reservation(
    j: Job, *, start: float, parts: tuple[Part, ...] | None = None, machine: str = "m"
) -> Reservation:
    """``j`` planned at ``start`` on ``parts`` (default: its processes on ``machine``)."""
    return Reservation(j, start, on(machine, j.procs) if parts is None else parts)


def snapshot(
    *,
    now: float = 0.0,
    queue: Sequence[Job] = (),
    running: Sequence[RunningJob] = (),
    machines: Sequence[Machine] | None = None,
    total_cpus: int | None = None,
    free: Mapping[str, int] | None = None,
    reservations: Iterable[Reservation] = (),
    usage: UsageView | None = None,
) -> Snapshot:
    """The cluster at ``now`` as the core shows it to a policy.

    Without ``machines``, one machine ``"m"`` of ``total_cpus`` CPUs (at least
    one; :data:`CPUS` by default). ``total_cpus`` may differ from the machines'
    sum for a test about the cluster size a priority reads; ``free`` may differ
    from what the running jobs leave for a test about CPUs held by something
    the snapshot does not show.
    """
    if machines is None:
        machines = [Machine(id="m", cpus=max(CPUS if total_cpus is None else total_cpus, 1))]
    if free is None:
        left = {m.id: m.cpus for m in machines}
        for r in running:
            for p in r.parts:
                left[p.machine] -= p.cpus
        free = left
    return Snapshot(
        now=now,
        machines=sort_machines(machines),
        free=dict(free),
        running=sorted(running, key=lambda r: r.est_end),
        queue=list(queue),
        usage=UsageLedger() if usage is None else usage,
        total_cpus=sum(m.cpus for m in machines) if total_cpus is None else total_cpus,
        speeds={m.id: m.speed for m in machines},
        reservations={r.job.id: r for r in reservations},
    )
