"""The agent's account of its running parts, its mailbox's letters and its counters."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from broker.bus import Delivery
from nodeagent.agent.settings import REASONS, Reason
from nodeagent.launch.contract import Launch
from nodeagent.launch.spawn import JobProcess


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


@dataclass(frozen=True, slots=True)
class Exited:
    job_id: str
    code: int
    attempt: int
    #: When it exited (monotonic), as its launcher or its supervisor saw it.
    at: float | None = None


@dataclass(frozen=True, slots=True)
class Launched:
    """A part's launch is over: its process runs, or ``error`` says why it does not."""

    job_id: str
    attempt: int
    process: JobProcess | None
    error: str | None = None


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
