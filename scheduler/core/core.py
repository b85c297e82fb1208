"""The scheduler core: a sans-I/O state machine, events in, decisions out.

Theory of operation. The core owns the queue (arrival order), the running
jobs with the scheduler's estimate of their end, the free CPUs of every
machine, the usage ledger and the reservations a policy last promised. Its
callers (the twin's event engine, the live scheduler actor) feed it events
(``submit``, ``finished``, ``cancel``) stamped with ``now`` and call
:meth:`SchedulerCore.schedule` once after every batch of simultaneous events.
``schedule`` hands the policy a read-only
:class:`~scheduler.core.snapshot.SnapshotView`, checks every decision against
the state (a policy that double-books a CPU or starts an unknown job is a bug
and raises :class:`PolicyError`), applies the decisions and returns them so
the caller can turn them into commands.

The core never reads a clock: time is the ``now`` it is given.

One object, composed of collaborators with one job each, which it builds and
owns: the :class:`~scheduler.core.job_book.JobBook` (every job known, its
state and requeues), the :class:`~scheduler.core.job_queue.JobQueue` (waiting
jobs in arrival order, with the per-name index; it hides a job wider than
what is left of the cluster), the :class:`~scheduler.core.cluster.Cluster`
(machines, free CPUs, the running jobs on them, the usage they are charged)
and the :class:`~scheduler.core.recovery.Recovery` (the lost-machine rule and
the journal restore). This module adds the events of a normal life (submit,
finish, cancel) and the scheduling step.

*Capabilities.* A job that needs capabilities (``Job.needs``) goes only to
machines that have them (``scheduler.planning.placement.machines_for``; every
start and resize is checked, ``scheduler.core.booking``) and waits hidden while
those online are too few (``scheduler.core.job_queue``). A job that must run on
one machine (``Job.one_machine``) is placed whole on one by every policy
(``Placement.for_job``), a start or resize of it on several is refused, and it
waits hidden while no machine it may run on is that wide. A machine whose
capabilities change keeps its jobs; a promise there that no longer holds is dropped.

*Cordoned machines.* A caller may pass a set of machine ids it edits
(``cordoned``: the live scheduler's SUSPECT and HELD agents, Slurm's DRAIN
without the admin): the policy sees none of their CPUs free, so no new part
goes there, while the jobs already on them keep their CPUs and the machines
still count in the cluster. The twin has no heartbeats and passes none.

Estimates. The running jobs, their expected ends and how a resize moves them
are ``scheduler.core.running_set``'s; what the core answers to events (``Accepted``,
``Rejected``, ``Left``) is in ``scheduler.core.answers``. A policy whose
``predictor`` option is ``last-two`` (EASY++) plans with run-time predictions
instead of wall times: the core keeps each user's last two run times
(``scheduler.core.run_history``) and queues each job with its prediction as
its wall time, while its book keeps the job as submitted (``job()``).

*Per user.* With ``track_users`` (the live scheduler) or a ``max_user_cpus``
the core keeps per-user tallies (``scheduler.core.user_load``); with
``max_user_cpus`` it offers the policy only jobs that keep their user within
that many running CPUs, and applies a decision's starts only while they do
(``scheduler.core.user_limit``: the rule, and why it lives here).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import replace

from model.execution import DEFAULT_MODEL, ExecutionModel
from model.job import Job
from model.machine import Capability, Machine, Part
from scheduler.core.answers import (
    Accepted,
    Left,
    PendingJob,
    PolicyError,
    RejectCode,
    Rejected,
    too_wide,
)
from scheduler.core.booking import check_needs
from scheduler.core.cluster import Cluster
from scheduler.core.job_book import JobBook
from scheduler.core.job_lifecycle import JobState
from scheduler.core.job_queue import JobQueue
from scheduler.core.queue_index import QueueIndex
from scheduler.core.recovery import Recovery
from scheduler.core.run_history import Predictor, RunHistory, corrected_end
from scheduler.core.running_set import RunningSet
from scheduler.core.snapshot import Decisions, Policy, Reservation, RunningJob, Snapshot
from scheduler.core.usage import UsageLedger
from scheduler.core.user_limit import UserCpuLimit, merged, too_wide_for_user
from scheduler.core.user_load import UserLoad

__all__ = [
    "Accepted",
    "Left",
    "PendingJob",
    "PolicyError",
    "RejectCode",
    "Rejected",
    "SchedulerCore",
]


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
        cordoned: Set[str] = frozenset(),
        keep_history: bool = False,
        max_user_cpus: int | None = None,
        track_users: bool = False,
    ) -> None:
        self.policy = policy
        #: Jobs are malleable by default, but only a policy that says it folds them
        #: (``folds = True``, FCFS-malleable) may run one on fewer CPUs than processes.
        self._folds = bool(getattr(policy, "folds", False))
        #: The policy decides nothing on an empty queue (``scheduler.core.snapshot.Policy``).
        self._idle_on_empty = bool(getattr(policy, "idle_on_empty_queue", False))
        self.execution = execution
        #: The policy plans with run-time predictions (its ``predictor`` is ``last-two``).
        self.predicts = Predictor(getattr(policy, "predictor", Predictor.ESTIMATE)) is not (
            Predictor.ESTIMATE
        )
        #: Each user's last run times, kept when the policy predicts with them or the
        #: caller asks (``keep_history``: the live scheduler's snapshot carries them).
        self.history: RunHistory | None = RunHistory() if self.predicts or keep_history else None
        self.usage = UsageLedger(usage_period)
        #: Per-user tallies, kept when something reads them (module docstring).
        self.load = UserLoad() if track_users or max_user_cpus is not None else None
        self._user_limit = (
            None
            if max_user_cpus is None or self.load is None
            else UserCpuLimit(max_user_cpus, self.load)
        )
        #: The last round of ``schedule`` deferred a start for the limit, and started one.
        self._deferred = False
        self._book = JobBook(self.load)
        self._running = RunningSet()
        self._queue = JobQueue(running=self._running, folds=self._folds)
        self._cluster = Cluster(
            machines=machines,
            execution=execution,
            running=self._running,
            usage=self.usage,
            index=self._queue.index,
        )
        self._recovery = Recovery(
            book=self._book,
            queue=self._queue,
            cluster=self._cluster,
            max_requeues=max_requeues,
            folds=self._folds,
        )
        #: The caller's set (module docstring, "Cordoned machines"), read at every event.
        self._cordoned = cordoned
        self._reservations: dict[str, Reservation] = {}
        self.counters: dict[str, int] = {}
        # The snapshot handed to the policy, refreshed at every event (snapshot()).
        self._snap: Snapshot | None = None

    # -- state, read-only -------------------------------------------------

    @property
    def max_requeues(self) -> int:
        return self._recovery.max_requeues

    @property
    def max_user_cpus(self) -> int | None:
        """The CPUs one user's running jobs may hold (None: no limit)."""
        return None if self._user_limit is None else self._user_limit.limit

    def held_by_limit(self, job: Job) -> bool:
        """Whether queued ``job`` waits because its user runs too many CPUs to start it."""
        return self._user_limit is not None and not self._user_limit.fits(job)

    @property
    def machines(self) -> Sequence[Machine]:
        return self._cluster.machines

    @property
    def total_cpus(self) -> int:
        return self._cluster.total

    @property
    def queue(self) -> Sequence[Job]:
        return self._queue.jobs

    @property
    def running(self) -> Sequence[RunningJob]:
        """Running jobs by expected end (ties by start order)."""
        return self._running.by_end

    @property
    def reservations(self) -> Sequence[Reservation]:
        return list(self._reservations.values())

    def free(self, machine_id: str) -> int:
        return self._cluster.free[machine_id]

    def state_of(self, job_id: str) -> JobState | None:
        return self._book.states.get(job_id)

    def job(self, job_id: str) -> Job | None:
        """The job known by ``job_id`` (in any state), if any."""
        return self._book.known.get(job_id)

    def arrival(self, job_id: str) -> int:
        """The arrival number of a known job: its place in the queue's order."""
        return self._queue.order[job_id]

    def requeues(self, job_id: str) -> int:
        """How many times the job was requeued after losing a machine."""
        return self._book.requeues(job_id)

    def charged_requeues(self, job_id: str) -> int:
        """Requeues of ``job_id`` that count against ``max_requeues``."""
        return self._book.charged_requeues(job_id)

    @property
    def speeds(self) -> Mapping[str, float]:
        return self._cluster.speeds

    @property
    def pending(self) -> Mapping[str, PendingJob]:
        """Restored running jobs awaiting their agents' confirmation, by id."""
        return self._book.pending

    def running_job(self, job_id: str) -> RunningJob | None:
        """The running job ``job_id`` (not a pending one), if any."""
        return self._running.get(job_id)

    def cpus_needed(self, job: Job) -> int:
        """Fewest CPUs ``job`` may hold under this policy (its processes, or half of
        them, rounded up, under a policy that folds malleable jobs to MPL 2)."""
        return job.min_cpus if self._folds else job.procs

    # -- machines, lost jobs and restore (``scheduler.core.recovery``) -----

    def machine_joined(self, machine: Machine) -> None:
        """A machine registered (or the twin's cluster is being built)."""
        self._cluster.join(machine)

    def machine_left(self, machine_id: str, now: float, *, charged: bool = True) -> list[Left]:
        """A machine is gone: the lost-machine rule for its jobs (``Recovery.machine_left``);
        ``charged=False`` for a machine its operator stopped."""
        lost = self._recovery.machine_left(machine_id, now, charged=charged)
        # A promise on a machine that is gone cannot be kept; policies plan afresh.
        self._reservations = {
            jid: r
            for jid, r in self._reservations.items()
            if all(p.machine != machine_id for p in r.parts)
        }
        return lost

    def machine_changed(self, machine_id: str, capabilities: frozenset[Capability]) -> None:
        """A known machine now has ``capabilities`` (module docstring, "Capabilities")."""
        self._cluster.change(machine_id, capabilities)
        # A promise that can no longer be kept there: the policy plans the job afresh.
        self._reservations = {
            jid: r
            for jid, r in self._reservations.items()
            if r.job.needs <= capabilities or all(p.machine != machine_id for p in r.parts)
        }

    def job_lost(self, job_id: str, now: float, *, charged: bool = True) -> Left:
        """The lost-machine rule for one job (``Recovery.job_lost``)."""
        return self._recovery.job_lost(job_id, now, charged=charged)

    def restore_queued(self, job: Job, *, requeues: int = 0, uncharged: int = 0) -> None:
        """A journalled queued job (``Recovery.restore_queued``)."""
        self._recovery.restore_queued(
            job, requeues=requeues, uncharged=uncharged, planned=self._planned(job)
        )

    def restore_usage(
        self, sums: Iterable[tuple[str, str, int, float]], period: float | None
    ) -> None:
        """Archived jobs' usage, before the journal's jobs (``Recovery.restore_usage``)."""
        self._recovery.restore_usage(sums, period)

    def restore_final(
        self,
        job: Job,
        state: JobState,
        *,
        start: float | None = None,
        end: float | None = None,
        parts: tuple[Part, ...] = (),
    ) -> None:
        """A journalled job that is over (``Recovery.restore_final``)."""
        self._recovery.restore_final(job, state, start=start, end=end, parts=parts)
        history = self.history
        ran = state is JobState.FINISHED and start is not None and end is not None
        if history is not None and ran and start is not None and end is not None:
            # The journal keeps no rate: its time on CPUs, at the reference speed.
            history.record(job.user, end, max(end - start, 0.0))

    def restore_pending(
        self,
        job: Job,
        parts: tuple[Part, ...],
        start: float,
        *,
        requeues: int = 0,
        uncharged: int = 0,
    ) -> None:
        """A journalled running job, pending its agents (``Recovery.restore_pending``)."""
        self._recovery.restore_pending(
            job,
            parts,
            start,
            requeues=requeues,
            uncharged=uncharged,
            planned=self._planned(job),
        )

    def restore_running(self, job_id: str, now: float) -> RunningJob:
        """A pending job back on its CPUs (``Recovery.restore_running``)."""
        return self._recovery.restore_running(job_id, now)

    # -- a state carried over (the twin's checkpoint and what-if) ---------

    def resume_running(  # noqa: PLR0917 - one argument per field carried over
        self,
        job: Job,
        parts: tuple[Part, ...],
        start: float,
        now: float,
        est_end: float,
        est_done: float,
        changed: float,
    ) -> RunningJob:
        """A job running since ``start`` on ``parts`` in another core (a twin run cut at
        ``now``, or a live scheduler's snapshot), with that core's estimate of it:
        ``est_done`` of its wall time done by ``changed``, expected to end at
        ``est_end``. Its usage before ``now`` is not charged here."""
        self._book.enter(job, JobState.RUNNING)
        self._queue.number(job.id)
        run = self._cluster.hold(self._planned(job), parts, self.cpus_needed(job), now, start)
        run.est_done = est_done
        run.changed = changed
        run.charged_from = now
        self._running.move_end(run, est_end)
        return run

    def resume_reservations(self, reservations: Iterable[Reservation]) -> None:
        """The promises the policy held in the core this state comes from (its queued
        jobs' reservations), handed back to it at its next decision."""
        self._reservations = {r.job.id: r for r in reservations}

    # -- events -----------------------------------------------------------

    def submit(self, job: Job, *, capacity: int | None = None) -> Accepted | Rejected:
        """Queue ``job``; idempotent by job id (the same job twice is one job).

        A job wider than ``capacity`` CPUs (default: the machines the core holds
        now) is rejected (:func:`~scheduler.core.answers.too_wide`). The live
        scheduler passes the cluster as configured, so a job wider than the CPUs
        online right now waits in the queue (the snapshot hides it from the
        policy until it fits).
        """
        book = self._book
        seen = book.known.get(job.id)
        if seen is not None:
            if seen == job:
                return Accepted(job.id, duplicate=True)
            why = f"job id {job.id!r} is already used by a different job"
            return Rejected(job.id, RejectCode.ID_REUSED, why)
        limit = self._cluster.total if capacity is None else capacity
        wide = too_wide(job, self.cpus_needed(job), limit) or too_wide_for_user(
            job, self.max_user_cpus
        )
        if wide is not None:
            return wide
        book.enter(job, JobState.QUEUED)
        self._queue.add(job if not self.predicts else self._planned(job))
        return Accepted(job.id)

    def finished(self, job_id: str, now: float, *, failed: bool = False) -> Left:
        """A running job ended (its agent reported it, or the twin's model did)."""
        state = JobState.FAILED if failed else JobState.FINISHED
        run = self._running.pop(job_id)
        if run is None:
            if job_id in self._book.pending:
                return self._recovery.end_pending(job_id, now, state)
            raise KeyError(f"job {job_id!r} is not running")
        self._book.move(job_id, state)
        self._cluster.release(run, now)
        if self.history is not None and not failed:
            self._remember(run, now)
        return Left(run.job, run.start, now, run.parts, state)

    def ended(self, job_id: str, now: float) -> None:
        """:meth:`finished` for a caller that does not read the answer: the twin's
        engine, which has the outcome from its modelled agents (one object less
        per job of a replay). The same state change, for running jobs only."""
        run = self._running.pop(job_id)
        if run is None:
            raise KeyError(f"job {job_id!r} is not running")
        self._book.move(job_id, JobState.FINISHED)
        self._cluster.release(run, now)
        if self.history is not None:
            self._remember(run, now)

    def cancel(self, job_id: str, now: float) -> Left | Job | None:
        """Cancel a queued or running job; returns what was cancelled, None if nothing was."""
        book = self._book
        state = book.states.get(job_id)
        if state is JobState.QUEUED:
            book.move(job_id, JobState.CANCELLED)
            job = book.known[job_id]
            self._queue.remove(job)
            self._reservations.pop(job_id, None)
            return job
        if state is JobState.RUNNING and job_id in book.pending:
            return self._recovery.end_pending(job_id, now, JobState.CANCELLED)
        if state is JobState.RUNNING:
            run = self._running.pop(job_id)
            assert run is not None  # RUNNING and not pending
            book.move(job_id, JobState.CANCELLED)
            self._cluster.release(run, now)
            return Left(run.job, run.start, now, run.parts, JobState.CANCELLED)
        return None

    def cancel_queued(self, job_ids: Iterable[str]) -> list[Job]:
        """Cancel the queued jobs among ``job_ids`` in one pass over the queue (a bulk
        cancel of thousands costs one pass, not one per job); returns them."""
        book = self._book
        jobs = []
        for job_id in job_ids:
            if book.states.get(job_id) is JobState.QUEUED:
                book.move(job_id, JobState.CANCELLED)
                jobs.append(book.known[job_id])
                self._reservations.pop(job_id, None)
        self._queue.remove_many(jobs)
        return jobs

    # -- scheduling -------------------------------------------------------

    def snapshot(self, now: float) -> Snapshot:
        """What the policy sees at ``now``: valid until the next call, since the core
        keeps one snapshot and refreshes it in place (``scheduler.core.snapshot``)."""
        cluster = self._cluster
        total = cluster.total
        waiting = self._queue
        if waiting.widest <= total and not waiting.where:
            # No queued job can be hidden (``JobQueue.visible``), the usual case.
            queue: Sequence[Job] = waiting.jobs
            index: QueueIndex | None = waiting.index
        else:
            queue, index = waiting.visible(total, cluster.capacity)
        held = self._user_limit
        if held is not None:
            # A fold is at least half its processes: twice the queue's widest bounds them.
            offered = held.offered(queue, waiting.widest * (2 if self._folds else 1))
            if offered is not None:
                queue, index = offered, None
        free: Mapping[str, int] = cluster.free
        cordoned = self._cordoned
        if cordoned:
            free = {m: 0 if m in cordoned else n for m, n in free.items()}
        snap = self._snap
        # The other fields are the core's own containers, the same objects from one
        # event to the next; the machines list is replaced when a machine comes or goes.
        if snap is not None and snap.machines is cluster.machines and snap.total_cpus == total:
            snap.now = now
            snap.free = free
            snap.queue = queue
            snap.reservations = self._reservations
            snap.by_account = index
            return snap
        snap = self._snap = Snapshot(
            now=now,
            machines=cluster.machines,
            free=free,
            running=self._running.by_end,
            queue=queue,
            usage=self.usage,
            total_cpus=total,
            speeds=cluster.speeds,
            reservations=self._reservations,
            by_account=index,
        )
        return snap

    def schedule(self, now: float) -> Decisions:
        """Run the policy once and apply its decisions; returns them for the caller to act on.

        Under a per-user CPU limit, a round that deferred a start is followed by
        another at the same instant (``scheduler.core.user_limit``), and the rounds
        are returned as one answer.
        """
        if not self._queue.jobs and self._idle_on_empty:
            # The policy promised to decide nothing now; what it would have returned
            # (no reservation) replaces the promises held, as below.
            if self._reservations:
                self._reservations = {}
            return Decisions()
        if self.predicts:
            self._correct(now)
        decisions = self._round(now)
        while self._deferred:
            decisions = merged(decisions, self._round(now))
        return decisions

    def _round(self, now: float) -> Decisions:
        """One call of the policy, its decisions checked and applied."""
        decisions = self.policy.decide(self.snapshot(now))
        self._deferred = False
        limit = self._user_limit
        if limit is not None and decisions.starts:
            kept, deferred = limit.split(decisions.starts)
            # Another round only after progress: each one then starts a job.
            self._deferred = bool(deferred) and bool(kept)
            if deferred:
                decisions = replace(decisions, starts=kept)
        for resize in decisions.resizes:
            self._apply_resize(resize.job, resize.parts, now)
        if decisions.starts:
            for start in decisions.starts:
                self._apply_start(start.job, start.parts, now)
            self._queue.take([start.job for start in decisions.starts])
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

    def _planned(self, job: Job) -> Job:
        """``job`` as the policy plans it (``scheduler.core.run_history``)."""
        history = self.history
        return history.planned(job) if self.predicts and history is not None else job

    def _correct(self, now: float) -> None:
        """Correct the predictions the running jobs outlived (``run_history.corrected_end``);
        they are the first of the running set, which is sorted by expected end."""
        running = self._running
        by_end = running.by_end
        known = self._book.known
        while by_end and by_end[0].est_end < now:
            run = by_end[0]
            running.move_end(run, corrected_end(run, known[run.job.id].walltime, now))

    def _remember(self, run: RunningJob, now: float) -> None:
        """Record a finished run's work (its time on CPUs at its rate) in the history."""
        assert self.history is not None
        self.history.record(run.job.user, now, run.est_done + (now - run.changed) * run.rate)

    def _apply_start(self, job: Job, parts: tuple[Part, ...], now: float) -> None:
        # A job started twice in one decision is RUNNING at its second start.
        book = self._book
        if book.states.get(job.id) is not JobState.QUEUED:
            raise PolicyError(f"policy started job {job.id!r}, which is not queued")
        if job.needs or job.one_machine:
            check_needs(job, parts, self._cluster.capabilities)
        self._cluster.hold(job, parts, job.min_cpus if self._folds else job.procs, now)
        book.move(job.id, JobState.RUNNING)

    def _apply_resize(self, job: Job, parts: tuple[Part, ...], now: float) -> None:
        run = self._running.get(job.id)
        if run is None:
            raise PolicyError(f"policy resized job {job.id!r}, which is not running")
        if not (job.malleable and self._folds):
            raise PolicyError(f"policy resized rigid job {job.id!r}")
        if job.needs or job.one_machine:
            # Where it runs already it stays, even on a machine that changed since.
            check_needs(job, parts, self._cluster.capabilities, {p.machine for p in run.parts})
        self._cluster.move(run, parts, self.cpus_needed(job), now)
