"""What the live scheduler plans and why: predicted starts, reasons, priorities, a snapshot.

Theory of operation. The prediction (``scheduler.planning.prediction``) and
the reasons (``scheduler.planning.wait_reasons``) are the twin's, run on the
core's snapshot after a decision. A *pass* (:func:`forecast`) works both out
for the whole queue and keeps them in ``Context.forecast``; ``status``
answers from the last pass (:func:`queued_status`), so a status request or
a submission never waits for a prediction. When passes run is the actor's
rule (``scheduler.runtime.actor``: at most every ``predict_interval`` wall
seconds, after a batch that changed something); a job queued since the last
pass has no prediction yet, and says so with empty fields.

The first time a pass places a queued job it is told in three places: its
status row, a ``planned`` event in its history (journalled, unnumbered:
``seq`` 0, never published, so that predicting a queue of thousands costs
no message; ``HistoryRequest`` returns it) and the histogram of predicted
waits (``accordion_scheduler_predicted_wait_cluster_seconds``, no job
label). A requeued job is predicted again when it is back in the queue
(its history keeps the first).

Priorities (:func:`priority_reply`) are ``scheduler.priority.factors``'s, on a
snapshot taken when the request is handled. The what-if snapshot
(:func:`snapshot_reply`) is the core's state as the policy sees it: the
machines (the cordoned ones marked), every running job with the work the
core believes done and its expected end, the queue in arrival order with
each job as submitted, the policy's reservations and each user's last run
times; ``accordion whatif`` replays it in the twin.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from broker.insight import (
    PriorityFactor,
    PriorityReply,
    PriorityRow,
    SnapshotJob,
    SnapshotMachine,
    SnapshotReply,
    SnapshotReservation,
    SnapshotRun,
    UserRuns,
)
from broker.messages import JobEvent, JobStatus, PartSpec
from broker.vocabulary import JobEventKind, WaitReason
from broker.vocabulary import JobState as WireState
from model.job import Job
from model.machine import Part
from scheduler.live.context import Context
from scheduler.planning.prediction import Plan, policy_order, predict
from scheduler.planning.wait_reasons import Wait, wait_reasons, when
from scheduler.priority.factors import explain

#: The reason every queued job is given while the scheduler reconciles after a restart.
RECONCILING = "the scheduler is reconciling with its agents after a restart"


@dataclass(frozen=True, slots=True)
class Forecast:
    """One pass: the plan at ``now`` and every queued job's reason."""

    now: float
    plan: Plan
    reasons: Mapping[str, Wait]


def forecast(ctx: Context, now: float, *, held: str | None = None) -> Forecast:
    """A prediction pass over the whole queue (module docstring); ``held`` says why the
    scheduler starts nothing now, if it does not."""
    core = ctx.core
    policy = core.policy
    snapshot = core.snapshot(now)
    plan = predict(snapshot, policy, cordoned=ctx.cordoned)
    visible = snapshot.queue
    queue = core.queue
    hidden: list[Job] = []
    limited: list[Job] = []
    if len(visible) < len(queue):
        shown = {j.id for j in visible}
        for j in queue:
            if j.id not in shown:
                (limited if core.held_by_limit(j) else hidden).append(j)
    load = core.load
    reasons = wait_reasons(
        plan,
        snapshot,
        policy,
        cordoned=ctx.cordoned,
        hidden=hidden,
        limited=limited,
        user_cpus=None if load is None else load.cpus,
        max_user_cpus=core.max_user_cpus,
        held=held,
    )
    result = Forecast(now, plan, reasons)
    ctx.forecast = result
    _tell_first(ctx, plan, reasons, now)
    return result


def _tell_first(ctx: Context, plan: Plan, reasons: Mapping[str, Wait], now: float) -> None:
    """The first prediction of each queued job: its history and the histogram."""
    predicted = ctx.predicted
    queued = {j.id for j in ctx.core.queue}
    # A job that left the queue is forgotten: requeued, it is predicted afresh.
    predicted &= queued
    journal = ctx.settings.job_events != "none"
    for job_id, planned in plan.queued.items():
        if job_id in predicted:
            continue
        predicted.add(job_id)
        ctx.metrics.predicted_wait.observe(max(planned.start - planned.job.submit, 0.0))
        if journal:
            wait = reasons.get(job_id)
            why = "" if wait is None else f"; {wait.why}: {wait.detail}"
            detail = f"predicted to start at {when(planned.start)} ({planned.meaning}){why}"
            ctx.journal.record_event(
                JobEvent(job_id=job_id, event=JobEventKind.PLANNED, at=now, seq=0, detail=detail)
            )


def queued_status(ctx: Context, job: Job) -> JobStatus:
    """A queued job's status row, with the last pass's prediction when it has one."""
    last = ctx.forecast
    planned = None if last is None else last.plan.queued.get(job.id)
    wait = None if last is None else last.reasons.get(job.id)
    return JobStatus(
        id=job.id,
        state=WireState.QUEUED,
        procs=job.procs,
        user=job.user,
        submit=job.submit,
        # The user's estimate: the queue holds a job with its run-time prediction as
        # its wall time under EASY++, the book the job as submitted.
        walltime=(ctx.core.job(job.id) or job).walltime,
        deadline=job.deadline,
        parts=() if planned is None else _specs(planned.parts),
        predicted_start=None if planned is None else planned.start,
        reason=None if wait is None else WaitReason(wait.why.value),
        reason_detail="" if wait is None else wait.detail,
    )


def priority_reply(ctx: Context, now: float, request_id: str = "-") -> PriorityReply:
    """Every queued job's priority, factor by factor (``scheduler.priority.factors``)."""
    core = ctx.core
    policy = core.policy
    snapshot = core.snapshot(now)
    source = getattr(policy, "priority", None)
    ranked: list[tuple[Job, float | None, tuple[tuple[str, float], ...]]]
    if source is None:
        # EG-EDF has no priority source: its order is its plan's.
        ranked = [(job, None, ()) for job in policy_order(policy, snapshot)]
        name = "plan"
    else:
        ranked = [(p.job, p.priority, p.factors) for p in explain(source, snapshot)]
        name = str(source.name)
    rows = tuple(
        PriorityRow(
            job_id=job.id,
            user=job.user,
            rank=rank,
            priority=priority,
            factors=tuple(PriorityFactor(name=n, value=v) for n, v in factors),
        )
        for rank, (job, priority, factors) in enumerate(ranked, 1)
    )
    return PriorityReply(request_id=request_id, now=now, policy=policy.name, source=name, rows=rows)


def snapshot_reply(ctx: Context, now: float, request_id: str = "-") -> SnapshotReply:
    """The cluster as the policy plans it at ``now`` (module docstring)."""
    core = ctx.core
    history = core.history
    cordoned = ctx.cordoned

    def spec(job: Job) -> SnapshotJob:
        submitted = core.job(job.id) or job  # as submitted, not as planned (EASY++)
        return SnapshotJob(
            id=submitted.id,
            user=submitted.user,
            group=submitted.group,
            procs=submitted.procs,
            walltime=submitted.walltime,
            submit=submitted.submit,
            qos=submitted.qos,
            deadline=submitted.deadline,
            malleable=submitted.malleable,
            cpu_util=submitted.cpu_util,
            ref_speed=submitted.ref_speed,
            predicted=None if history is None else history.prediction(submitted),
            needs=tuple(sorted(submitted.needs)),
            one_machine=submitted.one_machine,
        )

    running = [
        SnapshotRun(
            job=spec(r.job),
            start=r.start,
            parts=_specs(r.parts),
            done=r.est_done + (now - r.changed) * r.rate,
            est_end=r.est_end,
        )
        for r in sorted(core.running, key=lambda r: (r.start, r.job.id))
    ]
    # Jobs a restarted scheduler has not confirmed yet run as the journal says.
    running += [
        SnapshotRun(
            job=spec(p.job),
            start=p.start,
            parts=_specs(p.parts),
            done=max(now - p.start, 0.0),
            est_end=p.start + p.job.walltime,
        )
        for p in core.pending.values()
    ]
    return SnapshotReply(
        request_id=request_id,
        now=now,
        policy=core.policy.name,
        machines=tuple(
            SnapshotMachine(
                id=m.id,
                cpus=m.cpus,
                speed=m.speed,
                cordoned=m.id in cordoned,
                capabilities=tuple(sorted(m.capabilities)),
            )
            for m in core.machines
        ),
        running=tuple(running),
        queue=tuple(spec(j) for j in core.queue),
        reservations=tuple(
            SnapshotReservation(job_id=r.job.id, start=r.start, parts=_specs(r.parts))
            for r in core.reservations
        ),
        history=()
        if history is None
        else tuple(UserRuns(user=u, runs=history.last(u)) for u in history.users()),
        max_user_cpus=core.max_user_cpus,
    )


def _specs(parts: tuple[Part, ...]) -> tuple[PartSpec, ...]:
    return tuple(PartSpec(machine=p.machine, cpus=p.cpus) for p in parts)
