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

- :func:`hold` moves the agent to HELD (``scheduler.live.agent_lifecycle``) for
  the *hold-off*: exactly its declared lease. Its parts stay as they are
  (their CPUs held, their run going on), its machine is cordoned (no new
  parts), and the hold's end is journaled in each of its jobs' rows
  (``Journal.record_hold``) with a ``held`` event. No setting shortens it:
  requeueing sooner could run a job twice while its parts still run (they
  may, for the lease). An agent run with ``--no-adopt`` declares no
  adoption; its parts die with it, and the rule applies at once as before;
- :func:`adopt` (a new incarnation registered in time): the parts it lists
  with the job's current attempt are reconciled and go on, their run
  continuous (``adopted`` event, ``accordion_agents_adopted_parts_total``);
  a part whose start was never acknowledged (no ``PartStarted``: the old
  process died before its fork, which a record would otherwise show) is sent
  the same start again, once, uncharged; any other it does not list is lost
  by the old rule (requeued or failed);
- :func:`expire` (the periodic check): a hold-off that passed applies the old
  rule to everything still on the agent. Requeueing then cannot run a job
  twice: its parts stopped by their lease, which started no later than the
  will (the scheduler receives the will after the broker last heard the agent).

A scheduler restarted during a hold-off finds the jobs pending
(``scheduler.live.reconcile``) with the hold's end in their journal rows, and waits
for the rest of the hold-off before declaring them lost.
"""

from __future__ import annotations

import logging

from scheduler.live.agent_lifecycle import AgentInput, AgentState
from scheduler.live.context import Agent, Context
from scheduler.live.dispatch import start_commands
from scheduler.live.part_lifecycle import PartState

log = logging.getLogger(__name__)

HELD = "held"
ADOPTED = "adopted"

#: job id -> (CPUs when said, attempt) as an agent reported them.
Reported = dict[str, tuple[int | None, int]]


def hold(ctx: Context, agent: str, ag: Agent, now: float, why: str) -> bool:
    """Hold the agent's parts for adoption; False if no hold applies (apply the rule)."""
    # Held for its lease when its parts outlive it, since they may run that long.
    wall = ag.life.lease if ag.life.adopts else 0.0
    if wall <= 0:
        return False
    ag.life.apply(AgentInput.WILL_HOLD)
    until = ag.life.held_until = now + wall * ctx.time_scale
    ctx.cordoned.add(agent)  # no new parts there until it is heard again
    ctx.dirty = True
    jobs = _jobs_on(ctx, agent)
    for job_id in jobs:
        detail = f"agent {agent} lost ({why}): held for adoption for {wall!r} s"
        # In the job's row, not only in the event: a restart must wait whatever
        # events are journaled (``job_events="none"`` journals none).
        ctx.journal.record_hold(job_id, now, until, detail)
        ctx.event(job_id, HELD, now, detail)
    log.warning(
        "agent %s lost (%s): %d job(s) held %.1f s for a new incarnation to adopt",
        agent,
        why,
        len(jobs),
        wall,
    )
    return True


def adopt(ctx: Context, agent: str, ag: Agent, running: Reported, now: float) -> None:
    """A new incarnation registered while its machine was HELD: reconcile what it lists,
    lose the rest (the agent has just moved to ONLINE)."""
    ctx.cordoned.discard(agent)
    ctx.dirty = True
    adopted = restarted = 0
    for job_id in _jobs_on(ctx, agent):
        live = ctx.placements[job_id]
        part = live.parts[agent]
        listed = running.get(job_id)
        if listed is not None and not part.is_stale(listed[1]):
            adopted += 1
            ctx.event(job_id, ADOPTED, now, f"its part on {agent} adopted by a new incarnation")
            continue
        if part.state is PartState.STARTING and agent not in live.resent:
            # Its start never reached the old process's fork: every part it forked has
            # a record the new one adopts or kills and reports (``nodeagent.survival.state``).
            # The same start goes to the new incarnation, once, uncharged.
            live.resent.add(agent)
            for machine, command in start_commands(
                ctx, job_id, live.layout(), live.attempt, ctx.wall()
            ):
                if machine == agent:
                    ctx.command(machine, command)
            restarted += 1
            continue
        ctx.job_lost(job_id, now, f"its part on {agent} was not adopted by the new incarnation")
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
    ctx.cordoned.discard(agent)
    ctx.dirty = True
    ctx.metrics.agent_holds.labels(outcome="rejoined").inc()
    log.warning("agent %s heard again during its hold: its parts go on", agent)


def expired(ctx: Context, now: float) -> list[str]:
    """The HELD agents whose hold-off passed, moved to LOST (the caller applies the rule)."""
    ended = []
    for agent, ag in ctx.agents.items():
        until = ag.life.held_until
        if ag.life.state is AgentState.HELD and until is not None and now >= until:
            ag.life.apply(AgentInput.HOLD_ENDED)
            ctx.metrics.agent_holds.labels(outcome="expired").inc()
            ended.append(agent)
    return ended


def _jobs_on(ctx: Context, agent: str) -> list[str]:
    """The jobs with a part on ``agent`` that is not over yet."""
    return [
        job_id
        for job_id in ctx.placements.on_machine(agent)
        if not ctx.placements[job_id].parts[agent].final
    ]
