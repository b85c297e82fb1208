"""What an agent's machine can do, from its registration.

An agent says in its registration whether it runs users' commands
(``AgentOnline.commands``: ``off`` unless it was started with
``--allow-commands``). Its machine in the core then has the capability to
(``model.machine.Capability``), and a command job is placed, and planned,
only on machines that have it (``scheduler.planning.placement``). The wire's
words become the core's here, so the core and the policies never see a wire
type.

Every new incarnation says it afresh. One that leaves and joins the cluster
(its parts not adopted) joins with what it says now; one that adopts its parts
keeps its machine, whose capabilities change in place
(``SchedulerCore.machine_changed``): its running parts go on, and a promise
the policy made there to a job it can no longer run is dropped. A command job
that no machine online can run then waits, with the reason
``no_capable_machine``, until one that can registers.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from broker.messages import AgentOnline
from broker.vocabulary import CommandUsers
from model.machine import Capability
from scheduler.live.context import Context

log = logging.getLogger(__name__)

_NONE: frozenset[Capability] = frozenset()
_COMMANDS = frozenset({Capability.COMMANDS})


def of(message: AgentOnline) -> frozenset[Capability]:
    """What the registering agent's machine can do."""
    return _NONE if message.commands is CommandUsers.OFF else _COMMANDS


def changed(ctx: Context, agent: str, capabilities: frozenset[Capability]) -> None:
    """A new incarnation that keeps its machine (it adopts its parts) says what it can
    do now: its machine, in the agent table and in the core, changes if that differs."""
    ag = ctx.agents[agent]
    if ag.machine.capabilities == capabilities:
        return
    log.warning(
        "agent %s now has capabilities [%s] (was [%s])",
        agent,
        ", ".join(sorted(capabilities)),
        ", ".join(sorted(ag.machine.capabilities)),
    )
    ag.machine = replace(ag.machine, capabilities=capabilities)
    if agent in ctx.core.speeds:
        ctx.core.machine_changed(agent, capabilities)
        ctx.dirty = True
