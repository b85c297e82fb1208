"""One message type per kind, with its schema (msgspec structs, validated on decode).

Every message is a tagged struct: the ``kind`` field names it on the wire,
so one decoder reads any of them and refuses unknown kinds. Constraints
(positive sizes, bounded strings) are part of the types, so a payload that
decodes is well-formed; what is *reasonable* (a job wider than the cluster)
is the scheduler's to judge and answer.

Names: events are past tense (``PartStarted``), commands imperative
(``StartPart``), requests and replies say so.

Where the kinds are. This module is the contract's one index: every kind is
importable from here and :data:`AnyMessage` is their union, the decoder's.
They are defined by family: the field types and the base in
``broker.fields``; what a job and a machine are in ``broker.job_spec``;
clients' requests and the scheduler's replies in ``broker.client_messages``;
what agents and the scheduler say to each other in ``broker.agent_messages``;
job events and the cluster summary, which everyone may hear, in
``broker.events``; priorities and the what-if snapshot in ``broker.insight``.

Required fields. Every field of a message is keyword-only (``kw_only`` on the
base and on each kind: msgspec applies it to the fields a class declares), so
a field without a default is required: a payload that lacks it does not decode
(an ``invalid`` message). A field keeps a default only where the default is
a meaning the receiver acts on: ``"-"`` for "no request id" or "no reply
wanted", ``attempt`` 0 for "not said", a ``pace`` of 1 (the reference speed,
as a machine's ``speed``), None for a value an older sender did not send.
States, event kinds and refusal codes are the enums of ``broker.vocabulary``.

Protocol version 3 (``broker.topics.PROTOCOL_VERSION``): an agent says when
its operator stops it (``AgentOffline(reason="stopping")``, parts it ends
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
A job may run its user's own command (``JobSpec.command``,
``broker.command_spec``), as the broker login that submitted it
(``JobSpec.owner``, set by the scheduler), on the hosts its ``StartPart``
names; its end says the command's exit status or signal (``PartFinished``,
``JobEvent``), and an agent says whom it runs commands as
(``AgentOnline.commands``) and which MPI libraries it can launch a user's MPI
program with (``AgentOnline.mpi``, ``CommandSpec.mpi``), the scheduler keeping
such a job on one machine that has its library. What the scheduler plans: a queued job's status row
says its predicted start and why it waits (``JobStatus.predicted_start``,
``reason``), and the scheduler answers each queued job's priority by factor and
a what-if snapshot (``broker.insight``). A peer of an older version cannot read
these messages (unknown fields and values), hence each new version and its own
topic root.
"""

from __future__ import annotations

from broker.agent_messages import (
    AgentOffline,
    AgentOnline,
    CancelPart,
    ExecutionSpec,
    Heartbeat,
    PartFinished,
    PartProgress,
    PartStarted,
    ResizePart,
    RunningPart,
    StartPart,
)
from broker.client_messages import (
    MAX_IDS,
    TOP_USERS,
    CancelJob,
    CancelJobs,
    CancelJobsReply,
    CancelReply,
    Count,
    DrainMachine,
    DrainReply,
    ErrorReply,
    EventsReply,
    EventsRequest,
    Glob,
    HistoryReply,
    HistoryRequest,
    Ids,
    JobStatus,
    MachineStatus,
    States,
    StatusReply,
    StatusRequest,
    StatusTotals,
    SubmitJobs,
    SubmitReply,
    SubmitResult,
    UserTotals,
)
from broker.events import ClusterSummary, JobEvent, in_stream
from broker.fields import Message, PartSpec, Workload
from broker.insight import (
    PriorityReply,
    PriorityRequest,
    SnapshotReply,
    SnapshotRequest,
)
from broker.job_spec import (
    JobSpec,
    MachineSpec,
    MpiSpec,
    authenticated,
    charged_to,
    owned_by,
)

__all__ = [
    "MAX_IDS",
    "TOP_USERS",
    "AgentOffline",
    "AgentOnline",
    "AnyMessage",
    "CancelJob",
    "CancelJobs",
    "CancelJobsReply",
    "CancelPart",
    "CancelReply",
    "ClusterSummary",
    "Count",
    "DrainMachine",
    "DrainReply",
    "ErrorReply",
    "EventsReply",
    "EventsRequest",
    "ExecutionSpec",
    "Glob",
    "Heartbeat",
    "HistoryReply",
    "HistoryRequest",
    "Ids",
    "JobEvent",
    "JobSpec",
    "JobStatus",
    "MachineSpec",
    "MachineStatus",
    "Message",
    "MpiSpec",
    "PartFinished",
    "PartProgress",
    "PartSpec",
    "PartStarted",
    "ResizePart",
    "RunningPart",
    "StartPart",
    "States",
    "StatusReply",
    "StatusRequest",
    "StatusTotals",
    "SubmitJobs",
    "SubmitReply",
    "SubmitResult",
    "UserTotals",
    "Workload",
    "authenticated",
    "charged_to",
    "in_stream",
    "owned_by",
]

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
    | PriorityRequest
    | PriorityReply
    | SnapshotRequest
    | SnapshotReply
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
