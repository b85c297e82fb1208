"""Benchmark: what agents that change nothing cost the scheduler, up to 10,000 of them.

Run on demand (not a test)::

    .venv/bin/python -m bench.live.swarm --agents 10000 --processes 4

It starts a private Mosquitto (``accordion up``'s configuration, no logins) and a
real scheduler (``python -m scheduler``), then ``--processes`` children of
``bench/live/swarm_host.py`` that host the agents between them: every agent its
own MQTT connection and client id, registering with the real ``AgentOnline`` and
heartbeating every ``--beat`` wall seconds with the real ``Heartbeat`` (no parts).
It prints, for each run:

- the time from starting the agents' processes to the scheduler's retained
  ``ClusterSummary`` counting them all (time to register all);
- then, over ``--measure`` wall seconds (longer than the scheduler's silence
  limit, so agents still online at the end are heartbeating): the scheduler's
  CPU (utime + stime, % of one core) and its CPU per heartbeat (over the
  nominal rate, agents / period), the broker's and the agents' processes'
  CPU, and the scheduler's resident memory;
- at the end, from the scheduler's metrics: machines online, agents ever
  suspected (and how many of them before the measurement), agents lost (both
  must be 0: a suspected agent is one whose heartbeat came more than half a
  period late, anywhere between its process and the scheduler's handling).

``--profile FILE`` runs this tree's scheduler under cProfile; ``--keep-log FILE``
keeps its log (which names every suspected agent and when).

The yardstick, in the same run: the same agents (``--yardstick-agents`` of them)
against the scheduler of ``--yardstick REF``, a checkout of this repository's
history that ``git archive`` writes to a temporary directory (by default the
commit before heartbeats were made cheap). Its agents are built from that
checkout's ``broker`` package, in its protocol. ``--yardstick ''`` leaves it out.

Every process runs on this machine and talks to 127.0.0.1 only; on a 2-core
machine they share the cores with the scheduler, so their CPU is shown too.
The open-files limit is raised to its hard limit for the broker and the agents.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import math
import os
import re
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.live.private_mosquitto import mosquitto_process  # noqa: E402
from bench.live.proc_stats import cpu_seconds, rss_mb  # noqa: E402
from broker.local import accepts, free_port  # noqa: E402
from broker.mqtt import MqttBus, MqttSettings  # noqa: E402
from broker.topics import Topics  # noqa: E402

HOST_SCRIPT = ROOT / "bench" / "live" / "swarm_host.py"
YARDSTICK = "cbc6fff95a2fd7a9e1397f396e287506d7813ebb"
"""``main`` before heartbeats were made cheap (every batch rebuilt the gauges of every
machine, opened a journal transaction, and the liveness check walked every agent)."""


@dataclass(frozen=True, slots=True)
class Run:
    """One scheduler with ``agents`` simulated agents (see the module docstring)."""

    label: str
    agents: int
    beat: float
    #: Wall seconds from starting the agents to all of them counted; inf if not in time.
    registered: float
    scheduler_cpu: float
    broker_cpu: float
    hosts_cpu: float
    scheduler_rss: float
    online: int
    suspected: int
    #: Of ``suspected``: those before the measurement (while the agents registered).
    suspected_early: int
    lost: int

    @property
    def per_beat_us(self) -> float:
        """Scheduler CPU per heartbeat, microseconds."""
        beats = self.agents / self.beat
        return 1e6 * self.scheduler_cpu / 100 / beats if beats else math.nan

    @property
    def ok(self) -> bool:
        return math.isfinite(self.registered) and self.online == self.agents and not self.lost


def checkout(ref: str, into: Path) -> Path:
    """The files of ``ref`` of this repository, written under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref],
        check=True,
        capture_output=True,
    ).stdout
    target = into / "yardstick"
    target.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target


def _metrics(url: str) -> dict[str, float]:
    """The scheduler's unlabelled samples and the sums of labelled ones, by name."""
    with urllib.request.urlopen(url, timeout=30) as reply:
        text = reply.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:]+)(\{[^}]*\})? ([^ ]+)$", line)
        if m:
            out[m[1]] = out.get(m[1], 0.0) + float(m[3])
    return out


async def _registered(url: str, root: str, agents: int, timeout: float) -> float:
    """Wall seconds until the retained ClusterSummary counts ``agents`` machines."""
    t0 = time.perf_counter()
    async with MqttBus(MqttSettings.from_url(url), f"swarm-watch-{uuid.uuid4().hex[:6]}") as bus:
        await bus.subscribe(Topics(root).cluster, qos=0)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                async for d in bus.deliveries():
                    if not d.payload:
                        continue
                    # Read as plain msgpack: the yardstick may speak another protocol.
                    summary = msgspec.msgpack.decode(d.payload)
                    if isinstance(summary, dict) and summary.get("machines", 0) >= agents:
                        return time.perf_counter() - t0
    return math.inf


def one_run(  # noqa: PLR0917 (a bench's one call site per run)
    label: str,
    source: Path,
    agents: int,
    processes: int,
    beat: float,
    measure: float,
    profile: Path | None = None,
    keep_log: Path | None = None,
) -> Run:
    root = f"swarm-{uuid.uuid4().hex[:6]}/v1"
    env = {**os.environ, "PYTHONPATH": str(source)}
    with (
        tempfile.TemporaryDirectory(prefix="accordion-swarm-") as tmp,
        mosquitto_process() as (port, broker),
    ):
        url = f"mqtt://127.0.0.1:{port}"
        metrics_port = free_port()
        log = Path(tmp, "scheduler.log").open("wb")  # noqa: SIM115 (closed below)
        scheduler = subprocess.Popen(
            [
                sys.executable,
                *(["-m", "cProfile", "-o", str(profile)] if profile else []),
                "-m",
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--root",
                root,
                "--journal",
                str(Path(tmp, "journal.sqlite")),
                "--metrics-port",
                str(metrics_port),
                "--heartbeat-interval",
                str(beat),
                "--log-level",
                "WARNING",
            ],
            cwd=source,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        hosts: list[subprocess.Popen[bytes]] = []
        try:
            while not accepts("127.0.0.1", metrics_port):
                if scheduler.poll() is not None:
                    raise SystemExit(f"{label}: the scheduler exited; see its log in {tmp}")
                time.sleep(0.05)  # a bench's start-up, not a test's synchronisation
            share = math.ceil(agents / processes)
            watcher = asyncio.new_event_loop()
            waiting = watcher.create_task(_registered(url, root, agents, 120.0))
            # Subscribed before the agents start: the watch counts from their start.
            watcher.run_until_complete(asyncio.sleep(0.5))
            for first in range(0, agents, share):
                count = min(share, agents - first)
                argv = [sys.executable, str(HOST_SCRIPT), "--url", url, "--root", root]
                argv += ["--prefix", "a", "--first", str(first), "--count", str(count)]
                argv += ["--beat", str(beat)]
                hosts.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL))
            registered = watcher.run_until_complete(waiting)
            watcher.close()
            pids = [h.pid for h in hosts]
            metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
            early = _metrics(metrics_url).get("accordion_scheduler_agents_suspect_total", 0)
            s0, b0 = cpu_seconds(scheduler.pid), cpu_seconds(broker.pid)
            h0, w0 = sum(cpu_seconds(p) for p in pids), time.perf_counter()
            time.sleep(measure)  # the measurement window
            wall = time.perf_counter() - w0
            sched_cpu = 100 * (cpu_seconds(scheduler.pid) - s0) / wall
            broker_cpu = 100 * (cpu_seconds(broker.pid) - b0) / wall
            hosts_cpu = 100 * (sum(cpu_seconds(p) for p in pids) - h0) / wall
            memory = rss_mb(scheduler.pid)
            seen = _metrics(metrics_url)
        finally:
            for h in hosts:
                h.terminate()
            for h in hosts:
                try:
                    h.wait(60)
                except subprocess.TimeoutExpired:
                    h.kill()
                    h.wait()
            scheduler.terminate()
            try:
                scheduler.wait(60)
            except subprocess.TimeoutExpired:
                scheduler.kill()
                scheduler.wait()
            log.close()
            if keep_log is not None:
                keep_log.write_bytes(Path(tmp, "scheduler.log").read_bytes())
    return Run(
        label=label,
        agents=agents,
        beat=beat,
        registered=registered,
        scheduler_cpu=sched_cpu,
        broker_cpu=broker_cpu,
        hosts_cpu=hosts_cpu,
        scheduler_rss=memory,
        online=int(seen.get("accordion_scheduler_machines_online", 0)),
        suspected=int(seen.get("accordion_scheduler_agents_suspect_total", 0)),
        suspected_early=int(early),
        lost=int(seen.get("accordion_scheduler_agents_lost_total", 0)),
    )


def report(runs: list[Run], target_cpu: float, target_register: float) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="agents heartbeating at the scheduler: what they cost it")
    table.add_column("metric")
    for r in runs:
        table.add_column(f"{r.label}\n{r.agents:,} agents", justify="right")
    table.add_column("target", justify="right")

    def row(name: str, values: list[str], target: str = "") -> None:
        table.add_row(name, *values, target)

    row("heartbeats/s", [f"{r.agents / r.beat:,.0f}" for r in runs])
    row(
        "time to register all (s)",
        [f"{r.registered:.1f}" if math.isfinite(r.registered) else "not in 120" for r in runs],
        f"< {target_register:g}",
    )
    cpu = [f"{r.scheduler_cpu:.1f}" for r in runs]
    row("scheduler CPU (% of a core)", cpu, f"< {target_cpu:g}")
    row("scheduler CPU per heartbeat (µs)", [f"{r.per_beat_us:.0f}" for r in runs])
    row("broker CPU (% of a core)", [f"{r.broker_cpu:.1f}" for r in runs])
    row("agents' processes CPU (% of a core)", [f"{r.hosts_cpu:.1f}" for r in runs])
    row("scheduler RSS (MiB)", [f"{r.scheduler_rss:.0f}" for r in runs])
    row("online at the end", [f"{r.online:,}" for r in runs])
    row("agents suspected / lost", [f"{r.suspected} / {r.lost}" for r in runs], "0 / 0")
    row(
        "of them suspected while registering",
        [f"{r.suspected_early}" for r in runs],
    )
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--agents", type=int, default=1000, help="simulated agents")
    parser.add_argument("--processes", type=int, default=4, help="processes hosting them")
    parser.add_argument("--beat", type=float, default=2.0, help="heartbeat period, wall s")
    parser.add_argument("--measure", type=float, default=20.0, help="CPU window, wall s")
    parser.add_argument("--yardstick", default=YARDSTICK, help="git ref of the old scheduler")
    parser.add_argument(
        "--yardstick-agents", type=int, default=500, help="agents of the yardstick's run"
    )
    parser.add_argument("--profile", type=Path, help="cProfile this tree's scheduler into FILE")
    parser.add_argument("--keep-log", type=Path, help="copy this tree's scheduler log to FILE")
    args = parser.parse_args()
    if args.agents < 1 or args.processes < 1 or args.beat <= 0 or args.measure <= 0:
        raise SystemExit("--agents, --processes, --beat and --measure must be positive")
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < args.agents + 1000:
        raise SystemExit(f"the open-files limit ({hard}) is too low for {args.agents} agents")
    # The broker and the agents' processes inherit it: one socket per agent.
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="accordion-swarm-src-") as tmp:
        if args.yardstick:
            source = checkout(args.yardstick, Path(tmp))
            label = f"yardstick {args.yardstick[:7]}"
            print(f"{label}: {args.yardstick_agents:,} agents", flush=True)
            runs.append(
                one_run(
                    label,
                    source,
                    args.yardstick_agents,
                    args.processes,
                    args.beat,
                    args.measure,
                )
            )
        print(f"this tree: {args.agents:,} agents in {args.processes} processes", flush=True)
        runs.append(
            one_run(
                "this tree",
                ROOT,
                args.agents,
                args.processes,
                args.beat,
                args.measure,
                args.profile,
                args.keep_log,
            )
        )
    report(runs, target_cpu=50.0, target_register=60.0)
    if not all(r.ok for r in runs[-1:]):
        sys.exit(1)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
