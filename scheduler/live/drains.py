"""Draining a machine: nothing new is placed on it while its running parts end.

Two things drain a machine (Slurm's DRAIN, ``scontrol update state=drain``):

- an admin, by request (``DrainMachine``; ``accordion drain MACHINE``, and
  ``accordion resume MACHINE`` to lift it). The drain is journaled
  (``Journal.record_drain``) and kept in ``Context.drained`` by machine, not
  by agent: it outlasts the agent's restarts (whichever incarnation
  registers is drained at once) and the scheduler's (restored at start);
- its agent, as it stops with ``--drain-on-stop``: it says so in its
  ``AgentOnline.draining`` and says goodbye once its parts are over.

Either puts a heard agent in DRAINING (``scheduler.live.agent_lifecycle``),
whose machine ``scheduler.live.coupling`` cordons: the policy sees none of its
CPUs free, its parts go on. :func:`settle` moves it in or out as the two
say, after every move that could change it (a registration, a heartbeat
that brought it back, a request). A drain asked while the journal cannot be
written is refused (it must outlast a restart, so it is a promise).

Only an admin may drain or resume (a user's request is refused
``forbidden``, as another user's job would be); on a broker without logins
there is no requester and no check, as for cancels.
"""

from __future__ import annotations

import logging

from broker.messages import DrainMachine, DrainReply, ErrorReply
from broker.vocabulary import BadMessage, DrainRefusal, MachineState
from scheduler.live import agent_hold
from scheduler.live.agent_lifecycle import AgentInput, AgentState
from scheduler.live.context import Context
from scheduler.live.coupling import agent_moved

log = logging.getLogger(__name__)


def wanted(ctx: Context, agent: str) -> bool:
    """Whether ``agent``'s machine should drain: an admin drained it, or it drains."""
    ag = ctx.agents.get(agent)
    return agent in ctx.drained or (ag is not None and ag.draining)


def settle(ctx: Context, agent: str, now: float) -> None:
    """Move a heard agent into DRAINING or out of it, as :func:`wanted` says."""
    ag = ctx.agents[agent]
    if not ag.life.heard:
        return  # held, lost or gone: settled when it is heard again
    drain = wanted(ctx, agent)
    if drain and ag.life.state is not AgentState.DRAINING:
        agent_moved(ctx, agent, ag.life.apply(AgentInput.DRAIN), now, "drain")
        log.info("agent %s draining: %d job(s) on it", agent, len(agent_hold.jobs_on(ctx, agent)))
    elif not drain and ag.life.state is AgentState.DRAINING:
        agent_moved(ctx, agent, ag.life.apply(AgentInput.RESUME), now, "resume")
        log.info("agent %s resumed", agent)


def restore(ctx: Context, drained: dict[str, float]) -> None:
    """The drains journaled before a restart (applied as each agent registers)."""
    ctx.drained.update(drained)


def handle(ctx: Context, request: DrainMachine, now: float, admin: bool, user: str | None) -> None:
    """An admin's ``DrainMachine``; ``admin`` False (a user) is refused ``forbidden``,
    ``user`` is who asks (None on a broker without logins)."""
    machine = request.machine
    if not admin:
        why = "only an admin may drain or resume a machine"
        ctx.count_bad(BadMessage.FORBIDDEN, f"{user}: {why}")
        error = ErrorReply(request_id=request.request_id, code=BadMessage.FORBIDDEN, error=why)
        ctx.reply(request.reply_to, error, user, durable=False)
        return
    if machine not in ctx.agents:
        why = f"no machine {machine!r} has registered"
        _reply(ctx, request, user, refused=(DrainRefusal.UNKNOWN_MACHINE, why))
        return
    if ctx.journal.failure is not None:
        _reply(ctx, request, user, refused=(DrainRefusal.JOURNAL, ctx.journal.failure))
        return
    if request.drain and machine not in ctx.drained:
        ctx.journal.record_drain(machine, now, user)
        ctx.drained[machine] = now
        log.warning("machine %s drained by %s", machine, user or "a client")
    elif not request.drain and machine in ctx.drained:
        ctx.journal.record_resume(machine)
        del ctx.drained[machine]
        log.warning("machine %s resumed by %s", machine, user or "a client")
    settle(ctx, machine, now)
    _reply(ctx, request, user)


def _reply(
    ctx: Context,
    request: DrainMachine,
    user: str | None,
    *,
    refused: tuple[DrainRefusal, str] | None = None,
) -> None:
    machine = request.machine
    running = len(agent_hold.jobs_on(ctx, machine)) if machine in ctx.agents else 0
    code, reason = refused if refused is not None else (None, None)
    reply = DrainReply(
        request_id=request.request_id,
        machine=machine,
        draining=machine in ctx.drained or state_of(ctx, machine) is MachineState.DRAINING,
        running=running,
        reason=reason,
        code=code,
    )
    # A refusal promises nothing; an answer to a drain waits for its journal row.
    ctx.reply(request.reply_to, reply, user, durable=refused is None)


def state_of(ctx: Context, machine: str) -> MachineState | None:
    """The wire's state of ``machine``'s agent (None: never registered)."""
    ag = ctx.agents.get(machine)
    return None if ag is None else MachineState(ag.life.state.value)
