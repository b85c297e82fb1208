"""The node agent's settings and the snapshot of its counters the exporter reads."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from nodeagent.survival.lease import DEFAULT_LEASE

Reason = Literal["done", "failed", "cancelled", "walltime", "lost", "fenced", "stopped"]
REASONS: tuple[Reason, ...] = get_args(Reason)
#: How an agent stops (``nodeagent.agent.node_agent``'s stop rule): it leaves its parts
#: for its next incarnation, drains them, or ends them.
StopMode = Literal["leave", "drain", "end"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSettings:
    """How the agent behaves; all durations are wall seconds.

    ``time_scale``: when set, the compression this agent accepts (a StartPart
    with another one is refused, so a demo with a misconfigured scheduler fails
    loudly instead of running at the wrong speed); None accepts the scheduler's.
    ``remember_finished``: how many finished job ids are kept for idempotency.
    """

    heartbeat_interval: float = 2.0
    kill_grace: float = 5.0
    walltime_grace: float = 2.0
    time_scale: float | None = None
    mailbox_size: int = 1024
    remember_finished: int = 100_000
    #: Wall seconds a part runs on without the broker acknowledging this agent's
    #: heartbeats (``nodeagent.survival.lease``); 0: no lease. Keep it below the scheduler's
    #: silence limit (6 heartbeats, 12 s by default) and above a broker restart.
    lease: float = DEFAULT_LEASE
    #: Where the lease file goes (None: the system's temporary directory).
    lease_dir: str | None = None
    #: The host cores this agent owns (``nodeagent.agent.cpuset``); None: its affinity.
    cpuset: tuple[int, ...] | None = None
    #: The measured benchmark score and spread (``nodeagent.job.kernel``), announced in
    #: the registration when the machine's speed was measured (``--speed auto``).
    speed_score: float | None = None
    speed_spread: float | None = None
    #: Parts outlive a killed agent within their lease and the next incarnation for
    #: the machine adopts them (``nodeagent.survival.adoption``; needs a state directory and a
    #: lease). False: they stop with their agent, and are killed by the next one.
    adopt: bool = True
    #: Wall seconds the agent looks for an MPI-like part's ranks before giving up
    #: pinning them one by one (they stay on the part's cores, inherited).
    rank_search: float = 10.0
    #: Stopped (SIGTERM), drain: take no new part, run the parts to their end, then
    #: say goodbye; False: leave them running for the next incarnation (or end them,
    #: without adoption). See ``nodeagent.agent.node_agent``, "Stop rule".
    drain_on_stop: bool = False

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "kill_grace"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if not (self.walltime_grace >= 0 and math.isfinite(self.walltime_grace)):
            raise ValueError(f"walltime_grace must be >= 0, got {self.walltime_grace!r}")
        if self.time_scale is not None and not (
            self.time_scale > 0 and math.isfinite(self.time_scale)
        ):
            raise ValueError(f"time_scale must be > 0, got {self.time_scale!r}")
        if not (self.lease >= 0 and math.isfinite(self.lease)):
            raise ValueError(f"lease must be a finite number >= 0, got {self.lease!r}")
        if self.mailbox_size < 1 or self.remember_finished < 1:
            raise ValueError("mailbox_size and remember_finished must be >= 1")


@dataclass(frozen=True, slots=True)
class AgentStats:
    """What the exporter reads at scrape time (a consistent snapshot)."""

    agent_id: str
    cpus: int
    cpus_busy: int
    parts_running: int
    parts_started: int
    parts_finished: Mapping[str, int]
    bad_messages: int
    heartbeats: int
    #: More declared CPUs than real cores (packing emulated), and the measured speed.
    emulated: bool = False
    cores: int = 0
    speed_score: float | None = None
    resizes: int = 0
    #: Parts this incarnation adopted at start, and parts it found but could not adopt.
    adopted: int = 0
    not_adopted: int = 0
