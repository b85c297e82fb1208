"""Job specs as the live commands send them, and durations as users write them.

``accordion submit``, ``accordion replay``, ``accordion up --demo`` and the
benchmarks build their ``JobSpec`` s here: wall times written as sbatch
writes them, trace jobs turned into live jobs, and every spec checked by the
round trip the scheduler will make, so a bad flag is refused before anything
is sent.
"""

from __future__ import annotations

import math

from accordion.errors import UserError
from broker.codec import WireError, decode, encode
from broker.command_spec import CommandSpec
from broker.messages import JobSpec, MpiSpec, SubmitJobs, Workload
from model.job import Job

_DURATION_FORMS = "seconds, M:SS, H:MM:SS or D-H:MM:SS"


def parse_duration(text: str, *, what: str = "duration") -> float:
    """Seconds from ``S``, ``M:SS``, ``H:MM:SS``, ``D-H``, ``D-H:MM`` or ``D-H:MM:SS``.

    As sbatch's ``--time`` writes them, except that a bare number is seconds
    (sbatch reads minutes): the cluster's time unit is the second everywhere.
    """
    raw = text.strip()
    try:
        days = 0.0
        rest = raw
        if "-" in raw:
            d, _, rest = raw.partition("-")
            days = float(int(d))
        fields = rest.split(":")
        if not 1 <= len(fields) <= 3 or any(not f for f in fields):
            raise ValueError(raw)
        if "-" in raw:
            # D-H, D-H:MM, D-H:MM:SS: the first field after the day is hours.
            fields += ["0"] * (3 - len(fields))
        units = (1.0, 60.0, 3600.0)
        seconds = 0.0
        for i, value in enumerate(reversed(fields)):
            number = float(value) if i == 0 else float(int(value))
            if i < len(fields) - 1 and not 0 <= number < 60:
                raise ValueError(raw)  # minutes and seconds below a larger unit
            seconds += number * units[i]
        seconds += days * 86400.0
    except ValueError:
        raise UserError(f"{what} {text!r}: expected {_DURATION_FORMS}") from None
    if not (seconds > 0 and math.isfinite(seconds)):
        raise UserError(f"{what} {text!r} must be more than 0 seconds")
    return seconds


def checked(spec: JobSpec) -> JobSpec:
    """``spec`` if the scheduler will decode it; else a UserError in msgspec's words.

    Structs built in code are not validated (msgspec checks constraints on
    decode), so the spec makes the round trip the scheduler will make.
    """
    try:
        decode(encode(SubmitJobs(jobs=(spec,))))
    except WireError as exc:
        why = str(exc).removeprefix("invalid message: ").replace("$.jobs[0].", "")
        raise UserError(f"job {spec.id!r} cannot be sent: {why}") from exc
    return spec


def job_spec(
    *,
    job_id: str,
    procs: int,
    walltime: float,
    work: float | None = None,
    workload: Workload = "sleep",
    user: str = "nobody",
    account: str = "nobody",
    qos: int = 0,
    deadline: float | None = None,
    malleable: bool = True,
    cpu_util: float = 1.0,
    ref_speed: float = 1.0,
    mpi: MpiSpec | None = None,
    command: CommandSpec | None = None,
) -> JobSpec:
    """The spec of one job as ``accordion submit`` sends it; ``work`` defaults to ``walltime``
    (a command's run is its own: ``work`` is then only what the wire requires)."""
    return checked(
        JobSpec(
            command=command,
            id=job_id,
            procs=procs,
            walltime=walltime,
            work=walltime if work is None else work,
            workload=workload,
            user=user,
            group=account,
            qos=qos,
            deadline=deadline,
            malleable=malleable,
            cpu_util=cpu_util,
            ref_speed=ref_speed,
            mpi=mpi,
        )
    )


def mpi_of(
    workload: str,
    *,
    iterations: int | None = None,
    compute: float | None = None,
    message_bytes: int | None = None,
    pattern: str | None = None,
) -> MpiSpec | None:
    """The MPI-like parameters of a submission (None for a sleep job given none).

    Unset ones take :class:`MpiSpec`'s defaults; their bounds are checked by
    :func:`checked`'s round trip, like every other field. Parameters given to a
    sleep job are a mistake, not silently dropped.
    """
    given = {
        "iterations": iterations,
        "compute": compute,
        "message_bytes": message_bytes,
        "pattern": pattern,
    }
    set_ = {k: v for k, v in given.items() if v is not None}
    if workload != "mpi":
        if set_:
            flags = ", ".join("--" + k.replace("_", "-") for k in set_)
            raise UserError(f"{flags}: only for --workload mpi")
        return None
    if compute is not None and not math.isfinite(compute):
        raise UserError(f"--compute must be a finite number of seconds, got {compute!r}")
    spec = MpiSpec(**set_)  # type: ignore[arg-type]
    try:
        decode(
            encode(SubmitJobs(jobs=(JobSpec(id="-mpi-", procs=1, walltime=1, work=1, mpi=spec),)))
        )
    except WireError as exc:
        why = str(exc).removeprefix("invalid message: ").replace("$.jobs[0].", "")
        raise UserError(f"MPI-like parameters: {why}") from exc
    return spec


MAX_MPI_COMPUTE = 3600.0
"""The wire's bound on an MPI-like iteration's compute (``MpiSpec.compute``)."""

MIN_WORK = 1e-3
"""Seconds of work a trace job of run time 0 performs live (the wire wants work > 0)."""


def spec_of(job: Job, *, prefix: str = "", mpi: MpiSpec | None = None) -> JobSpec:
    """A trace job as a live job: its real run time becomes the sleep workload's work.

    The deadline becomes relative to the submission (the wire's convention);
    the id gets ``prefix``, so one trace can be replayed twice on one scheduler.
    With ``mpi`` (``accordion replay --mpi-iterations``), the job runs the
    MPI-like workload instead: ``mpi``'s iterations, message size and pattern,
    and its run time split evenly into the iterations' compute (more
    iterations if one would exceed the bound on ``compute``).
    """
    deadline = None if job.deadline is None else max(job.deadline - job.submit, 1e-3)
    work = job.walltime if job.runtime is None else job.runtime
    mpi_job = None
    if mpi is not None:
        iterations = max(mpi.iterations, math.ceil(max(work, MIN_WORK) / MAX_MPI_COMPUTE))
        mpi_job = MpiSpec(
            iterations=iterations,
            compute=max(work, MIN_WORK) / iterations,
            message_bytes=mpi.message_bytes,
            pattern=mpi.pattern,
        )
    return checked(
        JobSpec(
            id=f"{prefix}{job.id}",
            procs=job.procs,
            walltime=job.walltime,
            # The wire refuses no work at all; a trace's 0-second job runs for MIN_WORK.
            work=max(work, MIN_WORK),
            user=job.user,
            group=job.group,
            qos=job.qos,
            deadline=deadline,
            malleable=job.malleable,
            cpu_util=job.cpu_util,
            ref_speed=job.ref_speed,
            workload="sleep" if mpi_job is None else "mpi",
            mpi=mpi_job,
        )
    )
