"""The scheduler core: a sans-I/O state machine, events in, decisions out.

Theory of operation. The core owns the queue (arrival order), the running
jobs with the scheduler's estimate of their end, the free CPUs of every
machine, the usage ledger and the reservations a policy last promised. Its
callers (the twin's event engine, the live scheduler actor) feed it events
(``submit``, ``finished``, ``cancel``) stamped with ``now`` and call
:meth:`SchedulerCore.schedule` once after every batch of simultaneous events.
``schedule`` hands the policy a read-only :class:`~scheduler.core.snapshot.Snapshot`,
checks every decision against the state (a policy that double-books a CPU or
starts an unknown job is a bug and raises :class:`PolicyError`), applies the
decisions and returns them so the caller can turn them into commands.

The core never reads a clock: time is the ``now`` it is given.

A queued job wider than the cluster that is left (it was accepted when the
cluster was bigger) stays queued but is hidden from the policy until enough
machines are back, so it never blocks the jobs behind it.

The class is built in three layers, one responsibility each:
``scheduler.core.state`` holds the state and what every handler shares (the
queue, the running set, the free CPUs, the ledger, and their bookkeeping);
``scheduler.core.recovery`` adds what happens when a machine is lost and how
a restarted scheduler restores the core from its journal; this module adds
the events of a normal life (submit, finish, cancel) and the scheduling step.

Estimates. The running jobs, their expected ends and how a resize moves them
are ``scheduler.core.running_set``'s; what the core answers to events (``Accepted``,
``Rejected``, ``Left``) is in ``scheduler.core.answers``.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from model.job import Job
from model.machine import Part
from scheduler.core.answers import (
    Accepted,
    Left,
    PendingJob,
    PolicyError,
    RejectCode,
    Rejected,
    too_wide,
)
from scheduler.core.booking import book, release
from scheduler.core.job_lifecycle import JobState, transition
from scheduler.core.queue_index import QueueIndex
from scheduler.core.recovery import CoreRecovery
from scheduler.core.snapshot import Decisions, RunningJob, Snapshot
from scheduler.core.snapshot_slots import make_snapshot, refresh_snapshot

__all__ = [
    "Accepted",
    "Left",
    "PendingJob",
    "PolicyError",
    "RejectCode",
    "Rejected",
    "SchedulerCore",
]


class SchedulerCore(CoreRecovery):
    """Queue, running set and cluster state, driven by events; see the module docstring."""

    # -- events -----------------------------------------------------------

    def submit(self, job: Job, *, capacity: int | None = None) -> Accepted | Rejected:
        """Queue ``job``; idempotent by job id (the same job twice is one job).

        A job wider than ``capacity`` CPUs (default: the machines the core holds
        now) is rejected (:func:`~scheduler.core.answers.too_wide`). The live
        scheduler passes the cluster as configured, so a job wider than the CPUs
        online right now waits in the queue (the snapshot hides it from the
        policy until it fits).
        """
        seen = self._known.get(job.id)
        if seen is not None:
            if seen == job:
                return Accepted(job.id, duplicate=True)
            why = f"job id {job.id!r} is already used by a different job"
            return Rejected(job.id, RejectCode.ID_REUSED, why)
        wide = too_wide(job, self.cpus_needed(job), self._total if capacity is None else capacity)
        if wide is not None:
            return wide
        self._enqueue(job)
        return Accepted(job.id)

    def finished(self, job_id: str, now: float, *, failed: bool = False) -> Left:
        """A running job ended (its agent reported it, or the twin's model did)."""
        state = JobState.FAILED if failed else JobState.FINISHED
        run = self._running.pop(job_id)
        if run is None:
            if job_id in self._pending:
                return self._end_pending(job_id, now, state)
            raise KeyError(f"job {job_id!r} is not running")
        self._leave(run, now, state)
        return Left(run.job, run.start, now, run.parts, state)

    def ended(self, job_id: str, now: float) -> None:
        """:meth:`finished` for a caller that does not read the answer: the twin's
        engine, which has the outcome from its modelled agents (one object less
        per job of a replay). The same state change, for running jobs only."""
        run = self._running.pop(job_id)
        if run is None:
            raise KeyError(f"job {job_id!r} is not running")
        self._leave(run, now, JobState.FINISHED)

    def _leave(self, run: RunningJob, now: float, state: JobState) -> None:
        """``run``, already out of the running set, leaves its CPUs for ``state``."""
        if self._index.awake:
            self._index.remove_running(run)
        job_id = run.job.id
        self._state[job_id] = transition(self._state[job_id], state)
        release(self._free, run.parts)
        self._charge(run, now)

    def cancel(self, job_id: str, now: float) -> Left | Job | None:
        """Cancel a queued or running job; returns what was cancelled, None if nothing was."""
        state = self._state.get(job_id)
        if state is JobState.QUEUED:
            self._state[job_id] = transition(state, JobState.CANCELLED)
            self._queue = [j for j in self._queue if j.id != job_id]
            if self._index.awake:
                self._index.remove(self._known[job_id])
            self._reservations.pop(job_id, None)
            return self._known[job_id]
        if state is JobState.RUNNING and job_id in self._pending:
            return self._end_pending(job_id, now, JobState.CANCELLED)
        if state is JobState.RUNNING:
            run = self._running.pop(job_id)
            assert run is not None  # RUNNING and not pending
            self._leave(run, now, JobState.CANCELLED)
            return Left(run.job, run.start, now, run.parts, JobState.CANCELLED)
        return None

    # -- scheduling -------------------------------------------------------

    def snapshot(self, now: float) -> Snapshot:
        """What the policy sees at ``now``: valid until the next call, since the core
        keeps one snapshot and refreshes it (``scheduler.core.snapshot_slots``)."""
        queue: Sequence[Job] = self._queue
        index: QueueIndex | None = self._index
        if self._widest > self._total:
            # Jobs wider than what is left of the cluster wait hidden (module docstring).
            queue = [j for j in self._queue if self.cpus_needed(j) <= self._total]
            if len(queue) < len(self._queue):
                index = None  # it holds the hidden jobs too
        snap = self._snap
        # The other fields are the core's own containers, the same objects from one
        # event to the next; the machines list is replaced when a machine comes or goes.
        if snap is not None and snap.machines is self._machines and snap.total_cpus == self._total:
            refresh_snapshot(snap, now, queue, self._reservations, index)
            return snap
        snap = self._snap = make_snapshot(
            now,
            self._machines,
            self._free,
            self._running.by_end,
            queue,
            self.usage,
            self._total,
            self._speeds,
            self._reservations,
            index,
        )
        return snap

    def schedule(self, now: float) -> Decisions:
        """Run the policy once and apply its decisions; returns them for the caller to act on."""
        if not self._queue and self._idle_on_empty:
            # The policy promised to decide nothing now; what it would have returned
            # (no reservation) replaces the promises held, as below.
            if self._reservations:
                self._reservations = {}
            return Decisions()
        decisions = self.policy.decide(self.snapshot(now))
        for resize in decisions.resizes:
            self._apply_resize(resize.job, resize.parts, now)
        if decisions.starts:
            for start in decisions.starts:
                self._apply_start(start.job, start.parts, now)
            jobs = [start.job for start in decisions.starts]
            self._unqueue(jobs)
            if self._index.awake:
                for job in jobs:
                    self._index.remove(job)
        reservations = decisions.reservations
        if reservations or self._reservations:
            held = self._reservations
            # The usual event under EASY: the one promise kept, the very same object.
            if not (
                len(reservations) == 1
                and len(held) == 1
                and held.get(reservations[0].job.id) is reservations[0]
            ):
                self._reservations = {r.job.id: r for r in reservations}
        if decisions.counters:
            for key, value in decisions.counters.items():
                self.counters[key] = self.counters.get(key, 0) + value
        return decisions

    # -- internals --------------------------------------------------------

    def _unqueue(self, started: Sequence[Job]) -> None:
        """Take the started jobs out of the queue, each found by bisection: the
        queue is always in arrival order, so this costs a few list moves, not a
        rebuilt queue at every event."""
        queue = self._queue
        order = self._order
        for job in started:
            if queue[0] is job:
                # The head (most starts under an arrival-order policy): no search.
                del queue[0]
                continue
            at = bisect.bisect_left(queue, order[job.id], key=lambda j: order[j.id])
            if queue[at].id != job.id:
                raise RuntimeError(f"queue out of arrival order at job {job.id!r}")
            del queue[at]

    def _apply_start(self, job: Job, parts: tuple[Part, ...], now: float) -> None:
        # A job started twice in one decision is RUNNING at its second start.
        states = self._state
        if states.get(job.id) is not JobState.QUEUED:
            raise PolicyError(f"policy started job {job.id!r}, which is not queued")
        cpus = book(self._free, job, parts, job.min_cpus if self._folds else job.procs)
        states[job.id] = transition(JobState.QUEUED, JobState.RUNNING)
        allocs = self._allocs
        alloc = allocs.of(parts)
        rate = allocs.rate(alloc, job)
        self._started(self._running.start(job, parts, cpus, rate, now, alloc))

    def _apply_resize(self, job: Job, parts: tuple[Part, ...], now: float) -> None:
        run = self._running.get(job.id)
        if run is None:
            raise PolicyError(f"policy resized job {job.id!r}, which is not running")
        if not (job.malleable and self._folds):
            raise PolicyError(f"policy resized rigid job {job.id!r}")
        release(self._free, run.parts)
        try:
            cpus = book(self._free, job, parts, self.cpus_needed(job))
        except PolicyError:
            for part in run.parts:
                self._free[part.machine] -= part.cpus
            raise
        # Charge the old allocation before it changes, so usage follows the CPUs held.
        self._charge(run, now)
        alloc = self._allocs.of(parts)
        self._running.resize(run, parts, cpus, self._allocs.rate(alloc, job), now, alloc=alloc)
