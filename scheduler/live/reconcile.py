"""A restarted scheduler: rebuild from the journal, then reconcile with the agents.

On start the core is rebuilt from the journal: queued jobs in submission
order, finished ones (so their ids stay taken), and running ones as
*pending*: they hold no CPUs and no decision is taken while any is pending.
A pending job is restored on its journalled parts once the agents of all its
parts have re-announced it (``AgentOnline.running`` or a heartbeat's
``running``); if an agent's heartbeat shows it does not run the job, or the
``reconcile_grace`` (wall seconds) passes first, the lost-agent rule applies.
An agent that re-announces a part with other CPUs than the journal says is
told to resize to the journal's. Starts are journalled before ``StartPart``
is sent, so a scheduler killed between the two finds the job pending on
restart, and the rule requeues it.

*A start in flight.* A start is journalled before its ``StartPart`` is
published, so a scheduler killed in between restores a job whose agent never
heard of it. The requeue budget (``--max-requeues``) is for jobs lost while
running (past it, a job whose machines keep failing under it is failed
rather than run again), and this one never ran, so it is
not requeued: when an agent's heartbeat does not list a pending part and
nothing of that attempt was heard from it since the restart (the part is
still PENDING: no ``PartStarted``, no listing, no ``PartFinished``), the
same start (same attempt, parts and pace) is sent to it again, once
(:func:`not_running`). The agent ignores it if it had the start after all
(it keeps the attempts it ended); what it did with it then arrived before
its heartbeat (one publisher's messages keep their order), and that settled
the part already. The job keeps its journalled start, so its run is dated
from the decision before the restart. What this cannot tell apart: an agent
that was itself restarted while the scheduler was down, whose old process
ran the part; that part is started again here, not charged.

*A hold for adoption* (``scheduler.live.agent_hold``) in progress when the
scheduler stopped: its jobs are pending like any running one, and the
reconciliation waits at least until the journaled hold-off ends before it
declares them lost, so a job whose parts may still run is never requeued.
A hold its agent's operator asked for (a stop, ``hold_cause`` ``stop``: what
``accordion up`` does to every agent before it stops the scheduler) is not
the job's doing: a part of it that is not re-announced is requeued uncharged.

Each job's event sequence, the scheduler-wide stream and each owner's go on
from the journal's last numbers; the machines an admin drained stay drained.
The fair-share usage of the jobs moved to the journal's archive, which the
journal keeps as sums per user or group and period, is charged before the
journal's own jobs, so fair-share weighs what it weighed before the restart.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from broker.messages import JobSpec, ResizePart
from broker.vocabulary import JobEventKind
from model.allocation import Allocation
from model.machine import Part
from scheduler.core.job_lifecycle import JobState
from scheduler.live import drains
from scheduler.live.context import Context
from scheduler.live.coupling import PartEvent, ToJob, part_event
from scheduler.live.specs import job_from_spec

log = logging.getLogger(__name__)


class RestoredJob(Protocol):
    """One job as the journal restores it, in submission order (the runtime's
    ``JournalJob`` is one): what a restart rebuilds the core from."""

    @property
    def spec(self) -> JobSpec: ...
    @property
    def submit(self) -> float: ...
    @property
    def state(self) -> JobState: ...
    @property
    def start(self) -> float | None: ...
    @property
    def end(self) -> float | None: ...
    @property
    def parts(self) -> tuple[Part, ...]:
        """Its last allocation (a running or ended job's)."""

    @property
    def requeues(self) -> int: ...
    @property
    def uncharged(self) -> int:
        """Of ``requeues``, those not counted against ``max_requeues``."""

    @property
    def held_until(self) -> float | None:
        """When the hold of its parts for adoption ends (cluster seconds), if held."""

    @property
    def hold_cause(self) -> str | None:
        """``stop`` when its agent's operator stopped the agent holding its parts."""


@dataclass(slots=True)
class Reconciliation:
    """Whether a restart is being reconciled, and until when (cluster seconds)."""

    active: bool = False
    until: float = 0.0


def restore(
    ctx: Context,
    jobs: Sequence[RestoredJob],
    seqs: dict[str, int],
    now: float,
    *,
    streams: tuple[int, dict[str, int]] = (0, {}),
    drained: dict[str, float] | None = None,
    usage: Sequence[tuple[str, str, int, float]] = (),
    usage_period: float | None = None,
) -> Reconciliation:
    """Rebuild ``ctx`` from the journal's ``jobs`` (see the module docstring), its
    event ``streams`` (the last numbers, scheduler-wide and by owner), the
    machines an admin ``drained`` and the ``usage`` of the jobs it archived
    (``(kind, name, period index, CPU-seconds)`` by periods of ``usage_period``)."""
    core = ctx.core
    # First, as those jobs ended before the journal's were restored (Recovery.restore_usage).
    core.restore_usage(usage, usage_period)
    holds: list[float] = []
    for row in jobs:
        spec = row.spec
        job = job_from_spec(spec, row.submit)
        ctx.specs[spec.id] = spec
        if row.state is JobState.QUEUED:
            core.restore_queued(job, requeues=row.requeues, uncharged=row.uncharged)
        elif row.state is JobState.RUNNING:
            if row.start is None:
                raise ValueError(f"journal: running job {spec.id!r} has no start")
            core.restore_pending(
                job, row.parts, row.start, requeues=row.requeues, uncharged=row.uncharged
            )
            if row.held_until is not None:
                holds.append(row.held_until)
            live = ctx.placements.track(spec.id, row.parts, row.requeues + 1, pending=True)
            live.stopped = row.hold_cause == "stop"
        else:
            core.restore_final(job, row.state, start=row.start, end=row.end, parts=row.parts)
    ctx.seqs.update(seqs)
    ctx.stream = max(ctx.stream, streams[0])
    for owner, last in streams[1].items():
        ctx.owner_streams[owner] = max(ctx.owner_streams.get(owner, 0), last)
    drains.restore(ctx, drained or {})
    result = Reconciliation()
    if core.pending:
        until = now + ctx.settings.reconcile_grace * ctx.time_scale
        # A job held for adoption when the scheduler stopped (``scheduler.live.agent_hold``)
        # is not declared lost before its hold ends: its parts may still run until then.
        result = Reconciliation(True, max([until, *holds]))
        log.info("restored %d running job(s); reconciling with the agents", len(core.pending))
    ctx.dirty = bool(core.queue)
    log.info(
        "restored %d job(s): %d queued, %d running",
        len(jobs),
        len(core.queue),
        len(core.pending),
    )
    return result


def settle(ctx: Context, rec: Reconciliation, now: float) -> None:
    """Restore every pending job whose parts have all been re-announced; past the
    grace, apply the lost-agent rule to the rest; end the reconciliation when none
    is left."""
    if not rec.active:
        return
    core = ctx.core
    for job_id, pending in list(core.pending.items()):
        live = ctx.placements[job_id]
        if not live.confirmed:
            continue
        try:
            core.restore_running(job_id, now)
        except ValueError as exc:
            # The agent came back smaller than the journal remembers.
            log.warning("%s", exc)
            ctx.job_lost(job_id, now, "its parts no longer fit its machines")
            continue
        log.info("job %s reconciled on %s", job_id, [p.machine for p in pending.parts])
        alloc = Allocation.of(pending.parts, core.speeds)
        for p in pending.parts:
            if live.announced.get(p.machine, p.cpus) != p.cpus:
                ctx.command(
                    p.machine,
                    ResizePart(
                        job_id=job_id,
                        cpus=p.cpus,
                        pace=alloc.pace,
                        job_cpus=alloc.cpus,
                        attempt=live.attempt,
                    ),
                )
        ctx.event(
            job_id, JobEventKind.RUNNING, now, "reconciled after a restart", parts=pending.parts
        )
    if now >= rec.until:
        for job_id in list(core.pending):
            # Settled above if every part was confirmed: one at least was not.
            live = ctx.placements[job_id]
            unconfirmed = [p for p in live.parts.values() if not p.confirmed]
            agent = unconfirmed[0].machine
            why = "not re-announced by its agents after the restart"
            event = PartEvent.NOT_REANNOUNCED
            if live.stopped:
                # Held by its agent's stop, which its operator asked for: not charged.
                why += ", after its agent's operator stopped it: not charged"
                event = PartEvent.NOT_REANNOUNCED_AFTER_STOP
            part_event(ctx, job_id, agent, event, now, detail=why)
    if not core.pending:
        rec.active = False
        ctx.dirty = True
        log.info("reconciliation done")


def not_running(ctx: Context, job_id: str, agent: str, now: float) -> None:
    """A heartbeat of ``agent`` does not list its part of the pending ``job_id``.

    Never heard of since the restart: its start was in flight, so it is sent
    again (once) instead of costing the job a requeue; while that one is on its
    way, later heartbeats change nothing (the reconcile grace bounds the wait).
    Heard of since (listed, or started) and now gone: the lost-agent rule. Both
    are rows of ``scheduler.live.coupling``'s part table.
    """
    why = f"{agent} does not run it after the restart"
    rule = part_event(ctx, job_id, agent, PartEvent.UNLISTED_AFTER_RESTART, now, detail=why)
    if rule.job is ToJob.START_SENT_AGAIN:
        log.info(
            "job %s: %s never had attempt %d (a start in flight at the restart): sent again",
            job_id,
            agent,
            ctx.placements[job_id].attempt,
        )
