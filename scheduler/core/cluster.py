"""The core's cluster: its machines, their free CPUs, and the running jobs holding them.

Theory of operation. Machines join (registration, or the twin building its
cluster) and leave (a lost agent); the cluster keeps them sorted for the
placement rules, with their speeds, free CPUs and total. A job is put on
CPUs by :meth:`Cluster.hold` (its parts booked and checked,
``scheduler.core.booking``; its allocation and rate worked out once,
``model.allocation``), moved by :meth:`Cluster.move` (a resize) and taken off
by :meth:`Cluster.release`, which gives its CPUs back and charges the usage
ledger for what it held. The running jobs themselves are the
:class:`~scheduler.core.running_set.RunningSet` the core shares with its queue
index; the index hears of every start and end, and the ledger of every name
that ever held CPUs.

A machine's capabilities (``model.machine``) may change while it stays
(:meth:`Cluster.change`: its agent came back as a new process that adopted its
parts, and says it does other things now); the CPUs of the machines with each
set of capabilities (in all, or on the largest of them, for a job that must
run on one machine) are worked out once and kept until a machine comes, goes
or changes (:meth:`Cluster.capacity`).

Job states are not the cluster's: the core moves them around these calls.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import replace

from model.allocation import AllocationMemo
from model.execution import ExecutionModel
from model.job import Job
from model.machine import Capability, Machine, Part
from scheduler.core.answers import PolicyError
from scheduler.core.booking import book, release
from scheduler.core.job_queue import Where
from scheduler.core.queue_index import QueueIndex
from scheduler.core.running_set import RunningSet
from scheduler.core.snapshot import RunningJob
from scheduler.core.usage import UsageLedger
from scheduler.planning.placement import machine_order


class Cluster:
    """Machines, free CPUs and the jobs on them (see the module docstring)."""

    __slots__ = (
        "_allocs",
        "_capacity",
        "_index",
        "_noted",
        "capabilities",
        "free",
        "machines",
        "running",
        "speeds",
        "total",
        "usage",
    )

    def __init__(
        self,
        *,
        machines: Iterable[Machine],
        execution: ExecutionModel,
        running: RunningSet,
        usage: UsageLedger,
        index: QueueIndex,
    ) -> None:
        #: Sorted for the placement rules; replaced (not edited) when a machine comes
        #: or goes, so a snapshot holding the old list can tell.
        self.machines: Sequence[Machine] = []
        self.speeds: dict[str, float] = {}
        self.capabilities: dict[str, frozenset[Capability]] = {}
        self.free: dict[str, int] = {}
        self.total = 0
        self.running = running
        self.usage = usage
        self._index = index
        # Allocations and rates, remembered while the machines stay the same.
        self._allocs = AllocationMemo(self.speeds, execution)
        # (user, group) pairs already noted in the ledger (see hold).
        self._noted: set[tuple[str, str]] = set()
        # The CPUs of the machines with each set of capabilities asked about (capacity()).
        self._capacity: dict[Where, int] = {}
        for m in machines:
            self.join(m)

    def join(self, machine: Machine) -> None:
        """A machine registered (or the twin's cluster is being built)."""
        if machine.id in self.speeds:
            raise ValueError(f"machine {machine.id!r} is already known")
        # Inserted in place of a sort: registering n machines costs O(n) each, not
        # O(n log n) (a scheduler hears thousands of agents register at once).
        machines = list(self.machines)
        bisect.insort(machines, machine, key=machine_order)
        self.machines = machines
        self.speeds[machine.id] = machine.speed
        self.capabilities[machine.id] = machine.capabilities
        self.free[machine.id] = machine.cpus
        self.total += machine.cpus
        self._allocs.clear()
        self._capacity.clear()

    def leave(self, machine_id: str) -> None:
        """A machine is gone; every job that had a part there has left it already."""
        if machine_id not in self.speeds:
            raise KeyError(f"machine {machine_id!r} is not known")
        self.machines = [m for m in self.machines if m.id != machine_id]
        del self.speeds[machine_id]
        del self.capabilities[machine_id]
        self._allocs.clear()
        self._capacity.clear()
        # Every job with a part here has left, so all of the machine's CPUs are free.
        self.total -= self.free.pop(machine_id)

    def change(self, machine_id: str, capabilities: frozenset[Capability]) -> None:
        """A known machine now has ``capabilities``; its CPUs, speed and jobs stay."""
        if machine_id not in self.speeds:
            raise KeyError(f"machine {machine_id!r} is not known")
        # A new list, as for a join: a snapshot holding the old one can tell.
        self.machines = [
            replace(m, capabilities=capabilities) if m.id == machine_id else m
            for m in self.machines
        ]
        self.capabilities[machine_id] = capabilities
        self._capacity.clear()

    def capacity(self, where: Where) -> int:
        """The most CPUs a job that may run in ``where`` can have: those of the machines
        with every capability it needs, or of the largest of them if it must run on one."""
        needs, one_machine = where
        if not (needs or one_machine):
            return self.total
        known = self._capacity.get(where)
        if known is None:
            able = [m.cpus for m in self.machines if needs <= m.capabilities]
            known = self._capacity[where] = max(able, default=0) if one_machine else sum(able)
        return known

    def hold(
        self,
        job: Job,
        parts: tuple[Part, ...],
        least: int,
        now: float,
        start: float | None = None,
    ) -> RunningJob:
        """Put ``job`` on ``parts`` (checked: a bad part raises :class:`PolicyError`);
        ``least`` is the fewest CPUs it may hold, ``start`` when it began if before
        ``now`` (a restored job)."""
        cpus = book(self.free, job, parts, least)
        allocs = self._allocs
        alloc = allocs.of(parts)
        run = self.running.start(job, parts, cpus, allocs.rate(alloc, job), now, alloc, start)
        index = self._index
        if index.awake:
            index.add_running(run)
        # The ledger knows every name that ever held CPUs from the moment it does,
        # so fair-share counts names seen without walking the running jobs. A pair
        # noted before changes nothing in it (both names known, their order set),
        # so it is noted once: most jobs of a trace come from a known user.
        pair = (job.user, job.group)
        if pair not in self._noted:
            self._noted.add(pair)
            self.usage.note(user=job.user, group=job.group)
        return run

    def move(self, run: RunningJob, parts: tuple[Part, ...], least: int, now: float) -> None:
        """Resize ``run`` to ``parts`` at ``now``: its old allocation is charged and the
        new one booked; a bad part raises :class:`PolicyError` with nothing changed."""
        free = self.free
        release(free, run.parts)
        try:
            cpus = book(free, run.job, parts, least)
        except PolicyError:
            for part in run.parts:
                free[part.machine] -= part.cpus
            raise
        # Charge the old allocation before it changes, so usage follows the CPUs held.
        self._charge(run, now)
        allocs = self._allocs
        alloc = allocs.of(parts)
        self.running.resize(run, parts, cpus, allocs.rate(alloc, run.job), now, alloc=alloc)

    def release(self, run: RunningJob, now: float) -> None:
        """``run``, already out of the running set, gives its CPUs back and is charged."""
        index = self._index
        if index.awake:
            index.remove_running(run)
        release(self.free, run.parts)
        self._charge(run, now)

    def _charge(self, run: RunningJob, now: float) -> None:
        job = run.job
        self.usage.charge(
            user=job.user, group=job.group, start=run.charged_from, end=now, cpus=run.cpus
        )
