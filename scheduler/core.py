"""The scheduler core: a sans-I/O state machine, events in, decisions out.

Theory of operation. The core owns the queue (arrival order), the running
jobs with the scheduler's estimate of their end, the free CPUs of every
machine, the usage ledger and the reservations a policy last promised. Its
callers (the twin's event engine, the live scheduler actor) feed it events
(``submit``, ``finished``, ``cancel``) stamped with ``now`` and call
:meth:`SchedulerCore.schedule` once after every batch of simultaneous events.
``schedule`` hands the policy a read-only :class:`~scheduler.snapshot.Snapshot`,
checks every decision against the state (a policy that double-books a CPU or
starts an unknown job is a bug and raises :class:`PolicyError`), applies the
decisions and returns them so the caller can turn them into commands.

The core never reads a clock: time is the ``now`` it is given.

Machines come and go (live runtime). ``machine_left`` applies the rule for the
jobs of a lost machine, stated once here so the actor, the twin and the tests
share it: every job with a part on the machine leaves its CPUs; it is
*requeued* (same id, same submit time, back at its place in arrival order; its
CPUs on the other machines are freed, the caller cancels those parts) unless it
was already requeued ``max_requeues`` times (default 2), in which case it
*fails*. A queued job wider than the cluster that is left (it was accepted
when the cluster was bigger) stays queued but is hidden from the policy until
enough machines are back, so it never blocks the jobs behind it.

Restart. A restarted live scheduler rebuilds the core from its journal with
the ``restore_*`` methods: queued jobs in submission order, finished ones for
idempotency (and the usage ledger), and running ones as *pending*: known and
``RUNNING``, but holding no CPUs until the caller has heard from their agents.
``restore_running`` then puts a pending job on its CPUs; ``job_lost``
applies the lost-machine rule to it.

Estimates. The running jobs, their expected ends and how a resize moves them
are ``scheduler.running_set``'s; what the core answers to events (``Accepted``,
``Rejected``, ``Left``) is in ``scheduler.answers``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence

from model.allocation import AllocationMemo
from model.execution import DEFAULT_MODEL, ExecutionModel
from model.job import Job
from model.machine import Machine, Part, parts_cpus
from scheduler.answers import Accepted, Left, PendingJob, PolicyError, Rejected
from scheduler.booking import book, release
from scheduler.lifecycle import JobState, transition
from scheduler.placement import sort_machines
from scheduler.queue_index import QueueIndex
from scheduler.running_set import RunningSet
from scheduler.snapshot import Decisions, Policy, Reservation, RunningJob, Snapshot
from scheduler.snapshot_slots import make_snapshot
from scheduler.usage import UsageLedger

__all__ = ["Accepted", "Left", "PendingJob", "PolicyError", "Rejected", "SchedulerCore"]


class SchedulerCore:
    """Queue, running set and cluster state, driven by events; see the module docstring."""

    def __init__(
        self,
        *,
        policy: Policy,
        machines: Iterable[Machine],
        execution: ExecutionModel = DEFAULT_MODEL,
        usage_period: float = 86400.0,
        max_requeues: int = 2,
    ) -> None:
        if max_requeues < 0:
            raise ValueError(f"max_requeues must be >= 0, got {max_requeues!r}")
        self.policy = policy
        #: Jobs are malleable by default, but only a policy that says it folds them
        #: (``folds = True``, FCFS-malleable) may run one on fewer CPUs than processes.
        self._folds = bool(getattr(policy, "folds", False))
        self.execution = execution
        self.max_requeues = max_requeues
        self._machines: list[Machine] = []
        self._speeds: dict[str, float] = {}
        self._free: dict[str, int] = {}
        self._total = 0
        # Allocations and rates, remembered while the machines stay the same.
        self._allocs = AllocationMemo(self._speeds, execution)
        for m in machines:
            self.machine_joined(m)
        self._queue: list[Job] = []
        self._running = RunningSet()
        self._known: dict[str, Job] = {}
        self._state: dict[str, JobState] = {}
        self._reservations: dict[str, Reservation] = {}
        self.usage = UsageLedger(usage_period)
        self.counters: dict[str, int] = {}
        # Arrival order of every job, so a requeued job goes back to its place.
        self._order: dict[str, int] = {}
        # The queue per user and per group, for priority sources that rank names;
        # dormant (no upkeep) until one first reads it.
        self._index = QueueIndex(self._order, source=self._index_source)
        self._requeues: dict[str, int] = {}
        # The most CPUs any queued job ever needed: while the cluster has at least
        # that many, no queued job can be too wide and snapshot() filters nothing.
        self._widest = 0
        # Restored running jobs not yet confirmed by their agents: (job, parts, start).
        self._pending: dict[str, PendingJob] = {}

    # -- state, read-only -------------------------------------------------

    @property
    def machines(self) -> Sequence[Machine]:
        return self._machines

    @property
    def total_cpus(self) -> int:
        return self._total

    @property
    def queue(self) -> Sequence[Job]:
        return self._queue

    @property
    def running(self) -> Sequence[RunningJob]:
        """Running jobs by expected end (ties by start order)."""
        return self._running.by_end

    @property
    def reservations(self) -> Sequence[Reservation]:
        return list(self._reservations.values())

    def free(self, machine_id: str) -> int:
        return self._free[machine_id]

    def state_of(self, job_id: str) -> JobState | None:
        return self._state.get(job_id)

    def job(self, job_id: str) -> Job | None:
        """The job known by ``job_id`` (in any state), if any."""
        return self._known.get(job_id)

    def requeues(self, job_id: str) -> int:
        """How many times the job was requeued after losing a machine."""
        return self._requeues.get(job_id, 0)

    @property
    def speeds(self) -> Mapping[str, float]:
        return self._speeds

    @property
    def pending(self) -> Mapping[str, PendingJob]:
        """Restored running jobs awaiting their agents' confirmation, by id."""
        return self._pending

    def running_job(self, job_id: str) -> RunningJob | None:
        """The running job ``job_id`` (not a pending one), if any."""
        return self._running.get(job_id)

    # -- events -----------------------------------------------------------

    def machine_joined(self, machine: Machine) -> None:
        """A machine registered (or the twin's cluster is being built)."""
        if machine.id in self._speeds:
            raise ValueError(f"machine {machine.id!r} is already known")
        self._machines = sort_machines([*self._machines, machine])
        self._speeds[machine.id] = machine.speed
        self._free[machine.id] = machine.cpus
        self._total += machine.cpus
        self._allocs.clear()

    def submit(self, job: Job, *, capacity: int | None = None) -> Accepted | Rejected:
        """Queue ``job``; idempotent by job id (the same job twice is one job).

        A job wider than ``capacity`` CPUs (default: the machines the core holds
        now) is rejected. The live scheduler passes the cluster as configured, so
        a job wider than the CPUs online right now waits in the queue (the
        snapshot hides it from the policy until it fits).
        """
        seen = self._known.get(job.id)
        if seen is not None:
            if seen == job:
                return Accepted(job.id, duplicate=True)
            return Rejected(job.id, f"job id {job.id!r} is already used by a different job")
        limit = self._total if capacity is None else capacity
        if self.cpus_needed(job) > limit:
            return Rejected(
                job.id,
                f"job needs {self.cpus_needed(job)} CPUs for its {job.procs} processes, "
                f"the cluster has {limit}",
            )
        self._enqueue(job)
        return Accepted(job.id)

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

    def finished(self, job_id: str, now: float, *, failed: bool = False) -> Left:
        """A running job ended (its agent reported it, or the twin's model did)."""
        run = self._running.pop(job_id)
        if run is None:
            if job_id in self._pending:
                return self._end_pending(
                    job_id, now, JobState.FAILED if failed else JobState.FINISHED
                )
            raise KeyError(f"job {job_id!r} is not running")
        if self._index.awake:
            self._index.remove_running(run)
        state = JobState.FAILED if failed else JobState.FINISHED
        self._state[job_id] = transition(self._state[job_id], state)
        release(self._free, run.parts)
        self._charge(run, now)
        return Left(run.job, run.start, now, run.parts, state)

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
            if self._index.awake:
                self._index.remove_running(run)
            self._state[job_id] = transition(state, JobState.CANCELLED)
            release(self._free, run.parts)
            self._charge(run, now)
            return Left(run.job, run.start, now, run.parts, JobState.CANCELLED)
        return None

    # -- restart ----------------------------------------------------------

    def restore_queued(self, job: Job, *, requeues: int = 0) -> None:
        """A journalled queued job, restored in submission order (no width check:
        it was accepted before, and its machines may not have re-registered yet)."""
        self._check_new(job)
        self._requeues[job.id] = requeues
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
        self, job: Job, parts: tuple[Part, ...], start: float, *, requeues: int = 0
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

    def job_lost(self, job_id: str, now: float) -> Left:
        """One running or pending job lost a part (its agent no longer runs it, or a
        restored job was not confirmed): the lost-machine rule, for this job only."""
        run = self._running.get(job_id)
        if run is not None:
            return self._lose_running(run, now)
        pending = self._pending.pop(job_id, None)
        if pending is None:
            raise KeyError(f"job {job_id!r} is not running")
        return self._requeue_or_fail(pending.job, pending.start, pending.parts, now)

    # -- scheduling -------------------------------------------------------

    def snapshot(self, now: float) -> Snapshot:
        queue: Sequence[Job] = self._queue
        index: QueueIndex | None = self._index
        if self._widest > self._total:
            # Jobs wider than what is left of the cluster wait hidden (module docstring).
            queue = [j for j in self._queue if self.cpus_needed(j) <= self._total]
            if len(queue) < len(self._queue):
                index = None  # it holds the hidden jobs too
        return make_snapshot(
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

    def schedule(self, now: float) -> Decisions:
        """Run the policy once and apply its decisions; returns them for the caller to act on."""
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
        if decisions.reservations or self._reservations:
            self._reservations = {r.job.id: r for r in decisions.reservations}
        if decisions.counters:
            for key, value in decisions.counters.items():
                self.counters[key] = self.counters.get(key, 0) + value
        return decisions

    # -- internals --------------------------------------------------------

    def cpus_needed(self, job: Job) -> int:
        """Fewest CPUs ``job`` may hold under this policy (its processes, or half of
        them, rounded up, under a policy that folds malleable jobs to MPL 2)."""
        return job.min_cpus if self._folds else job.procs

    def _check_new(self, job: Job) -> None:
        if job.id in self._known:
            raise ValueError(f"job {job.id!r} is already known")

    def _enqueue(self, job: Job) -> None:
        self._known[job.id] = job
        self._state[job.id] = JobState.QUEUED
        self._order[job.id] = len(self._order)
        self._widest = max(self._widest, self.cpus_needed(job))
        self._queue.append(job)
        if self._index.awake:
            self._index.add(job)

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

    def _lose_running(self, run: RunningJob, now: float) -> Left:
        self._running.pop(run.job.id)
        if self._index.awake:
            self._index.remove_running(run)
        release(self._free, run.parts)
        self._charge(run, now)
        return self._requeue_or_fail(run.job, run.start, run.parts, now)

    def _requeue_or_fail(self, job: Job, start: float, parts: tuple[Part, ...], now: float) -> Left:
        """The lost-machine rule for one job that already left its CPUs."""
        done = self._requeues.get(job.id, 0)
        if done >= self.max_requeues:
            self._state[job.id] = transition(self._state[job.id], JobState.FAILED)
            return Left(job, start, now, parts, JobState.FAILED)
        self._requeues[job.id] = done + 1
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

    def _apply_start(self, job: Job, parts: tuple[Part, ...], now: float) -> None:
        # A job started twice in one decision is RUNNING at its second start.
        if self._state.get(job.id) is not JobState.QUEUED:
            raise PolicyError(f"policy started job {job.id!r}, which is not queued")
        cpus = book(self._free, job, parts, self.cpus_needed(job))
        self._state[job.id] = transition(JobState.QUEUED, JobState.RUNNING)
        alloc = self._allocs.of(parts)
        rate = self._allocs.rate(alloc, job)
        run = self._running.start(job, parts, cpus, rate=rate, start=now, now=now, alloc=alloc)
        self._started(run)

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

    def _index_source(self) -> tuple[Iterable[Job], Iterable[RunningJob]]:
        """What a dormant queue index builds itself from."""
        return self._queue, self._running.values()

    def _started(self, run: RunningJob) -> None:
        if self._index.awake:
            self._index.add_running(run)
        # The ledger knows every name that ever held CPUs from the moment it does,
        # so fair-share counts names seen without walking the running jobs.
        self.usage.note(user=run.job.user, group=run.job.group)

    def _charge(self, run: RunningJob, now: float) -> None:
        self.usage.charge(
            user=run.job.user,
            group=run.job.group,
            start=run.charged_from,
            end=now,
            cpus=run.cpus,
        )
