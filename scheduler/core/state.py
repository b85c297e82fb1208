"""The scheduler core's state and the bookkeeping every event handler shares.

``scheduler.core.core`` explains the core as a whole; this layer holds what it
knows: the machines and their free CPUs, the queue in arrival order (with the
per-name index fair-share reads, ``scheduler.core.queue_index``), the running jobs
(``scheduler.core.running_set``), every job's lifecycle state, the usage ledger
(``scheduler.core.usage``), the reservations a policy last promised and the
allocations and rates already worked out (``model.allocation``). Its methods
read that state or keep it consistent when a job enters the queue, starts,
or is charged for the CPUs it held.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from model.allocation import AllocationMemo
from model.execution import DEFAULT_MODEL, ExecutionModel
from model.job import Job
from model.machine import Machine
from scheduler.core.answers import PendingJob
from scheduler.core.job_lifecycle import JobState
from scheduler.core.queue_index import QueueIndex
from scheduler.core.running_set import RunningSet
from scheduler.core.snapshot import Policy, Reservation, RunningJob, Snapshot
from scheduler.core.usage import UsageLedger
from scheduler.planning.placement import sort_machines


class CoreState:
    """The core's state and shared bookkeeping (see the module docstring)."""

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
        #: The policy decides nothing on an empty queue (``scheduler.core.snapshot.Policy``).
        self._idle_on_empty = bool(getattr(policy, "idle_on_empty_queue", False))
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
        # (user, group) pairs already noted in the ledger (see _started).
        self._noted: set[tuple[str, str]] = set()
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
        # The snapshot handed to the policy, refreshed at every event (core.snapshot).
        self._snap: Snapshot | None = None

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

    # -- shared by the event handlers -------------------------------------

    def machine_joined(self, machine: Machine) -> None:
        """A machine registered (or the twin's cluster is being built)."""
        if machine.id in self._speeds:
            raise ValueError(f"machine {machine.id!r} is already known")
        self._machines = sort_machines([*self._machines, machine])
        self._speeds[machine.id] = machine.speed
        self._free[machine.id] = machine.cpus
        self._total += machine.cpus
        self._allocs.clear()

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
        # cpus_needed, inline: this runs once per job of a replay.
        self._widest = max(self._widest, job.min_cpus if self._folds else job.procs)
        self._queue.append(job)
        if self._index.awake:
            self._index.add(job)

    def _index_source(self) -> tuple[Iterable[Job], Iterable[RunningJob]]:
        """What a dormant queue index builds itself from."""
        return self._queue, self._running.values()

    def _started(self, run: RunningJob) -> None:
        if self._index.awake:
            self._index.add_running(run)
        # The ledger knows every name that ever held CPUs from the moment it does,
        # so fair-share counts names seen without walking the running jobs. A pair
        # noted before changes nothing in it (both names known, their order set),
        # so it is noted once: most jobs of a trace come from a known user.
        job = run.job
        pair = (job.user, job.group)
        if pair not in self._noted:
            self._noted.add(pair)
            self.usage.note(user=job.user, group=job.group)

    def _charge(self, run: RunningJob, now: float) -> None:
        self.usage.charge(
            user=run.job.user,
            group=run.job.group,
            start=run.charged_from,
            end=now,
            cpus=run.cpus,
        )
