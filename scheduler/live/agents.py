"""Agents: registration, liveness, part reports, and the lost-agent rule's triggers.

Liveness comes from the agent's own ``Heartbeat`` only (its lifecycle is in
``scheduler.live.agent_lifecycle``): a job process's progress is no proof, since
job processes go on while their agent is frozen. An agent whose heartbeats
stop for ``suspect_factor`` periods is SUSPECT; for ``silence_factor``
periods, LOST. Silence is counted only while the scheduler itself is
connected (``Context.heard_since``), so a broker outage is no one's silence.

*Adoption.* An agent whose parts outlive it (``AgentOnline.adopts``) is not
lost at once on its will or a new incarnation: its parts are held for its
lease, for the new incarnation to adopt (``scheduler.live.agent_hold``).

*Polite stops.* An agent its operator stopped says so
(``AgentOffline(reason="stopping")``): one that adopts is STOPPED, its parts
held as after a will; one that does not is lost at once. Either way nothing
is charged to the jobs' requeue budgets, nor for a part it reports
``stopped`` (``scheduler.live.coupling``). A heartbeat of a stopped
incarnation (in flight) does not bring it back; its next incarnation does.

*Drains.* An agent that drains as it stops announces it
(``AgentOnline.draining``); an admin drains a machine by request
(``scheduler.live.drains``). Either puts it in DRAINING: nothing new is placed
there while its parts run to their end.

*The lost-agent rule.* An agent is lost when its Last Will arrives, when it
is silent, when it re-registers with a new incarnation (the old process's
parts are gone), or when it gives parts up (``PartFinished(reason="lost")``,
which an agent sends only when it stops). Then every job
with a part on it is requeued or, past ``max_requeues``, failed
(``SchedulerCore.machine_left``); ``CancelPart`` of that attempt goes to all
its parts, the lost agent's included (if it is still alive, its parts must
stop; if not, fencing makes the command harmless to a later incarnation).
This module tells what happened (which agent input, which part event); what
each does to the machine, the parts and the job is ``scheduler.live.coupling``'s
tables, stated once for every handler.
The same rule applies to one job when a part vanishes (a RUNNING part that
the agent's heartbeats stop listing for ``vanish_misses`` beats in a row) or is
fenced off by its agent (``PartFinished(reason="fenced")``: a start that
reached it later than its lease, or a part stopped because the lease lapsed),
and, uncharged, when a start never reached its agent (a STARTING part that a
heartbeat does not list past the silence limit since the decision: a broker
killed after acknowledging the ``StartPart`` loses it, and the agent would
refuse it now as older than its lease).
A LOST agent heard again (a heartbeat) rejoins; its stale parts are told to
stop when its heartbeat lists them.

*Run dating.* The scheduler hears of a part's start and end later than
they happen (the broker's and its own batches' delays: whole cluster seconds
at a time scale of 1000), so it does not date a run by its handling of the
reports. Each agent measures on its own monotonic clock (never compared with
another host's) its launch latency (``PartStarted.launch_seconds``) and the
process's run (``PartFinished.run_seconds``); the job's run starts at its
decision plus the last part's launch latency and ends the measured run later
(``LiveJob.measured_run``), which the journal and the job metrics record.
Without both measurements from every part (an older agent), the run is dated
from the decision to the handling of the last report, as before.

*Part ends.* A job finishes when every part has reported ``PartFinished``
with exit code 0 and reason ``done``. The first part that reports anything
else fails the job at once; its other parts are cancelled. Duplicate and
stale reports (another attempt, fencing) are ignored; a stale part still
running is told to stop. A part's end counts even from an agent not
registered (yet): the broker may hand a restarted scheduler the events it
queued meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from broker.messages import (
    AgentOffline,
    AgentOnline,
    AnyMessage,
    CancelPart,
    Heartbeat,
    PartFinished,
    PartProgress,
    PartStarted,
    RunningPart,
)
from broker.vocabulary import BadMessage
from model.machine import Machine
from scheduler.live import agent_hold, drains, reconcile
from scheduler.live.agent_lifecycle import AgentInput, AgentLifecycle, AgentState
from scheduler.live.context import Agent, Context
from scheduler.live.coupling import PartEvent, Reported, ToJob, agent_moved, part_event, part_rule
from scheduler.live.live_jobs import LiveJob
from scheduler.live.part_lifecycle import PartState

log = logging.getLogger(__name__)


def on_state(ctx: Context, agent: str, message: AnyMessage, now: float) -> None:
    """A message on ``agents/<agent>/state``."""
    match message:
        case AgentOnline():
            _online(ctx, agent, message, now)
        case AgentOffline():
            _offline(ctx, agent, message, now)
        case _:
            ctx.count_bad(BadMessage.UNEXPECTED, f"{_kind(message)} is not an agent state")


def on_event(ctx: Context, agent: str, message: AnyMessage, now: float) -> None:
    """A message on ``agents/<agent>/events``."""
    if not isinstance(message, Heartbeat | PartStarted | PartProgress | PartFinished):
        ctx.count_bad(BadMessage.UNEXPECTED, f"{_kind(message)} is not an agent event")
        return
    if message.agent_id not in ("-", agent):
        ctx.count_bad(BadMessage.UNEXPECTED, f"agent {message.agent_id!r} on {agent!r}'s topic")
        return
    if isinstance(message, PartFinished):
        _part_finished(ctx, agent, message, now)
        return
    ag = ctx.agents.get(agent)
    if ag is None:
        return  # no registration seen yet (its AgentOnline may be on its way)
    match message:
        case Heartbeat():
            _heartbeat(ctx, agent, ag, message, now)
        case PartStarted():
            if ag.life.available:
                _part_started(ctx, agent, message, now)
        case PartProgress():
            pass  # not liveness (see the module docstring); estimates come from the model


def check_liveness(ctx: Context, now: float) -> None:
    """The periodic check: suspect and lose agents whose heartbeats stopped."""
    s = ctx.settings
    lose = s.silence_limit * ctx.time_scale
    suspect = s.suspect_limit * ctx.time_scale
    for agent, move in agent_hold.expired(ctx, now):
        agent_moved(ctx, agent, move, now, "will")  # nobody adopted its parts within the lease
    for agent, ag in list(ctx.agents.items()):
        if not ag.life.heard:
            continue
        silent = now - max(ag.last_heartbeat, ctx.heard_since)
        if silent > lose:
            agent_moved(ctx, agent, ag.life.apply(AgentInput.SILENT), now, "silence")
        elif silent > suspect and ag.life.state is AgentState.ONLINE:
            # Cordoned: no new parts there until it is heard again.
            agent_moved(ctx, agent, ag.life.apply(AgentInput.MISSED), now, "silence")
            ctx.metrics.agents_suspect.inc()
            log.warning("agent %s suspect: no heartbeat for %.1f s", agent, silent / ctx.time_scale)


def _reports(parts: Iterable[RunningPart]) -> Reported:
    return {p.job_id: (p.cpus, p.attempt) for p in parts}


def _kind(message: AnyMessage) -> str:
    return str(message.__struct_config__.tag)


# -- registration ------------------------------------------------------------------


def _online(ctx: Context, agent: str, message: AgentOnline, now: float) -> None:
    spec = message.machine
    if spec.id != agent:
        why = f"agent {agent!r} must describe its own machine {agent!r}"
        ctx.count_bad(BadMessage.UNEXPECTED, why)
        return
    running = _reports(message.running)
    machine = Machine(id=spec.id, cpus=spec.cpus, speed=spec.speed, labels=spec.labels)
    ag = ctx.agents.get(agent)
    if ag is not None and ag.life.incarnation == message.incarnation:
        # A retained replay or a re-announcement after a reconnection (or to say it
        # drains): news of its parts, but no proof of life (only heartbeats are).
        if ag.life.available:
            ag.draining = message.draining
            drains.settle(ctx, agent, now)
            _reported(ctx, agent, running, now, complete=False)
        return
    lease, adopts = message.lease, message.adopts
    if ag is None:
        ag = Agent(machine, AgentLifecycle(message.incarnation, lease=lease, adopts=adopts), now)
        ag.draining = message.draining
        ctx.agents[agent] = ag
        _check_lease(ctx, agent, message.lease)
        ctx.core.machine_joined(machine)
        ctx.dirty = True
    else:
        log.warning("agent %s re-registered (incarnation %s)", agent, message.incarnation)
        ag.draining = message.draining
        if (
            ag.life.available
            and ag.machine.cpus == machine.cpus
            and (ag.life.held or _hold(ctx, agent, now, AgentInput.WILL_HOLD, "incarnation"))
        ):
            # Its parts were held: the new process adopts what it lists.
            move = ag.life.apply(AgentInput.REINCARNATED)
            ag.life.renew(message.incarnation, lease=lease, adopts=adopts)
            ag.last_heartbeat = now
            _check_lease(ctx, agent, message.lease)
            agent_moved(ctx, agent, move, now, "incarnation", listed=running)
            drains.settle(ctx, agent, now)
            _reported(ctx, agent, running, now, complete=False)
            return
        if ag.life.held:
            # Another machine now: the old rule.
            agent_moved(ctx, agent, ag.life.apply(AgentInput.HOLD_ENDED), now, "incarnation")
        elif ag.life.available:
            agent_moved(ctx, agent, ag.life.apply(AgentInput.REINCARNATED), now, "incarnation")
        move = ag.life.apply(AgentInput.REINCARNATED)
        ag.life.renew(message.incarnation, lease=lease, adopts=adopts)
        ag.machine, ag.last_heartbeat = machine, now
        _check_lease(ctx, agent, message.lease)
        agent_moved(ctx, agent, move, now, "incarnation")  # back in the cluster
    log.info("agent %s online: %d CPUs at speed %g", agent, spec.cpus, spec.speed)
    drains.settle(ctx, agent, now)
    _reported(ctx, agent, running, now, complete=False)


def _check_lease(ctx: Context, agent: str, lease: float) -> None:
    limit = ctx.settings.silence_limit
    if lease >= limit:
        log.warning(
            "agent %s keeps its parts %.1f s without the broker, but this scheduler "
            "requeues after %.1f s of silence: a requeued job may run twice for up to %.1f s",
            agent,
            lease,
            limit,
            lease - limit,
        )


def _offline(ctx: Context, agent: str, message: AgentOffline, now: float) -> None:
    ag = ctx.agents.get(agent)
    if ag is None or not ag.life.available:
        return  # a retained will from before, or a repeat
    if message.incarnation not in ("-", ag.life.incarnation):
        return  # the will of an older incarnation, arriving after the new one registered
    if message.reason == "lost":
        if ag.life.held or _hold(ctx, agent, now, AgentInput.WILL_HOLD, "will"):
            return  # held for adoption (``scheduler.live.agent_hold``)
        agent_moved(ctx, agent, ag.life.apply(AgentInput.WILL), now, "will")
    elif message.reason == "stopping":
        # Its operator stopped it: its parts held for its next incarnation, or (it does
        # not adopt) ended by it; nothing charged either way.
        if ag.life.held or _hold(ctx, agent, now, AgentInput.STOP_HOLD, "stop"):
            return
        agent_moved(ctx, agent, ag.life.apply(AgentInput.STOP), now, "stop")
    else:
        agent_moved(ctx, agent, ag.life.apply(AgentInput.GOODBYE), now, "goodbye")


def _hold(ctx: Context, agent: str, now: float, what: AgentInput, why: str) -> bool:
    """Hold the agent's parts for adoption (``scheduler.live.agent_hold``) by ``what``
    (``will_hold`` or ``stop_hold``); False if no hold applies (its parts die with it:
    the lost-agent rule, at once)."""
    ag = ctx.agents[agent]
    wall = agent_hold.hold_off(ag)
    if wall <= 0 or not ag.life.heard:
        return False
    move = ag.life.apply(what)
    ag.life.held_until = now + wall * ctx.time_scale
    agent_moved(ctx, agent, move, now, why)
    return True


def _heartbeat(ctx: Context, agent: str, ag: Agent, beat: Heartbeat, now: float) -> None:
    state = ag.life.state
    if state in (AgentState.GONE, AgentState.STOPPED):
        return  # in flight when it said goodbye, or that it stops
    move = ag.life.apply(AgentInput.HEARTBEAT)
    ag.last_heartbeat = now
    if state is AgentState.LOST:
        log.warning("agent %s heard again: rejoins", agent)
    elif state is AgentState.HELD:
        agent_hold.rejoined(ctx, agent)
    elif state is AgentState.SUSPECT:
        log.info("agent %s heard again: no longer suspect", agent)
    agent_moved(ctx, agent, move, now, "heartbeat")
    if move.changed:
        drains.settle(ctx, agent, now)
    _reported(ctx, agent, _reports(beat.running), now, complete=True)


# -- parts -----------------------------------------------------------------------------


def _stale(ctx: Context, agent: str, job_id: str, attempt: int) -> None:
    """A report of a part the scheduler does not hold there: tell the agent to stop it."""
    ctx.metrics.stale_reports.inc()
    ctx.command(agent, CancelPart(job_id=job_id, attempt=attempt))


def _part_started(ctx: Context, agent: str, message: PartStarted, now: float) -> None:
    live = ctx.placements.get(message.job_id)
    part = live.part(agent) if live is not None else None
    if live is None or part is None or part.final or part.is_stale(message.attempt):
        # Started after the job was cancelled or requeued (a late StartPart).
        _stale(ctx, agent, message.job_id, message.attempt)
        return
    part_event(ctx, message.job_id, agent, PartEvent.STARTED, now)
    if message.launch_seconds is not None:
        ctx.metrics.part_launch.observe(message.launch_seconds)
        if live.decided is not None:
            live.ran[agent] = live.decided + message.launch_seconds * ctx.time_scale


def _part_finished(ctx: Context, agent: str, message: PartFinished, now: float) -> None:
    job_id = message.job_id
    live = ctx.placements.get(job_id)
    part = live.part(agent) if live is not None else None
    if live is None or part is None or part.final:
        return  # stale (the job left already) or a QoS 1 repeat
    if part.is_stale(message.attempt):
        ctx.metrics.stale_reports.inc()
        return  # another attempt's process ended: nothing of this attempt changed
    if message.exit_code == 0 and message.reason == "done":
        ran = live.ran.get(agent)
        if ran is not None and message.run_seconds is not None:
            live.ended[agent] = ran + message.run_seconds * ctx.time_scale
        part_event(ctx, job_id, agent, PartEvent.DONE, now)
        return
    detail = f"part on {agent}: {message.reason} (exit code {message.exit_code})"
    if message.reason == "fenced":
        # The agent would not run this attempt (a start delayed past its lease, or the
        # lease lapsed under it): that job goes back to the queue; the agent stays.
        # A start refused before its fork (exit -1) that was never heard started
        # never ran: the table does not charge its requeue to the job's budget.
        event = PartEvent.FENCED_BEFORE_FORK if message.exit_code == -1 else PartEvent.FENCED
        if part_rule(event, part.state).job is ToJob.REQUEUED_UNCHARGED:
            detail = f"{detail}, before it ran: not charged"
        part_event(ctx, job_id, agent, event, now, detail=detail)
        return
    if message.reason == "lost":
        # An agent gives parts up only when it stops: the lost-agent rule for all of
        # its jobs at once, so none is started there again until it is heard again.
        part_event(ctx, job_id, agent, PartEvent.GIVEN_UP, now, detail=detail)
        return
    if message.reason == "stopped":
        # Its operator stopped the agent: requeued, not charged to the job.
        detail = f"{detail}: its agent's operator stopped it, not charged"
        part_event(ctx, job_id, agent, PartEvent.STOPPED, now, detail=detail)
        return
    part_event(ctx, job_id, agent, PartEvent.FAILED, now, detail=detail)


def _reported(ctx: Context, agent: str, running: Reported, now: float, *, complete: bool) -> None:
    """An agent said which parts it runs (``cpus`` when known, and their attempts).

    ``complete`` (a heartbeat, always current) also lets the absence of a part
    mean something; a state announcement may be an old retained one.
    """
    core = ctx.core
    for job_id, (cpus, attempt) in running.items():
        live = ctx.placements.get(job_id)
        part = live.part(agent) if live is not None else None
        if live is None or part is None or part.final or part.is_stale(attempt):
            _stale(ctx, agent, job_id, attempt)
            continue
        part_event(ctx, job_id, agent, PartEvent.STARTED, now)
        if cpus is not None and job_id in core.pending:
            live.announced[agent] = cpus
        if complete:
            part.misses = 0
    if not complete:
        return
    for job_id in ctx.placements.on_machine(agent):
        if job_id in running:
            continue
        live = ctx.placements[job_id]
        part = live.parts[agent]
        if part.final:
            continue
        if job_id in core.pending:
            reconcile.not_running(ctx, job_id, agent, now)
        elif part.state is PartState.STARTING and _start_expired(ctx, live, agent, now):
            detail = f"its start never reached {agent}: not charged"
            part_event(ctx, job_id, agent, PartEvent.NEVER_REACHED, now, detail=detail)
        elif part.state is PartState.RUNNING and ctx.settings.vanish_misses:
            part.misses += 1
            if part.misses >= ctx.settings.vanish_misses:
                detail = f"its part on {agent} vanished"
                part_event(ctx, job_id, agent, PartEvent.VANISHED, now, detail=detail)


def _start_expired(ctx: Context, live: LiveJob, agent: str, now: float) -> bool:
    """Whether a start the agent's heartbeat does not list can no longer run there.

    A ``StartPart`` the broker acknowledged can still be lost (a broker killed
    before it delivered it): the agent never lists the part, never reports it,
    and the job would stay starting for ever. An agent refuses a start older
    than its lease (``nodeagent.survival.lease``); past the silence limit since the
    decision (longer than the lease, with the same margin for the hosts' clocks
    as the lost-agent rule), a start not listed has not run and never will, so
    it is lost, uncharged. A start sent again (``live.resent``) is newer than
    the decision and left to the rule that sent it.
    """
    if live.decided is None or agent in live.resent:
        return False
    return now - live.decided > ctx.settings.silence_limit * ctx.time_scale
