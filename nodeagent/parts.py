"""The agent's account of its running parts, its mailbox's letters and its counters."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.bus import Delivery
from nodeagent.settings import REASONS, Reason
from nodeagent.spawn import JobProcess, Launch


@dataclass(slots=True, kw_only=True)
class Part:
    """A running part, as the agent accounts for it (monotonic times)."""

    launch: Launch
    process: JobProcess
    cpus: int
    attempt: int
    started: float  # wall seconds since the epoch (PartStarted.at)
    rate: float
    budget: float  # wall-time units left at ``changed``
    changed: float
    deadline: float  # when the wall-time limit kills it
    ending: Reason | None = None  # why the agent is ending it, if it is
    kill_at: float | None = None
    resized: bool = False
    #: The declared CPUs (``nodeagent.cpuset`` slots) the part holds.
    slots: tuple[int, ...] = ()
    #: Its MPI-like ranks' pids, once found (pinned one by one from then on).
    ranks: tuple[int, ...] = ()
    #: Where its process writes why it failed (read into ``PartFinished.detail``).
    failure_file: str | None = None


@dataclass(frozen=True, slots=True)
class Exited:
    job_id: str
    code: int
    attempt: int


@dataclass(frozen=True, slots=True)
class Reconnected:
    """The bus is connected again (posted by :meth:`NodeAgent.reconnected`)."""


@dataclass(frozen=True, slots=True)
class RanksFound:
    """The rank processes of a part are all forked (posted by the agent's rank finder)."""

    job_id: str
    attempt: int
    pids: tuple[int, ...]


Mail = Delivery | Exited | Reconnected | RanksFound | None  # None only wakes the loop


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
