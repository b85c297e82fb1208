"""The core's running jobs: by id, and sorted by expected end, with their estimates.

Theory of operation. A running job's expected end comes from the user's wall
time and the shared execution model (``model.execution``) at the job's
allocation: the set keeps how much of the wall time it believes done
(``est_done`` by ``changed``, at ``rate`` since), so a resize moves the
expected end the way the agents' progress will move. A job that outlives its
estimate keeps its ``est_end``; when planners expect it to end is the rule of
``scheduler.planning.overdue``.

Backfilling walks the running jobs by expected end and usually stops after a
few, so the set keeps them sorted (ties in start order) instead of sorting at
every event; :attr:`by_end` is that list, handed to policies as it is.

The set books no CPUs and charges no usage: the core does, around these calls.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence, ValuesView

from model.allocation import Allocation
from model.job import Job
from model.machine import Part
from scheduler.core.snapshot import RunningJob


class RunningSet:
    """Running jobs by id and by expected end (see the module docstring)."""

    __slots__ = ("_by_end", "_by_id", "_ends")

    def __init__(self) -> None:
        self._by_id: dict[str, RunningJob] = {}
        self._by_end: list[RunningJob] = []
        # ``est_end`` of each job of ``_by_end``, same positions: bisection on plain
        # floats runs in C, where a key function would be called per step.
        self._ends: list[float] = []

    @property
    def by_end(self) -> Sequence[RunningJob]:
        """Running jobs by expected end (ties in start order)."""
        return self._by_end

    def get(self, job_id: str) -> RunningJob | None:
        return self._by_id.get(job_id)

    def __getitem__(self, job_id: str) -> RunningJob:
        return self._by_id[job_id]

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._by_id

    def __len__(self) -> int:
        return len(self._by_id)

    def values(self) -> ValuesView[RunningJob]:
        """Running jobs in start order."""
        return self._by_id.values()

    def start(  # noqa: PLR0917 - positional on purpose: it runs once per job of a replay
        self,
        job: Job,
        parts: tuple[Part, ...],
        cpus: int,
        rate: float,
        now: float,
        alloc: Allocation | None = None,
        start: float | None = None,
    ) -> RunningJob:
        """``job`` runs on ``parts`` at ``rate`` since ``start`` (default ``now``, as for
        every start a policy decides; a restored job started before ``now`` has done
        the wall time of its time since)."""
        if start is None:
            start = now
        run = RunningJob(
            job=job,
            parts=parts,
            start=start,
            est_end=start + job.walltime / rate,
            cpus=cpus,
            est_done=0.0 if start == now else min(job.walltime, max(now - start, 0.0) * rate),
            changed=now,
            rate=rate,
            charged_from=start,
            alloc=alloc,
        )
        self._by_id[job.id] = run
        self._list(run)
        return run

    def resize(
        self,
        run: RunningJob,
        parts: tuple[Part, ...],
        cpus: int,
        rate: float,
        now: float,
        *,
        alloc: Allocation | None = None,
    ) -> None:
        """``run`` moves to ``parts`` at ``now``: the wall time done so far is kept and
        the rest goes at the new ``rate`` (the caller has charged the old allocation)."""
        job = run.job
        run.est_done = min(job.walltime, run.est_done + (now - run.changed) * run.rate)
        run.changed = now
        run.rate = rate
        run.parts = parts
        run.cpus = cpus
        run.alloc = alloc
        self._unlist(run)
        run.est_end = now + (job.walltime - run.est_done) / rate
        run.charged_from = now
        self._list(run)

    def move_end(self, run: RunningJob, end: float) -> None:
        """``run`` is now expected to end at ``end`` (a run-time prediction it outlived,
        corrected: ``SchedulerCore``), its place in the order moved with it."""
        self._unlist(run)
        run.est_end = end
        self._list(run)

    def pop(self, job_id: str) -> RunningJob | None:
        """Take the job out of the set; None if it is not running."""
        run = self._by_id.pop(job_id, None)
        if run is not None:
            self._unlist(run)
        return run

    def _list(self, run: RunningJob) -> None:
        # After every job of the same expected end: ties stay in start order.
        at = bisect.bisect_right(self._ends, run.est_end)
        self._ends.insert(at, run.est_end)
        self._by_end.insert(at, run)

    def _unlist(self, run: RunningJob) -> None:
        by_end = self._by_end
        i = bisect.bisect_left(self._ends, run.est_end)
        while by_end[i] is not run:
            i += 1
        del by_end[i]
        del self._ends[i]
