"""One message type per kind, with its schema (msgspec structs, validated on decode).

Every message is a tagged struct: the ``kind`` field names it on the wire,
so one decoder reads any of them and refuses unknown kinds. Constraints
(positive sizes, bounded strings) are part of the types, so a payload that
decodes is well-formed; what is *reasonable* (a job wider than the cluster)
is the scheduler's to judge and answer.

Names: events are past tense (``PartStarted``), commands imperative
(``StartPart``), requests and replies say so.

Required fields. Every field of a message is keyword-only (``kw_only`` on the
base and on each kind: msgspec applies it to the fields a class declares), so
a field without a default is required: a payload that lacks it does not decode
(an ``invalid`` message). A field keeps a default only where the default is
a meaning the receiver acts on: ``"-"`` for "no request id" or "no reply
wanted", ``attempt`` 0 for "not said", a ``pace`` of 1 (the reference speed,
as a machine's ``speed``), None for a value an older sender did not send.
States, event kinds and refusal codes are the enums of ``broker.vocabulary``.

Protocol version 2 (``broker.topics.PROTOCOL_VERSION``): events carry an
``event`` kind instead of a ``state`` that mixed states with what happened,
refusals a ``code`` beside their text, a status its ``reconciling`` flag;
required fields are required. A version-1 peer cannot read these messages
(unknown fields), hence the new version and its own topic root.

Protocol version 3: an agent says when its operator stops it
(``AgentOffline(reason="stopping")``, parts it ends
``PartFinished(reason="stopped")``) and when it drains
(``AgentOnline.draining``); an admin drains and resumes machines
(``DrainMachine``); job events carry their number in the stream they are
published on (``JobEvent.stream``), which a watcher that missed some asks for
(``EventsRequest``); a status says each machine's state. For a cluster many
users share: a ``StatusRequest`` has filters (user, states, ids), a page size
and a cursor, and its reply totals and the cursor of the next page, never
more than ``broker.limits``'s reply bound; ``CancelJobs`` cancels many jobs in
one request and is answered with counts; refusals gained the codes of the
scheduler's limits and associations and of a journal that cannot be written.
A version-2 peer cannot read these messages (unknown fields and values),
hence the new version (the rule above: a peer of the previous version could
not read this one's messages).

Room is left in :class:`JobStatus` for what a queued job's row will say next
(its predicted start, its reason to wait): fields with defaults, added in a
later version by the same rule.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from broker.limits import MAX_MPI_MESSAGE_BYTES
from broker.topics import PROTOCOL_VERSION
from broker.vocabulary import (
    BadMessage,
    CancelRefusal,
    DrainRefusal,
    JobEventKind,
    JobState,
    MachineState,
    Rejection,
)

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:@-]+$")]
#: A job's id: an :data:`Id` that is not ``.``, ``..`` (path-like, so unsafe as a file or
#: topic name downstream) nor ``-`` (the protocol's "none" for request and reply ids).
JobId = Annotated[
    str,
    msgspec.Meta(min_length=1, max_length=128, pattern=r"^(?!(?:\.|\.\.|-)$)[A-Za-z0-9_.:@-]+$"),
]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
# Bounded above so inf and absurd values (a job of 30,000 years) fail on decode.
Seconds = Annotated[float, msgspec.Meta(ge=0, le=1e12)]
PositiveSeconds = Annotated[float, msgspec.Meta(gt=0, le=1e12)]
#: A part's attempt: 1 for a job's first start, n + 1 after its n-th requeue. 0 in a
#: report or command means "not said" (any attempt), for commands sent before fencing.
Attempt = Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]
Seq = Annotated[int, msgspec.Meta(ge=0)]
Cpus = Annotated[int, msgspec.Meta(ge=1, le=1_048_576)]
Speed = Annotated[float, msgspec.Meta(gt=0, le=1e6)]
Fraction = Annotated[float, msgspec.Meta(gt=0, le=1)]
Workload = Literal["sleep", "mpi"]
#: The most job ids a status or cancel request may name, and the most rows a status
#: page may hold (``broker.limits.MAX_REPLY_BYTES`` bounds its bytes first).
MAX_IDS = 10_000
#: A shell pattern over job ids (``*``, ``?``, ``[...]``, ``[!...]``): an id's own
#: characters and these.
Glob = Annotated[
    str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:@*?!\[\]-]+$")
]
Ids = Annotated[tuple[Id, ...], msgspec.Meta(max_length=MAX_IDS)]
States = Annotated[tuple[JobState, ...], msgspec.Meta(max_length=len(JobState))]
Count = Annotated[int, msgspec.Meta(ge=0)]


class Message(
    msgspec.Struct, tag_field="kind", forbid_unknown_fields=True, frozen=True, kw_only=True
):
    """Base of every message; ``v`` is the protocol version of the sender.

    ``kw_only``: the kinds' fields may then go without defaults (required)
    although ``v`` has one.
    """

    v: int = PROTOCOL_VERSION


# -- jobs ---------------------------------------------------------------------


class MpiSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The MPI-like workload's parameters (``nodeagent.job.mpi``): what each rank does.

    Every iteration, each rank burns ``compute`` CPU-seconds (at the job's
    ``ref_speed``; a machine's speed scales them), then exchanges
    ``message_bytes`` with every other rank by ``pattern``: an ``allreduce``
    (element-wise sum of ``message_bytes`` of float64s over all ranks) or a
    ``barrier`` (nobody goes on before everybody arrived). Bounded so a typo
    cannot start a year-long or memory-hungry job.
    """

    iterations: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 10
    compute: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 0.1
    #: A part publishes its contribution in one message: below the wire's limit.
    message_bytes: Annotated[int, msgspec.Meta(ge=0, le=MAX_MPI_MESSAGE_BYTES)] = 1024
    pattern: Literal["allreduce", "barrier"] = "allreduce"


class JobSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A job as a client submits it. Times are seconds at the cluster's time base.

    ``work`` is the job's run time on a machine of speed ``ref_speed`` at MPL 1
    (what the sleep workload performs); ``walltime`` is the user's estimate of
    it, the only one the scheduler uses. ``deadline`` is relative to the
    submission.
    """

    id: JobId
    procs: Cpus
    walltime: PositiveSeconds
    #: Positive: a job of no work is a client's mistake (and -0.0 is refused too). The
    #: scheduler also refuses work or wall time beyond its configured maximum.
    work: PositiveSeconds
    workload: Workload = "sleep"
    user: Name = "nobody"
    group: Name = "nobody"
    qos: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 0
    deadline: PositiveSeconds | None = None
    #: False marks the job rigid (``accordion submit --rigid``): a policy that folds jobs
    #: (FCFS-malleable) never runs it on fewer CPUs than ``procs``. Jobs are malleable
    #: by default, as in the FCFS-malleable paper.
    malleable: bool = True
    cpu_util: Fraction = 1.0
    ref_speed: Speed = 1.0
    #: The MPI-like workload's parameters (``workload="mpi"``; its defaults when None).
    mpi: MpiSpec | None = None


def owned_by(spec: JobSpec, user: str) -> JobSpec:
    """``spec`` with ``user`` as its owner (the scheduler's authenticated submitter)."""
    return spec if spec.user == user else msgspec.structs.replace(spec, user=user)


def charged_to(spec: JobSpec, account: str) -> JobSpec:
    """``spec`` with ``account`` as its account (``group``): a user's default account."""
    return spec if spec.group == account else msgspec.structs.replace(spec, group=account)


class MachineSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    id: Id
    cpus: Cpus
    speed: Speed = 1.0
    labels: tuple[Name, ...] = ()


class PartSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    machine: Id
    cpus: Cpus


# -- requests and replies (clients <-> scheduler) --------------------------------


class SubmitJobs(Message, tag="submit_jobs", frozen=True, kw_only=True):
    """Submit one or many jobs; answered by one ``SubmitReply`` on ``reply_to``."""

    request_id: Id = "-"
    #: The client id: replies go to ``Topics.replies(reply_to)``, never to a topic the
    #: client names, so a request cannot make the scheduler publish anywhere else.
    reply_to: Id = "-"
    jobs: tuple[JobSpec, ...]


class CancelJob(Message, tag="cancel_job", frozen=True, kw_only=True):
    request_id: Id = "-"
    reply_to: Id = "-"
    job_id: Id


class CancelJobs(Message, tag="cancel_jobs", frozen=True, kw_only=True):
    """Cancel many jobs in one request (journalled in one transaction); answered by
    one ``CancelJobsReply`` of counts.

    The jobs are those named in ``job_ids`` and the queued or running jobs whose
    id matches one of ``patterns``, or, with neither, every queued or running
    job of ``user``; of them only ``user``'s (None: anyone's) in ``states``
    (empty: queued and running). At least one of ``job_ids``, ``patterns`` and
    ``user`` is required. A user may cancel only their own jobs (the others'
    are counted ``not_allowed``); an admin, anyone's.
    """

    request_id: Id = "-"
    reply_to: Id = "-"
    job_ids: Ids = ()
    patterns: Annotated[tuple[Glob, ...], msgspec.Meta(max_length=16)] = ()
    user: Name | None = None
    states: States = ()


class StatusRequest(Message, tag="status_request", frozen=True, kw_only=True):
    """The machines, and a page of the queued and running jobs with their totals.

    Filters: ``user`` (None: everyone's jobs), ``states`` (empty: queued and
    running; a final state matches nothing, a status lists live jobs), ``ids``
    (empty: any). A page holds at most ``limit`` jobs and at most
    ``broker.limits.MAX_REPLY_BYTES``; the reply's ``next_cursor`` asks for the
    next one. Pages go machines (when ``machines``), running jobs, queued jobs,
    each in its own order (machine id; arrival): a job that moves meanwhile may
    show on two pages or none, the totals count each once.
    """

    request_id: Id = "-"
    reply_to: Id = "-"
    user: Name | None = None
    states: States = ()
    ids: Ids = ()
    limit: Annotated[int, msgspec.Meta(ge=0, le=MAX_IDS)] = MAX_IDS
    cursor: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | None = None
    machines: bool = True


class HistoryRequest(Message, tag="history_request", frozen=True, kw_only=True):
    """Every journalled ``JobEvent`` of ``job_ids`` (a watcher filling a gap); answered
    by one ``HistoryReply``. At most 10,000 jobs per request."""

    request_id: Id = "-"
    reply_to: Id = "-"
    job_ids: Annotated[tuple[Id, ...], msgspec.Meta(max_length=10_000)]


class EventsRequest(Message, tag="events_request", frozen=True, kw_only=True):
    """The requester's event stream after number ``after`` (a watcher catching up on
    what it missed, whichever jobs those were): at most ``limit`` events, in stream
    order; answered by one ``EventsReply``. A user's stream holds their own jobs'
    events; an admin's, or a request on a broker without logins, every job's."""

    request_id: Id = "-"
    reply_to: Id = "-"
    after: Seq
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1000


class DrainMachine(Message, tag="drain_machine", frozen=True, kw_only=True):
    """An admin drains a machine (``drain``: no new part is placed on it, its running
    parts go on to their end) or resumes it (``drain=False``); answered by one
    ``DrainReply``. A drain outlasts its agent's restarts and the scheduler's."""

    request_id: Id = "-"
    reply_to: Id = "-"
    machine: Id
    drain: bool = True


class SubmitResult(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One job's answer: accepted (perhaps a ``duplicate`` of one accepted before), or
    refused with a ``code`` and a ``reason`` in words. A refusal without a code, or
    an acceptance with one, does not decode."""

    job_id: str
    accepted: bool
    reason: str | None = None
    duplicate: bool = False
    code: Rejection | None = None

    def __post_init__(self) -> None:
        if self.accepted == (self.code is not None):
            raise ValueError("a refused job has a code, an accepted one has none")


class SubmitReply(Message, tag="submit_reply", frozen=True, kw_only=True):
    request_id: str
    results: tuple[SubmitResult, ...]


class CancelJobsReply(Message, tag="cancel_jobs_reply", frozen=True, kw_only=True):
    """What a ``CancelJobs`` did: jobs ``cancelled`` now; named ids that are no job
    (``not_found``); jobs of another user (``not_allowed``); named jobs that had
    already ended (``already_final``); named jobs the filters left out
    (``skipped``). A request refused whole (the journal cannot be written now) did
    nothing: its counts are 0, ``code`` says why and ``reason`` in words."""

    request_id: str
    cancelled: Count
    not_found: Count
    not_allowed: Count
    already_final: Count
    skipped: Count
    code: CancelRefusal | None = None
    reason: str | None = None


class CancelReply(Message, tag="cancel_reply", frozen=True, kw_only=True):
    """``cancelled``: the job is cancelled (now, or it was already). Otherwise ``code``
    says why not and ``reason`` in words."""

    request_id: str
    job_id: str
    cancelled: bool
    reason: str | None = None
    code: CancelRefusal | None = None


class JobStatus(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """A queued or running job; ``reconciling``: running as the journal says, not yet
    confirmed by its agents (a scheduler that just restarted).

    What a chart of the plan needs besides its place (``accordion gantt``):
    ``walltime``, the user's estimate (seconds at the job's reference speed);
    ``est_end``, a running job's end as the scheduler estimates it from that wall
    time (the end its plan counts on), None for a job not running yet;
    ``deadline``, absolute, None for a job without one.
    """

    id: str
    state: JobState
    procs: int
    user: str
    submit: float
    walltime: float
    start: float | None = None
    parts: tuple[PartSpec, ...] = ()
    est_end: float | None = None
    deadline: float | None = None
    reconciling: bool = False


class MachineStatus(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A machine as the scheduler sees it: ``online`` when its agent is heard from,
    ``state`` its agent's lifecycle state (None from an older scheduler)."""

    id: str
    cpus: int
    speed: float
    free: int
    online: bool
    state: MachineState | None = None


class UserTotals(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One user's jobs: queued, running, and the CPUs the running ones asked for
    (their processes, shrunk or not: what ``max_user_cpus`` counts)."""

    user: str
    queued: Count
    running: Count
    cpus: Count


class StatusTotals(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The jobs a status's ``user`` and ``ids`` filters select, all pages together
    (the ``states`` filter is left out, so both counts show). For an admin,
    ``users`` users have jobs and ``by_user`` lists the ones with most (at most
    :data:`TOP_USERS`); for a user, ``by_user`` is empty."""

    queued: Count
    running: Count
    cpus: Count
    users: Count = 0
    by_user: Annotated[tuple[UserTotals, ...], msgspec.Meta(max_length=1000)] = ()


#: The most users an admin's status totals list (those with the most jobs).
TOP_USERS = 100


class StatusReply(Message, tag="status_reply", frozen=True, kw_only=True):
    """One page (see ``StatusRequest``): the machines on the first, then jobs."""

    request_id: str
    now: float
    machines: tuple[MachineStatus, ...]
    queue: tuple[JobStatus, ...]
    running: tuple[JobStatus, ...]
    totals: StatusTotals
    #: The next page's ``StatusRequest.cursor``; None on the last page.
    next_cursor: str | None = None
    #: The most CPUs one user's running jobs may hold (None: no limit): a queued job
    #: that would take its user past it waits until their running jobs end.
    max_user_cpus: Cpus | None = None


class HistoryReply(Message, tag="history_reply", frozen=True, kw_only=True):
    """The events of the requested jobs, by job then ``seq``; unknown ids are listed
    in ``unknown``."""

    request_id: str
    events: tuple[JobEvent, ...]
    unknown: tuple[str, ...]


class EventsReply(Message, tag="events_reply", frozen=True, kw_only=True):
    """The requested stream's events after the request's ``after``, in order, each
    with its ``stream`` number; ``last`` is the stream's last number now, ``more``
    that events past these remain (the request's ``limit`` was reached). A number
    up to ``last`` (or, with ``more``, up to the last event here) that is missing is
    an event the journal does not hold: the scheduler could not write it."""

    request_id: str
    events: tuple[JobEvent, ...]
    last: Seq
    more: bool = False


class DrainReply(Message, tag="drain_reply", frozen=True, kw_only=True):
    """``draining``: whether ``machine`` drains now; ``running``: the jobs with a part
    on it (a drained machine is empty once that is 0). A refusal has a ``code`` and
    a ``reason`` in words."""

    request_id: str
    machine: str
    draining: bool
    running: Annotated[int, msgspec.Meta(ge=0)] = 0
    reason: str | None = None
    code: DrainRefusal | None = None


class ErrorReply(Message, tag="error_reply", frozen=True, kw_only=True):
    """A request the scheduler could not read or accept as a whole: ``code`` says why,
    ``error`` in words; ``request_id`` is None when it could not be read."""

    request_id: str | None
    code: BadMessage
    error: str


# -- agents <-> scheduler ---------------------------------------------------------


class RunningPart(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A part an agent is running, as it reports on (re)registration and heartbeats."""

    job_id: Id
    cpus: Cpus
    started: float
    attempt: Attempt = 0


class AgentOnline(Message, tag="agent_online", frozen=True, kw_only=True):
    """Retained on the agent's state topic while it lives."""

    machine: MachineSpec
    incarnation: Id
    running: tuple[RunningPart, ...]
    #: Wall seconds the agent keeps its parts running without the broker acknowledging
    #: its heartbeats (its lease); 0 when it has none. The scheduler checks that it
    #: declares an agent lost only later than that (see ``scheduler.live.agents``).
    lease: Annotated[float, msgspec.Meta(ge=0, le=1e6)] = 0.0
    #: The host CPUs the agent pins its parts' ranks to (``nodeagent.agent.cpuset``); empty
    #: from an agent that does not pin.
    cpuset: Annotated[
        tuple[Annotated[int, msgspec.Meta(ge=0, le=65_535)], ...], msgspec.Meta(max_length=65_536)
    ] = ()
    #: True when the machine declares more CPUs than ``cpuset`` holds: packing is then
    #: emulated (two declared CPUs may share one core), so timings are not physical.
    emulated: bool = False
    #: The measured benchmark score (``nodeagent.speed``, relative to its reference
    #: machine) and its relative spread over the benchmark's rounds; None if not measured.
    speed_score: Annotated[float, msgspec.Meta(gt=0, le=1e6)] | None = None
    speed_spread: Annotated[float, msgspec.Meta(ge=0, le=1e6)] | None = None
    #: True when this agent's parts outlive it within ``lease`` and a next incarnation
    #: for the machine adopts them (``nodeagent.survival.adoption``): on its will, the scheduler
    #: holds its parts for the lease instead of requeueing them at once.
    adopts: bool = False
    #: True while the agent drains (stopped by its operator with ``--drain-on-stop``):
    #: it runs its parts to their end, takes no new one, then says goodbye. The
    #: scheduler places nothing on it meanwhile.
    draining: bool = False


class AgentOffline(Message, tag="agent_offline", frozen=True, kw_only=True):
    """How an agent left. ``lost``: its Last Will (the broker's). ``goodbye``: it
    retires, its parts over. ``stopping``: its operator stopped it and it will be
    back: its parts run on within its lease for its next incarnation to adopt (an
    agent that ``adopts``), or it ended them, each reported ``stopped``. Either way
    the scheduler charges no job's requeue budget for it."""

    agent_id: Id
    incarnation: Id
    reason: Literal["lost", "goodbye", "stopping"]


class Heartbeat(Message, tag="heartbeat", frozen=True, kw_only=True):
    """The agent's liveness (only the agent's own heartbeat counts as such) and the
    complete list of the parts it runs now."""

    agent_id: Id
    seq: Seq
    running: tuple[RunningPart, ...]


class PartStarted(Message, tag="part_started", frozen=True, kw_only=True):
    job_id: Id
    agent_id: Id
    pid: int
    at: float
    attempt: Attempt = 0
    #: Wall seconds from the agent's admission of the ``StartPart`` to the instant the
    #: part's run counts from (its process's fork), on the agent's own monotonic clock:
    #: its launch latency. 0 for a process that cannot say when it began (an exec'd
    #: one counts its work from the admission); None from an older agent.
    launch_seconds: Seconds | None = None


class PartProgress(Message, tag="part_progress", frozen=True, kw_only=True):
    """Work done so far (units of ``JobSpec.work``), from the job process."""

    job_id: Id
    agent_id: Id
    done: Seconds
    rate: float
    at: float
    attempt: Attempt = 0
    #: MPI-like workload: iterations done, and the CPU utilisation ``u`` measured so
    #: far (compute time over compute plus communication time of the ranks).
    iteration: Annotated[int, msgspec.Meta(ge=0)] | None = None
    cpu_util: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None


class PartFinished(Message, tag="part_finished", frozen=True, kw_only=True):
    """The part's process exited: ``exit_code`` 0 is success; ``reason`` says why not."""

    job_id: Id
    agent_id: Id
    exit_code: int
    at: float
    #: ``fenced``: the agent refused or stopped this attempt for fencing (a start
    #: delayed past its lease, or its lease lapsed): the job goes back to the queue.
    #: ``stopped``: its agent's operator stopped the agent, and the part with it (an
    #: agent that does not adopt, a start that reached a stopping agent, or a part
    #: a successor could not adopt after such a stop): the job goes back to the
    #: queue without charging its requeue budget.
    reason: Literal["done", "failed", "cancelled", "walltime", "lost", "fenced", "stopped"]
    attempt: Attempt = 0
    #: What went wrong, in words, when the part can say (e.g. which MPI rank died).
    detail: Annotated[str, msgspec.Meta(max_length=512)] | None = None
    #: Wall seconds from the process's fork to its exit, on the agent's own monotonic
    #: clock (the scheduler dates the run's end from it, not from when it hears of
    #: it); None for a part whose process never ran, or from an older agent.
    run_seconds: Seconds | None = None


class ExecutionSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The execution model the scheduler plans with (``model.execution``), so the
    agents' sleep workload progresses by the same formula: its named ``kind``,
    formula (4)'s fixed ``overhead`` and the ``paper`` model's per-job OV range
    and seed. ``calibrated`` is named so that every kind of ``model.execution`` has
    its wire name, but no StartPart carries a calibration yet: an agent refuses it."""

    kind: Literal["linear", "max", "paper", "calibrated"] = "linear"
    overhead: Annotated[float, msgspec.Meta(ge=0, le=1e6)] = 0.0
    ov_min: Annotated[float, msgspec.Meta(ge=0, le=1e6)] = 0.0
    ov_max: Annotated[float, msgspec.Meta(ge=0, le=1e6)] = 1.0
    seed: int = 0


class StartPart(Message, tag="start_part", frozen=True, kw_only=True):
    """Run ``cpus`` CPUs of ``job`` on this agent at the job's ``pace`` (its slowest part's
    machine speed; the reference speed by default, as a machine's)."""

    job: JobSpec
    cpus: Cpus
    pace: Speed = 1.0
    part: Annotated[int, msgspec.Meta(ge=0)] = 0
    parts: Annotated[int, msgspec.Meta(ge=1)] = 1
    time_scale: Annotated[float, msgspec.Meta(gt=0, le=1e6)] = 1.0
    #: The job's CPUs over all its parts: with ``job.procs`` it gives the MPL every
    #: part runs at. None from an older sender: a lone part then has ``cpus``.
    job_cpus: Cpus | None = None
    #: Fencing: which start of the job this is. A report or command of another
    #: attempt is stale; an agent holding an older attempt's part kills it.
    attempt: Attempt = 1
    #: Wall seconds since the epoch when the scheduler sent it (0: not said). An
    #: agent refuses a start older than its lease: it was delayed (the agent frozen
    #: or cut off) long enough that the job may have been given to another agent.
    issued: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    #: The execution model (None from an older sender: the default ``linear``).
    execution: ExecutionSpec | None = None
    #: MPI-like workload: this part's rank processes and the job-wide number of its
    #: first rank. The scheduler splits ``job.procs`` over the parts so they sum to it
    #: (uneven parts get uneven shares). None from an older sender: the agent derives
    #: them from ``cpus`` and ``job_cpus``.
    ranks: Cpus | None = None
    rank_offset: Annotated[int, msgspec.Meta(ge=0, le=1_048_576)] | None = None


class ResizePart(Message, tag="resize_part", frozen=True, kw_only=True):
    job_id: Id
    cpus: Cpus
    pace: Speed = 1.0
    #: The job's CPUs over all its parts after the resize (see ``StartPart``).
    job_cpus: Cpus | None = None
    attempt: Attempt = 0
    #: Wall seconds since the epoch when the scheduler decided the resize (0: not
    #: said). The sleep workload's progress changes pace from then, as in the twin
    #: and the journal, even if the job process reads it later (still starting).
    issued: Annotated[float, msgspec.Meta(ge=0)] = 0.0


class CancelPart(Message, tag="cancel_part", frozen=True, kw_only=True):
    """End a part; ``attempt`` 0 ends whatever attempt runs, n only attempt n."""

    job_id: Id
    attempt: Attempt = 0


# -- for everyone -------------------------------------------------------------------


class ClusterSummary(Message, tag="cluster_summary", frozen=True, kw_only=True):
    now: float
    machines: Annotated[int, msgspec.Meta(ge=0)]
    cpus: Annotated[int, msgspec.Meta(ge=0)]
    free: Annotated[int, msgspec.Meta(ge=0)]
    queued: Annotated[int, msgspec.Meta(ge=0)]
    running: Annotated[int, msgspec.Meta(ge=0)]
    policy: str


class JobEvent(Message, tag="job_event", frozen=True, kw_only=True):
    """One thing that happened to a job (``event``), journalled before it is published
    (QoS 1). ``seq`` counts a job's events from 1 without gaps, so a watcher that
    sees a jump knows it missed some and asks for them (``HistoryRequest``).
    ``stream`` numbers the events of the stream it is published on, from 1 without
    gaps: every job's on ``events``, one user's on ``users/<user>/events``; a
    watcher that sees a jump there (or reconnects) missed events of jobs it may
    not know yet, and asks for them by number (``EventsRequest``)."""

    job_id: str
    event: JobEventKind
    at: float
    seq: Seq
    detail: str = ""
    #: A ``resized`` event's CPUs of the job (all parts) before and after; None on
    #: other events and from an older sender.
    cpus_before: Cpus | None = None
    cpus_after: Cpus | None = None
    #: A ``running`` or ``resized`` event's parts of the job from then on (where it
    #: runs, for a chart of the schedule); empty on the other kinds, which place
    #: nothing.
    parts: Annotated[tuple[PartSpec, ...], msgspec.Meta(max_length=65_536)] = ()
    #: None from an older sender; in a ``HistoryReply``, the scheduler-wide number.
    stream: Annotated[int, msgspec.Meta(ge=1)] | None = None

    @property
    def state(self) -> JobState:
        """The job's state once the event happened (a function of its kind)."""
        return self.event.state


def in_stream(event: JobEvent, stream: int | None) -> JobEvent:
    """``event`` as it is published on another stream: with that stream's number."""
    return msgspec.structs.replace(event, stream=stream)


AnyMessage = (
    SubmitJobs
    | CancelJob
    | CancelJobs
    | StatusRequest
    | SubmitReply
    | CancelReply
    | CancelJobsReply
    | StatusReply
    | ErrorReply
    | HistoryRequest
    | HistoryReply
    | EventsRequest
    | EventsReply
    | DrainMachine
    | DrainReply
    | AgentOnline
    | AgentOffline
    | Heartbeat
    | PartStarted
    | PartProgress
    | PartFinished
    | StartPart
    | ResizePart
    | CancelPart
    | ClusterSummary
    | JobEvent
)
