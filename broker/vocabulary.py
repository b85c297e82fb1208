"""The wire's closed vocabularies: job states, job event kinds and refusal codes.

Each is a ``StrEnum``: msgspec encodes a member as its value, so a payload
stays readable (``"event": "resized"``), and decodes only the listed values,
so an unknown one is an ``invalid`` message like any other bad field. The
same values are the labels of the scheduler's metrics (``reason`` of
``accordion_scheduler_rejections_total`` and ``..._bad_messages_total``),
so a label is never a free text and its cardinality is the enum's size.

A refusal is a code from here plus a sentence for people: clients branch
and count on the code, and print the text.

The scheduler's own lifecycle (``scheduler.core.job_lifecycle``) has the same
job states; the wire keeps its own copy because ``broker`` imports nothing of
the project, and a test holds the two equal.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    """Where a job is in its life (QUEUED -> RUNNING -> a final state; a requeue goes
    back to QUEUED)."""

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        """Whether the job has left for good (nothing happens to it afterwards)."""
        return self in _FINAL


_FINAL = frozenset({JobState.FINISHED, JobState.FAILED, JobState.CANCELLED})


class JobEventKind(StrEnum):
    """What happened to a job, as a ``JobEvent`` tells watchers.

    Five kinds are the job entering a state (``queued``: accepted; ``running``:
    started, or found running by a restarted scheduler; and the three final
    states); the others happen to a running or queued job without a change of
    state: ``resized`` (its CPUs changed, shrunk or expanded), ``requeued``
    (its machine was lost, it waits again), ``held`` (its agent died and its
    parts are held for a new incarnation to adopt), ``adopted`` (one did).
    """

    QUEUED = "queued"
    RUNNING = "running"
    RESIZED = "resized"
    REQUEUED = "requeued"
    HELD = "held"
    ADOPTED = "adopted"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def state(self) -> JobState:
        """The job's state once this happened."""
        return _STATE_AFTER[self]


_STATE_AFTER: dict[JobEventKind, JobState] = {
    JobEventKind.QUEUED: JobState.QUEUED,
    JobEventKind.RUNNING: JobState.RUNNING,
    JobEventKind.RESIZED: JobState.RUNNING,
    JobEventKind.REQUEUED: JobState.QUEUED,
    JobEventKind.HELD: JobState.RUNNING,
    JobEventKind.ADOPTED: JobState.RUNNING,
    JobEventKind.FINISHED: JobState.FINISHED,
    JobEventKind.FAILED: JobState.FAILED,
    JobEventKind.CANCELLED: JobState.CANCELLED,
}


class Rejection(StrEnum):
    """Why the scheduler refused one submitted job (``SubmitResult.code``)."""

    #: It needs more CPUs than the cluster has in all (its machines as configured).
    TOO_WIDE = "too_wide"
    #: Its wall time or work is beyond the scheduler's maximum.
    WALLTIME = "walltime"
    #: A spec the scheduler cannot turn into a job.
    INVALID = "invalid"
    #: Its id is already used by a job with another spec.
    ID_REUSED = "id_reused"
    #: Its user has as many jobs queued as the scheduler's limit allows
    #: (``max_queued_per_user``, Slurm's ``MaxSubmitJobs``).
    QUEUE_LIMIT = "queue_limit"
    #: It asks for more CPUs than one user's running jobs may hold (``max_user_cpus``):
    #: it could never start.
    CPU_LIMIT = "cpu_limit"
    #: Its account is not one its user may charge (the association file), or its
    #: user has no association at all.
    ACCOUNT = "account"
    #: Its QoS is above the highest its user may ask for (the association file).
    QOS = "qos"
    #: The scheduler cannot journal it now (its disk is full or failing): not accepted,
    #: try again later.
    JOURNAL = "journal"


class CancelRefusal(StrEnum):
    """Why a cancel did nothing (``CancelReply.code``)."""

    #: No such job (or another user's, which is answered the same).
    UNKNOWN_JOB = "unknown_job"
    #: The job had already finished or failed.
    ENDED = "ended"
    #: The scheduler cannot journal the cancel now (its disk is full or failing).
    JOURNAL = "journal"


class DrainRefusal(StrEnum):
    """Why a drain or resume did nothing (``DrainReply.code``)."""

    #: No agent ever registered that machine.
    UNKNOWN_MACHINE = "unknown_machine"
    #: The scheduler cannot journal the drain now (its disk is full or failing).
    JOURNAL = "journal"


class MachineState(StrEnum):
    """Where a machine's agent is in its lifecycle (``MachineStatus.state``); the
    scheduler's own table (``scheduler.live.agent_lifecycle``) has the same states.

    ``online``; ``suspect`` (a few heartbeats missed, nothing new placed there);
    ``draining`` (an admin drained it, or its agent drains as it stops: its parts
    run to their end, nothing new is placed there); ``held`` (its agent died, its
    parts are held for a new incarnation to adopt); ``stopped`` (its operator
    stopped its agent, its parts are held for the next incarnation); ``lost``;
    ``gone`` (its agent retired).
    """

    ONLINE = "online"
    SUSPECT = "suspect"
    DRAINING = "draining"
    HELD = "held"
    STOPPED = "stopped"
    LOST = "lost"
    GONE = "gone"


class BadMessage(StrEnum):
    """Why a receiver refused a message (``ErrorReply.code``, and the metric label).

    The first three are the codec's (``broker.codec``), and ``too_large`` for a
    payload past its limit; the others are a valid message the scheduler will
    not act on.
    """

    NOT_MSGPACK = "not_msgpack"
    UNKNOWN_KIND = "unknown_kind"
    INVALID = "invalid"
    #: Another protocol version than the receiver's.
    VERSION = "version"
    #: A kind that is not accepted on that topic, or a sender naming someone else.
    UNEXPECTED = "unexpected"
    #: A user's request about another user's job (answered as if it did not exist).
    FORBIDDEN = "forbidden"
    #: A payload over the scheduler's request bound (``max_request_bytes``) or the
    #: wire's (``broker.limits``), or a request whose answer would be.
    TOO_LARGE = "too_large"
    #: More jobs in one request than the scheduler takes (``max_jobs_per_request``).
    TOO_MANY = "too_many"
