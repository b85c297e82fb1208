"""What an agent's machine can do, from its registration.

An agent says in its registration whether it runs users' commands
(``AgentOnline.commands``: ``off`` unless it was started with
``--allow-commands``), and which MPI libraries it can launch a user's MPI
program with (``AgentOnline.mpi``). Its machine in the core then has the
capability to (``model.machine.Capability``: ``commands``, and ``openmpi`` or
``mpich`` for each library, only where it runs commands), and a command job
is placed, and planned, only on machines that have what it needs
(``scheduler.planning.placement``; an MPI job needs its library's too,
``scheduler.live.specs``). The wire's words become the core's here, so the
core and the policies never see a wire type.

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
from broker.vocabulary import CommandUsers, MpiLibrary
from model.machine import Capability
from scheduler.live.context import Context

log = logging.getLogger(__name__)

_NONE: frozenset[Capability] = frozenset()
_COMMANDS = frozenset({Capability.COMMANDS})
#: The capability of a machine whose agent launches each MPI library's programs.
MPI_CAPABILITY = {MpiLibrary.OPENMPI: Capability.OPENMPI, MpiLibrary.MPICH: Capability.MPICH}


def of(message: AgentOnline) -> frozenset[Capability]:
    """What the registering agent's machine can do."""
    if message.commands is CommandUsers.OFF:
        # An MPI program is a command: an agent that runs none launches none.
        return _NONE
    if not message.mpi:
        return _COMMANDS
    return _COMMANDS | {MPI_CAPABILITY[library] for library in message.mpi}


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
