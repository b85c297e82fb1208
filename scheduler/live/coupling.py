"""What each agent and part transition does to the others and to the job, as tables.

The agent's lifecycle (``scheduler.live.agent_lifecycle``), the part's
(``scheduler.live.part_lifecycle``) and the job's (``scheduler.core.job_lifecycle``)
are each one table. This module is the one place that ties them together, the
way h11 keeps the coupling of a connection's client and server state machines
in one module: everything one machine's move does to the others lives here, as
data where it can. The handlers (``scheduler.live.agents``, ``agent_hold``, ``reconcile``)
only tell what happened; this module says, and then does, what follows.

*An agent's move* (:data:`AGENT_RULES`, keyed by the state it was in and the
input it took, the same keys as the agent's own table) does two things:

- to its machine in the core (:class:`ToMachine`): cordon it (the policy sees
  none of its CPUs free; its jobs keep theirs), lift the cordon, take it out
  of the cluster, or put it (back) in;
- to its parts (:class:`ToParts`): nothing; hold them for adoption (each job's
  hold journaled, a ``held`` event); offer them to the new incarnation (each
  part then goes through the part table as ``adopted`` or ``not adopted``);
  or the lost-agent rule (every job with a part there requeued, or failed past
  ``max_requeues``, ``scheduler.core.recovery``; every part of those jobs told
  to stop, the lost agent's included).

*A stop an operator asked for* (DESIGN.md, "Trust and faults": a stop never
costs a job its requeue budget) has rows of its own: a stopped agent's hold
(STOPPED) offers its parts as after a will, but what its next incarnation does
not adopt, or what is left when its hold ends, is requeued uncharged, its
cause ``operator_stop`` journaled (:class:`Cause`); an agent that ended its
parts as it stopped loses them by the same uncharged rule at once.

*A part's event* (:data:`PART_RULES`, keyed by what was learnt of the part,
its state, and whether its start was sent again already) says what the part
becomes and what the job does (:class:`ToJob`). A job that fails or is
requeued has every other part of the attempt told to stop
(``Context.end_job``, ``Context.after_loss``).

An agent's move the agent table does not allow raises there; a pair of the
agent table with no row here, or a part event the part table has no row for in
that state (a vanished part that never started, a fenced start of a part
already final), raises :class:`IllegalTransitionError` here: both are bugs
in a handler, not input to count.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from broker.vocabulary import JobEventKind
from scheduler.core.job_lifecycle import IllegalTransitionError, JobState
from scheduler.live import agent_hold
from scheduler.live.agent_lifecycle import AgentInput, AgentState, Move
from scheduler.live.context import Context
from scheduler.live.dispatch import start_commands
from scheduler.live.part_lifecycle import PartInput, PartState

log = logging.getLogger(__name__)

#: job id -> (CPUs when said, attempt) as an agent reported them.
Reported = dict[str, tuple[int | None, int]]


class ToMachine(StrEnum):
    """What an agent's move does to its machine in the core."""

    NOTHING = "nothing"
    CORDON = "cordoned"
    UNCORDON = "cordon lifted"
    LEAVE = "leaves the cluster"
    JOIN = "joins the cluster"


class ToParts(StrEnum):
    """What an agent's move does to the parts it holds."""

    NOTHING = "nothing"
    HOLD = "held for adoption"
    OFFER = "adopted if the new incarnation lists them"
    #: The same after its operator stopped it: what is not adopted is not charged.
    OFFER_AFTER_STOP = "adopted if the new incarnation lists them, the rest uncharged"
    LOSE = "the lost-agent rule"
    #: Every job with a part there requeued, none charged: its operator stopped it.
    LOSE_BY_STOP = "the lost-agent rule, uncharged"


class Cause(StrEnum):
    """Why a job went back to the queue, as its journaled requeue says."""

    #: Its agent was lost (will, silence, a new incarnation): charged.
    AGENT_LOST = "agent_lost"
    #: One of its parts was lost (vanished, fenced, not re-announced): charged.
    PART_LOST = "part_lost"
    #: Its start never ran (refused before its fork, or lost on its way): uncharged.
    NEVER_RAN = "never_ran"
    #: Its agent's operator stopped the agent: uncharged.
    OPERATOR_STOP = "operator_stop"


class PartEvent(StrEnum):
    """What the scheduler learnt of one part."""

    #: ``PartStarted``, or its agent listed it (a heartbeat or an announcement).
    STARTED = "started"
    #: ``PartFinished`` with exit code 0 and reason ``done``.
    DONE = "done"
    #: ``PartFinished`` with any other exit or reason not named below.
    FAILED = "failed"
    #: ``PartFinished(reason="fenced")``: the agent stopped it or refused its start
    #: (a start older than the lease, or the lease lapsed under it).
    FENCED = "fenced"
    #: The same with exit code -1: refused before its fork.
    FENCED_BEFORE_FORK = "fenced before its fork"
    #: ``PartFinished(reason="lost")``: its agent gives its parts up as it stops.
    GIVEN_UP = "given up"
    #: ``PartFinished(reason="stopped")``: its agent's operator stopped the agent, and
    #: the part with it (or its successor could not adopt it after such a stop).
    STOPPED = "stopped by its agent's operator"
    #: Running, and not listed by its agent's last ``vanish_misses`` heartbeats.
    VANISHED = "vanished"
    #: Starting, and not listed by a heartbeat past the silence limit since the
    #: decision: its ``StartPart`` was lost (the agent would refuse it now).
    NEVER_REACHED = "start never reached its agent"
    #: A restored job's part that a heartbeat of its agent does not list.
    UNLISTED_AFTER_RESTART = "not listed after a restart"
    #: A restored job's part not re-announced within the reconcile grace.
    NOT_REANNOUNCED = "not re-announced"
    #: Listed, with the job's attempt, by the new incarnation of its HELD agent.
    ADOPTED = "adopted"
    #: Not listed by the new incarnation of its HELD agent.
    NOT_ADOPTED = "not adopted"
    #: Not listed by the new incarnation of its STOPPED agent.
    NOT_ADOPTED_AFTER_STOP = "not adopted after its agent's stop"
    #: A restored job's part not re-announced within the reconcile grace, held when the
    #: scheduler stopped because its agent's operator had stopped that agent.
    NOT_REANNOUNCED_AFTER_STOP = "not re-announced after its agent's stop"


class ToJob(StrEnum):
    """What a part's event does to its job."""

    GOES_ON = "goes on"
    #: Finished when every part is done.
    FINISHES = "finishes if every part is done"
    #: Failed now; its other parts are told to stop.
    FAILS = "fails"
    #: The lost-agent rule: requeued, or failed past ``max_requeues``; its other
    #: parts are told to stop.
    REQUEUED = "requeued or failed"
    #: Requeued without counting against ``max_requeues`` (the part never ran).
    REQUEUED_UNCHARGED = "requeued, not charged"
    #: Requeued without counting against ``max_requeues``: its agent's operator
    #: stopped the agent.
    REQUEUED_BY_STOP = "requeued, not charged: an operator's stop"
    #: The same start (attempt, parts, pace) goes to the part's agent again, once.
    START_SENT_AGAIN = "start sent again"
    #: Goes on, with an ``adopted`` event.
    ADOPTED = "goes on, adopted"
    #: The agent's own lost-agent rule (its input ``will``) when its process is
    #: heard from, which covers this job; otherwise this job alone is requeued.
    AGENT_LEAVES = "its agent leaves"


@dataclass(frozen=True, slots=True)
class AgentRule:
    machine: ToMachine
    parts: ToParts


@dataclass(frozen=True, slots=True)
class PartRule:
    #: What the part takes in its own table (None: it stays as it is).
    part: PartInput | None
    job: ToJob


_A, _I = AgentState, AgentInput
_STAY: Final = AgentRule(ToMachine.NOTHING, ToParts.NOTHING)
_LOST: Final = AgentRule(ToMachine.LEAVE, ToParts.LOSE)
_STOPPED: Final = AgentRule(ToMachine.LEAVE, ToParts.LOSE_BY_STOP)
_HELD: Final = AgentRule(ToMachine.CORDON, ToParts.HOLD)
_BACK: Final = AgentRule(ToMachine.JOIN, ToParts.NOTHING)
_CORDON: Final = AgentRule(ToMachine.CORDON, ToParts.NOTHING)

AGENT_RULES: Final[dict[tuple[AgentState, AgentInput], AgentRule]] = {
    (_A.ONLINE, _I.HEARTBEAT): _STAY,
    (_A.ONLINE, _I.MISSED): AgentRule(ToMachine.CORDON, ToParts.NOTHING),
    (_A.ONLINE, _I.SILENT): _LOST,
    (_A.ONLINE, _I.WILL): _LOST,
    (_A.ONLINE, _I.GOODBYE): _LOST,
    (_A.ONLINE, _I.REINCARNATED): _LOST,
    (_A.ONLINE, _I.WILL_HOLD): _HELD,
    (_A.SUSPECT, _I.HEARTBEAT): AgentRule(ToMachine.UNCORDON, ToParts.NOTHING),
    (_A.SUSPECT, _I.MISSED): _STAY,
    (_A.SUSPECT, _I.SILENT): _LOST,
    (_A.SUSPECT, _I.WILL): _LOST,
    (_A.SUSPECT, _I.GOODBYE): _LOST,
    (_A.SUSPECT, _I.REINCARNATED): _LOST,
    (_A.SUSPECT, _I.WILL_HOLD): _HELD,
    # Drained: nothing new is placed there; its parts run to their end.
    (_A.ONLINE, _I.DRAIN): _CORDON,
    (_A.SUSPECT, _I.DRAIN): _CORDON,
    (_A.DRAINING, _I.RESUME): AgentRule(ToMachine.UNCORDON, ToParts.NOTHING),
    (_A.DRAINING, _I.HEARTBEAT): _STAY,
    (_A.DRAINING, _I.SILENT): _LOST,
    (_A.DRAINING, _I.WILL): _LOST,
    (_A.DRAINING, _I.GOODBYE): _LOST,
    (_A.DRAINING, _I.REINCARNATED): _LOST,
    (_A.DRAINING, _I.WILL_HOLD): _HELD,
    # Stopped by its operator: held for its next incarnation, or (no adoption) its
    # parts ended and their jobs requeued at once, uncharged either way.
    (_A.ONLINE, _I.STOP): _STOPPED,
    (_A.SUSPECT, _I.STOP): _STOPPED,
    (_A.DRAINING, _I.STOP): _STOPPED,
    (_A.ONLINE, _I.STOP_HOLD): _HELD,
    (_A.SUSPECT, _I.STOP_HOLD): _HELD,
    (_A.DRAINING, _I.STOP_HOLD): _HELD,
    (_A.STOPPED, _I.REINCARNATED): AgentRule(ToMachine.UNCORDON, ToParts.OFFER_AFTER_STOP),
    (_A.STOPPED, _I.HOLD_ENDED): _STOPPED,
    (_A.STOPPED, _I.GOODBYE): _STOPPED,
    # The same process heard again: nothing was lost.
    (_A.HELD, _I.HEARTBEAT): AgentRule(ToMachine.UNCORDON, ToParts.NOTHING),
    (_A.HELD, _I.REINCARNATED): AgentRule(ToMachine.UNCORDON, ToParts.OFFER),
    (_A.HELD, _I.HOLD_ENDED): _LOST,
    (_A.HELD, _I.GOODBYE): _LOST,
    # Its stale parts are told to stop when a heartbeat lists them.
    (_A.LOST, _I.HEARTBEAT): _BACK,
    (_A.LOST, _I.REINCARNATED): _BACK,
    (_A.GONE, _I.REINCARNATED): _BACK,
}
"""Every move of the agent table that changes something, or could: what it does."""

_P, _E, _J = PartState, PartEvent, ToJob
_LIVE: Final = (_P.STARTING, _P.PENDING, _P.RUNNING)
_ANY: Final = (False, True)
_ROWS: Final[
    list[tuple[PartEvent, tuple[PartState, ...], tuple[bool, ...], PartInput | None, ToJob]]
] = [
    # event                  part states        sent again  the part takes     the job
    (_E.STARTED, _LIVE, _ANY, PartInput.STARTED, _J.GOES_ON),
    (_E.DONE, _LIVE, _ANY, PartInput.DONE, _J.FINISHES),
    (_E.FAILED, _LIVE, _ANY, PartInput.FAILED, _J.FAILS),
    (_E.FENCED, _LIVE, _ANY, PartInput.LOST, _J.REQUEUED),
    # Never heard started and refused before its fork: it never ran.
    (_E.FENCED_BEFORE_FORK, (_P.STARTING,), _ANY, PartInput.LOST, _J.REQUEUED_UNCHARGED),
    (_E.FENCED_BEFORE_FORK, (_P.PENDING, _P.RUNNING), _ANY, PartInput.LOST, _J.REQUEUED),
    (_E.GIVEN_UP, _LIVE, _ANY, PartInput.LOST, _J.AGENT_LEAVES),
    (_E.STOPPED, _LIVE, _ANY, PartInput.LOST, _J.REQUEUED_BY_STOP),
    (_E.VANISHED, (_P.RUNNING,), _ANY, None, _J.REQUEUED),
    (_E.NEVER_REACHED, (_P.STARTING,), (False,), None, _J.REQUEUED_UNCHARGED),
    # Never heard of since the restart: its start was in flight, so it goes again,
    # once; while that one is on its way, the reconcile grace bounds the wait.
    (_E.UNLISTED_AFTER_RESTART, (_P.PENDING,), (False,), None, _J.START_SENT_AGAIN),
    (_E.UNLISTED_AFTER_RESTART, (_P.PENDING,), (True,), None, _J.GOES_ON),
    # Heard of since the restart, and gone now.
    (_E.UNLISTED_AFTER_RESTART, (_P.RUNNING,), _ANY, None, _J.REQUEUED),
    (_E.NOT_REANNOUNCED, (_P.PENDING,), _ANY, None, _J.REQUEUED),
    (_E.ADOPTED, _LIVE, _ANY, None, _J.ADOPTED),
    # Its start never reached the old process's fork: every part it forked has a
    # record the new one adopts or kills and reports, so it goes to the new one.
    (_E.NOT_ADOPTED, (_P.STARTING,), (False,), None, _J.START_SENT_AGAIN),
    (_E.NOT_ADOPTED, (_P.STARTING,), (True,), None, _J.REQUEUED),
    (_E.NOT_ADOPTED, (_P.PENDING, _P.RUNNING), _ANY, None, _J.REQUEUED),
    # The same after an operator's stop, uncharged.
    (_E.NOT_ADOPTED_AFTER_STOP, (_P.STARTING,), (False,), None, _J.START_SENT_AGAIN),
    (_E.NOT_ADOPTED_AFTER_STOP, (_P.STARTING,), (True,), None, _J.REQUEUED_BY_STOP),
    (_E.NOT_ADOPTED_AFTER_STOP, (_P.PENDING, _P.RUNNING), _ANY, None, _J.REQUEUED_BY_STOP),
    (_E.NOT_REANNOUNCED_AFTER_STOP, (_P.PENDING,), _ANY, None, _J.REQUEUED_BY_STOP),
]
PART_RULES: Final[dict[tuple[PartEvent, PartState, bool], PartRule]] = {
    (event, state, again): PartRule(takes, job)
    for event, states, agains, takes, job in _ROWS
    for state in states
    for again in agains
}
"""What each event does to a part and its job, by (event, part state, start sent
again already); final parts take no event (their reports are repeats)."""
if len(PART_RULES) != sum(len(r[1]) * len(r[2]) for r in _ROWS):
    raise RuntimeError("coupling: two rows of the part table cover one case")


def agent_rule(move: Move) -> AgentRule:
    """What ``move`` does to its machine and parts (a move that changed nothing does
    nothing); raises on a move of the agent table that has no row here."""
    rule = AGENT_RULES.get((move.before, move.input))
    if rule is None:
        if not move.changed:
            return _STAY  # a repeat or a message in flight (the agent table ignored it)
        raise IllegalTransitionError(f"no coupling for an agent's {move.input} while {move.before}")
    return rule


def part_rule(event: PartEvent, state: PartState, *, sent_again: bool = False) -> PartRule:
    """What ``event`` does to a part in ``state`` and its job; raises when the part
    cannot take it (the table has no such row)."""
    rule = PART_RULES.get((event, state, sent_again))
    if rule is None:
        again = " (its start sent again)" if sent_again else ""
        raise IllegalTransitionError(f"a part cannot be {event} while {state}{again}")
    return rule


# -- doing what the tables say ------------------------------------------------------


def agent_moved(
    ctx: Context,
    agent: str,
    move: Move,
    now: float,
    why: str,
    *,
    listed: Reported | None = None,
) -> AgentRule:
    """Apply :data:`AGENT_RULES` to ``agent``'s move; ``why`` names the loss in metrics
    and details (``will``, ``silence``, ``incarnation``, ``goodbye``, ``stop``),
    ``listed`` is what a new incarnation runs (for the offers)."""
    rule = agent_rule(move)
    match rule.machine:
        case ToMachine.CORDON:
            ctx.cordoned.add(agent)
        case ToMachine.UNCORDON:
            ctx.cordoned.discard(agent)
            ctx.dirty = True  # its free CPUs are the policy's again
        case ToMachine.LEAVE:
            ctx.cordoned.discard(agent)
        case ToMachine.JOIN:
            ctx.core.machine_joined(ctx.agents[agent].machine)
            ctx.dirty = True
        case ToMachine.NOTHING:
            pass
    match rule.parts:
        case ToParts.HOLD:
            agent_hold.held(ctx, agent, now, why)
        case ToParts.OFFER | ToParts.OFFER_AFTER_STOP:
            if listed is None:
                raise ValueError(f"agent {agent}: an offer to a new incarnation needs its list")
            _offer(ctx, agent, listed, now, stopped=rule.parts is ToParts.OFFER_AFTER_STOP)
        case ToParts.LOSE:
            _lose_agent(ctx, agent, now, why)
        case ToParts.LOSE_BY_STOP:
            _lose_agent(ctx, agent, now, why, stopped=True)
        case ToParts.NOTHING:
            pass
    return rule


def part_event(
    ctx: Context, job_id: str, agent: str, event: PartEvent, now: float, *, detail: str = ""
) -> PartRule:
    """Apply :data:`PART_RULES` to the part of ``job_id`` on ``agent``; ``detail`` says
    why, in the job's event and journal row."""
    live = ctx.placements[job_id]
    part = live.parts[agent]
    rule = part_rule(event, part.state, sent_again=agent in live.resent)
    if rule.part is not None:
        part.apply(rule.part)
    match rule.job:
        case ToJob.GOES_ON:
            pass
        case ToJob.FINISHES:
            if live.all_done:
                ctx.end_job(job_id, now, JobState.FINISHED, "")
        case ToJob.FAILS:
            ctx.end_job(job_id, now, JobState.FAILED, detail)
        case ToJob.REQUEUED:
            ctx.job_lost(job_id, now, detail, cause=Cause.PART_LOST)
        case ToJob.REQUEUED_UNCHARGED:
            ctx.job_lost(job_id, now, detail, cause=Cause.NEVER_RAN, charged=False)
        case ToJob.REQUEUED_BY_STOP:
            ctx.job_lost(job_id, now, detail, cause=Cause.OPERATOR_STOP, charged=False)
        case ToJob.START_SENT_AGAIN:
            live.resent.add(agent)
            for machine, command in start_commands(
                ctx, job_id, live.layout(), live.attempt, ctx.wall()
            ):
                if machine == agent:
                    ctx.command(machine, command)
        case ToJob.ADOPTED:
            ctx.event(job_id, JobEventKind.ADOPTED, now, detail)
        case ToJob.AGENT_LEAVES:
            ag = ctx.agents.get(agent)
            if ag is not None and ag.life.heard:
                agent_moved(ctx, agent, ag.life.apply(AgentInput.WILL), now, "goodbye")
            else:
                ctx.job_lost(job_id, now, detail, cause=Cause.AGENT_LOST)
    return rule


def _lose_agent(ctx: Context, agent: str, now: float, why: str, *, stopped: bool = False) -> None:
    """:attr:`ToParts.LOSE` (``stopped``: :attr:`ToParts.LOSE_BY_STOP`, uncharged): the
    lost-agent rule for everything on ``agent``."""
    lefts = ctx.core.machine_left(agent, now, charged=not stopped)
    ctx.dirty = True
    if why not in ("goodbye", "stop") or lefts:  # a retired or stopped agent lost nothing
        ctx.metrics.agents_lost.labels(reason=why).inc()
    log.warning("agent %s offline (%s): %d job(s) affected", agent, why, len(lefts))
    cause = Cause.OPERATOR_STOP if stopped else Cause.AGENT_LOST
    what = "stopped by its operator, not charged" if stopped else "lost"
    for left in lefts:
        detail = f"machine {agent} {what} ({why})"
        ctx.after_loss(left, now, detail, also_cancel=agent, cause=cause, charged=not stopped)


def _offer(ctx: Context, agent: str, listed: Reported, now: float, *, stopped: bool) -> None:
    """:attr:`ToParts.OFFER` (``stopped``: :attr:`ToParts.OFFER_AFTER_STOP`): each part on
    ``agent`` adopted if the new incarnation lists it with the job's attempt, else not."""
    adopted = restarted = 0
    missing = PartEvent.NOT_ADOPTED_AFTER_STOP if stopped else PartEvent.NOT_ADOPTED
    for job_id in agent_hold.jobs_on(ctx, agent):
        part = ctx.placements[job_id].parts[agent]
        seen = listed.get(job_id)
        if seen is not None and not part.is_stale(seen[1]):
            detail = f"its part on {agent} adopted by a new incarnation"
            part_event(ctx, job_id, agent, PartEvent.ADOPTED, now, detail=detail)
            adopted += 1
            continue
        detail = f"its part on {agent} was not adopted by the new incarnation"
        if stopped:
            detail += " after its operator's stop: not charged"
        rule = part_event(ctx, job_id, agent, missing, now, detail=detail)
        restarted += rule.job is ToJob.START_SENT_AGAIN
    agent_hold.adopted(ctx, agent, adopted, restarted)
