"""An admin's operations on a running cluster: ``drain`` and ``resume`` a machine.

``accordion drain MACHINE`` asks the scheduler (``DrainMachine``) to place
nothing more on the machine while its running jobs go on to their end
(Slurm's ``scontrol update state=drain``); ``accordion resume MACHINE`` lifts
it. Only an admin may (with logins: an admin login and ``ACCORDION_ROLE=admin``);
on a broker without logins anyone may, as for cancels. The drain is the
scheduler's, journaled: it outlasts the agent's restarts and the
scheduler's (``scheduler.live.drains``). Like every client command, a broker or
scheduler that cannot be reached is one line and exit 2; a refusal (an
unknown machine, a journal that cannot be written, not an admin) is printed
with its reason and exits 1.
"""

from __future__ import annotations

from typing import Annotated

import typer

from accordion.client.live_client import DEFAULT_BROKER, DEFAULT_TIMEOUT, connect, run_async
from accordion.commands.options import BrokerOpt, RootOpt, TimeoutOpt
from accordion.display import out_console
from accordion.errors import refused, user_errors
from broker.messages import DrainReply
from broker.topics import DEFAULT_ROOT


def drain(
    machine: Annotated[str, typer.Argument(metavar="MACHINE", help="the machine's id")],
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
) -> None:
    """Drain a machine (an admin's): no new job is placed on it; its jobs run to their end.

    The drain outlasts its agent's restarts and the scheduler's; `accordion resume`
    lifts it. Exit 1 with the reason if it cannot be drained.
    """
    _drain(machine, drain=True, broker=broker, root=root, timeout=timeout)


def resume(
    machine: Annotated[str, typer.Argument(metavar="MACHINE", help="the machine's id")],
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
) -> None:
    """Lift an admin's drain of a machine: jobs are placed on it again."""
    _drain(machine, drain=False, broker=broker, root=root, timeout=timeout)


def _drain(machine: str, *, drain: bool, broker: str, root: str, timeout: float) -> None:
    with user_errors():

        async def ask() -> DrainReply:
            async with connect(broker, root, timeout=timeout) as client:
                return await client.drain(machine, drain=drain)

        reply = run_async(ask())
    if reply.code is not None:
        raise refused(f"cannot {'drain' if drain else 'resume'} {machine}: {reply.reason}")
    if not drain:
        state = "draining still (its agent drains as it stops)" if reply.draining else "resumed"
        out_console.print(f"machine {machine} {state}", highlight=False)
        return
    left = f"{reply.running} job(s) on it to run to their end" if reply.running else "empty"
    out_console.print(f"machine {machine} drained: {left}", highlight=False)


def register(app: typer.Typer) -> None:
    for command in (drain, resume):
        app.command()(command)
