"""How an agent starts a job process: the spawn strategies and the process it supervises.

A *spawn strategy* turns a launch (``nodeagent.launch.contract.Launch``) into a
running :class:`JobProcess` (an ``asyncio.subprocess.Process`` fits the
protocol as it is). The agent only knows the protocol, so tests and the CLI
choose the transport:

- ``nodeagent.launch.relay.RelaySpawn`` (the production path, ``python -m
  nodeagent``): forks the job process from the agent's warm launcher
  (``nodeagent.launch.forkserver``) and relays its bus over the agent's own
  connection, fenced to the job's own topics;
- :class:`MqttSpawn` runs the job module as an MQTT client of the same broker
  (an open broker only: the job process has no credentials; kept for the
  benchmark that hosts hundreds of agents in one process, and its tests);
- ``nodeagent.launch.pipe.PipeSpawn`` runs the same module with its bus relayed over
  its stdin/stdout through a client the agent opens (any bus, e.g. the
  in-process memory broker of the tests);
- any callable ``Launch -> Awaitable[JobProcess]`` (tests inject one that runs
  ``python -c 'import sys; sys.exit(3)'``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from nodeagent.launch.contract import JOB_MODULE, Launch


class JobProcess(Protocol):
    """A started job process, as the agent supervises it."""

    @property
    def pid(self) -> int: ...

    async def wait(self) -> int:
        """The exit code (negative: killed by that signal)."""
        ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


Spawn = Callable[[Launch], Awaitable[JobProcess]]
"""A spawn strategy: start the process of a launch (raises OSError if it cannot)."""


def running_since(process: JobProcess, default: float) -> float:
    """When ``process`` began running (wall s), if its strategy knows; else ``default``.

    A forked process (``nodeagent.launch.forkserver``) carries ``started_at``, the
    instant of its fork, which it counts its work from: the part's run starts
    there, and the launch before it is reported on its own. An interpreter
    started by exec cannot say when it got going, so its part keeps the
    agent's clock from before the spawn.
    """
    value = getattr(process, "started_at", None)
    return value if isinstance(value, float) else default


@dataclass(frozen=True, slots=True)
class MqttSpawn:
    """Runs ``python -m nodeagent.job --host H --port P ...``: the job is an MQTT client."""

    host: str
    port: int
    python: str = sys.executable

    async def __call__(self, launch: Launch) -> JobProcess:
        # stdin is closed so a job never waits on the agent's terminal; stdout and
        # stderr are the agent's own, so a job's log lines land in the agent's log.
        return await asyncio.create_subprocess_exec(
            self.python,
            "-m",
            JOB_MODULE,
            f"--host={self.host}",
            f"--port={self.port}",
            *launch.argv(),
            stdin=asyncio.subprocess.DEVNULL,
        )
