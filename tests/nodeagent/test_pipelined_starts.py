"""Starts are pipelined: the agent reads the next command while a part launches.

A spawn strategy held at a gate stands for a slow launcher: the agent must
admit every start without waiting for the earlier ones' processes, and a
cancel or a resize that arrives while a part launches must reach its process
once it runs. Waits are for conditions (bounded by ``HANG``), never sleeps.
"""

from __future__ import annotations

import asyncio

from broker.memory import MemoryBroker
from broker.messages import CancelPart, PartFinished, PartProgress, PartStarted, ResizePart
from nodeagent.launch.contract import Launch
from nodeagent.launch.pipe import PipeSpawn
from nodeagent.launch.spawn import JobProcess
from tests.builders import spec
from tests.nodeagent.harness import HANG, UNLIMITED, running_agent, settled, start


class GatedSpawn:
    """Real job processes (``PipeSpawn``), each started only once the gate opens."""

    def __init__(self, broker: MemoryBroker) -> None:
        self._real = PipeSpawn(broker.client)
        self.gate = asyncio.Event()
        self.asked: list[str] = []

    async def __call__(self, launch: Launch) -> JobProcess:
        self.asked.append(launch.job_id)
        await self.gate.wait()
        return await self._real(launch)

    async def asked_for(self, *job_ids: str) -> None:
        async with asyncio.timeout(HANG):
            while not set(job_ids) <= set(self.asked):
                await asyncio.sleep(0.005)


async def test_three_starts_launch_together() -> None:
    broker = MemoryBroker()
    spawn = GatedSpawn(broker)
    async with running_agent(spawn=spawn, broker=broker, cpus=3) as run:
        for j in ("p1", "p2", "p3"):
            await run.scheduler.send(start(spec(j, work=20.0, walltime=UNLIMITED)))
        # All three are launching at once: none waited for another's process.
        await spawn.asked_for("p1", "p2", "p3")
        assert run.scheduler.all(PartStarted) == []
        assert run.agent.stats().cpus_busy == 3  # their CPUs are held meanwhile
        spawn.gate.set()
        for j in ("p1", "p2", "p3"):
            started = await run.scheduler.expect(PartStarted, lambda s, j=j: s.job_id == j)  # type: ignore[misc]
            assert started.launch_seconds is not None
            assert started.launch_seconds >= 0.0
            done = await run.scheduler.expect(PartFinished, lambda f, j=j: f.job_id == j)  # type: ignore[misc]
            assert (done.reason, done.exit_code) == ("done", 0)
            assert done.run_seconds is not None
            assert done.run_seconds >= 20.0 / 1000.0
        # Each part's PartStarted came before its PartFinished (one topic, in order).
        order = [(type(m).__name__, getattr(m, "job_id", "")) for _, m in run.scheduler.seen]
        for j in ("p1", "p2", "p3"):
            assert order.index(("PartStarted", j)) < order.index(("PartFinished", j))


async def test_a_cancel_while_launching_ends_the_process_as_it_arrives() -> None:
    broker = MemoryBroker()
    spawn = GatedSpawn(broker)
    async with running_agent(spawn=spawn, broker=broker) as run:
        await run.scheduler.send(start(spec("c1", work=1e6, walltime=UNLIMITED), time_scale=1.0))
        await spawn.asked_for("c1")
        await run.scheduler.send(CancelPart(job_id="c1", attempt=1))
        await settled(run.scheduler)
        spawn.gate.set()
        finished = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "c1")
        assert finished.reason == "cancelled"
        # It never ran as far as the scheduler knows: no PartStarted for a cancelled part.
        assert run.scheduler.all(PartStarted, lambda s: s.job_id == "c1") == []
        assert run.agent.stats().parts_running == 0


async def test_a_resize_while_launching_reaches_the_process() -> None:
    broker = MemoryBroker()
    spawn = GatedSpawn(broker)
    async with running_agent(spawn=spawn, broker=broker) as run:
        job = spec("r1", 2, work=1e6, walltime=UNLIMITED, malleable=True)
        await run.scheduler.send(start(job, time_scale=1.0))
        await spawn.asked_for("r1")
        # Shrunk to one CPU before its process runs: MPL 2, rate 1 / (1 + u) = 0.5.
        await run.scheduler.send(ResizePart(job_id="r1", cpus=1, job_cpus=1, attempt=1))
        await settled(run.scheduler)
        assert run.agent.stats().cpus_busy == 1
        spawn.gate.set()
        await run.scheduler.expect(PartProgress, lambda p: p.job_id == "r1" and p.rate == 0.5)
        await run.scheduler.send(CancelPart(job_id="r1"))
        await run.scheduler.expect(PartFinished, lambda f: f.job_id == "r1")
