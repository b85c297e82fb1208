"""The scheduler core when machines are lost, and when it is restored from a journal.

Machines come and go (live runtime). :meth:`Recovery.machine_left` applies the
rule for the jobs of a lost machine, stated once here so the actor, the twin
and the tests share it: every job with a part on the machine leaves its CPUs;
it is *requeued* (same id, same submit time, back at its place in arrival
order; its CPUs on the other machines are freed, the caller cancels those
parts) unless it was already requeued ``max_requeues`` times (default 2), in
which case it *fails*. A requeue of a start that never ran (its agent fenced
it off before the fork), or of a job whose machine its operator stopped, is
not charged: it numbers the next attempt but never fails the job. The journal
keeps how many were not charged, so a restarted scheduler charges the same
ones. What each agent or part event does to a job in
the live runtime (which of these it calls) is ``scheduler.live.coupling``'s
table.

Restart. A restarted live scheduler rebuilds the core from its journal with
the ``restore_*`` methods: first the usage of the jobs the journal no longer
holds (moved to its archive: :meth:`Recovery.restore_usage`), then queued jobs
in submission order, finished ones for idempotency (and the usage ledger),
and running ones as *pending*: known and ``RUNNING``, but holding no CPUs
until the caller has heard from their agents.
:meth:`Recovery.restore_running` then puts a pending job on its CPUs;
:meth:`Recovery.job_lost` applies the lost-machine rule to it.

The core (``scheduler.core.core``) owns one :class:`Recovery` over its own
job book, queue and cluster, and answers these calls through it.
"""

from __future__ import annotations

from collections.abc import Iterable

from model.job import Job
from model.machine import Part, parts_cpus
from scheduler.core.answers import Left, PendingJob
from scheduler.core.cluster import Cluster
from scheduler.core.job_book import JobBook
from scheduler.core.job_lifecycle import JobState
from scheduler.core.job_queue import JobQueue
from scheduler.core.snapshot import RunningJob

_FINAL = (JobState.FINISHED, JobState.FAILED, JobState.CANCELLED)


class Recovery:
    """Lost machines and journal restore over the core's parts (module docstring)."""

    __slots__ = ("_book", "_cluster", "_folds", "_queue", "max_requeues")

    def __init__(
        self,
        *,
        book: JobBook,
        queue: JobQueue,
        cluster: Cluster,
        max_requeues: int,
        folds: bool,
    ) -> None:
        if max_requeues < 0:
            raise ValueError(f"max_requeues must be >= 0, got {max_requeues!r}")
        self._book = book
        self._queue = queue
        self._cluster = cluster
        self.max_requeues = max_requeues
        self._folds = folds

    def machine_left(self, machine_id: str, now: float, *, charged: bool = True) -> list[Left]:
        """A machine is gone: apply the lost-machine rule (module docstring) to its jobs.

        Returns one :class:`Left` per job that had a part there, in start order
        (then the pending ones), with ``state`` ``QUEUED`` (requeued) or
        ``FAILED``; the caller cancels the jobs' parts on the other machines.
        ``charged=False``: its operator stopped it, no requeue counts (none fails).
        """
        cluster = self._cluster
        if machine_id not in cluster.speeds:
            raise KeyError(f"machine {machine_id!r} is not known")
        hit = [r for r in cluster.running.values() if any(p.machine == machine_id for p in r.parts)]
        lost = [self._lose_running(run, now, charged=charged) for run in hit]
        lost += [
            self.job_lost(jid, now, charged=charged)
            for jid, p in list(self._book.pending.items())
            if any(part.machine == machine_id for part in p.parts)
        ]
        cluster.leave(machine_id)
        return lost

    def restore_queued(
        self, job: Job, *, requeues: int = 0, uncharged: int = 0, planned: Job | None = None
    ) -> None:
        """A journalled queued job, restored in submission order (no width check:
        it was accepted before, and its machines may not have re-registered yet).
        ``planned``: the job as the policy plans it, when that differs
        (``scheduler.core.run_history``)."""
        self._book.enter(job, JobState.QUEUED, requeues=requeues, uncharged=uncharged)
        self._queue.add(job if planned is None else planned)

    def restore_usage(
        self, sums: Iterable[tuple[str, str, int, float]], period: float | None
    ) -> None:
        """Charge the usage the journal kept for jobs it no longer holds: CPU-seconds per
        ``(kind, name, period index)``, split by periods of ``period`` seconds (None:
        none kept), which must be the ledger's. Called before the journal's own jobs
        are restored, so their charges add to these sums."""
        ledger = self._cluster.usage
        if period is not None and period != ledger.period:
            raise ValueError(
                f"the journal's archived usage is split by periods of {period} s, "
                f"the usage ledger's are {ledger.period} s"
            )
        for kind, name, index, cpu_seconds in sums:
            ledger.add_period(kind, name, index, cpu_seconds)

    def restore_final(
        self,
        job: Job,
        state: JobState,
        *,
        start: float | None = None,
        end: float | None = None,
        parts: tuple[Part, ...] = (),
    ) -> None:
        """A journalled job that is over: known again (so its id stays taken) and,
        when it ran, charged to the usage ledger with its last allocation."""
        if state not in _FINAL:
            raise ValueError(f"restore_final takes a final state, not {state}")
        self._book.enter(job, state)
        self._queue.number(job.id)
        if start is not None and end is not None and parts:
            self._cluster.usage.charge(
                user=job.user, group=job.group, start=start, end=end, cpus=parts_cpus(parts)
            )

    def restore_pending(
        self,
        job: Job,
        parts: tuple[Part, ...],
        start: float,
        *,
        requeues: int = 0,
        uncharged: int = 0,
        planned: Job | None = None,
    ) -> None:
        """A journalled running job: known and ``RUNNING``, holding no CPUs until
        :meth:`restore_running` or :meth:`job_lost` settles it. ``planned`` as in
        :meth:`restore_queued`."""
        if not parts:
            raise ValueError(f"job {job.id!r}: a running job has parts")
        book = self._book
        book.enter(job, JobState.RUNNING, requeues=requeues, uncharged=uncharged)
        self._queue.number(job.id)
        book.pending[job.id] = PendingJob(job if planned is None else planned, parts, start)

    def restore_running(self, job_id: str, now: float) -> RunningJob:
        """Put a pending job back on its CPUs; its machines must be known, with room.

        Its estimate is taken as if it had run on these parts since its start
        (the journal keeps the last allocation, not the history of resizes).
        """
        pending = self._book.pending[job_id]
        job, parts = pending.job, pending.parts
        cluster = self._cluster
        # Checked before taking anything: booking takes part by part, and a caller
        # that is refused here carries on with the core as it was.
        free = cluster.free
        short = [p for p in parts if p.cpus > free.get(p.machine, 0)]
        if short:
            have = {p.machine: free.get(p.machine) for p in short}
            raise ValueError(f"cannot restore job {job_id!r} on {parts}: free CPUs are {have}")
        least = job.min_cpus if self._folds else job.procs
        run = cluster.hold(job, parts, least, now, pending.start)
        del self._book.pending[job_id]
        return run

    def job_lost(self, job_id: str, now: float, *, charged: bool = True) -> Left:
        """One running or pending job lost a part (its agent no longer runs it, or a
        restored job was not confirmed): the lost-machine rule, for this job only.

        ``charged=False``: the part never ran (its start was fenced by its agent), so
        the requeue does not count against ``max_requeues`` (it never fails the job).
        """
        run = self._cluster.running.get(job_id)
        if run is not None:
            return self._lose_running(run, now, charged=charged)
        pending = self._book.pending.pop(job_id, None)
        if pending is None:
            raise KeyError(f"job {job_id!r} is not running")
        return self._requeue_or_fail(
            pending.job, pending.start, pending.parts, now, charged=charged
        )

    def end_pending(self, job_id: str, now: float, state: JobState) -> Left:
        """A pending job ended (finished, failed or cancelled) before it was confirmed:
        charged for its journalled parts since its start."""
        pending = self._book.pending.pop(job_id)
        self._book.move(job_id, state)
        job = pending.job
        self._cluster.usage.charge(
            user=job.user,
            group=job.group,
            start=pending.start,
            end=now,
            cpus=parts_cpus(pending.parts),
        )
        return Left(job, pending.start, now, pending.parts, state)

    def _lose_running(self, run: RunningJob, now: float, *, charged: bool = True) -> Left:
        cluster = self._cluster
        cluster.running.pop(run.job.id)
        cluster.release(run, now)
        return self._requeue_or_fail(run.job, run.start, run.parts, now, charged=charged)

    def _requeue_or_fail(
        self,
        job: Job,
        start: float,
        parts: tuple[Part, ...],
        now: float,
        *,
        charged: bool = True,
    ) -> Left:
        """The lost-machine rule for one job that already left its CPUs."""
        book = self._book
        if charged and book.charged_requeues(job.id) >= self.max_requeues:
            book.move(job.id, JobState.FAILED)
            return Left(job, start, now, parts, JobState.FAILED)
        book.requeued(job.id, charged=charged)
        book.move(job.id, JobState.QUEUED)
        self._queue.put_back(job)
        return Left(job, start, now, parts, JobState.QUEUED)
