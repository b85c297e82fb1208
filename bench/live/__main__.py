"""Benchmark: the live runtime's throughput, latency and scale on this machine.

Run on demand (not a test): ``.venv/bin/python -m bench.live``. It prints one
table comparing each measurement with its target (below) and with Slurm:

- jobs accepted per second through the broker, for single-job requests with
  ``--in-flight`` of them awaiting their reply at once, and for batched
  requests (``--batch`` jobs each); the scheduler has one machine of 1 CPU, so
  every job past the first queues (EASY looks at the whole queue at every
  decision);
- submit-to-start latency on an idle cluster (p50, p99): from the client's
  publish to the ``StartPart`` reaching an in-process agent that finishes
  every part at once, and to the ``running`` JobEvent reaching the client;
  then, with a real ``python -m nodeagent``, to its ``PartStarted`` (the job's
  process has been forked and exec'd);
- the scheduler's CPU time per job (utime + stime from ``/proc/<pid>/stat``,
  over each throughput phase);
- how many agents one machine can host: N ``NodeAgent`` actors in one child
  process, on one event loop, each with its own MQTT connection, for N in
  ``--agents``; a step passes when the scheduler's StatusReply shows all N
  online after more than its silence limit (6 heartbeats of 2 s), i.e. every
  agent is heartbeating.

The targets: >= 500 single submissions/s, >= 5,000 jobs/s batched,
submit-to-start p50 < 20 ms, 500 agents. Slurm reference, quoted not measured:
50-100 sbatch/s and about 0.5 s from submission to start; the ratios take
100 sbatch/s, the better end. Every process (Mosquitto with the generated
configuration of ``accordion up``, the scheduler, the agents, this client)
runs on this machine and talks to 127.0.0.1 only; on a 2-core machine they
share the cores, so the client's own CPU time is shown beside the rates.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from accordion.client.live_client import LiveClient, connect, run_async  # noqa: E402
from accordion.client.specs import job_spec  # noqa: E402
from accordion.cluster.local_cluster import LocalCluster, UpError  # noqa: E402
from bench.live.agents import FakeAgent, command  # noqa: E402
from bench.live.proc_stats import cpu_seconds, rss  # noqa: E402
from bench.live.report import Hosted, Latency, Rate, console, report  # noqa: E402
from broker.codec import decode  # noqa: E402
from broker.messages import (  # noqa: E402
    JobEvent,
    MachineSpec,
    PartStarted,
)
from broker.mqtt import MqttBus, MqttSettings  # noqa: E402
from broker.topics import Topics  # noqa: E402
from model.machine import Machine  # noqa: E402
from workload.cluster import ClusterSpec  # noqa: E402


def cluster(machines: Sequence[Machine], run_dir: Path, **kw: object) -> LocalCluster:
    tag = uuid.uuid4().hex[:6]
    spec = ClusterSpec(name=f"bench-{tag}", reference_speed=1.0, machines=tuple(machines))
    return LocalCluster(spec, run_dir / tag, root=f"bench-{tag}/v1", **kw)  # type: ignore[arg-type]


async def ready(local: LocalCluster, timeout: float = 120.0) -> None:
    async with connect(local.broker_url, local.root, timeout=2.0) as client:
        await local.ready(client, timeout=timeout)


# -- throughput ------------------------------------------------------------------------------


async def _throughput(
    local: LocalCluster, *, jobs: int, batch: int, in_flight: int, tag: str
) -> Rate:
    settings = MqttSettings.from_url(local.broker_url)
    fake = FakeAgent(settings, Topics(local.root), MachineSpec(id="m", cpus=1), finish=False)
    async with fake.running():
        await ready(local)
        pid = local.scheduler_pid
        assert pid is not None
        async with connect(local.broker_url, local.root, timeout=60.0) as client:
            ids = (f"{tag}-{i}" for i in range(jobs))
            accepted = 0

            async def worker() -> None:
                nonlocal accepted
                while True:
                    chunk = [
                        job_spec(job_id=i, procs=1, walltime=3600.0)
                        for i in itertools.islice(ids, batch)
                    ]
                    if not chunk:
                        return
                    reply = await client.submit(chunk)
                    accepted += sum(r.accepted for r in reply.results)

            cpu0, mine0, t0 = cpu_seconds(pid), time.process_time(), time.perf_counter()
            async with asyncio.TaskGroup() as tg:
                for n in range(in_flight):
                    tg.create_task(worker(), name=f"bench-submitter-{n}")
            elapsed = time.perf_counter() - t0
            cpu, mine = cpu_seconds(pid) - cpu0, time.process_time() - mine0
    if accepted != jobs:
        raise RuntimeError(f"only {accepted} of {jobs} jobs were accepted")
    return Rate(jobs, elapsed, cpu, mine)


def throughput(run_dir: Path, *, jobs: int, batch: int, in_flight: int) -> Rate:
    with cluster([Machine(id="m", cpus=1)], run_dir, start_agents=False) as local:
        return run_async(
            _throughput(local, jobs=jobs, batch=batch, in_flight=in_flight, tag=f"b{batch}")
        )


# -- latency ---------------------------------------------------------------------------------


async def _latency(local: LocalCluster, samples: int) -> Latency:
    settings = MqttSettings.from_url(local.broker_url)
    fake = FakeAgent(settings, Topics(local.root), MachineSpec(id="m", cpus=1000), finish=True)
    to_agent: list[float] = []
    to_event: list[float] = []
    async with fake.running():
        await ready(local)
        async with connect(local.broker_url, local.root, watch=True) as client:
            for i in range(samples + 5):
                job_id = f"lat-{i}"
                fake.waiters[job_id] = asyncio.Event()
                t0 = time.perf_counter()
                await client.submit([job_spec(job_id=job_id, procs=1, walltime=60.0)])
                await _running(client, job_id)
                t_event = time.perf_counter()
                await fake.waiters[job_id].wait()
                if i >= 5:  # the first few warm the connections up
                    to_agent.append(1000 * (fake.arrived[job_id] - t0))
                    to_event.append(1000 * (t_event - t0))
                await asyncio.sleep(0.005)
    return Latency(to_agent, to_event)


async def _running(client: LiveClient, job_id: str) -> None:
    async with asyncio.timeout(10):
        while True:
            item = await client.next_watched()
            if isinstance(item, JobEvent) and item.job_id == job_id and item.event == "running":
                return


def latency(run_dir: Path, samples: int) -> Latency:
    with cluster([Machine(id="m", cpus=1000)], run_dir, start_agents=False) as local:
        return run_async(_latency(local, samples))


async def _real_latency(local: LocalCluster, samples: int) -> list[float]:
    machine = local.spec.machines[0].id
    settings = MqttSettings.from_url(local.broker_url)
    started: dict[str, float] = {}
    arrived = asyncio.Event()
    out: list[float] = []
    await ready(local)
    async with MqttBus(settings, f"bench-watch-{uuid.uuid4().hex[:6]}") as bus:
        await bus.subscribe(Topics(local.root).agent_events(machine))

        async def read() -> None:
            async for d in bus.deliveries():
                message = decode(d.payload)
                if isinstance(message, PartStarted):
                    started[message.job_id] = time.perf_counter()
                    arrived.set()

        async with (
            asyncio.TaskGroup() as tg,
            connect(local.broker_url, local.root) as client,
        ):
            reader = tg.create_task(read(), name="bench-part-events")
            for i in range(samples + 2):
                job_id = f"real-{i}"
                t0 = time.perf_counter()
                await client.submit([job_spec(job_id=job_id, procs=1, walltime=5.0, work=0.001)])
                async with asyncio.timeout(10):
                    while job_id not in started:
                        arrived.clear()
                        await arrived.wait()
                if i >= 2:
                    out.append(1000 * (started[job_id] - t0))
                # Let the job's interpreter start and end before the next sample.
                await asyncio.sleep(0.8)
            reader.cancel()
    return out


def real_latency(run_dir: Path, samples: int) -> list[float]:
    with cluster([Machine(id=f"real-{uuid.uuid4().hex[:4]}", cpus=8)], run_dir) as local:
        return run_async(_real_latency(local, samples))


# -- agents per machine ------------------------------------------------------------------------


async def _online(local: LocalCluster) -> int:
    async with connect(local.broker_url, local.root, timeout=10.0) as client:
        status = await client.status()
    return sum(m.online for m in status.machines)


def hosted(run_dir: Path, n: int) -> Hosted:
    tag = uuid.uuid4().hex[:4]
    machines = [Machine(id=f"h{tag}-{i}", cpus=8) for i in range(n)]
    with cluster(machines, run_dir, start_agents=False) as local:
        host = subprocess.Popen(command(local.broker_url, local.root, [m.id for m in machines]))
        try:
            t0 = time.perf_counter()
            try:
                run_async(ready(local, timeout=120.0))
            except UpError as exc:
                console.print(f"{n} agents: {exc}", style="red", highlight=False)
                alive = "running" if host.poll() is None else f"exited {host.returncode}"
                console.print(f"the agents' process is {alive}", style="red")
                return Hosted(n, math.inf, run_async(_online(local)), 0.0, rss(host), 0.0)
            online_after = time.perf_counter() - t0
            sched = local.scheduler_pid
            assert sched is not None
            h0, s0, w0 = cpu_seconds(host.pid), cpu_seconds(sched), time.perf_counter()
            # Past the scheduler's silence limit (6 x 2 s): still online means heartbeating.
            time.sleep(14.0)
            wall = time.perf_counter() - w0
            host_cpu = 100 * (cpu_seconds(host.pid) - h0) / wall
            sched_cpu = 100 * (cpu_seconds(sched) - s0) / wall
            memory = rss(host)
            still = run_async(_online(local))
        finally:
            host.terminate()
            try:
                host.wait(60)
            except subprocess.TimeoutExpired:
                host.kill()
                host.wait()
    return Hosted(n, online_after, still, host_cpu, memory, sched_cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--single", type=int, default=5000, help="jobs, one per request")
    parser.add_argument("--in-flight", type=int, default=64, help="requests awaiting replies")
    parser.add_argument("--batched", type=int, default=50_000, help="jobs in batched requests")
    parser.add_argument("--batch", type=int, default=1000, help="jobs per batched request")
    parser.add_argument("--batch-in-flight", type=int, default=4)
    parser.add_argument("--samples", type=int, default=200, help="latency samples, fake agent")
    parser.add_argument("--real-samples", type=int, default=20, help="latency samples, real agent")
    parser.add_argument("--agents", default="50,100,200,500", help="agents per process, steps")
    args = parser.parse_args()
    steps = [int(n) for n in args.agents.split(",") if n]
    with tempfile.TemporaryDirectory(prefix="accordion-bench-") as tmp:
        run_dir = Path(tmp)
        say: Callable[[str], None] = lambda text: console.print(text, style="dim")  # noqa: E731
        single = batched = None
        lat = None
        real: list[float] | None = None
        if args.single:
            say(f"single-job requests: {args.single:,} jobs, {args.in_flight} in flight")
            single = throughput(run_dir, jobs=args.single, batch=1, in_flight=args.in_flight)
        if args.batched:
            say(f"batched requests: {args.batched:,} jobs, {args.batch} per request")
            batched = throughput(
                run_dir, jobs=args.batched, batch=args.batch, in_flight=args.batch_in_flight
            )
        if args.samples:
            say(f"submit-to-start latency: {args.samples} samples, idle cluster")
            lat = latency(run_dir, args.samples)
        if args.real_samples:
            say(f"submit-to-start latency with a real agent: {args.real_samples} samples")
            real = real_latency(run_dir, args.real_samples)
        hosts: list[Hosted] = []
        for n in steps:
            say(f"{n} agents in one process")
            result = hosted(run_dir, n)
            hosts.append(result)
            if not result.ok:
                break
    report(single, batched, lat, real, hosts)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
