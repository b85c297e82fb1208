"""What a policy sees and what it returns.

A policy is called with a :class:`SnapshotView` (now, machines, free CPUs,
running jobs, the queue in arrival order, usage history) and returns
:class:`Decisions` (start job J on parts, resize job J to parts, reservations
for display).

The queue a policy sees holds only jobs the machines could ever run: the
core hides a job wider than the CPUs online, or than those of the machines
with the capabilities it needs (``Job.needs``). A policy still places such a
job only on those machines (``scheduler.planning.placement.machines_for``);
on a cluster of one machine, every job it sees runs there.

The view is read-only by type: every member is a read-only property, so a
policy that assigns to one fails the type check. What stands behind it is a
:class:`Snapshot`, a plain mutable value: the core owns one and refreshes it
in place at every event (``SchedulerCore.snapshot``: five assignments), because
a trace replay decides hundreds of thousands of times; tests build their own.
Its sequences and mappings are the core's own containers, not copies, for the
same reason. So a snapshot is valid during the ``decide`` call it was given
to, and a policy keeps none (its containers would be stale anyway).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from model.allocation import Allocation
from model.job import Job
from model.machine import Machine, Part
from scheduler.core.queue_index import QueueIndex


@dataclass(slots=True, kw_only=True)
class RunningJob:
    """A job on CPUs. ``est_end`` is the scheduler's estimate (from the user's wall time).

    Owned and updated by the core (resizes move ``est_end``); policies read it.
    """

    job: Job
    parts: tuple[Part, ...]
    start: float
    est_end: float
    cpus: int
    #: The core's estimate of the wall time done by ``changed`` and the rate since then.
    est_done: float = 0.0
    changed: float = 0.0
    rate: float = 1.0
    #: Usage is charged to the ledger up to here (resizes charge the old allocation).
    charged_from: float = 0.0
    #: ``parts`` as the execution model sees them (pace and CPUs), when the core built
    #: it: the twin's modelled agents run the job on this same value, not a copy.
    alloc: Allocation | None = None


class UsageView(Protocol):
    """Read access to the usage history of finished work (see ``scheduler.core.usage``)."""

    @property
    def period(self) -> float: ...

    def cpu_seconds(self, kind: str, name: str, period_index: int) -> float: ...

    def names(self, kind: str) -> list[str]: ...

    def recent(self, kind: str, name: str, last: int, count: int) -> list[float]: ...

    def decayed(self, kind: str, name: str, last: int, count: int, decay: float) -> float: ...

    def knows(self, kind: str, name: str) -> bool: ...

    def count(self, kind: str) -> int: ...


@dataclass(slots=True, kw_only=True)
class Snapshot:
    """The cluster as the scheduler knows it at ``now`` (module docstring: the core
    refreshes its own in place; a policy reads it as a :class:`SnapshotView`)."""

    now: float
    machines: Sequence[Machine]
    free: Mapping[str, int]
    #: Sorted by ``est_end`` (ties in start order).
    running: Sequence[RunningJob]
    queue: Sequence[Job]
    usage: UsageView
    total_cpus: int
    speeds: Mapping[str, float]
    #: The reservations the policy returned last time, by job id: a policy that
    #: promises start times (conservative, EASY's head) reads them to keep its word.
    reservations: Mapping[str, Reservation]
    #: The queue per user and per group (``scheduler.core.queue_index``), when the core
    #: keeps one and ``queue`` is all of it; None otherwise (and in hand-built snapshots).
    by_account: QueueIndex | None = None


class SnapshotView(Protocol):
    """A :class:`Snapshot` as a policy receives it: every field read-only."""

    @property
    def now(self) -> float: ...
    @property
    def machines(self) -> Sequence[Machine]: ...
    @property
    def free(self) -> Mapping[str, int]: ...
    @property
    def running(self) -> Sequence[RunningJob]:
        """Sorted by ``est_end`` (ties in start order)."""

    @property
    def queue(self) -> Sequence[Job]: ...
    @property
    def usage(self) -> UsageView: ...
    @property
    def total_cpus(self) -> int: ...
    @property
    def speeds(self) -> Mapping[str, float]: ...
    @property
    def reservations(self) -> Mapping[str, Reservation]: ...
    @property
    def by_account(self) -> QueueIndex | None: ...


@dataclass(frozen=True, slots=True)
class Start:
    """Start ``job`` now on ``parts``."""

    job: Job
    parts: tuple[Part, ...]


@dataclass(frozen=True, slots=True)
class Resize:
    """Move running ``job`` to ``parts`` (shrink or expand; the job keeps its processes)."""

    job: Job
    parts: tuple[Part, ...]


@dataclass(frozen=True, slots=True)
class Reservation:
    """``job`` is planned to start at ``start`` on ``parts`` (for display and checks)."""

    job: Job
    start: float
    parts: tuple[Part, ...]


@dataclass(slots=True)
class Decisions:
    """A policy's answer. Resizes are applied before starts."""

    starts: list[Start] = field(default_factory=list)
    resizes: list[Resize] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    #: Free-form counters a policy reports (e.g. DPSA's budget hits); summed by the core.
    counters: dict[str, int] = field(default_factory=dict)


class Policy(Protocol):
    """A scheduling policy: pure, deterministic, no I/O.

    A policy may also say ``idle_on_empty_queue`` is true (an attribute or a property,
    read with ``getattr``; the policies here use a property, since mypyc loses the
    ``ClassVar`` of a compiled dataclass's field): it then promises to decide nothing
    at all (no start, resize, reservation or counter) when the queue is empty, and
    the core does not call it then. Each policy that says so has that promise
    checked against its own ``decide`` (``tests/scheduler/core/test_idle_on_empty_queue.py``).
    """

    @property
    def name(self) -> str: ...

    def decide(self, snapshot: SnapshotView) -> Decisions: ...
