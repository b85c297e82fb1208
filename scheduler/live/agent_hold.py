"""Holding a lost agent's parts for adoption, instead of requeueing them at once.

Theory of operation. A broker restart or an agent's restart is an ordinary
event: agents keep their job processes running meanwhile and report them
afterwards, and the scheduler reconciles. An agent that declares
``AgentOnline.adopts`` runs parts that outlive it for at most its lease
(``AgentOnline.lease``): past the lease from when the broker last heard it,
every one of them has stopped by itself
(``nodeagent.survival.lease``), and a new incarnation of the agent for the same
machine adopts the ones still running (``nodeagent.survival.adoption``).

So when such an agent's Last Will arrives, or a new incarnation registers
while the old one still counted as alive, the lost-agent rule waits:

- the agent moves to HELD (``scheduler.live.agent_lifecycle``) for the
  *hold-off* (:func:`hold_off`): exactly its declared lease. Its parts stay as
  they are (their CPUs held, their run going on), its machine is cordoned (no
  new parts), and the hold's end is journaled in each of its jobs' rows
  (``Journal.record_hold``) with a ``held`` event (:func:`held`). No setting
  shortens it: requeueing sooner could run a job twice while its parts still
  run (they may, for the lease). An agent run with ``--no-adopt`` declares no
  adoption; its parts die with it, and the rule applies at once as before;
- a new incarnation registered in time: the parts it lists with the job's
  current attempt are reconciled and go on, their run continuous
  (``adopted`` event, ``accordion_agents_adopted_parts_total``); a part whose
  start was never acknowledged (no ``PartStarted``: the old process died
  before its fork, which a record would otherwise show) is sent the same
  start again, once, uncharged; any other it does not list is lost by the old
  rule (requeued or failed). What each of those does is a row of
  ``scheduler.live.coupling``'s part table (``adopted``, ``not adopted``);
- :func:`expired` (the periodic check): a hold-off that passed applies the old
  rule to everything still on the agent. Requeueing then cannot run a job
  twice: its parts stopped by their lease, which started no later than the
  will (the scheduler receives the will after the broker last heard the agent).

The moves and what they do to the machine and the parts are
``scheduler.live.coupling``'s; this module keeps the hold's own bookkeeping
(its length, its journal rows and events, its metrics).

*A stop its operator asked for* (``AgentOffline(reason="stopping")`` from an
agent that adopts): the same hold, the agent STOPPED instead of HELD, each
job's hold journaled with its cause ``stop``; what its next incarnation does
not adopt, and what is left when the hold ends, is requeued without charging
the jobs' budgets (``scheduler.live.coupling``).

A scheduler restarted during a hold-off finds the jobs pending
(``scheduler.live.reconcile``) with the hold's end (and cause) in their journal
rows, and waits for the rest of the hold-off before declaring them lost.
"""

from __future__ import annotations

import logging

from broker.vocabulary import JobEventKind
from scheduler.live.agent_lifecycle import AgentInput, AgentState, Move
from scheduler.live.context import Agent, Context

log = logging.getLogger(__name__)


def hold_off(ag: Agent) -> float:
    """The hold-off of an agent's parts (wall seconds), 0 if they are not held: its
    lease when its parts outlive it, since they may run that long."""
    return ag.life.lease if ag.life.adopts else 0.0


def held(ctx: Context, agent: str, now: float, why: str) -> None:
    """The agent has just moved to HELD or STOPPED: journal the hold of each of its jobs."""
    ag = ctx.agents[agent]
    wall = hold_off(ag)
    until = ag.life.held_until
    if until is None:
        raise ValueError(f"agent {agent} is held with no hold-off set")
    ctx.dirty = True
    jobs = jobs_on(ctx, agent)
    stopped = ag.life.state is AgentState.STOPPED
    what = "stopped by its operator" if stopped else f"lost ({why})"
    for job_id in jobs:
        detail = f"agent {agent} {what}: held for adoption for {wall!r} s"
        # In the job's row, not only in the event: a restart must wait whatever
        # events are journaled (``job_events="none"`` journals none).
        ctx.journal.record_hold(job_id, now, until, detail, cause="stop" if stopped else "lost")
        ctx.event(job_id, JobEventKind.HELD, now, detail)
    log.warning(
        "agent %s %s: %d job(s) held %.1f s for a new incarnation to adopt",
        agent,
        what,
        len(jobs),
        wall,
    )


def adopted(ctx: Context, agent: str, adopted: int, restarted: int) -> None:
    """A new incarnation took over the held agent's parts: count and tell."""
    ctx.metrics.adopted_parts.inc(adopted)
    ctx.metrics.agent_holds.labels(outcome="adopted").inc()
    log.warning(
        "agent %s: new incarnation adopted %d running part(s); %d start(s) it never had sent again",
        agent,
        adopted,
        restarted,
    )


def rejoined(ctx: Context, agent: str) -> None:
    """The held agent's own process was heard again (a heartbeat): nothing was lost."""
    ctx.metrics.agent_holds.labels(outcome="rejoined").inc()
    log.warning("agent %s heard again during its hold: its parts go on", agent)


def expired(ctx: Context, now: float) -> list[tuple[str, Move]]:
    """The HELD and STOPPED agents whose hold-off passed, moved to LOST (the caller
    applies the moves' rule), with their moves."""
    ended = []
    for agent, ag in ctx.agents.items():
        until = ag.life.held_until
        if ag.life.held and until is not None and now >= until:
            ended.append((agent, ag.life.apply(AgentInput.HOLD_ENDED)))
            ctx.metrics.agent_holds.labels(outcome="expired").inc()
    return ended


def jobs_on(ctx: Context, agent: str) -> list[str]:
    """The jobs with a part on ``agent`` that is not over yet."""
    return [
        job_id
        for job_id in ctx.placements.on_machine(agent)
        if not ctx.placements[job_id].parts[agent].final
    ]
