"""The scheduler core when machines are lost, and when it is restored from a journal.

Machines come and go (live runtime). ``machine_left`` applies the rule for the
jobs of a lost machine, stated once here so the actor, the twin and the tests
share it: every job with a part on the machine leaves its CPUs; it is
*requeued* (same id, same submit time, back at its place in arrival order; its
CPUs on the other machines are freed, the caller cancels those parts) unless it
was already requeued ``max_requeues`` times (default 2), in which case it
*fails*. A requeue of a start that never ran (its agent fenced it off before the
fork) is not charged: it numbers the next attempt but never fails the job. The
journal keeps only the requeue count, so a restarted scheduler charges them all.

Restart. A restarted live scheduler rebuilds the core from its journal with
the ``restore_*`` methods: queued jobs in submission order, finished ones for
idempotency (and the usage ledger), and running ones as *pending*: known and
``RUNNING``, but holding no CPUs until the caller has heard from their agents.
``restore_running`` then puts a pending job on its CPUs; ``job_lost``
applies the lost-machine rule to it.
"""

from __future__ import annotations

import bisect
from typing import Any

from model.job import Job
from model.machine import Part, parts_cpus
from scheduler.core.answers import Left, PendingJob
from scheduler.core.booking import book, release
from scheduler.core.job_lifecycle import JobState, transition
from scheduler.core.snapshot import RunningJob
from scheduler.core.state import CoreState


class CoreRecovery(CoreState):
    """Lost machines and journal restore, over the core's state (module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: Requeues not charged to a job's budget (a start fenced before it ran): they
        #: still number its attempts (``requeues``), but not against ``max_requeues``.
        self._uncharged: dict[str, int] = {}

    def machine_left(self, machine_id: str, now: float) -> list[Left]:
        """A machine is gone: apply the lost-machine rule (module docstring) to its jobs.

        Returns one :class:`Left` per job that had a part there, in start order,
        with ``state`` ``QUEUED`` (requeued) or ``FAILED``; the caller cancels
        the jobs' parts on the other machines.
        """
        if machine_id not in self._speeds:
            raise KeyError(f"machine {machine_id!r} is not known")
        hit = [r for r in self._running.values() if any(p.machine == machine_id for p in r.parts)]
        lost = [self._lose_running(run, now) for run in hit]
        lost += [
            self.job_lost(jid, now)
            for jid, p in list(self._pending.items())
            if any(part.machine == machine_id for part in p.parts)
        ]
        self._machines = [m for m in self._machines if m.id != machine_id]
        del self._speeds[machine_id]
        self._allocs.clear()
        # Every job with a part here has left, so all of the machine's CPUs are free.
        self._total -= self._free.pop(machine_id)
        # A promise on a machine that is gone cannot be kept; policies plan afresh.
        self._reservations = {
            jid: r
            for jid, r in self._reservations.items()
            if all(p.machine != machine_id for p in r.parts)
        }
        return lost

    def restore_queued(self, job: Job, *, requeues: int = 0, uncharged: int = 0) -> None:
        """A journalled queued job, restored in submission order (no width check:
        it was accepted before, and its machines may not have re-registered yet)."""
        self._check_new(job)
        self._requeues[job.id] = requeues
        if uncharged:
            self._uncharged[job.id] = uncharged
        self._enqueue(job)

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
        if state not in (JobState.FINISHED, JobState.FAILED, JobState.CANCELLED):
            raise ValueError(f"restore_final takes a final state, not {state}")
        self._check_new(job)
        self._known[job.id] = job
        self._state[job.id] = state
        self._order[job.id] = len(self._order)
        if start is not None and end is not None and parts:
            self.usage.charge(
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
    ) -> None:
        """A journalled running job: known and ``RUNNING``, holding no CPUs until
        :meth:`restore_running` or :meth:`job_lost` settles it."""
        if not parts:
            raise ValueError(f"job {job.id!r}: a running job has parts")
        self._check_new(job)
        self._known[job.id] = job
        self._state[job.id] = JobState.RUNNING
        self._order[job.id] = len(self._order)
        self._requeues[job.id] = requeues
        if uncharged:
            self._uncharged[job.id] = uncharged
        self._pending[job.id] = PendingJob(job, parts, start)

    def restore_running(self, job_id: str, now: float) -> RunningJob:
        """Put a pending job back on its CPUs; its machines must be known, with room.

        Its estimate is taken as if it had run on these parts since its start
        (the journal keeps the last allocation, not the history of resizes).
        """
        pending = self._pending[job_id]
        job, parts = pending.job, pending.parts
        # Checked before taking anything: book() takes part by part, and a caller
        # that is refused here carries on with the core as it was.
        short = [p for p in parts if p.cpus > self._free.get(p.machine, 0)]
        if short:
            have = {p.machine: self._free.get(p.machine) for p in short}
            raise ValueError(f"cannot restore job {job_id!r} on {parts}: free CPUs are {have}")
        cpus = book(self._free, job, parts, self.cpus_needed(job))
        del self._pending[job_id]
        alloc = self._allocs.of(parts)
        run = self._running.start(
            job,
            parts,
            cpus,
            rate=self._allocs.rate(alloc, job),
            start=pending.start,
            now=now,
            alloc=alloc,
        )
        self._started(run)
        return run

    def job_lost(self, job_id: str, now: float, *, charged: bool = True) -> Left:
        """One running or pending job lost a part (its agent no longer runs it, or a
        restored job was not confirmed): the lost-machine rule, for this job only.

        ``charged=False``: the part never ran (its start was fenced by its agent), so
        the requeue does not count against ``max_requeues`` (it never fails the job).
        """
        run = self._running.get(job_id)
        if run is not None:
            return self._lose_running(run, now, charged=charged)
        pending = self._pending.pop(job_id, None)
        if pending is None:
            raise KeyError(f"job {job_id!r} is not running")
        return self._requeue_or_fail(
            pending.job, pending.start, pending.parts, now, charged=charged
        )

    def charged_requeues(self, job_id: str) -> int:
        """Requeues of ``job_id`` that count against ``max_requeues``."""
        return self._requeues.get(job_id, 0) - self._uncharged.get(job_id, 0)

    def _lose_running(self, run: RunningJob, now: float, *, charged: bool = True) -> Left:
        self._running.pop(run.job.id)
        if self._index.awake:
            self._index.remove_running(run)
        release(self._free, run.parts)
        self._charge(run, now)
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
        done = self._requeues.get(job.id, 0)
        if charged and self.charged_requeues(job.id) >= self.max_requeues:
            self._state[job.id] = transition(self._state[job.id], JobState.FAILED)
            return Left(job, start, now, parts, JobState.FAILED)
        # Every requeue numbers the next attempt (fencing), charged or not.
        self._requeues[job.id] = done + 1
        if not charged:
            self._uncharged[job.id] = self._uncharged.get(job.id, 0) + 1
        self._state[job.id] = transition(self._state[job.id], JobState.QUEUED)
        # A restored job was never queued here: it may be the widest one yet.
        self._widest = max(self._widest, self.cpus_needed(job))
        order = self._order
        bisect.insort_right(self._queue, job, key=lambda j: order[j.id])
        if self._index.awake:
            self._index.add(job)
        return Left(job, start, now, parts, JobState.QUEUED)

    def _end_pending(self, job_id: str, now: float, state: JobState) -> Left:
        pending = self._pending.pop(job_id)
        self._state[job_id] = transition(self._state[job_id], state)
        job = pending.job
        self.usage.charge(
            user=job.user,
            group=job.group,
            start=pending.start,
            end=now,
            cpus=parts_cpus(pending.parts),
        )
        return Left(job, pending.start, now, pending.parts, state)
