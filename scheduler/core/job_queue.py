"""The core's queue: waiting jobs in arrival order, with their per-name index.

Theory of operation. Every job the core learns of gets an arrival number, in
the order it arrived (a restored job in journal order), and the queue is
always sorted by it: a new job goes at the end, a requeued job goes back to
its place (:meth:`JobQueue.put_back`), and the jobs a decision starts are
found by bisection (:meth:`JobQueue.take`), so no event rebuilds the queue.
The per-user and per-group view that fair-share reads
(``scheduler.core.queue_index``) is kept here too, dormant until a priority
source first reads it.

A queued job wider than the cluster that is left (it was accepted when the
cluster was bigger) stays queued but is hidden from the policy
(:meth:`JobQueue.visible`) until enough machines are back, so it never blocks
the jobs behind it. The queue remembers the widest job it ever held: while the
cluster has that many CPUs, nothing can be hidden and nothing is filtered.

The same holds for a job that needs capabilities (``Job.needs``): it is hidden
while the machines online that have them hold fewer CPUs than it needs (none
at all, when no agent runs commands), so it blocks no job behind it under an
in-order policy, and shown again once enough such machines are back. A job
that must run on one machine (``Job.one_machine``) is hidden likewise while no
such machine online is that wide. The queue counts its waiting jobs by where
they may run (:data:`Where`), so a queue where every such place holds at least
the widest job's CPUs is not filtered either.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence

from model.job import Job
from model.machine import Capability
from scheduler.core.queue_index import QueueIndex
from scheduler.core.running_set import RunningSet
from scheduler.core.snapshot import RunningJob

#: Where a job may run: the capabilities it needs and whether on one machine only.
#: The queue counts its jobs by it, the cluster says how many CPUs each such place
#: holds (``Cluster.capacity``).
Where = tuple[frozenset[Capability], bool]


def _position(queue: list[Job], order: dict[str, int], job: Job) -> int:
    """Where ``job`` is in ``queue`` (sorted by ``order``), found by bisection. Its
    own function: the key's closure is then built only when a search is needed,
    not at every :meth:`JobQueue.take` (compiled, a closure's environment is made
    when the function that holds it is entered)."""
    at = bisect.bisect_left(queue, order[job.id], key=lambda j: order[j.id])
    if queue[at].id != job.id:
        raise RuntimeError(f"queue out of arrival order at job {job.id!r}")
    return at


class JobQueue:
    """Waiting jobs in arrival order (see the module docstring)."""

    __slots__ = ("_folds", "_running", "index", "jobs", "order", "where", "widest")

    def __init__(self, *, running: RunningSet, folds: bool) -> None:
        #: The waiting jobs, in arrival order.
        self.jobs: list[Job] = []
        #: Arrival number of every job the core knows, queued or not.
        self.order: dict[str, int] = {}
        #: Fewest CPUs a job may hold is half its processes under a policy that folds.
        self._folds = folds
        self._running = running
        # Dormant (no upkeep) until a priority source first reads it.
        self.index = QueueIndex(self.order, source=self._index_source)
        #: The most CPUs any queued job ever needed (module docstring).
        self.widest = 0
        #: How many waiting jobs may run in each :data:`Where` (jobs that need nothing
        #: and may span machines are not counted): what :meth:`visible` checks before
        #: it filters.
        self.where: dict[Where, int] = {}

    def _index_source(self) -> tuple[Iterable[Job], Iterable[RunningJob]]:
        """What a dormant queue index builds itself from."""
        return self.jobs, self._running.values()

    def number(self, job_id: str) -> None:
        """Give ``job_id`` the next arrival number (a job known but not queued)."""
        self.order[job_id] = len(self.order)

    def add(self, job: Job) -> None:
        """A new job waits at the end of the queue."""
        self.order[job.id] = len(self.order)
        # Job.min_cpus or procs, inline: this runs once per job of a replay.
        self.widest = max(self.widest, job.min_cpus if self._folds else job.procs)
        self.jobs.append(job)
        if job.needs or job.one_machine:
            self._count(job, 1)
        index = self.index
        if index.awake:
            index.add(job)

    def put_back(self, job: Job) -> None:
        """A job that left the CPUs waits again, at its place in arrival order."""
        # A restored job was never queued here: it may be the widest one yet.
        self.widest = max(self.widest, job.min_cpus if self._folds else job.procs)
        order = self.order
        bisect.insort_right(self.jobs, job, key=lambda j: order[j.id])
        if job.needs or job.one_machine:
            self._count(job, 1)
        if self.index.awake:
            self.index.add(job)

    def take(self, started: Sequence[Job]) -> None:
        """Take the started jobs out of the queue, each found by bisection: the queue
        is always in arrival order, so this costs a few list moves, not a rebuilt
        queue at every event."""
        queue = self.jobs
        for job in started:
            if queue[0] is job:
                # The head (most starts under an arrival-order policy): no search.
                del queue[0]
                continue
            del queue[_position(queue, self.order, job)]
        if self.where:
            for job in started:
                if job.needs or job.one_machine:
                    self._count(job, -1)
        index = self.index
        if index.awake:
            for job in started:
                index.remove(job)

    def remove(self, job: Job) -> None:
        """A queued job leaves the queue without starting (cancelled)."""
        self.jobs = [j for j in self.jobs if j.id != job.id]
        if job.needs or job.one_machine:
            self._count(job, -1)
        if self.index.awake:
            self.index.remove(job)

    def remove_many(self, jobs: Sequence[Job]) -> None:
        """Queued jobs leave the queue without starting (a bulk cancel), in one pass."""
        if not jobs:
            return
        gone = {j.id for j in jobs}
        self.jobs = [j for j in self.jobs if j.id not in gone]
        for job in jobs:
            if job.needs or job.one_machine:
                self._count(job, -1)
        if self.index.awake:
            for job in jobs:
                self.index.remove(job)

    def _count(self, job: Job, by: int) -> None:
        where = self.where
        key = (job.needs, job.one_machine)
        left = where.get(key, 0) + by
        if left:
            where[key] = left
        else:
            del where[key]

    def hides_nothing(self, total_cpus: int, capacity: Callable[[Where], int]) -> bool:
        """True when no waiting job can be hidden on a cluster of ``total_cpus`` where
        a job that may run in ``w`` has ``capacity(w)`` CPUs (module docstring)."""
        widest = self.widest
        return widest <= total_cpus and all(capacity(w) >= widest for w in self.where)

    def visible(
        self, total_cpus: int, capacity: Callable[[Where], int]
    ) -> tuple[Sequence[Job], QueueIndex | None]:
        """The queue the policy sees on a cluster of ``total_cpus`` (``capacity``: as for
        :meth:`hides_nothing`), and the index when it describes that queue (None when
        jobs are hidden: it holds them)."""
        if self.hides_nothing(total_cpus, capacity):
            return self.jobs, self.index
        folds = self._folds
        room = {w: capacity(w) for w in self.where}
        queue = [
            j
            for j in self.jobs
            if (j.min_cpus if folds else j.procs)
            <= (room[j.needs, j.one_machine] if j.needs or j.one_machine else total_cpus)
        ]
        if len(queue) < len(self.jobs):
            return queue, None
        return queue, self.index
