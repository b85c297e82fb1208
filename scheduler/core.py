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

Estimates. A running job's expected end comes from the user's wall time and
the shared execution model (``model.execution``) at the job's allocation: the
core keeps how much of the wall time it believes done, so a resize moves the
expected end the way the agents' progress will move. A job that outlives its
estimate is expected to end "now" (policies see ``max(est_end, now)``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from model.execution import DEFAULT_MODEL, ExecutionModel
from model.job import Job
from model.machine import Machine, Part
from scheduler.lifecycle import JobState, transition
from scheduler.placement import sort_machines
from scheduler.snapshot import Decisions, Policy, Reservation, RunningJob, Snapshot
from scheduler.usage import UsageLedger


class PolicyError(RuntimeError):
    """A policy returned a decision that cannot be applied (a bug in the policy)."""


@dataclass(frozen=True, slots=True)
class Accepted:
    job_id: str
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class Rejected:
    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Left:
    """A job that left the CPUs, with what the core knew of it."""

    job: Job
    start: float
    end: float
    parts: tuple[Part, ...]
    state: JobState


class SchedulerCore:
    """Queue, running set and cluster state, driven by events; see the module docstring."""

    def __init__(
        self,
        *,
        policy: Policy,
        machines: Iterable[Machine],
        execution: ExecutionModel = DEFAULT_MODEL,
        usage_period: float = 86400.0,
    ) -> None:
        self.policy = policy
        self.execution = execution
        self._machines: list[Machine] = []
        self._speeds: dict[str, float] = {}
        self._free: dict[str, int] = {}
        self._total = 0
        for m in machines:
            self.machine_joined(m)
        self._queue: list[Job] = []
        self._running: dict[str, RunningJob] = {}
        # The same jobs sorted by expected end: backfilling walks them in this order
        # and usually stops after a few, so keeping them sorted beats sorting per event.
        self._by_end: list[RunningJob] = []
        self._known: dict[str, Job] = {}
        self._state: dict[str, JobState] = {}
        self._reservations: dict[str, Reservation] = {}
        self.usage = UsageLedger(usage_period)
        self.counters: dict[str, int] = {}

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
        return self._by_end

    @property
    def reservations(self) -> Sequence[Reservation]:
        return list(self._reservations.values())

    def free(self, machine_id: str) -> int:
        return self._free[machine_id]

    def state_of(self, job_id: str) -> JobState | None:
        return self._state.get(job_id)

    # -- events -----------------------------------------------------------

    def machine_joined(self, machine: Machine) -> None:
        """A machine registered (or the twin's cluster is being built)."""
        if machine.id in self._speeds:
            raise ValueError(f"machine {machine.id!r} is already known")
        self._machines = sort_machines([*self._machines, machine])
        self._speeds[machine.id] = machine.speed
        self._free[machine.id] = machine.cpus
        self._total += machine.cpus

    def submit(self, job: Job) -> Accepted | Rejected:
        """Queue ``job``; idempotent by job id (the same job twice is one job)."""
        seen = self._known.get(job.id)
        if seen is not None:
            if seen == job:
                return Accepted(job.id, duplicate=True)
            return Rejected(job.id, f"job id {job.id!r} is already used by a different job")
        if job.min_cpus > self._total:
            return Rejected(
                job.id,
                f"job needs {job.min_cpus} CPUs for its {job.procs} processes, "
                f"the cluster has {self._total}",
            )
        self._known[job.id] = job
        self._state[job.id] = JobState.QUEUED
        self._queue.append(job)
        return Accepted(job.id)

    def finished(self, job_id: str, now: float, *, failed: bool = False) -> Left:
        """A running job ended (its agent reported it, or the twin's model did)."""
        run = self._running.pop(job_id, None)
        if run is None:
            raise KeyError(f"job {job_id!r} is not running")
        self._unlist(run)
        state = JobState.FAILED if failed else JobState.FINISHED
        self._state[job_id] = transition(self._state[job_id], state)
        for part in run.parts:
            self._free[part.machine] += part.cpus
        self._charge(run, now)
        return Left(run.job, run.start, now, run.parts, state)

    def cancel(self, job_id: str, now: float) -> Left | Job | None:
        """Cancel a queued or running job; returns what was cancelled, None if nothing was."""
        state = self._state.get(job_id)
        if state is JobState.QUEUED:
            self._state[job_id] = transition(state, JobState.CANCELLED)
            self._queue = [j for j in self._queue if j.id != job_id]
            self._reservations.pop(job_id, None)
            return self._known[job_id]
        if state is JobState.RUNNING:
            run = self._running.pop(job_id)
            self._unlist(run)
            self._state[job_id] = transition(state, JobState.CANCELLED)
            for part in run.parts:
                self._free[part.machine] += part.cpus
            self._charge(run, now)
            return Left(run.job, run.start, now, run.parts, JobState.CANCELLED)
        return None

    # -- scheduling -------------------------------------------------------

    def snapshot(self, now: float) -> Snapshot:
        return Snapshot(
            now=now,
            machines=self._machines,
            free=self._free,
            running=self._by_end,
            queue=self._queue,
            usage=self.usage,
            total_cpus=self._total,
            speeds=self._speeds,
            reservations=self._reservations,
        )

    def schedule(self, now: float) -> Decisions:
        """Run the policy once and apply its decisions; returns them for the caller to act on."""
        decisions = self.policy.decide(self.snapshot(now))
        for resize in decisions.resizes:
            self._apply_resize(resize.job, resize.parts, now)
        if decisions.starts:
            started: set[str] = set()
            for start in decisions.starts:
                self._apply_start(start.job, start.parts, now, started)
            self._queue = [j for j in self._queue if j.id not in started]
        self._reservations = {r.job.id: r for r in decisions.reservations}
        for key, value in decisions.counters.items():
            self.counters[key] = self.counters.get(key, 0) + value
        return decisions

    # -- internals --------------------------------------------------------

    def _take(self, job: Job, parts: tuple[Part, ...]) -> int:
        cpus = 0
        for part in parts:
            have = self._free.get(part.machine)
            if have is None:
                raise PolicyError(f"job {job.id!r} placed on unknown machine {part.machine!r}")
            if part.cpus < 1 or part.cpus > have:
                raise PolicyError(
                    f"job {job.id!r} asks {part.cpus} CPUs of {part.machine!r}, {have} are free"
                )
            self._free[part.machine] = have - part.cpus
            cpus += part.cpus
        if len({p.machine for p in parts}) != len(parts):
            raise PolicyError(f"job {job.id!r} has two parts on one machine")
        if not job.min_cpus <= cpus <= job.procs:
            raise PolicyError(
                f"job {job.id!r} ({job.procs} processes) placed on {cpus} CPUs; "
                f"allowed {job.min_cpus}..{job.procs}"
            )
        return cpus

    def _rate(self, job: Job, parts: tuple[Part, ...], cpus: int) -> float:
        speed = min(self._speeds[p.machine] for p in parts)
        return self.execution.rate(
            procs=job.procs,
            cpus=cpus,
            speed=speed,
            ref_speed=job.ref_speed,
            cpu_util=job.cpu_util,
        )

    def _apply_start(
        self, job: Job, parts: tuple[Part, ...], now: float, started: set[str]
    ) -> None:
        if self._state.get(job.id) is not JobState.QUEUED or job.id in started:
            raise PolicyError(f"policy started job {job.id!r}, which is not queued")
        cpus = self._take(job, parts)
        self._state[job.id] = transition(JobState.QUEUED, JobState.RUNNING)
        started.add(job.id)
        rate = self._rate(job, parts, cpus)
        run = RunningJob(
            job=job,
            parts=parts,
            start=now,
            est_end=now + job.walltime / rate,
            cpus=cpus,
            est_done=0.0,
            changed=now,
            rate=rate,
            charged_from=now,
        )
        self._running[job.id] = run
        bisect.insort_right(self._by_end, run, key=_end_key)

    def _apply_resize(self, job: Job, parts: tuple[Part, ...], now: float) -> None:
        run = self._running.get(job.id)
        if run is None:
            raise PolicyError(f"policy resized job {job.id!r}, which is not running")
        if not job.malleable:
            raise PolicyError(f"policy resized rigid job {job.id!r}")
        for part in run.parts:
            self._free[part.machine] += part.cpus
        try:
            cpus = self._take(job, parts)
        except PolicyError:
            for part in run.parts:
                self._free[part.machine] -= part.cpus
            raise
        # Charge the old allocation before it changes, so usage follows the CPUs held.
        self._charge(run, now)
        run.est_done = min(job.walltime, run.est_done + (now - run.changed) * run.rate)
        run.changed = now
        run.rate = self._rate(job, parts, cpus)
        run.parts = parts
        run.cpus = cpus
        self._unlist(run)
        run.est_end = now + (job.walltime - run.est_done) / run.rate
        run.charged_from = now
        bisect.insort_right(self._by_end, run, key=_end_key)

    def _unlist(self, run: RunningJob) -> None:
        i = bisect.bisect_left(self._by_end, run.est_end, key=_end_key)
        while self._by_end[i] is not run:
            i += 1
        del self._by_end[i]

    def _charge(self, run: RunningJob, now: float) -> None:
        self.usage.charge(
            user=run.job.user,
            group=run.job.group,
            start=run.charged_from,
            end=now,
            cpus=run.cpus,
        )


def _end_key(run: RunningJob) -> float:
    return run.est_end
