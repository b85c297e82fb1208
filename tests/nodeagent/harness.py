"""A node agent on the in-process broker, and a fake scheduler to drive it.

The agent's job processes are real OS processes running ``nodeagent.job``;
their bus is relayed over their stdin/stdout (``nodeagent.launch.pipe``) to clients
of the same memory broker, so a test sees every message the scheduler would.

Synchronisation is by signals, never by sleeping, so a loaded machine only
makes a test slower: a job process's first ``PartProgress`` says it is up
(subscribed to its control topic, its SIGTERM handler installed); a child
script says so with a ``ready`` line (:class:`CommandSpawn`); the agent's
answer to a command sent last says it handled those before
(:func:`settled`); on a :class:`~tests.nodeagent.clock.ManualClock`, the
heartbeat after a jump says the agent acted on the new time
(:func:`agent_reaches`). Every wait is bounded by :data:`HANG`, which only
turns a hang into a failure.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from broker.bus import Bus
from broker.codec import decode, encode
from broker.memory import MemoryBroker
from broker.messages import (
    AgentOnline,
    AnyMessage,
    Heartbeat,
    JobSpec,
    Message,
    PartFinished,
    StartPart,
)
from broker.topics import Topics
from model.machine import Machine
from nodeagent.agent.node_agent import AgentSettings, NodeAgent
from nodeagent.launch.contract import Launch
from nodeagent.launch.pipe import PipeSpawn
from nodeagent.launch.spawn import JobProcess, Spawn
from tests.builders import spec
from tests.nodeagent.clock import ManualClock

M = TypeVar("M", bound=Message)

TOPICS = Topics("test/v1")
HANG = 30.0
"""Seconds any wait may take before the test fails: bounds a hang, times nothing."""
UNLIMITED = 1e9
"""A job's wall time unless a test is about the limit: a loaded machine can take
longer to start a Python process than the tests' short grace."""
FAST = AgentSettings(heartbeat_interval=0.05, kill_grace=1.0, walltime_grace=0.5)
STOPPED = AgentSettings(heartbeat_interval=0.05, kill_grace=1.0, walltime_grace=0.5, lease=0.0)
"""For an agent on a stopped clock. No lease: it is renewed by heartbeats, which the
stopped clock holds back, and read by the job processes on their own wall clock, so
it would lapse under a test that takes its time."""


@dataclass
class Scheduler:
    """Sees the agent's state and events in order; sends it commands."""

    bus: Bus
    agent_id: str
    topics: Topics = TOPICS
    seen: list[tuple[str, AnyMessage]] = field(default_factory=list)
    _arrived: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def read(self) -> None:
        async for delivery in self.bus.deliveries():
            if not delivery.payload:
                continue
            async with self._arrived:
                self.seen.append((delivery.topic, decode(delivery.payload)))
                self._arrived.notify_all()

    async def expect(
        self,
        kind: type[M],
        where: Callable[[M], bool] = lambda _: True,
        *,
        timeout: float = HANG,
    ) -> M:
        """The first message of ``kind`` that matches ``where``."""

        def found() -> M | None:
            for _, message in self.seen:
                if isinstance(message, kind) and where(message):
                    return message
            return None

        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(lambda: found() is not None)
        result = found()
        assert result is not None
        return result

    def all(self, kind: type[M], where: Callable[[M], bool] = lambda _: True) -> list[M]:
        return [m for _, m in self.seen if isinstance(m, kind) and where(m)]

    async def send(self, message: Message) -> None:
        await self.bus.publish(self.topics.agent_commands(self.agent_id), encode(message))

    async def send_raw(self, payload: bytes) -> None:
        await self.bus.publish(self.topics.agent_commands(self.agent_id), payload)


@dataclass
class Running:
    agent: NodeAgent
    scheduler: Scheduler
    broker: MemoryBroker
    task: asyncio.Task[None]
    clock: ManualClock | None = None
    #: Heartbeats the agent sent on its manual clock (see :func:`agent_reaches`).
    beats: int = 1


@asynccontextmanager
async def running_agent(
    *,
    cpus: int = 4,
    speed: float = 1.0,
    spawn: Spawn | None = None,
    settings: AgentSettings = FAST,
    name: str = "node1",
    broker: MemoryBroker | None = None,
    clock: ManualClock | None = None,
) -> AsyncIterator[Running]:
    """An agent running on a memory broker, watched by a fake scheduler; stopped on exit.

    With ``clock``, the agent reads the time only from it (use :data:`STOPPED`
    settings and :func:`agent_reaches`).
    """
    broker = broker or MemoryBroker()
    async with broker.client(f"scheduler-{name}") as sched_bus:
        await sched_bus.subscribe(TOPICS.agent_state(name))
        await sched_bus.subscribe(TOPICS.agent_events(name))
        scheduler = Scheduler(sched_bus, name)
        machine = Machine(id=name, cpus=cpus, speed=speed)
        async with asyncio.TaskGroup() as tg:
            watcher = tg.create_task(scheduler.read(), name="test-scheduler-reader")
            agent_bus = broker.client(f"agent-{name}")
            agent = NodeAgent(
                bus=agent_bus,
                topics=TOPICS,
                machine=machine,
                spawn=spawn or PipeSpawn(broker.client),
                settings=settings,
                clock=time.time if clock is None else clock.wall,
                monotonic=time.monotonic if clock is None else clock.monotonic,
            )
            async with agent_bus:
                task = tg.create_task(agent.run(), name=f"test-agent-{name}")
                # Commands sent before the agent subscribed would be lost, as on MQTT.
                await scheduler.expect(AgentOnline)
                try:
                    yield Running(agent, scheduler, broker, task, clock)
                finally:
                    agent.stop()
                    await task
            watcher.cancel()


def start(
    spec: JobSpec, *, cpus: int | None = None, pace: float = 1.0, time_scale: float = 1000.0
) -> StartPart:
    return StartPart(
        job=spec, cpus=cpus if cpus is not None else spec.procs, pace=pace, time_scale=time_scale
    )


async def settled(scheduler: Scheduler) -> None:
    """Return once the agent has handled every command sent before this call.

    The agent handles its commands in order, and refuses a part wider than its
    machine at once: that refusal (a ``PartFinished``, counted as a failed part)
    marks the point. Used where a test checks that something did *not* happen.
    """
    marker = f"settled-{len(scheduler.seen)}"
    widest = 1_048_576  # the protocol's largest CPU count: wider than any machine here
    await scheduler.send(start(spec(marker, widest, work=1.0, walltime=UNLIMITED)))
    await scheduler.expect(PartFinished, lambda f: f.job_id == marker)


async def agent_reaches(run: Running, at: float) -> None:
    """Move the agent's manual clock to ``at``; return once the agent has acted on it.

    On a stopped clock the agent sends a heartbeat only when the time passes its
    next one (the first at once), in the same pass that checks its parts' limits,
    and one beat however far the time jumped. Each move here passes the next
    heartbeat, so the beat numbered after the moves so far is the signal.
    """
    clock = run.clock
    if clock is None:
        raise TypeError("agent_reaches needs an agent started with a manual clock")
    if at - clock.now < run.agent.settings.heartbeat_interval:
        raise ValueError("move the clock by at least a heartbeat interval, or no beat says so")
    clock.move_to(at)
    seq = run.beats
    run.beats += 1
    await run.scheduler.expect(Heartbeat, lambda h: h.seq == seq)


@dataclass
class CommandSpawn:
    """A spawn strategy that ignores the launch and runs ``python argv...``.

    The child's stdout is a pipe: a script that must be set up before the test
    goes on (a signal handler installed) prints ``ready`` and the test waits
    for it with :meth:`ready`.
    """

    argv: tuple[str, ...]
    started: list[asyncio.subprocess.Process] = field(default_factory=list)

    async def __call__(self, launch: Launch) -> JobProcess:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *self.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
        )
        self.started.append(process)
        return process

    async def ready(self, index: int = -1) -> None:
        """Wait for the ``ready`` line of a started process (the last one by default)."""
        stdout = self.started[index].stdout
        assert stdout is not None
        async with asyncio.timeout(HANG):
            line = await stdout.readline()
        assert line == b"ready\n", line


def command_spawn(*argv: str) -> CommandSpawn:
    return CommandSpawn(argv)


async def gone(pid: int) -> None:
    """Return once process ``pid`` (not necessarily a child of ours) has exited.

    A pidfd becomes readable when its process exits (a zombie has exited).
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # exited and reaped already
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not exited.done():  # it stays readable until the reader is removed
            exited.set_result(None)

    loop.add_reader(fd, readable)
    try:
        async with asyncio.timeout(HANG):
            await exited
    finally:
        loop.remove_reader(fd)
        os.close(fd)
