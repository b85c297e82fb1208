"""The scheduler actor with real node agents (and real job processes) on the memory broker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from broker.memory import MemoryBus
from model.machine import Machine
from nodeagent.agent.node_agent import AgentSettings, NodeAgent
from nodeagent.launch.pipe import PipeSpawn
from scheduler.runtime.clock import ManualClock
from tests.builders import spec
from tests.scheduler.runtime.harness import TOPICS, Cluster, eventually

# K = 100: a job of 20 cluster seconds of work runs 0.2 wall seconds.
AGENT = AgentSettings(heartbeat_interval=0.05, kill_grace=1.0, walltime_grace=1.0)


@dataclass
class Running:
    agent: NodeAgent
    bus: MemoryBus
    task: asyncio.Task[None]

    async def kill(self) -> None:
        """SIGKILL: the process stops at once, its connection dies, the broker sends its will."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        will = self.bus.kill()
        assert will is not None
        await will


@asynccontextmanager
async def agents(cluster: Cluster, *machines: Machine) -> AsyncIterator[dict[str, Running]]:
    running: dict[str, Running] = {}
    async with asyncio.TaskGroup() as tg:
        for machine in machines:
            bus = cluster.broker.client(f"agent-{machine.id}")
            agent = NodeAgent(
                bus=bus,
                topics=TOPICS,
                machine=machine,
                spawn=PipeSpawn(cluster.broker.client),
                settings=AGENT,
            )
            bus._will = agent.will()
            await bus.__aenter__()
            task = tg.create_task(agent.run(), name=f"test-agent-{machine.id}")
            running[machine.id] = Running(agent, bus, task)
        for machine in machines:
            await eventually(lambda m=machine: cluster.online(m.id))  # type: ignore[misc]
        try:
            yield running
        finally:
            for r in running.values():
                r.agent.stop()


async def test_jobs_run_to_the_end_on_real_agents(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "j.sqlite", clock=ManualClock(0.0, time_scale=100.0))
    await c.client.start()
    await c.start()
    try:
        async with agents(c, Machine(id="n1", cpus=2, speed=1.0), Machine(id="n2", cpus=2)):
            reply = await c.client.submit(
                spec("one", 1, work=20.0), spec("span", 4, work=20.0), spec("two", 2, work=10.0)
            )
            assert all(r.accepted for r in reply.results)
            await eventually(
                lambda: all(c.state(j) == "finished" for j in ("one", "span", "two")), timeout=30
            )
    finally:
        await c.stop()


async def test_a_killed_real_agent_has_its_job_requeued_and_finished(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "j.sqlite", clock=ManualClock(0.0, time_scale=100.0))
    await c.client.start()
    await c.start()
    try:
        async with agents(
            c, Machine(id="fast", cpus=2, speed=2.0), Machine(id="slow", cpus=2)
        ) as running:
            await c.client.submit(spec("j", 2, work=100.0, walltime=400.0))
            fast = running["fast"]
            await eventually(lambda: fast.agent.stats().parts_running == 1)
            await fast.kill()
            await eventually(lambda: c.state("j") == "finished", timeout=30)
            assert c.actor is not None
            assert c.actor.core.requeues("j") == 1
            assert running["slow"].agent.stats().parts_started == 1
    finally:
        await c.stop()
