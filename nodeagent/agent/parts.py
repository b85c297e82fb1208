"""The agent's account of its running parts, its mailbox's letters and its counters.

A :class:`Part` is one part as the agent accounts for it (its launch, its
process once forked, its CPUs and cores, its wall-time account); the
:class:`PartTable` holds them by job id with the CPUs they hold. Only the
agent's drain loop changes them; the exporter's thread reads the table's
``busy`` and length, plain numbers.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import ItemsView, ValuesView
from dataclasses import dataclass, field

from broker.bus import Delivery
from broker.messages import RunningPart
from nodeagent.agent.settings import REASONS, Reason
from nodeagent.launch.contract import Launch
from nodeagent.launch.spawn import JobProcess
from nodeagent.survival.state import PartRecord


@dataclass(slots=True, kw_only=True)
class Part:
    """A running part, as the agent accounts for it (monotonic times)."""

    launch: Launch
    #: None while its launch is in flight (``nodeagent.agent.runs``).
    process: JobProcess | None
    cpus: int
    attempt: int
    started: float  # wall seconds since the epoch (PartStarted.at)
    #: When the agent admitted the start (monotonic): its launch latency counts from here.
    received: float
    rate: float
    budget: float  # wall-time units left at ``changed``
    changed: float
    deadline: float  # when the wall-time limit kills it
    ending: Reason | None = None  # why the agent is ending it, if it is
    kill_at: float | None = None
    resized: bool = False
    #: The declared CPUs (``nodeagent.agent.cpuset`` slots) the part holds.
    slots: tuple[int, ...] = ()
    #: Its MPI-like ranks' pids, once found (pinned one by one from then on).
    ranks: tuple[int, ...] = ()
    #: Where its process writes why it failed (read into ``PartFinished.detail``).
    failure_file: str | None = None
    #: When its run counts from (monotonic; None while launching): its fork, or the
    #: admission for a process that cannot say when it began (an exec'd one); and
    #: how long after ``received`` that was.
    forked: float | None = None
    launch_seconds: float = 0.0
    #: Adopted from a predecessor its operator stopped: wall time of the adoption. Its
    #: lease ran on the predecessor's account until this incarnation renews it, so an
    #: end for its lease before then is that stop's, not the job's (``stopped``).
    adopted_after_stop: float | None = None

    def lapsed_on_the_stop(self) -> bool:
        """Whether it was left by a stopped predecessor and its lease was not renewed by
        this incarnation since (its lease file older than its adoption)."""
        if self.adopted_after_stop is None or self.launch.lease_file is None:
            return False
        try:
            renewed = os.stat(self.launch.lease_file).st_mtime
        except OSError:
            return True  # no lease of its own left: nobody renewed it
        return renewed < self.adopted_after_stop

    def signal(self, *, kill: bool) -> None:
        """SIGKILL or SIGTERM its process; a process still launching gets it on arrival
        (``nodeagent.agent.runs``: ``ending`` and ``kill_at`` say which)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):  # it may have exited already
            if kill:
                self.process.kill()
            else:
                self.process.terminate()

    def end(self, reason: Reason, kill_at: float) -> None:
        """End it for ``reason``: SIGTERM now, SIGKILL at ``kill_at`` if it is still there."""
        self.ending = reason
        self.kill_at = kill_at
        self.signal(kill=False)

    def record(self) -> PartRecord:
        """Its record in the state directory, for a next incarnation to adopt it."""
        launch = self.launch
        return PartRecord(
            job_id=launch.job_id,
            attempt=self.attempt,
            cpus=self.cpus,
            slots=self.slots,
            argv=tuple(launch.argv()),
            budget=self.budget,
            rate=self.rate,
            changed=self.changed,
            resized=self.resized,
        )


def wall_deadline(
    changed: float, budget: float, rate: float, time_scale: float, grace: float
) -> float:
    """When a part whose ``budget`` units were left at ``changed`` has spent them at
    ``rate`` (units per cluster second, ``time_scale`` cluster seconds per wall second),
    plus ``grace``: its wall-time limit (``nodeagent.agent.node_agent``'s rule)."""
    return changed + budget / (rate * time_scale) + grace


class PartTable:
    """The parts this agent runs, by job id, and the CPUs they hold of ``cpus``."""

    def __init__(self, cpus: int) -> None:
        self.cpus = cpus
        #: CPUs held by the parts (kept, not summed: the exporter's thread reads it).
        self.busy = 0
        self._parts: dict[str, Part] = {}

    @property
    def free(self) -> int:
        return self.cpus - self.busy

    def __len__(self) -> int:
        return len(self._parts)

    def __getitem__(self, job_id: str) -> Part:
        return self._parts[job_id]

    def get(self, job_id: str) -> Part | None:
        return self._parts.get(job_id)

    def items(self) -> ItemsView[str, Part]:
        return self._parts.items()

    def values(self) -> ValuesView[Part]:
        return self._parts.values()

    def add(self, part: Part) -> None:
        self._parts[part.launch.job_id] = part
        self.busy += part.cpus

    def pop(self, job_id: str) -> Part:
        part = self._parts.pop(job_id)
        self.busy -= part.cpus
        return part

    def resize(self, part: Part, cpus: int) -> None:
        self.busy += cpus - part.cpus
        part.cpus = cpus

    def ending_cpus(self) -> int:
        """CPUs still held by parts the agent is ending (their processes have a grace)."""
        return sum(p.cpus for p in self._parts.values() if p.ending is not None)

    def running(self) -> tuple[RunningPart, ...]:
        """The parts, as heartbeats and announcements list them."""
        return tuple(
            RunningPart(job_id=job_id, cpus=p.cpus, started=p.started, attempt=p.attempt)
            for job_id, p in self._parts.items()
        )


@dataclass(frozen=True, slots=True)
class Exited:
    """A part's process is gone, or never started (``error`` says why)."""

    job_id: str
    code: int
    attempt: int
    #: When it exited (monotonic), as its launcher or its supervisor saw it.
    at: float | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Launched:
    """A part's launch is over: its process runs."""

    job_id: str
    attempt: int
    process: JobProcess


@dataclass(frozen=True, slots=True)
class Reconnected:
    """The bus is connected again (posted by :meth:`NodeAgent.reconnected`)."""


@dataclass(frozen=True, slots=True)
class RanksFound:
    """The rank processes of a part are all forked (posted by the agent's rank finder)."""

    job_id: str
    attempt: int
    pids: tuple[int, ...]


Mail = Delivery | Exited | Launched | Reconnected | RanksFound | None  # None only wakes the loop


@dataclass(slots=True)
class Counters:
    started: int = 0
    finished: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    bad_messages: int = 0
    heartbeats: int = 0
    #: Commands and parts of an attempt other than the one running (fencing).
    stale: int = 0
    #: Resizes applied (the part re-pinned and its process told).
    resizes: int = 0
    #: Adoption at start (``nodeagent.survival.adoption``): parts taken over, parts found that
    #: could not be (reported ``fenced``), and records that could not be read.
    adopted: int = 0
    not_adopted: int = 0
    bad_records: int = 0
