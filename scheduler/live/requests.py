"""Clients' requests: submit, cancel (one or many), status, history; answered on their reply topic.

*Idempotency.* Jobs are keyed by the client's id. Submitting the same spec
again (a QoS 1 redelivery, a client retry) is answered ``accepted,
duplicate`` and changes nothing; the same id with another spec is rejected.
Cancelling a cancelled job answers ``cancelled`` again.

*Durability.* Accepted jobs are journalled inside the batch's transaction;
the ``SubmitReply`` waits in the outbox until the actor has committed it.

*A job that cannot be accepted* (wider than the cluster as configured, beyond the maximum
wall time, an id reused for another spec, its user at the queued-jobs limit,
wider than the per-user CPU limit, an account or QoS its user may not use) is
rejected in its own ``SubmitResult``, with a code
(``broker.vocabulary.Rejection``) and a reason in words that names the limit
and its value; the rest of the request goes on, and the rejection is counted
by its code. Too wide is the core's rule (``SchedulerCore.submit``), given the
cluster as configured as its capacity. *The cluster as configured* is every
machine whose agent registered and has not said goodbye
(``Context.configured_cpus``): a machine lost or suspect right now still
counts, so a job wider than the CPUs online waits in the queue until its
machines are back; an agent scaled down says goodbye and stops counting. A
``reply_to`` that cannot be a topic level refuses the whole request (nobody
could be told what was done), and so does a request of more jobs than
``max_jobs_per_request`` (an ``ErrorReply`` of code ``too_many``).

*Limits and associations* (``scheduler.live.limits``,
``scheduler.live.associations``): checked per job, in that order after the
owner is set: the association (a user's account and QoS; an admin's requests
are not checked), then, for a job not seen before, its user's queued jobs
against ``max_queued_per_user`` (the core's tallies, so a request's own jobs
count as they are accepted).

*Status* is ``scheduler.live.status``'s (filtered, paged, bounded); *bulk
cancel* is ``scheduler.live.bulk_cancel``'s.

*History.* ``HistoryRequest`` is answered from the journal's ``job_events``:
exactly the events that were published, so a watcher that saw a gap in a
job's ``seq`` fills it. An answer that would not fit in one message is
refused (``too_large``), so the watcher asks for fewer jobs at a time.
``EventsRequest`` is answered from the same rows by their number in the
requester's stream (every job's for an admin or a broker without logins, a
user's own jobs' otherwise), so a watcher that saw a jump in
``JobEvent.stream``, or reconnected, gets what it missed whichever jobs those
were; an answer is cut short (``more``) before it would pass the message
limit.

*A journal that cannot be written* (its disk full, read-only or failing:
``JournalWriter.failure``): submissions are refused with the code
``journal`` and the reason, and so are cancels (a cancel is a promise too);
status, history and event requests are answered as ever. Such answers
promise nothing journaled (``durable=False``), so the actor sends them at
once; an acceptance waits for its commit.

*Drains* (``DrainMachine``) are ``scheduler.live.drains``'s.

*Who asks*: identity comes from the broker, not from the payload. With broker
logins and ACLs, a user may publish only on ``scheduler/requests/<user>`` and
an admin only on ``scheduler/admin/<admin>``, so the topic names the sender
(:class:`Requester`), never the payload. A user's submissions are owned by
that user whatever their ``user`` field says; a user may cancel, and read
the history of, only their own jobs (another user's job is answered as if it
did not exist, and counted ``forbidden``; a bulk cancel counts them
``not_allowed``); an admin may cancel any job and submit for any user. Replies
go to ``users/<user>/replies/<reply_to>``, which only that user (and admins)
may read. A request on the identity-less ``scheduler/requests`` topic (a
broker without logins) has no requester and no checks, as before, but the
association table still applies to the user its jobs name.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.codec import encoded_size
from broker.insight import PriorityReply, PriorityRequest, SnapshotReply, SnapshotRequest
from broker.limits import MAX_MESSAGE_BYTES, MAX_REPLY_BYTES
from broker.messages import (
    AnyMessage,
    CancelJob,
    CancelJobs,
    CancelReply,
    DrainMachine,
    ErrorReply,
    EventsReply,
    EventsRequest,
    HistoryReply,
    HistoryRequest,
    JobSpec,
    StatusRequest,
    SubmitJobs,
    SubmitReply,
    SubmitResult,
    authenticated,
    owned_by,
)
from broker.topics import Topics
from broker.vocabulary import BadMessage, CancelRefusal, JobEventKind, Rejection
from model.job import JobError
from scheduler.core.core import Rejected
from scheduler.core.job_lifecycle import JobState, is_final
from scheduler.live import drains
from scheduler.live.associations import Refusal
from scheduler.live.bulk_cancel import NothingNamedError, cancel_jobs
from scheduler.live.context import Context
from scheduler.live.insight import priority_reply, snapshot_reply
from scheduler.live.limits import raise_hint
from scheduler.live.specs import SpecError, check_spec, job_from_spec
from scheduler.live.status import CursorError, status

Request = (
    SubmitJobs
    | CancelJob
    | CancelJobs
    | StatusRequest
    | HistoryRequest
    | EventsRequest
    | DrainMachine
    | PriorityRequest
    | SnapshotRequest
)


@dataclass(frozen=True, slots=True)
class Requester:
    """Who sent a request, as the topic it came on says (the broker's ACL vouches)."""

    name: str
    admin: bool


def requester(topics: Topics, topic: str) -> Requester | None:
    """The :class:`Requester` of a per-user or per-admin request topic, else None."""
    found = topics.requester_of(topic)
    return None if found is None else Requester(*found)


def reply_user(who: Requester | None) -> str | None:
    """Under whose ``users/<name>/`` subtree the answer to ``who`` goes (None: the old topic)."""
    return None if who is None else who.name


def kind(message: AnyMessage) -> str:
    return str(message.__struct_config__.tag)


def handle(ctx: Context, message: Request, now: float, who: Requester | None = None) -> None:
    """Apply one request whose ``reply_to`` was checked (see :func:`reply_to_ok`)."""
    match message:
        case SubmitJobs():
            _submit(ctx, message, now, who)
        case CancelJob():
            _cancel(ctx, message, now, who)
        case CancelJobs():
            _cancel_many(ctx, message, now, who)
        case StatusRequest():
            _status(ctx, message, now, who)
        case HistoryRequest():
            _history(ctx, message, who)
        case EventsRequest():
            _events(ctx, message, who)
        case DrainMachine():
            admin = who is None or who.admin
            drains.handle(ctx, message, now, admin, reply_user(who))
        case PriorityRequest():
            _whole_queue(ctx, message, priority_reply(ctx, now, message.request_id), who)
        case SnapshotRequest():
            _whole_queue(ctx, message, snapshot_reply(ctx, now, message.request_id), who)


def refuse(
    ctx: Context, message: AnyMessage, code: BadMessage, error: str, who: Requester | None = None
) -> None:
    """A valid message the scheduler will not act on: count it, answer it if it asks."""
    ctx.count_bad(code, f"{kind(message)}: {error}")
    reply_to = getattr(message, "reply_to", None)
    if isinstance(reply_to, str):
        request_id = getattr(message, "request_id", None)
        error_reply = ErrorReply(request_id=request_id, code=code, error=error)
        # A refusal promises nothing journaled: it goes out at once.
        ctx.reply(reply_to, error_reply, reply_user(who), durable=False)


def reply_to_ok(ctx: Context, message: Request, who: Requester | None = None) -> bool:
    """Whether the request's ``reply_to`` is ``-`` or can be a topic level."""
    return message.reply_to == "-" or ctx.reply_topic(message.reply_to, reply_user(who)) is not None


def _owns(ctx: Context, who: Requester | None, job_id: str) -> bool:
    """Whether ``who`` may act on ``job_id`` (no requester: a broker without logins)."""
    if who is None or who.admin:
        return True
    spec = ctx.specs.get(job_id)
    return spec is not None and spec.user == who.name


def _spec_of(ctx: Context, job_id: str) -> JobSpec | None:
    """The spec of a job the scheduler knows, or that its journal archived (a restart
    forgets archived jobs; their ids and histories are still theirs)."""
    spec = ctx.specs.get(job_id)
    return spec if spec is not None else ctx.journal.archived_spec(job_id)


def _submit(ctx: Context, request: SubmitJobs, now: float, who: Requester | None) -> None:
    most = ctx.settings.limits.max_jobs_per_request
    if len(request.jobs) > most:
        refuse(
            ctx,
            request,
            BadMessage.TOO_MANY,
            f"a request of {len(request.jobs):,} jobs is over the limit of {most:,} jobs per "
            f"request (max_jobs_per_request); send them in requests of at most {most:,}",
            who,
        )
        return
    results: list[SubmitResult] = []
    durable: list[tuple[JobSpec, float]] = []
    counts = {"accepted": 0, "rejected": 0, "duplicate": 0}
    specs = request.jobs
    admin = who is not None and who.admin
    if who is not None and not who.admin:
        # The owner is the authenticated user, whatever the payload says.
        specs = tuple(owned_by(spec, who.name) for spec in specs)
    # Who the broker vouches for (a root agent runs a command only for an owner its admin
    # mapped): the user's login; the user an admin submits for, as root's ``sbatch --uid``;
    # nobody without a login. Never what the payload says.
    specs = tuple(authenticated(s, None if who is None else s.user) for s in specs)
    table = None if admin else ctx.settings.associations
    failure = ctx.journal.failure
    for asked in specs:
        # An association may charge the user's default account: that spec is the job's.
        spec = asked if table is None else table.admit(asked)
        if isinstance(spec, Refusal):
            results.append(_rejected(asked, spec.code, spec.reason))
            counts["rejected"] += 1
            ctx.metrics.rejections.labels(reason=spec.code).inc()
            continue
        if failure is None or ctx.core.job(spec.id) is not None:
            # (A job known already is answered as ever: a duplicate promises nothing
            # new, and its answer waits, like the first, for the journal to take it.)
            result = _submit_one(ctx, spec, now)
        else:
            # Nothing new can be promised while the journal refuses writes.
            result = _rejected(spec, Rejection.JOURNAL, f"{failure}; try again later")
        results.append(result)
        if result.code is not None:
            counts["rejected"] += 1
            ctx.metrics.rejections.labels(reason=result.code).inc()
        elif result.duplicate:
            counts["duplicate"] += 1
        else:
            counts["accepted"] += 1
            durable.append((spec, now))
    if durable:
        # Inside the batch's transaction: committed before the reply is published.
        ctx.journal.record_submissions(durable)
        ctx.dirty = True
    for result_name, n in counts.items():
        if n:
            ctx.metrics.submissions.labels(result=result_name).inc(n)
    reply = SubmitReply(request_id=request.request_id, results=tuple(results))
    # Every job refused: a reply that promises nothing goes out at once.
    promises = any(r.accepted for r in results)
    ctx.reply(request.reply_to, reply, reply_user(who), durable=promises)


def _submit_one(ctx: Context, spec: JobSpec, now: float) -> SubmitResult:
    """The job's result; a rejection's code is also its metric label."""
    core = ctx.core
    known = core.job(spec.id)
    archived = ctx.journal.archived_spec(spec.id) if known is None else None
    if archived is not None:
        # A job a restart forgot (archived): its id stays taken, its answer the same.
        if archived != spec:
            why = f"job id {spec.id!r} is already used by a different job"
            return _rejected(spec, Rejection.ID_REUSED, why)
        return SubmitResult(spec.id, True, duplicate=True)
    if known is not None:
        # The Job carries its submit time, so equal specs are compared here and
        # the core is handed the job it knows: it answers "duplicate".
        if ctx.specs[spec.id] != spec:
            why = f"job id {spec.id!r} is already used by a different job"
            return _rejected(spec, Rejection.ID_REUSED, why)
        answer = core.submit(known)
    else:
        load = core.load
        queued = 0 if load is None else load.queued.get(spec.user, 0)
        most = ctx.settings.limits.max_queued_per_user
        if queued >= most:
            return _rejected(
                spec,
                Rejection.QUEUE_LIMIT,
                f"user {spec.user!r} has {queued:,} jobs queued, the limit "
                f"(max_queued_per_user) is {most:,}; {raise_hint('max_queued_per_user')}",
            )
        try:
            check_spec(spec, max_walltime=ctx.settings.max_walltime)
            job = job_from_spec(spec, now)
        except SpecError as exc:
            return _rejected(spec, Rejection.WALLTIME, str(exc))
        except JobError as exc:
            return _rejected(spec, Rejection.INVALID, str(exc))
        # Too wide is the core's rule, against the cluster as configured (module docstring).
        answer = core.submit(job, capacity=ctx.configured_cpus())
    if isinstance(answer, Rejected):
        code = Rejection(answer.code.value)
        hint = f"; {raise_hint('max_user_cpus')}" if code is Rejection.CPU_LIMIT else ""
        return _rejected(spec, code, answer.reason + hint)
    if not answer.duplicate:
        ctx.specs[spec.id] = spec
        ctx.event(spec.id, JobEventKind.QUEUED, now)
    return SubmitResult(spec.id, True, duplicate=answer.duplicate)


def _rejected(spec: JobSpec, code: Rejection, reason: str) -> SubmitResult:
    return SubmitResult(spec.id, False, reason, code=code)


def _cancel(ctx: Context, request: CancelJob, now: float, who: Requester | None) -> None:
    job_id = request.job_id
    state = ctx.core.state_of(job_id)
    reason: str | None = None
    code: CancelRefusal | None = None
    cancelled = False
    if state is not None and not _owns(ctx, who, job_id):
        # Answered as an unknown job: whether another user's job exists is not news.
        ctx.count_bad(BadMessage.FORBIDDEN, f"{reply_user(who)} may not cancel job {job_id!r}")
        state = None
    if state is None:
        code, reason = CancelRefusal.UNKNOWN_JOB, f"no job {job_id!r}"
    elif state is JobState.CANCELLED:
        cancelled, reason = True, "already cancelled"
    elif is_final(state):
        code, reason = CancelRefusal.ENDED, f"job {job_id!r} is already {state}"
    elif ctx.journal.failure is not None:
        code, reason = CancelRefusal.JOURNAL, f"{ctx.journal.failure}; try again later"
    else:
        ctx.cancel_job(job_id, now, "cancelled by a client")
        cancelled = True
    ctx.reply(
        request.reply_to,
        CancelReply(
            request_id=request.request_id,
            job_id=job_id,
            cancelled=cancelled,
            reason=reason,
            code=code,
        ),
        reply_user(who),
        durable=cancelled,
    )


def _cancel_many(ctx: Context, request: CancelJobs, now: float, who: Requester | None) -> None:
    requester = None if who is None or who.admin else who.name
    try:
        reply = cancel_jobs(ctx, request, now, requester=requester)
    except NothingNamedError as exc:
        refuse(ctx, request, BadMessage.INVALID, str(exc), who)
        return
    # Counts of nothing cancelled (or of a journal refusing writes) promise nothing.
    ctx.reply(request.reply_to, reply, reply_user(who), durable=reply.cancelled > 0)


def _status(ctx: Context, request: StatusRequest, now: float, who: Requester | None) -> None:
    try:
        # No requester: a broker without logins, where every client is trusted alike.
        reply = status(ctx, request, now, admin=who is None or who.admin)
    except CursorError as exc:
        refuse(ctx, request, BadMessage.INVALID, str(exc), who)
        return
    ctx.reply(request.reply_to, reply, reply_user(who), durable=False)


def _history(ctx: Context, request: HistoryRequest, who: Requester | None) -> None:
    specs = {j: spec for j in request.job_ids if (spec := _spec_of(ctx, j)) is not None}
    known = [j for j in request.job_ids if j in specs]
    theirs = [j for j in known if who is None or who.admin or specs[j].user == who.name]
    if len(theirs) < len(known):
        ctx.count_bad(BadMessage.FORBIDDEN, f"{reply_user(who)} asked for other users' job events")
    allowed = set(theirs)
    unknown = tuple(j for j in request.job_ids if j not in allowed)
    events = ctx.journal.job_events(theirs)
    reply = HistoryReply(request_id=request.request_id, events=tuple(events), unknown=unknown)
    size = encoded_size(reply)
    if size > MAX_MESSAGE_BYTES:
        why = (
            f"the events of {len(theirs):,} jobs take {size:,} bytes, over the message limit "
            f"of {MAX_MESSAGE_BYTES:,}; ask for fewer jobs at a time"
        )
        refuse(ctx, request, BadMessage.TOO_LARGE, why, who)
        return
    ctx.reply(request.reply_to, reply, reply_user(who), durable=False)


def _whole_queue(
    ctx: Context,
    request: PriorityRequest | SnapshotRequest,
    reply: PriorityReply | SnapshotReply,
    who: Requester | None,
) -> None:
    """Answer with a reply about the whole queue (it has no pages), or refuse it when it
    would pass the message limit. Like a status, it promises nothing journaled."""
    size = encoded_size(reply)
    if size > MAX_MESSAGE_BYTES:
        why = (
            f"the answer about {len(ctx.core.queue):,} queued jobs takes {size:,} bytes, "
            f"over the message limit of {MAX_MESSAGE_BYTES:,}"
        )
        refuse(ctx, request, BadMessage.TOO_LARGE, why, who)
        return
    ctx.reply(request.reply_to, reply, reply_user(who), durable=False)


def _events(ctx: Context, request: EventsRequest, who: Requester | None) -> None:
    """The requester's stream after ``request.after`` (module docstring, "History")."""
    owner = None if who is None or who.admin else who.name
    events, more = ctx.journal.stream_events(request.after, request.limit, owner=owner)
    last = ctx.stream if owner is None else ctx.owner_streams.get(owner, 0)
    # Cut short before the reply bound (at least one event, so the watcher moves on):
    # the rest is ``more``, which the watcher asks for next.
    size, kept = 0, 0
    for event in events:
        size += encoded_size(event)
        if kept and size > MAX_REPLY_BYTES:
            more = True
            break
        kept += 1
    reply = EventsReply(
        request_id=request.request_id, events=tuple(events[:kept]), last=last, more=more
    )
    ctx.reply(request.reply_to, reply, reply_user(who), durable=False)
