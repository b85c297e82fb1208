"""A node agent on the in-process broker, and a fake scheduler to drive it.

The agent's job processes are real OS processes running ``nodeagent.job``;
their bus is relayed over their stdin/stdout (``nodeagent.pipe``) to clients
of the same memory broker, so a test sees every message the scheduler would.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from broker.bus import Bus
from broker.codec import decode, encode
from broker.memory import MemoryBroker
from broker.messages import AgentOnline, AnyMessage, JobSpec, Message, StartPart
from broker.topics import Topics
from model.machine import Machine
from nodeagent.agent import AgentSettings, NodeAgent
from nodeagent.pipe import PipeSpawn
from nodeagent.spawn import JobProcess, Launch, Spawn

M = TypeVar("M", bound=Message)

TOPICS = Topics("test/v1")
FAST = AgentSettings(heartbeat_interval=0.05, kill_grace=1.0, walltime_grace=0.5)


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
        after: int = 0,
        timeout: float = 20.0,
    ) -> M:
        """The first message of ``kind`` (from index ``after``) that matches ``where``."""

        def found() -> M | None:
            for _, message in self.seen[after:]:
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


@asynccontextmanager
async def running_agent(
    *,
    cpus: int = 4,
    speed: float = 1.0,
    spawn: Spawn | None = None,
    settings: AgentSettings = FAST,
    name: str = "node1",
    broker: MemoryBroker | None = None,
) -> AsyncIterator[Running]:
    """An agent running on a memory broker, watched by a fake scheduler; stopped on exit."""
    broker = broker or MemoryBroker()
    async with broker.client("scheduler") as sched_bus:
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
            )
            async with agent_bus:
                task = tg.create_task(agent.run(), name=f"test-agent-{name}")
                # Commands sent before the agent subscribed would be lost, as on MQTT.
                await scheduler.expect(AgentOnline)
                try:
                    yield Running(agent, scheduler, broker, task)
                finally:
                    agent.stop()
                    await task
            watcher.cancel()


def job(
    job_id: str = "j1",
    *,
    procs: int = 2,
    work: float = 10.0,
    walltime: float | None = None,
    cpu_util: float = 1.0,
    ref_speed: float = 1.0,
    malleable: bool = False,
) -> JobSpec:
    return JobSpec(
        id=job_id,
        procs=procs,
        # Generous unless a test is about the limit: a loaded machine can take
        # longer to start a Python process than the tests' short grace.
        walltime=walltime if walltime is not None else 1e9,
        work=work,
        cpu_util=cpu_util,
        ref_speed=ref_speed,
        malleable=malleable,
    )


def start(
    spec: JobSpec, *, cpus: int | None = None, pace: float = 1.0, time_scale: float = 1000.0
) -> StartPart:
    return StartPart(
        job=spec, cpus=cpus if cpus is not None else spec.procs, pace=pace, time_scale=time_scale
    )


def command_spawn(*argv: str) -> Spawn:
    """A spawn strategy that ignores the launch and runs ``python argv...``."""

    async def spawn(launch: Launch) -> JobProcess:
        return await asyncio.create_subprocess_exec(sys.executable, *argv)

    return spawn
