"""Clients' requests: submit, cancel, status and history, answered on their reply topic.

*Idempotency.* Jobs are keyed by the client's id. Submitting the same spec
again (a QoS 1 redelivery, a client retry) is answered ``accepted,
duplicate`` and changes nothing; the same id with another spec is rejected.
Cancelling a cancelled job answers ``cancelled`` again.

*Durability.* Accepted jobs are journalled inside the batch's transaction;
the ``SubmitReply`` waits in the outbox until the actor has committed it.

*A job that cannot be accepted* (wider than the cluster as configured, beyond the maximum
wall time, an id reused for another spec) is rejected in its own
``SubmitResult``, with a code (``broker.vocabulary.Rejection``) and a reason in
words; the rest of the request goes on, and the rejection is counted by its
code. Too wide is the core's rule (``SchedulerCore.submit``), given the
cluster as configured as its capacity. *The cluster as configured* is every
machine whose agent registered and has not said goodbye
(``Context.configured_cpus``): a machine lost or suspect right now still
counts, so a job wider than the CPUs online waits in the queue until its
machines are back; an agent scaled down says goodbye and stops counting. A
``reply_to`` that cannot be a topic level refuses the whole request (nobody
could be told what was done).

*History.* ``HistoryRequest`` is answered from the journal's ``job_events``:
exactly the events that were published, so a watcher that saw a gap in a
job's ``seq`` fills it. ``EventsRequest`` is answered from the same rows by
their number in the requester's stream (every job's for an admin or a
broker without logins, a user's own jobs' otherwise), so a watcher that saw a
jump in ``JobEvent.stream``, or reconnected, gets what it missed whichever
jobs those were.

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
did not exist, and counted ``forbidden``); an admin may cancel any job and
submit for any user. Replies go to ``users/<user>/replies/<reply_to>``,
which only that user (and admins) may read. A request on the identity-less
``scheduler/requests`` topic (a broker without logins) has no requester and
no checks, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.messages import (
    AnyMessage,
    CancelJob,
    CancelReply,
    DrainMachine,
    EventsReply,
    EventsRequest,
    HistoryReply,
    HistoryRequest,
    JobSpec,
    JobStatus,
    MachineStatus,
    PartSpec,
    StatusReply,
    StatusRequest,
    SubmitJobs,
    SubmitReply,
    SubmitResult,
    owned_by,
)
from broker.topics import Topics
from broker.vocabulary import BadMessage, CancelRefusal, JobEventKind, MachineState, Rejection
from broker.vocabulary import JobState as WireState
from model.job import JobError
from scheduler.core.core import Left, Rejected
from scheduler.core.job_lifecycle import JobState, is_final
from scheduler.live import drains
from scheduler.live.context import Context
from scheduler.live.part_lifecycle import PartInput
from scheduler.live.specs import SpecError, check_spec, job_from_spec

Request = SubmitJobs | CancelJob | StatusRequest | HistoryRequest | EventsRequest | DrainMachine


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
        case StatusRequest():
            reply = status(ctx, now, message.request_id)
            ctx.reply(message.reply_to, reply, reply_user(who), durable=False)
        case HistoryRequest():
            _history(ctx, message, who)
        case EventsRequest():
            _events(ctx, message, who)
        case DrainMachine():
            admin = who is None or who.admin
            drains.handle(ctx, message, now, admin, reply_user(who))


def reply_to_ok(ctx: Context, message: Request, who: Requester | None = None) -> bool:
    """Whether the request's ``reply_to`` is ``-`` or can be a topic level."""
    return message.reply_to == "-" or ctx.reply_topic(message.reply_to, reply_user(who)) is not None


def _owns(ctx: Context, who: Requester | None, job_id: str) -> bool:
    """Whether ``who`` may act on ``job_id`` (no requester: a broker without logins)."""
    if who is None or who.admin:
        return True
    spec = ctx.specs.get(job_id)
    return spec is not None and spec.user == who.name


def _submit(ctx: Context, request: SubmitJobs, now: float, who: Requester | None) -> None:
    results: list[SubmitResult] = []
    durable: list[tuple[JobSpec, float]] = []
    counts = {"accepted": 0, "rejected": 0, "duplicate": 0}
    specs = request.jobs
    if who is not None and not who.admin:
        # The owner is the authenticated user, whatever the payload says.
        specs = tuple(owned_by(spec, who.name) for spec in specs)
    failure = ctx.journal.failure
    for spec in specs:
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
    if known is not None:
        # The Job carries its submit time, so equal specs are compared here and
        # the core is handed the job it knows: it answers "duplicate".
        if ctx.specs[spec.id] != spec:
            why = f"job id {spec.id!r} is already used by a different job"
            return _rejected(spec, Rejection.ID_REUSED, why)
        answer = core.submit(known)
    else:
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
        return _rejected(spec, Rejection(answer.code.value), answer.reason)
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
        left = ctx.core.cancel(job_id, now)
        cancelled = True
        ctx.journal.record_end(job_id, now, JobState.CANCELLED, "cancelled by a client")
        if isinstance(left, Left):
            live = ctx.placements.untrack(job_id)
            ctx.cancel_parts(live)
            live.end_all(PartInput.CANCELLED)
        ctx.metrics.jobs_finished.labels(state=JobState.CANCELLED.value).inc()
        ctx.event(job_id, JobEventKind.CANCELLED, now, "cancelled by a client")
        ctx.dirty = True
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


def _history(ctx: Context, request: HistoryRequest, who: Requester | None) -> None:
    known = [j for j in request.job_ids if ctx.core.state_of(j) is not None]
    theirs = [j for j in known if _owns(ctx, who, j)]
    if len(theirs) < len(known):
        ctx.count_bad(BadMessage.FORBIDDEN, f"{reply_user(who)} asked for other users' job events")
    allowed = set(theirs)
    unknown = tuple(j for j in request.job_ids if j not in allowed)
    events = ctx.journal.job_events(theirs)
    ctx.reply(
        request.reply_to,
        HistoryReply(request_id=request.request_id, events=tuple(events), unknown=unknown),
        reply_user(who),
        durable=False,
    )


def _events(ctx: Context, request: EventsRequest, who: Requester | None) -> None:
    """The requester's stream after ``request.after`` (module docstring, "History")."""
    owner = None if who is None or who.admin else who.name
    events, more = ctx.journal.stream_events(request.after, request.limit, owner=owner)
    last = ctx.stream if owner is None else ctx.owner_streams.get(owner, 0)
    reply = EventsReply(request_id=request.request_id, events=tuple(events), last=last, more=more)
    ctx.reply(request.reply_to, reply, reply_user(who), durable=False)


def status(ctx: Context, now: float, request_id: str = "-") -> StatusReply:
    """The cluster, the queue and the running jobs as a ``StatusReply``."""
    core = ctx.core
    machines = tuple(
        MachineStatus(
            id=agent_id,
            cpus=ag.machine.cpus,
            speed=ag.machine.speed,
            free=core.free(agent_id) if ag.life.available else 0,
            # A machine held for adoption (its agent dead, its parts running on) is not
            # online: nothing new starts there until an incarnation registers.
            online=ag.life.heard,
            state=MachineState(ag.life.state.value),
        )
        for agent_id, ag in sorted(ctx.agents.items())
    )
    queue = tuple(
        JobStatus(
            id=j.id,
            state=WireState.QUEUED,
            procs=j.procs,
            user=j.user,
            submit=j.submit,
            walltime=j.walltime,
            deadline=j.deadline,
        )
        for j in core.queue
    )
    running = [
        JobStatus(
            id=r.job.id,
            state=WireState.RUNNING,
            procs=r.job.procs,
            user=r.job.user,
            submit=r.job.submit,
            start=r.start,
            parts=tuple(PartSpec(machine=p.machine, cpus=p.cpus) for p in r.parts),
            walltime=r.job.walltime,
            est_end=r.est_end,
            deadline=r.job.deadline,
        )
        for r in core.running
    ]
    running += [
        JobStatus(
            id=p.job.id,
            state=WireState.RUNNING,
            procs=p.job.procs,
            user=p.job.user,
            submit=p.job.submit,
            start=p.start,
            parts=tuple(PartSpec(machine=q.machine, cpus=q.cpus) for q in p.parts),
            walltime=p.job.walltime,
            deadline=p.job.deadline,
            reconciling=True,
        )
        for p in core.pending.values()
    ]
    return StatusReply(
        request_id=request_id, now=now, machines=machines, queue=queue, running=tuple(running)
    )
