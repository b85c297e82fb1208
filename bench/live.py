"""Benchmark: the live runtime's throughput, latency and scale on this machine.

Run on demand (not a test): ``.venv/bin/python bench/live.py``. It prints one
table comparing each measurement with the issue's target and with Slurm:

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

Targets (issue 4): >= 500 single submissions/s, >= 5,000 jobs/s batched,
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
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from accordion.client import LiveClient, connect, run_async  # noqa: E402
from accordion.cluster import LocalCluster, UpError  # noqa: E402
from accordion.specs import job_spec  # noqa: E402
from broker.codec import decode, encode  # noqa: E402
from broker.messages import (  # noqa: E402
    AgentOnline,
    Heartbeat,
    JobEvent,
    MachineSpec,
    PartFinished,
    PartStarted,
    StartPart,
)
from broker.mqtt import MqttBus, MqttSettings  # noqa: E402
from broker.topics import Topics  # noqa: E402
from model.machine import Machine  # noqa: E402
from workload.cluster import ClusterSpec  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 160)
TICK = os.sysconf("SC_CLK_TCK")

TARGET_SINGLE = 500.0
TARGET_BATCHED = 5000.0
TARGET_P50_MS = 20.0
TARGET_AGENTS = 500
SLURM_SUBMITS = 100.0  # sbatch/s, the better end of 50-100
SLURM_START_MS = 500.0


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (fields 14 and 15 of /proc/<pid>/stat)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def rss(process: subprocess.Popen[bytes]) -> float:
    return rss_mb(process.pid) if process.poll() is None else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def cluster(machines: Sequence[Machine], run_dir: Path, **kw: object) -> LocalCluster:
    tag = uuid.uuid4().hex[:6]
    spec = ClusterSpec(name=f"bench-{tag}", reference_speed=1.0, machines=tuple(machines))
    return LocalCluster(spec, run_dir / tag, root=f"bench-{tag}/v1", **kw)  # type: ignore[arg-type]


# -- an in-process agent that only answers ---------------------------------------------------


@dataclass
class FakeAgent:
    """Registers a machine, heartbeats, and (``finish``) ends every part at once.

    Records when each ``StartPart`` arrived (``time.perf_counter``).
    """

    settings: MqttSettings
    topics: Topics
    machine: MachineSpec
    finish: bool
    arrived: dict[str, float] = field(default_factory=dict)
    waiters: dict[str, asyncio.Event] = field(default_factory=dict)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        state = self.topics.agent_state(self.machine.id)
        async with (
            MqttBus(self.settings, f"bench-fake-{self.machine.id}") as bus,
            asyncio.TaskGroup() as tg,
        ):
            await bus.subscribe(self.topics.agent_commands(self.machine.id))
            online = AgentOnline(machine=self.machine, incarnation=uuid.uuid4().hex)
            await bus.publish(state, encode(online), retain=True)
            reader = tg.create_task(self._read(bus), name=f"bench-fake-{self.machine.id}")
            beat = tg.create_task(self._beat(bus), name=f"bench-beat-{self.machine.id}")
            try:
                yield
            finally:
                reader.cancel()
                beat.cancel()
                await bus.publish(state, b"", retain=True)

    async def _beat(self, bus: MqttBus) -> None:
        for seq in itertools.count():
            beat = Heartbeat(agent_id=self.machine.id, seq=seq)
            await bus.publish(self.topics.agent_events(self.machine.id), encode(beat))
            await asyncio.sleep(2.0)

    async def _read(self, bus: MqttBus) -> None:
        events = self.topics.agent_events(self.machine.id)
        async for d in bus.deliveries():
            message = decode(d.payload)
            if not isinstance(message, StartPart) or message.job is None:
                continue
            job_id = message.job.id
            self.arrived[job_id] = time.perf_counter()
            if job_id in self.waiters:
                self.waiters[job_id].set()
            if self.finish:
                me = self.machine.id
                await bus.publish(events, encode(PartStarted(job_id=job_id, agent_id=me)))
                await bus.publish(events, encode(PartFinished(job_id=job_id, agent_id=me)))


async def ready(local: LocalCluster, timeout: float = 120.0) -> None:
    async with connect(local.broker_url, local.root, timeout=2.0) as client:
        await local.ready(client, timeout=timeout)


# -- throughput ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rate:
    jobs: int
    seconds: float
    scheduler_cpu: float
    client_cpu: float

    @property
    def per_second(self) -> float:
        return self.jobs / self.seconds

    @property
    def cpu_us_per_job(self) -> float:
        return 1e6 * self.scheduler_cpu / self.jobs


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


@dataclass(frozen=True, slots=True)
class Latency:
    to_agent_ms: list[float]
    to_event_ms: list[float]


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
            if isinstance(item, JobEvent) and item.job_id == job_id and item.state == "running":
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


async def host_agents(url: str, root: str, names: Sequence[str]) -> None:
    """In the child: run one NodeAgent per name, each on its own MQTT connection."""
    from nodeagent.agent import AgentSettings, NodeAgent, agent_will, new_incarnation
    from nodeagent.spawn import MqttSpawn

    settings = MqttSettings.from_url(url)
    topics = Topics(root)
    agents: list[NodeAgent] = []
    async with AsyncExitStack() as stack:
        for name in names:
            incarnation = new_incarnation()
            bus = await stack.enter_async_context(
                MqttBus(settings, f"agent-{name}", will=agent_will(topics, name, incarnation))
            )
            agents.append(
                NodeAgent(
                    bus=bus,
                    topics=topics,
                    machine=Machine(id=name, cpus=8),
                    spawn=MqttSpawn(settings.host, settings.port),
                    settings=AgentSettings(),
                    incarnation=incarnation,
                )
            )

        def stop() -> None:
            for agent in agents:
                agent.stop()

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop)
        async with asyncio.TaskGroup() as tg:
            for agent in agents:
                tg.create_task(agent.run(), name=f"agent-{agent.agent_id}")


@dataclass(frozen=True, slots=True)
class Hosted:
    agents: int
    online_after_s: float
    still_online: int
    host_cpu_percent: float
    host_rss_mb: float
    scheduler_cpu_percent: float

    @property
    def ok(self) -> bool:
        return self.still_online == self.agents


async def _online(local: LocalCluster) -> int:
    async with connect(local.broker_url, local.root, timeout=10.0) as client:
        status = await client.status()
    return sum(m.online for m in status.machines)


def hosted(run_dir: Path, n: int) -> Hosted:
    tag = uuid.uuid4().hex[:4]
    machines = [Machine(id=f"h{tag}-{i}", cpus=8) for i in range(n)]
    with cluster(machines, run_dir, start_agents=False) as local:
        names = ",".join(m.id for m in machines)
        host = subprocess.Popen(
            [sys.executable, __file__, "--host-agents", names, "--url", local.broker_url,
             "--root", local.root],
        )  # fmt: skip
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


# -- the report -----------------------------------------------------------------------------------


def ratio(value: float, reference: float) -> str:
    r = value / reference
    return f"{r:,.2f}x" if r < 1 else f"{r:,.1f}x"


def report(
    single: Rate | None,
    batched: Rate | None,
    lat: Latency | None,
    real: list[float] | None,
    hosts: list[Hosted],
) -> None:
    table = Table(title="live runtime on this machine (127.0.0.1, Mosquitto)")
    for name in ("measurement", "measured", "target", "vs target", "Slurm", "vs Slurm"):
        table.add_column(name, justify="left" if name == "measurement" else "right")
    if single is not None:
        table.add_row(
            "single-job submissions accepted/s",
            f"{single.per_second:,.0f}",
            f">= {TARGET_SINGLE:,.0f}",
            ratio(single.per_second, TARGET_SINGLE),
            "50-100 sbatch/s",
            ratio(single.per_second, SLURM_SUBMITS),
        )
    if batched is not None:
        table.add_row(
            "batched jobs accepted/s",
            f"{batched.per_second:,.0f}",
            f">= {TARGET_BATCHED:,.0f}",
            ratio(batched.per_second, TARGET_BATCHED),
            "50-100 jobs/s",
            ratio(batched.per_second, SLURM_SUBMITS),
        )
    if lat is not None:
        for label, values in (
            ("submit to StartPart at the agent", lat.to_agent_ms),
            ("submit to 'running' event at the client", lat.to_event_ms),
        ):
            p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
            table.add_row(
                f"{label}, p50 (ms)",
                f"{p50:.2f}",
                f"< {TARGET_P50_MS:g}",
                ratio(TARGET_P50_MS, p50),
                "~500 ms",
                ratio(SLURM_START_MS, p50),
            )
            table.add_row(f"{label}, p99 (ms)", f"{p99:.2f}", "", "", "", "")
    if real:
        p50, p99 = percentile(real, 0.5), percentile(real, 0.99)
        table.add_row(
            "submit to PartStarted, real agent, p50 (ms)",
            f"{p50:.2f}",
            f"< {TARGET_P50_MS:g}",
            ratio(TARGET_P50_MS, p50),
            "~500 ms",
            ratio(SLURM_START_MS, p50),
        )
        table.add_row("submit to PartStarted, real agent, p99 (ms)", f"{p99:.2f}", "", "", "", "")
    for label, rate in (("single", single), ("batched", batched)):
        if rate is not None:
            table.add_row(
                f"scheduler CPU per job, {label} (us)",
                f"{rate.cpu_us_per_job:,.0f}",
                "",
                "",
                "",
                "",
            )
    if hosts:
        best = max((h.agents for h in hosts if h.ok), default=0)
        table.add_row(
            "agents hosted by one process, all heartbeating",
            f"{best:,}",
            f">= {TARGET_AGENTS}",
            ratio(best, TARGET_AGENTS),
            "",
            "",
        )
    console.print(table)
    if single is not None and batched is not None:
        console.print(
            f"single: {single.jobs:,} jobs in {single.seconds:.2f} s (this client used "
            f"{single.client_cpu:.2f} CPU s, the scheduler {single.scheduler_cpu:.2f}); batched: "
            f"{batched.jobs:,} jobs in {batched.seconds:.2f} s (client {batched.client_cpu:.2f} "
            f"CPU s, scheduler {batched.scheduler_cpu:.2f})",
            highlight=False,
        )
    if hosts:
        steps = Table(title="agents in one process (NodeAgent actors, one MQTT connection each)")
        for name in (
            "agents",
            "all online after (s)",
            "online after 8 s",
            "host CPU %",
            "host RSS (MB)",
            "scheduler CPU %",
        ):
            steps.add_column(name, justify="right")
        for h in hosts:
            steps.add_row(
                str(h.agents),
                f"{h.online_after_s:.1f}",
                f"{h.still_online}",
                f"{h.host_cpu_percent:.0f}",
                f"{h.host_rss_mb:.0f}",
                f"{h.scheduler_cpu_percent:.0f}",
            )
        console.print(steps)


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
    parser.add_argument("--host-agents", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.host_agents:
        run_async(host_agents(args.url, args.root, args.host_agents.split(",")))
        return
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
