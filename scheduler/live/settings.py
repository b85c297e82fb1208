"""The live scheduler's settings: one frozen value, checked at construction.

Durations are wall seconds unless named otherwise; the actor converts them to
cluster seconds with the clock's time scale where it compares them with
``now``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from scheduler.live.associations import Associations
from scheduler.live.limits import DEFAULTS, Limits

JobEvents = Literal["all", "lifecycle", "none"]

#: 365 days: a wall-time estimate (or work) beyond this is a client's mistake.
DEFAULT_MAX_WALLTIME = 365 * 86400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorSettings:
    """Knobs of the live scheduler."""

    mailbox_size: int = 10_000
    #: Most mailbox items handled as one batch (one commit, one decision).
    max_batch: int = 20_000
    #: The agents' heartbeat period.
    heartbeat_interval: float = 2.0
    #: An agent whose heartbeats stopped for this many periods is SUSPECT: shown as
    #: such and counted; it keeps its parts.
    suspect_factor: float = 1.5
    #: An agent whose heartbeats stopped for this many periods is LOST and its jobs
    #: are requeued. It must exceed the agents' lease (``nodeagent`` stops its parts
    #: after ``lease`` wall seconds without the broker), so that a job requeued by
    #: silence never runs twice at once: 6 x 2 s = 12 s against the default 8 s lease.
    silence_factor: float = 6.0
    tick_interval: float = 0.5
    #: Least time between two ClusterSummary publications and two rebuilds of the
    #: gauges' state (each walks every machine).
    summary_interval: float = 0.5
    #: How long a restarted scheduler waits for agents to re-announce running jobs.
    reconcile_grace: float = 10.0
    #: How long a restarted scheduler holds client requests back while the broker
    #: replays the agents' retained registrations, so that nothing is refused for a
    #: cluster it has not heard of yet. ``python -m scheduler`` sets it to 0 on a new
    #: journal (a first start: nothing can have queued for it).
    startup_grace: float = 3.0
    max_requeues: int = 2
    #: Heartbeats in a row that may omit a listed part before it counts as vanished
    #: (0: never judge parts by heartbeats).
    vanish_misses: int = 2
    #: The longest wall-time estimate, and the most work, a job may ask for
    #: (cluster seconds).
    max_walltime: float = DEFAULT_MAX_WALLTIME
    #: Which JobEvents watchers get: ``all`` transitions; ``lifecycle`` (default) all
    #: but "queued", so a submission of thousands of jobs costs one message, its
    #: reply, instead of one more per job (about 160 us of paho time each: with
    #: ``all`` a batched submission runs at ~3,700 jobs/s on MQTT, ~30,000 without).
    job_events: JobEvents = "lifecycle"
    #: Also publish each job's events on its owner's ``users/<user>/events`` (on when
    #: the scheduler logs in: with ACLs, a user reads only that topic).
    owner_events: bool = False
    #: Least wall time between two prediction passes (predicted starts and reasons,
    #: ``scheduler.live.insight``; the actor also waits ten times the last pass's own
    #: time); a pass runs after a batch that changed something, never inside one, so
    #: it never delays a submission's answer. 0 turns predictions off.
    predict_interval: float = 1.0
    #: A pass also runs this often while jobs wait and nothing happens: a running job
    #: past its estimate moves its planned end as time goes by.
    predict_refresh: float = 30.0
    #: Wall seconds after its end before an ended job (finished, failed, cancelled)
    #: moves with its events from the journal to its archive
    #: (``scheduler.runtime.journal_archive``), which a restart does not read; 0: at
    #: the next tick; None: never (the journal keeps every job).
    archive_after: float | None = 3600.0
    #: Jobs moved per timer tick at most: one batch, which holds the actor's loop for
    #: tens of milliseconds (``bench.journal_archive``, 500 a batch: 25-33 ms on
    #: average, 64 ms at worst over 100,000 jobs, 182 ms over 1,000,000 on a shared
    #: machine); a backlog moves a batch per turn of the loop.
    archive_batch: int = 500
    #: Per-user and per-request limits (``scheduler.live.limits``).
    limits: Limits = DEFAULTS
    #: The accounts and QoS each user may use (``scheduler.live.associations``); None:
    #: nothing is checked.
    associations: Associations | None = None

    def __post_init__(self) -> None:
        for name in (
            "heartbeat_interval",
            "suspect_factor",
            "silence_factor",
            "tick_interval",
            "reconcile_grace",
            "max_walltime",
        ):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if self.suspect_factor >= self.silence_factor:
            raise ValueError(
                f"suspect_factor ({self.suspect_factor}) must be below "
                f"silence_factor ({self.silence_factor})"
            )
        if self.mailbox_size < 1 or self.max_batch < 1 or self.archive_batch < 1:
            raise ValueError("mailbox_size, max_batch and archive_batch must be >= 1")
        if self.archive_after is not None and not self.archive_after >= 0:
            raise ValueError(f"archive_after must be >= 0 or never, got {self.archive_after!r}")
        if (
            self.summary_interval < 0
            or self.max_requeues < 0
            or self.vanish_misses < 0
            or self.startup_grace < 0
            or self.predict_interval < 0
            or self.predict_refresh < 0
        ):
            raise ValueError(
                "summary_interval, startup_grace, max_requeues, vanish_misses, "
                "predict_interval and predict_refresh must be >= 0"
            )
        if self.job_events not in ("all", "lifecycle", "none"):
            raise ValueError(f"job_events must be all, lifecycle or none, not {self.job_events!r}")

    @property
    def silence_limit(self) -> float:
        """Wall seconds without a heartbeat after which an agent is lost."""
        return self.heartbeat_interval * self.silence_factor

    @property
    def suspect_limit(self) -> float:
        """Wall seconds without a heartbeat after which an agent is suspect."""
        return self.heartbeat_interval * self.suspect_factor
