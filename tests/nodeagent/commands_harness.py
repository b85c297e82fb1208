"""An agent that runs users' commands, on the in-process broker, and what its tests need.

The agent is ``tests.nodeagent.harness``'s (real job processes relayed over
their pipes); it runs commands with a user map in a temporary directory, as
the account the map gives (root maps ``alice`` to itself when the tests run
as root; otherwise the agent runs commands as itself). Every wait is on a
signal: a report, a file the command writes, a pidfd.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

from broker.command_spec import CommandSpec, HostSlots
from broker.messages import JobSpec, StartPart
from broker.vocabulary import MpiLibrary
from nodeagent.agent.commands import CommandSettings
from nodeagent.agent.node_agent import AgentSettings
from tests.nodeagent.clock import ManualClock
from tests.nodeagent.harness import FAST, HANG, STOPPED, Running, running_agent

OWNER = "alice"


def command_job(
    job_id: str,
    argv: Sequence[str],
    where: Path,
    *,
    procs: int = 1,
    walltime: float = 1e6,
    owner: str | None = OWNER,
    script: str | None = None,
    output: str = "accordion-%j.out",
    error: str | None = None,
    mpi: MpiLibrary | None = None,
) -> JobSpec:
    return JobSpec(
        id=job_id,
        procs=procs,
        walltime=walltime,
        work=walltime,
        workload="command",
        user=owner or "nobody",
        owner=owner,
        command=CommandSpec(
            argv=tuple(argv),
            script=script,
            chdir=str(where),
            output=output,
            error=error,
            mpi=mpi,
        ),
    )


def start_command(
    spec: JobSpec,
    *,
    cpus: int | None = None,
    part: int = 0,
    hosts: Sequence[tuple[str, int]] = (),
    attempt: int = 1,
) -> StartPart:
    return StartPart(
        job=spec,
        cpus=cpus or spec.procs,
        time_scale=1.0,
        part=part,
        parts=max(1, len(hosts)),
        attempt=attempt,
        hosts=tuple(HostSlots(machine=m, slots=n) for m, n in hosts),
    )


def user_map(folder: Path, lines: str) -> Path:
    path = folder / "users.map"
    path.write_text(lines)
    path.chmod(0o644)
    return path


def settings_for(
    folder: Path,
    *,
    lines: str | None = None,
    cgroups: bool = True,
    base: AgentSettings = FAST,
    mpi_shims: str | None = None,
) -> AgentSettings:
    """``base`` settings with commands on: ``alice`` maps to the tests' own account."""
    own = _own_account()
    mapping = lines if lines is not None else f"{OWNER} {own}\n"
    commands = CommandSettings(
        user_map=str(user_map(folder, mapping)) if os.geteuid() == 0 else None,
        jobs_dir=str(folder / "jobs"),
        cgroups=cgroups,
        mpi_shims=mpi_shims,
    )
    return replace(base, commands=commands)


def _own_account() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


@asynccontextmanager
async def commands_agent(
    folder: Path,
    *,
    cpus: int = 2,
    lines: str | None = None,
    cgroups: bool = True,
    clock: ManualClock | None = None,
    mpi_shims: str | None = None,
) -> AsyncIterator[Running]:
    """An agent running commands; on ``clock`` (stopped settings) when one is given."""
    base = FAST if clock is None else STOPPED
    settings = settings_for(folder, lines=lines, cgroups=cgroups, base=base, mpi_shims=mpi_shims)
    async with running_agent(cpus=cpus, settings=settings, clock=clock) as run:
        yield run


async def file_says(path: Path, *, what: str = "") -> str:
    """The text of ``path`` once it exists and holds ``what`` (a command wrote it)."""
    async with asyncio.timeout(HANG):
        while True:
            try:
                text = path.read_text()
            except FileNotFoundError:
                text = None
            if text is not None and what in text:
                return text
            await asyncio.sleep(0.02)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")
