"""Benchmark: what a job process costs to launch, warm launcher against interpreter start.

Run on demand (not a test): ``.venv/bin/python -m bench.live.launch``. Three
parts, measured in the same run:

1. **One launch.** ``--samples`` job processes, one after another, started
   (a) the yardstick way, ``python -m nodeagent.job --pipe ...`` exec'd as a
   new interpreter, and (b) forked by a warm fork server
   (``nodeagent.launch.forkserver``). Wall latency: from the request to the job's
   first ``PartProgress`` frame, its readiness signal (it has subscribed to
   its control topic and installed its signal handlers). CPU seconds: the job
   process's own utime + stime at that moment (``/proc/PID/stat``), plus for
   (b) the fork server's CPU per launch over the whole series.
2. **64 processes on one agent.** A real ``NodeAgent`` with the default spawn
   strategy (``RelaySpawn``: fork server plus relay, as ``python -m
   nodeagent`` wires it), a 64-CPU machine, and 64 ``StartPart`` of one CPU
   published at once (64 jobs, or one job's 64 parts, to the agent).
   Measured: from the first command published to the 64th process's first
   progress report (all 64 running and subscribed), ``--rounds`` times, on a
   private Mosquitto and on the memory broker.
3. **One 64-rank job.** One MPI-like ``StartPart`` of 64 processes: from the
   command to its leader's first report, which it sends once its 64 rank
   processes are forked and connected. The target: all 64 ranks of a
   64-rank job running in under 1 s on this 2-core machine.

Ratios say more than seconds on a shared 2-core machine: the table shows the
yardstick beside the launcher, measured minutes apart in the same process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from broker.bus import Bus, Delivery
from broker.codec import decode, encode
from broker.memory import MemoryBroker
from broker.messages import (
    AgentOnline,
    CancelPart,
    JobSpec,
    MpiSpec,
    PartProgress,
    PartStarted,
    StartPart,
)
from broker.mqtt import MqttBus, MqttSettings
from broker.topics import Topics
from model.machine import Machine
from nodeagent.agent.commands import CommandSettings
from nodeagent.agent.node_agent import AgentSettings, NodeAgent
from nodeagent.launch.contract import JOB_MODULE, Launch
from nodeagent.launch.forkserver import ForkServer
from nodeagent.launch.frames import PUBLISH, read_frame
from nodeagent.launch.relay import PipeStreams, Relay, RelaySpawn, pipe_streams

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: the benches' shared modules

from bench.live.private_mosquitto import mosquitto  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def launch_of(i: int) -> Launch:
    return Launch(agent="bench", job_id=f"l{i}", procs=1, cpus=1, pace=1.0, work=3600.0)


async def ready(streams: PipeStreams) -> None:
    """Until the job's first PartProgress (its readiness signal)."""
    while True:
        frame = await read_frame(streams.reader)
        if frame is None:
            raise RuntimeError("the job process exited before it was ready")
        if frame.op == PUBLISH and isinstance(decode(frame.payload), PartProgress):
            return


async def exec_one(i: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        JOB_MODULE,
        "--pipe",
        *launch_of(i).argv(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None
    while True:
        frame = await read_frame(process.stdout)
        if frame is None:
            raise RuntimeError("the job process exited before it was ready")
        if frame.op == PUBLISH and isinstance(decode(frame.payload), PartProgress):
            break
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(process.pid)
    process.kill()
    await process.wait()
    return wall, cpu


async def fork_one(server: ForkServer, i: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    down_r, down_w = os.pipe2(os.O_CLOEXEC)
    up_r, up_w = os.pipe2(os.O_CLOEXEC)
    try:
        process = await server.launch(["--pipe", *launch_of(i).argv()], down_r, up_w)
    finally:
        os.close(down_r)
        os.close(up_w)
    streams = await pipe_streams(up_r, down_w)
    await ready(streams)
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(process.pid)
    process.kill()
    await process.wait()
    streams.close()
    return wall, cpu


async def one_launch(samples: int) -> dict[str, tuple[list[float], list[float]]]:
    out: dict[str, tuple[list[float], list[float]]] = {"exec": ([], []), "fork": ([], [])}
    for i in range(samples):
        wall, cpu = await exec_one(i)
        out["exec"][0].append(wall)
        out["exec"][1].append(cpu)
    async with ForkServer() as server:
        assert server.pid is not None
        before = cpu_seconds(server.pid)
        for i in range(samples):
            wall, cpu = await fork_one(server, i)
            out["fork"][0].append(wall)
            out["fork"][1].append(cpu)
        per_fork = (cpu_seconds(server.pid) - before) / samples
    out["fork"] = (out["fork"][0], [c + per_fork for c in out["fork"][1]])
    return out


def clients(kind: str, port: int) -> tuple[
    AbstractAsyncContextManager[Bus], AbstractAsyncContextManager[Bus]
]:  # fmt: skip
    """The agent's and the scheduler's connections, on the memory broker or Mosquitto."""
    if kind == "memory":
        broker = MemoryBroker()
        return broker.client("agent-bench"), broker.client("scheduler")
    settings = MqttSettings("127.0.0.1", port)
    return MqttBus(settings, "agent-bench"), MqttBus(settings, "scheduler")


TOPICS = Topics("bench/v1")


@asynccontextmanager
async def hosted_agent(
    kind: str, port: int, cpus: int, *, commands: CommandSettings | None = None
) -> AsyncIterator[tuple[Bus, NodeAgent, ForkServer, AsyncIterator[Delivery]]]:
    """A real agent ``bench`` of ``cpus`` CPUs, launching through a fork server and
    relaying its job processes, online (running users' commands with ``commands``);
    and the scheduler's side: its connection, subscribed to the agent's events and
    state, with their deliveries."""
    agent_client, sched_client = clients(kind, port)
    async with (
        agent_client as bus,
        sched_client as sched,
        ForkServer() as server,
        asyncio.TaskGroup() as tg,
    ):
        await sched.subscribe(TOPICS.agent_events("bench"))
        await sched.subscribe(TOPICS.agent_state("bench"))
        relay = Relay(bus, TOPICS, "bench")
        pump = tg.create_task(relay.pump(), name="bench-relay")
        agent = NodeAgent(
            bus=relay.agent_bus,
            topics=TOPICS,
            machine=Machine(id="bench", cpus=cpus, speed=1.0),
            spawn=RelaySpawn(server, relay),
            settings=AgentSettings(lease=0.0, kill_grace=1.0, commands=commands),
        )
        running = tg.create_task(agent.run(), name="bench-agent")
        events = sched.deliveries()
        while not isinstance(decode((await anext(events)).payload), AgentOnline):
            pass  # commands sent before the agent subscribed would be lost
        yield sched, agent, server, events
        agent.stop()
        await running
        pump.cancel()


async def burst(
    n: int, rounds: int, kind: str = "memory", port: int = 0
) -> tuple[list[float], list[float], list[float]]:
    """``rounds`` times: n StartParts at once to one agent.

    Per round: wall seconds until all n ran, the mean launch latency, and the
    CPU seconds spent (the agent's process, its fork server and the n job
    processes up to their first report): what the burst costs whatever else
    the machine is running.
    """
    times: list[float] = []
    launches: list[float] = []
    cpus: list[float] = []
    async with hosted_agent(kind, port, n) as (sched, agent, server, events):
        for r in range(rounds):
            ids = [f"b{r}-{i}" for i in range(n)]
            starts = [
                StartPart(job=JobSpec(id=j, procs=1, walltime=3600.0, work=3600.0), cpus=1)
                for j in ids
            ]
            observed = server.stats.launches, server.stats.latency_sum
            assert server.pid is not None
            cpu0 = time.process_time() + cpu_seconds(server.pid)
            pids: list[int] = []
            t0 = time.perf_counter()
            # All at once, as many QoS 1 publishes in flight: what is measured is the
            # agent's launch path, not this client's round trips.
            async with asyncio.TaskGroup() as sends:
                for start in starts:
                    sends.create_task(
                        sched.publish(TOPICS.agent_commands("bench"), encode(start)),
                        name="bench-start",
                    )
            up: set[str] = set()
            while len(up) < n:
                message = decode((await anext(events)).payload)
                if isinstance(message, PartProgress) and message.job_id in ids:
                    up.add(message.job_id)
                elif isinstance(message, PartStarted) and message.job_id in ids:
                    pids.append(message.pid)
            times.append(time.perf_counter() - t0)
            # A job's own first report may overtake its agent's PartStarted (they are
            # published independently): the pids of this round, before its CPU is read.
            while len(pids) < n:
                message = decode((await anext(events)).payload)
                if isinstance(message, PartStarted) and message.job_id in ids:
                    pids.append(message.pid)
            spent = time.process_time() + cpu_seconds(server.pid) - cpu0
            cpus.append(spent + sum(cpu_seconds(pid) for pid in pids))
            count = server.stats.launches - observed[0]
            launches.append((server.stats.latency_sum - observed[1]) / max(count, 1))
            for j in ids:
                await sched.publish(TOPICS.agent_commands("bench"), encode(CancelPart(job_id=j)))
            while agent.stats().parts_running:
                await asyncio.sleep(0.05)  # a bench, not a test: polling the agent is fine here
    return times, launches, cpus


async def mpi_job(n: int, rounds: int, kind: str = "mosquitto", port: int = 0) -> list[float]:
    """``rounds`` times: one MPI-like job of ``n`` ranks on one agent of ``n`` CPUs.

    Per round: wall seconds from its ``StartPart`` to its leader's first report, which
    it sends once all ``n`` rank processes are forked and connected to it (the job
    running whole). The agent declares ``n`` CPUs on this machine's cores (emulated
    packing, as ``accordion up --demo`` does).
    """
    times: list[float] = []
    async with hosted_agent(kind, port, n) as (sched, agent, _server, events):
        for r in range(rounds):
            job_id = f"m{r}"
            # Ranks compute from their fork on: 1 ms a rank per iteration and a barrier,
            # so 64 of them keep this machine's 2 cores busy but not flooded meanwhile.
            mpi = MpiSpec(iterations=1_000_000, compute=0.001, message_bytes=0, pattern="barrier")
            spec = JobSpec(id=job_id, procs=n, walltime=1e6, work=1e6, workload="mpi", mpi=mpi)
            t0 = time.perf_counter()
            await sched.publish(TOPICS.agent_commands("bench"), encode(StartPart(job=spec, cpus=n)))
            while True:
                message = decode((await anext(events)).payload)
                if isinstance(message, PartProgress) and message.job_id == job_id:
                    break
            times.append(time.perf_counter() - t0)
            await sched.publish(TOPICS.agent_commands("bench"), encode(CancelPart(job_id=job_id)))
            while agent.stats().parts_running:
                await asyncio.sleep(0.05)  # a bench, not a test: polling the agent is fine here
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10, help="single launches per way")
    parser.add_argument("--procs", type=int, default=64, help="job processes in the burst")
    parser.add_argument("--rounds", type=int, default=5, help="bursts")
    parser.add_argument(
        "--broker",
        choices=("mosquitto", "memory", "both"),
        default="both",
        help="the burst's broker: a private Mosquitto (QoS 1 round trips, as deployed), "
        "the in-process memory broker, or each in turn",
    )
    args = parser.parse_args()
    single = asyncio.run(one_launch(args.samples))
    print(f"one launch, {args.samples} samples each (median; wall to the job's first report)")
    print(f"{'':34} {'wall ms':>9} {'CPU ms':>9}")
    med = {k: (statistics.median(w), statistics.median(c)) for k, (w, c) in single.items()}
    exec_wall, exec_cpu = med["exec"]
    print(f"{'python -m nodeagent.job (exec)':34} {1e3 * exec_wall:9.1f} {1e3 * exec_cpu:9.1f}")
    print(f"{'fork server':34} {1e3 * med['fork'][0]:9.1f} {1e3 * med['fork'][1]:9.1f}")
    print(
        f"{'ratio exec / fork':34} {med['exec'][0] / med['fork'][0]:9.1f}x "
        f"{med['exec'][1] / max(med['fork'][1], 1.0 / TICKS):8.1f}x"
    )
    print(
        f"a 64-rank job's launch CPU: exec {64 * med['exec'][1]:.1f} CPU-s, "
        f"fork {64 * med['fork'][1]:.2f} CPU-s"
    )
    kinds = ("mosquitto", "memory") if args.broker == "both" else (args.broker,)
    worst = 0.0
    for kind in kinds:
        if kind == "mosquitto":
            with mosquitto(": use --broker memory") as port:
                times, latency, cpu = asyncio.run(burst(args.procs, args.rounds, kind, port))
        else:
            times, latency, cpu = asyncio.run(burst(args.procs, args.rounds, kind))
        worst = max(worst, *times)
        print(
            f"{args.procs} job processes on one agent ({kind} broker), all running (first "
            f"StartPart to the last first report), {args.rounds} rounds: median "
            f"{statistics.median(times):.3f} s, max {max(times):.3f} s; mean launch latency "
            f"(decision to fork) {1e3 * statistics.mean(latency):.1f} ms; CPU spent per burst "
            f"(agent, fork server, the {args.procs} processes to their first report): median "
            f"{statistics.median(cpu):.3f} s"
        )
    with mosquitto(": use --broker memory") as port:
        ranks = asyncio.run(mpi_job(args.procs, args.rounds, "mosquitto", port))
    print(
        f"one MPI-like job of {args.procs} ranks on one agent (mosquitto broker), StartPart to "
        f"its leader's first report (all ranks forked and connected), {args.rounds} rounds: "
        f"median {statistics.median(ranks):.3f} s, max {max(ranks):.3f} s"
    )
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    verdict = "met" if max(ranks) < 1.0 else "missed"
    print(
        f"target: all {args.procs} ranks of a {args.procs}-rank job running in under "
        f"1 s: {verdict} (worst round {max(ranks):.3f} s); {args.procs} separate one-CPU parts, "
        f"worst round {worst:.3f} s"
    )


if __name__ == "__main__":
    main()
