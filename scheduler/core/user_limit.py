"""The per-user CPU limit: a scheduling rule the core applies for every policy.

Theory of operation. Slurm's ``GrpTRES=cpu`` on a user's association (or
``MaxTRESPerUser=cpu`` on a QoS): the CPUs one user's running jobs may hold
together. A job that would take its user past the limit is not refused; it
waits (Slurm's reason ``AssocGrpCpuLimit``) until enough of its user's jobs
have ended. A job that asks for more than the limit on its own could never
start, so it is refused at submission (:func:`too_wide_for_user`, the
``cpu_limit`` code). CPUs are counted as ``scheduler.core.user_load`` counts
them: a running job's processes, shrunk or not.

Where it applies: where the core offers jobs to the policy, not inside each
policy, so every policy (and the twin, which drives the same core) keeps it
alike. Two steps:

1. *Offer* (:meth:`UserCpuLimit.offered`): the snapshot's queue leaves out
   every job whose user's running CPUs plus its own would pass the limit. A
   policy never sees it, so it gets no reservation and blocks nobody (EASY's
   head is the first job that may run).
2. *Apply* (:meth:`UserCpuLimit.split`): one decision may start several jobs of
   one user that fit alone but not together. The core applies them in the
   policy's order while they fit, and defers the rest (they stay queued); the
   first start of each user always fits, since the job was offered. With a
   start deferred the core asks the policy again at once, on the cluster with
   what it just started (``SchedulerCore.schedule``): each round starts at
   least one job, so the rounds end, and the CPUs a deferred start would have
   taken are offered to someone else in the same instant, as Slurm's main loop
   moves on to the next job. :func:`merged` joins the rounds into one answer
   whose jobs each appear once (a job started and then resized in the same
   instant is started at its resized parts).

With no limit nothing of this runs: a replay keeps its schedule, byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence

from model.job import Job
from scheduler.core.answers import RejectCode, Rejected
from scheduler.core.snapshot import Decisions, Resize, Start
from scheduler.core.user_load import UserLoad


def too_wide_for_user(job: Job, limit: int | None) -> Rejected | None:
    """The refusal of a job that asks for more CPUs than one user may run at once."""
    if limit is None or job.procs <= limit:
        return None
    return Rejected(
        job.id,
        RejectCode.CPU_LIMIT,
        f"job needs {job.procs} CPUs, more than one user's running jobs may hold: "
        f"max_user_cpus is {limit}",
    )


class UserCpuLimit:
    """The limit over the core's tallies (see the module docstring)."""

    __slots__ = ("limit", "load")

    def __init__(self, limit: int, load: UserLoad) -> None:
        if limit < 1:
            raise ValueError(f"max_user_cpus must be >= 1, got {limit!r}")
        self.limit = limit
        self.load = load

    def fits(self, job: Job) -> bool:
        """Whether ``job`` may start now without taking its user past the limit."""
        return self.load.cpus.get(job.user, 0) + job.procs <= self.limit

    def offered(self, queue: Sequence[Job], widest: int) -> list[Job] | None:
        """The jobs of ``queue`` that may start now; None when all of them may.

        ``widest``: no queued job asks for more (the queue's own bound), so while
        every user runs at most ``limit - widest`` CPUs nobody is held and the
        queue is not walked.
        """
        cpus = self.load.cpus
        if not cpus or max(cpus.values()) + widest <= self.limit:
            return None
        limit = self.limit
        return [j for j in queue if cpus.get(j.user, 0) + j.procs <= limit]

    def split(self, starts: Sequence[Start]) -> tuple[list[Start], list[Start]]:
        """``(kept, deferred)``: the starts that fit one after another, and the rest."""
        cpus = self.load.cpus
        limit = self.limit
        added: dict[str, int] = {}
        kept: list[Start] = []
        deferred: list[Start] = []
        for start in starts:
            job = start.job
            after = added.get(job.user, 0) + job.procs
            if cpus.get(job.user, 0) + after <= limit:
                added[job.user] = after
                kept.append(start)
            else:
                deferred.append(start)
        return kept, deferred


def merged(first: Decisions, later: Decisions) -> Decisions:
    """Two rounds of one instant as one answer, each job once (module docstring)."""
    starts = {s.job.id: s for s in first.starts}
    resizes = {r.job.id: r for r in first.resizes}
    for resize in later.resizes:
        job_id = resize.job.id
        if job_id in starts:
            starts[job_id] = Start(starts[job_id].job, resize.parts)
        else:
            resizes[job_id] = Resize(resize.job, resize.parts)
    for start in later.starts:
        starts[start.job.id] = start
    counters = dict(first.counters)
    for key, value in later.counters.items():
        counters[key] = counters.get(key, 0) + value
    return Decisions(
        starts=list(starts.values()),
        resizes=list(resizes.values()),
        reservations=later.reservations,
        counters=counters,
    )
