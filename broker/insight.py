"""The messages of the scheduler's insight: priorities by factor, and the what-if snapshot.

``accordion priority`` asks with a :class:`PriorityRequest` and reads each
queued job's priority factor by factor (as Slurm's ``sprio`` shows it);
``accordion whatif`` asks with a :class:`SnapshotRequest` and replays the
:class:`SnapshotReply` (the machines, the running jobs with what they have
done and when they are expected to end, the queue, the policy's
reservations and the users' run-time history) in the twin under other
policies. Both are requests like a status request, on the same topics and
with the same reply rules (``scheduler.live.requests``).
"""

from __future__ import annotations

import msgspec

from broker.fields import Capabilities, Cpus, Id, Message, PartSpec


class PriorityRequest(Message, tag="priority_request", frozen=True, kw_only=True):
    """Each queued job's priority, factor by factor (``accordion priority``, like Slurm's
    ``sprio``); answered by one ``PriorityReply``."""

    request_id: Id = "-"
    reply_to: Id = "-"


class PriorityFactor(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One factor's weighted share of a job's priority (``age``, ``fairshare``, ``size``,
    ``qos``; a paper's own, e.g. Flexible backfilling's ``deadline`` and ``wait``)."""

    name: str
    value: float


class PriorityRow(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A queued job's place in the policy's order (``rank`` 1 is first) and its priority
    (None under a priority that is an order only, such as FIFO's)."""

    job_id: str
    user: str
    rank: int
    priority: float | None
    factors: tuple[PriorityFactor, ...] = ()


class PriorityReply(Message, tag="priority_reply", frozen=True, kw_only=True):
    """The queue by priority (``source`` names the priority source), highest first."""

    request_id: str
    now: float
    policy: str
    source: str
    rows: tuple[PriorityRow, ...]


class SnapshotRequest(Message, tag="snapshot_request", frozen=True, kw_only=True):
    """The cluster as the scheduler plans it, for a what-if replay (``accordion whatif``);
    answered by one ``SnapshotReply``."""

    request_id: Id = "-"
    reply_to: Id = "-"


class SnapshotJob(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A job as the scheduler knows it (times in cluster seconds; ``deadline`` absolute).
    ``predicted``: the run time EASY++'s predictor gives it from its user's last jobs
    (the scheduler's history), None when the scheduler keeps none."""

    id: str
    user: str
    group: str
    procs: int
    walltime: float
    submit: float
    qos: int = 0
    deadline: float | None = None
    malleable: bool = True
    cpu_util: float = 1.0
    ref_speed: float = 1.0
    predicted: float | None = None
    #: The capabilities its machines must have (``commands``: it runs a user's command).
    needs: Capabilities = ()
    #: It runs on one machine or not at all (an MPI program: ``CommandSpec.mpi``).
    one_machine: bool = False


class SnapshotRun(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A running job: since ``start`` on ``parts``; ``done``, the work the scheduler
    believes it has done (seconds of its wall time), and ``est_end``, when it expects
    it to end (from its estimate, or its prediction under EASY++)."""

    job: SnapshotJob
    start: float
    parts: tuple[PartSpec, ...]
    done: float
    est_end: float


class SnapshotMachine(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A machine the scheduler plans with; ``cordoned``: nothing new starts there now."""

    id: str
    cpus: int
    speed: float
    cordoned: bool = False
    #: What it can do that not every machine does (``commands``: its agent runs them).
    capabilities: Capabilities = ()


class SnapshotReservation(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A start the policy promised a queued job (EASY's head, conservative's every job)."""

    job_id: str
    start: float
    parts: tuple[PartSpec, ...]


class UserRuns(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The run times of a user's last finished jobs, the latest first (EASY++'s input)."""

    user: str
    runs: tuple[float, ...]


class SnapshotReply(Message, tag="snapshot_reply", frozen=True, kw_only=True):
    """The cluster at ``now``: its machines, running jobs, queue (in arrival order), the
    policy's reservations, the users' run-time history and the per-user CPU limit."""

    request_id: str
    now: float
    policy: str
    machines: tuple[SnapshotMachine, ...]
    running: tuple[SnapshotRun, ...]
    queue: tuple[SnapshotJob, ...]
    reservations: tuple[SnapshotReservation, ...] = ()
    history: tuple[UserRuns, ...] = ()
    #: The per-user CPU limit the scheduler applies (None: none), so that a replay
    #: holds the same jobs back.
    max_user_cpus: Cpus | None = None
