"""The requests clients send the scheduler and its replies: submit, cancel, status,
history, events, drain, and the refusals (``ErrorReply``). ``broker.messages``
says the rules every message follows; ``scheduler.live.requests`` answers them.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from broker.events import JobEvent
from broker.fields import (
    Capabilities,
    Cpus,
    Id,
    Message,
    Name,
    PartSpec,
    Seq,
)
from broker.job_spec import JobSpec
from broker.vocabulary import (
    BadMessage,
    CancelRefusal,
    DrainRefusal,
    JobState,
    MachineState,
    Rejection,
    WaitReason,
)

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

    A queued job carries the scheduler's prediction, once one was worked out
    (they are worked out periodically, not at every message): ``predicted_start``
    (cluster seconds, the base of ``submit``), the machines it is planned on in
    ``parts``, and why it waits, ``reason`` with ``reason_detail`` in words.
    None and empty before the first prediction.
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
    predicted_start: float | None = None
    reason: WaitReason | None = None
    reason_detail: str = ""


class MachineStatus(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A machine as the scheduler sees it: ``online`` when its agent is heard from,
    ``state`` its agent's lifecycle state (None from an older scheduler)."""

    id: str
    cpus: int
    speed: float
    free: int
    online: bool
    state: MachineState | None = None
    #: What it can do that not every machine does: its agent runs users' commands
    #: (``commands``), launches MPI programs with a library (``openmpi``, ``mpich``).
    capabilities: Capabilities = ()


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
