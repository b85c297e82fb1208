"""A schedule back to SWF records: the simulator's output in the archive's format.

The inverse of ``workload.swf_rules`` as far as a schedule can say: each
finished job becomes one record whose wait, run time and allocated processors
are what the schedule gave it; ``workload.swf_writer`` writes the records.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from model import Job
from workload.swf import MISSING, SwfRecord

__all__ = ["ScheduleRow", "records_from_schedule"]


ScheduleRow = tuple[Job, float, float, int, int]
"""``(job, start, end, cpus, status)`` of one finished job, as the simulator reports it."""


def _id_back(name: str, prefix: str) -> int:
    digits = name[len(prefix) :]
    if name.startswith(prefix) and digits.isascii() and digits.isdecimal():
        return int(digits)
    return MISSING


def records_from_schedule(rows: Iterable[ScheduleRow]) -> Iterator[SwfRecord]:
    """SWF records of a schedule, one per row, in the order given.

    Per row ``(job, start, end, cpus, status)``: submit = ``job.submit``, wait
    = start - submit, run time = end - start, allocated processors = ``cpus``,
    requested processors = ``job.procs``, requested time = ``job.walltime``,
    status as given (1 completed, 0 failed, 5 cancelled), queue = ``job.qos``,
    user and group ids read back from ``u<n>``/``g<n>`` names (else -1). The
    job number is the job id when that is a decimal number, else the row's
    position (1-based). Average CPU time, memory, executable, partition,
    preceding job and think time are written as missing (-1). Raises
    ``ValueError`` naming the job when start precedes submit or end precedes
    start.
    """
    for position, (job, start, end, cpus, status) in enumerate(rows, start=1):
        if not (math.isfinite(start) and math.isfinite(end)):
            raise ValueError(f"job {job.id!r}: start {start!r} and end {end!r} must be finite")
        if start < job.submit:
            raise ValueError(f"job {job.id!r}: start {start!r} is before submit {job.submit!r}")
        if end < start:
            raise ValueError(f"job {job.id!r}: end {end!r} is before start {start!r}")
        number = int(job.id) if job.id.isascii() and job.id.isdecimal() else position
        yield SwfRecord(
            job_number=number,
            submit_time=job.submit,
            wait_time=start - job.submit,
            run_time=end - start,
            allocated_procs=cpus,
            avg_cpu_time=MISSING,
            used_memory=MISSING,
            requested_procs=job.procs,
            requested_time=job.walltime,
            requested_memory=MISSING,
            status=status,
            user_id=_id_back(job.user, "u"),
            group_id=_id_back(job.group, "g"),
            executable=MISSING,
            queue=job.qos,
            partition=MISSING,
            preceding_job=MISSING,
            think_time=MISSING,
        )
