"""Benchmark: the MPI-like workload at MPL 1 and 2 on real cores, against the models.

Run on demand (not a test): ``.venv/bin/python -m bench.live.malleability``. A
real node agent (in-process broker, job processes relayed over pipes) owns
two real cores and runs a 2-rank MPI-like job (allreduce) once expanded (one
rank per core, MPL 1) and once shrunk (both ranks on one core, MPL 2), for
several compute/communication ratios (compute CPU-seconds per iteration,
message size). Runs alternate and repeat, and the median counts.

It prints, per case: ``u`` as the job measured it at MPL 1 (compute over
compute plus communication time of the ranks), the measured slowdown
``T(MPL 2) / T(MPL 1)``, and beside it ``model.execution``'s factors at
``m = 2`` with that ``u``: ``linear`` ``1 + (m - 1) u``, ``max``
``max(1, m u)``, the paper's formula (3) ``m u`` (isolated time relative to
the run time) and (3) + (4) ``m u + OV`` with the paper's mean ``OV = 0.5``,
and which of them is closest to the measurement.

The yardstick, measured in the same run: two spinners on two cores, then on
one; their time ratio is how much packing this machine shows right now (2 on
free cores). Below about 1.6 the cores are busy with other work, which moves
to the core the ranks leave, and the slowdowns shrink towards 1.

``--resizes N`` also measures ResizePart-to-repinned latency: the time from
publishing a ResizePart to seeing every rank's ``Cpus_allowed_list`` in
``/proc`` changed, N times, p50 and p95 printed against the 20 ms target.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from broker.bus import Bus
from broker.codec import decode, encode
from broker.memory import MemoryBroker
from broker.messages import (
    AgentOnline,
    JobSpec,
    MpiSpec,
    PartFinished,
    PartProgress,
    PartStarted,
    ResizePart,
    StartPart,
)
from broker.topics import Topics
from model.execution import ExecutionModel, ModelKind
from model.machine import Machine
from nodeagent.agent.cpuset import allowed_list, children
from nodeagent.agent.node_agent import AgentSettings, NodeAgent
from nodeagent.launch.pipe import PipeSpawn

TOPICS = Topics("bench/v1")
CASES: tuple[tuple[float, int], ...] = (
    (0.2, 8),  # compute-bound
    (0.1, 256 * 1024),
    (0.05, 1024 * 1024),
    (0.02, 2 * 1024 * 1024),  # communication-bound
)
TARGET_P50_MS = 20.0


@dataclass
class Run:
    seconds: float
    cpu_util: float


class Bench:
    """One agent with two real cores and a reader of its events."""

    def __init__(self, cores: tuple[int, ...]) -> None:
        self.cores = cores
        self.broker = MemoryBroker()
        self.events: asyncio.Queue[object] = asyncio.Queue()

    def _agent(self, bus: Bus) -> NodeAgent:
        """The bench's one agent "a1" on this bench's cores, its jobs relayed by pipe."""
        settings = AgentSettings(heartbeat_interval=1.0, cpuset=self.cores, lease=0.0)
        return NodeAgent(
            bus=bus,
            topics=TOPICS,
            machine=Machine(id="a1", cpus=len(self.cores)),
            spawn=PipeSpawn(self.broker.client),
            settings=settings,
        )

    async def run(self, spec: JobSpec, cpus: int) -> Run:
        async with self.broker.client("bench-scheduler") as bus:
            await bus.subscribe(TOPICS.agent_events("a1"))
            await bus.subscribe(TOPICS.agent_state("a1"))
            agent_bus = self.broker.client("agent-a1")
            agent = self._agent(agent_bus)
            async with agent_bus, asyncio.TaskGroup() as tg:
                task = tg.create_task(agent.run(), name="bench-agent")
                deliveries = bus.deliveries()
                started = finished = None
                util = 0.0
                start = StartPart(job=spec, cpus=cpus, job_cpus=cpus, time_scale=1.0)
                async for d in deliveries:
                    message = decode(d.payload) if d.payload else None
                    if isinstance(message, AgentOnline):
                        await bus.publish(TOPICS.agent_commands("a1"), encode(start))
                    elif isinstance(message, PartStarted):
                        started = message
                    elif isinstance(message, PartProgress) and message.cpu_util is not None:
                        util = message.cpu_util
                    elif isinstance(message, PartFinished):
                        finished = message
                        break
                agent.stop()
                await task
        assert started is not None
        assert finished is not None
        if finished.reason != "done":
            raise RuntimeError(f"{spec.id}: {finished.reason} {finished.detail}")
        return Run(finished.at - started.at, util)

    async def resize_latency(self, count: int) -> list[float]:
        """ResizePart published -> every rank's affinity changed, ``count`` times (s)."""
        spec = mpi_spec("resize", 0.01, 8, iterations=1_000_000)
        latencies: list[float] = []
        async with self.broker.client("bench-resizer") as bus:
            await bus.subscribe(TOPICS.agent_events("a1"))
            await bus.subscribe(TOPICS.agent_state("a1"))
            agent_bus = self.broker.client("agent-a1")
            agent = self._agent(agent_bus)
            async with agent_bus, asyncio.TaskGroup() as tg:
                task = tg.create_task(agent.run(), name="bench-agent")
                leader = 0
                async for d in bus.deliveries():
                    message = decode(d.payload) if d.payload else None
                    if isinstance(message, AgentOnline):
                        start = StartPart(job=spec, cpus=2, job_cpus=2, time_scale=1.0)
                        await bus.publish(TOPICS.agent_commands("a1"), encode(start))
                    elif isinstance(message, PartStarted):
                        leader = message.pid
                        break
                while len(ranks := children(leader)) < 2:
                    await asyncio.sleep(0.001)
                apart = [str(c) for c in self.cores[:2]]
                while [allowed_list(p) for p in ranks] != apart:
                    await asyncio.sleep(0.001)
                for i in range(count):
                    cpus = 1 if i % 2 == 0 else 2
                    want = [apart[0]] * 2 if cpus == 1 else apart
                    resize = ResizePart(job_id="resize", cpus=cpus, job_cpus=cpus)
                    sent = time.perf_counter()
                    await bus.publish(TOPICS.agent_commands("a1"), encode(resize))
                    while [allowed_list(p) for p in ranks] != want:
                        await asyncio.sleep(0)
                    latencies.append(time.perf_counter() - sent)
                agent.stop()
                await task
        return latencies


def mpi_spec(job_id: str, compute: float, message_bytes: int, *, iterations: int) -> JobSpec:
    return JobSpec(
        id=job_id,
        procs=2,
        walltime=1e9,
        work=1.0,
        workload="mpi",
        mpi=MpiSpec(iterations=iterations, compute=compute, message_bytes=message_bytes),
    )


async def yardstick(a: int, b: int) -> float:
    async def pair(cores: tuple[int, int]) -> float:
        began = time.perf_counter()
        code = (
            "import os; os.sched_setaffinity(0, {%d}); "
            "from nodeagent.job.kernel import burn; burn(0.5)"
        )
        procs = [
            await asyncio.create_subprocess_exec(sys.executable, "-c", code % c) for c in cores
        ]
        for p in procs:
            await p.wait()
        return time.perf_counter() - began

    apart = await pair((a, b))
    return await pair((a, a)) / apart


async def main_async(args: argparse.Namespace) -> None:
    cores = tuple(sorted(os.sched_getaffinity(0)))[:2]
    if len(cores) < 2:
        raise SystemExit("bench/live/malleability.py needs 2 real CPUs")
    console = Console(width=150)
    bench = Bench(cores)
    stick = await yardstick(*cores)
    console.print(f"yardstick (two spinners on one core / on two cores): {stick:.2f}")
    table = Table(title=f"2-rank allreduce, {args.iterations} iterations, cores {cores}")
    for col in (
        "compute s",
        "message B",
        "u (MPL 1)",
        "T1 s",
        "T2 s",
        "measured",
        "linear",
        "max",
        "(3) m·u",
        "(3)+(4) OV=.5",
        "closest",
    ):
        table.add_column(col, justify="right")
    rows: list[tuple[float, int, float, float, float]] = []
    for compute, size in CASES:
        t1: list[float] = []
        t2: list[float] = []
        utils: list[float] = []
        for r in range(args.repeats):
            spec = mpi_spec(f"c{compute}-{size}-{r}", compute, size, iterations=args.iterations)
            one = await bench.run(spec, 2)
            t1.append(one.seconds)
            utils.append(one.cpu_util)
            two = await bench.run(spec, 1)
            t2.append(two.seconds)
        rows.append(
            (compute, size, statistics.median(utils), statistics.median(t1), statistics.median(t2))
        )
    for compute, size, u, t1m, t2m in rows:
        linear = ExecutionModel(kind=ModelKind.LINEAR).factor(m=2.0, cpu_util=u)
        maxed = ExecutionModel(kind=ModelKind.MAX).factor(m=2.0, cpu_util=u)
        factors = {"linear": linear, "max": maxed, "(3)": 2 * u, "(3)+(4)": 2 * u + 0.5}
        closest = min(factors, key=lambda k: abs(factors[k] - t2m / t1m))
        table.add_row(
            f"{compute:g}",
            f"{size:,}",
            f"{u:.2f}",
            f"{t1m:.2f}",
            f"{t2m:.2f}",
            f"{t2m / t1m:.2f}",
            f"{linear:.2f}",
            f"{maxed:.2f}",
            f"{2 * u:.2f}",
            f"{2 * u + 0.5:.2f}",
            closest,
        )
    console.print(table)
    if args.resizes:
        latencies = sorted(await bench.resize_latency(args.resizes))
        p50 = statistics.median(latencies) * 1000
        p95 = latencies[int(0.95 * (len(latencies) - 1))] * 1000
        console.print(
            f"ResizePart -> ranks re-pinned, {len(latencies)} resizes: p50 {p50:.2f} ms, "
            f"p95 {p95:.2f} ms, max {latencies[-1] * 1000:.2f} ms "
            f"(target p50 < {TARGET_P50_MS:g} ms: {p50 / TARGET_P50_MS:.2f} x)",
            highlight=False,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--resizes", type=int, default=100)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
