"""The fault bench's shared parts: a row's result, its cluster and workload, and waits on them.

Every wait is bounded (``BOUND`` wall seconds) and polls the scheduler's
status over the bus: the bench measures recovery, so it must ask, not sleep.
"""

from __future__ import annotations

import asyncio
import random
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from accordion.client.live_client import LiveClient
from accordion.client.specs import job_spec
from accordion.cluster.local_cluster import LocalCluster
from accordion.errors import NoReplyError
from bench.faults.sampler import ALLOWANCE
from broker.bus import BusError
from broker.messages import JobSpec
from broker.mqtt import MqttSettings
from broker.settings import read_secret
from model.machine import Machine
from scheduler.core.job_lifecycle import JobState
from scheduler.runtime.journal import Journal
from workload.cluster import ClusterSpec

HEARTBEAT = 1.0
BOUND = 300.0
FINAL = {JobState.FINISHED, JobState.FAILED, JobState.CANCELLED}
FORGING_AGENT = "rogue"
"""The machine id of the agent login that forges on another agent's topics."""


@dataclass
class Result:
    row: str
    accepted: int = 0
    finished: int = 0
    failed: int = 0
    cancelled: int = 0
    queued: int = 0
    lost: int = 0
    requeued: int = 0
    #: Of the requeues, those charged to a job's requeue budget.
    charged: int = 0
    #: Parts a restarted agent adopted (the journal's ``adopted`` events).
    adopted: int = 0
    #: Jobs run twice at once beyond the fencing bound (``bench.faults.sampler``).
    duplicated: int = 0
    #: Jobs whose attempts overlapped only within the bound (an old one exiting).
    overlapped: int = 0
    recovery: float | None = None
    bad_counted: float | None = None
    effects: int | None = None
    restarts: int = 0
    note: str = ""


@dataclass
class Bench:
    time_scale: float
    jobs: int
    burst: int
    payloads: int
    keep: bool
    console: Console
    allowance: float = ALLOWANCE
    results: list[Result] = field(default_factory=list)


def cluster_spec(tag: str) -> ClusterSpec:
    return ClusterSpec(
        name=f"faults-{tag}",
        reference_speed=1.0,
        machines=tuple(Machine(id=f"m{i}-{tag}", cpus=16, speed=1.0) for i in range(3)),
    )


def workload(tag: str, n: int, seed: int = 1) -> list[JobSpec]:
    """``n`` jobs of 1 or 2 processes, 40 to 120 cluster seconds each."""
    rng = random.Random(seed)
    specs = []
    for i in range(n):
        work = rng.uniform(40.0, 120.0)
        specs.append(
            job_spec(job_id=f"{tag}-{i}", procs=rng.choice((1, 2)), walltime=3 * work, work=work)
        )
    return specs


async def submit_all(client: LiveClient, specs: list[JobSpec]) -> set[str]:
    accepted: set[str] = set()
    for i in range(0, len(specs), 100):
        reply = await client.submit(specs[i : i + 100])
        accepted |= {r.job_id for r in reply.results if r.accepted}
    return accepted


async def wait_offline(cluster: LocalCluster, machine: str) -> None:
    """Until the scheduler has noticed that ``machine`` is gone (bounded)."""
    deadline = time.monotonic() + 30.0
    async with cluster.connect(timeout=2.0) as client:
        while time.monotonic() < deadline:
            status = await client.status()
            if machine not in {m.id for m in status.machines if m.online}:
                return
            await asyncio.sleep(0.05)


async def wait_requeued(cluster: LocalCluster, accepted: set[str]) -> None:
    """Until the journal shows a requeue of one of ``accepted`` (bounded)."""
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        with Journal(cluster.journal) as journal:
            if any(e.event == "requeued" for e in journal.job_events(sorted(accepted))):
                return
        await asyncio.sleep(0.1)
    raise RuntimeError("no job was requeued within the bound")


async def wait_healthy(cluster: LocalCluster, since: float) -> float:
    """Wall seconds from ``since`` until the scheduler answers with every machine online."""
    wanted = {m.id for m in cluster.spec.machines}
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        try:
            async with cluster.connect(timeout=1.0) as client:
                status = await client.status(timeout=1.0)
                if wanted <= {m.id for m in status.machines if m.online}:
                    return time.monotonic() - since
        except (NoReplyError, BusError, OSError):
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("the cluster did not recover within the bound")


async def wait_drained(cluster: LocalCluster, accepted: set[str]) -> None:
    """Until the scheduler holds none of the accepted jobs queued or running."""
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        try:
            async with cluster.connect(timeout=2.0) as client:
                status = await client.status(timeout=2.0)
                live = {j.id for j in status.queue} | {j.id for j in status.running}
                if not live & accepted:
                    return
        except (NoReplyError, BusError, OSError):
            pass
        await asyncio.sleep(0.25)


def scrape_bad(cluster: LocalCluster) -> float:
    text = ""
    for attempt in range(5):
        try:
            text = urllib.request.urlopen(cluster.scheduler_metrics, timeout=5).read().decode()
            break
        except OSError:
            if attempt == 4:
                raise
            time.sleep(0.5)
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("accordion_scheduler_bad_messages_total{")
    )


def tally(result: Result, journal_path: Path, accepted: set[str]) -> None:
    with Journal(journal_path) as journal:
        rows = {row.spec.id: row for row in journal.load().jobs}
        events = journal.job_events(sorted(accepted))
    result.accepted = len(accepted)
    result.adopted = sum(1 for e in events if e.event == "adopted")
    for job_id in accepted:
        row = rows.get(job_id)
        if row is None or row.state not in FINAL:
            result.lost += 1
            if row is not None:
                result.queued += 1
            continue
        result.requeued += row.requeues
        result.charged += row.requeues - row.uncharged
        if row.state is JobState.FINISHED:
            result.finished += 1
        elif row.state is JobState.FAILED:
            result.failed += 1
        else:
            result.cancelled += 1


async def running_at_least(cluster: LocalCluster, n: int) -> None:
    deadline = time.monotonic() + BOUND
    async with cluster.connect(timeout=5.0) as client:
        while time.monotonic() < deadline:
            status = await client.status()
            if len(status.running) >= n:
                return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"fewer than {n} jobs ever ran at once")


def agent_child(cluster: LocalCluster, index: int = 0) -> int:
    machine = cluster.spec.machines[index].id
    child = next(c for c in cluster.children() if c.name == f"agent-{machine}")
    return child.pid


def as_login(cluster: LocalCluster, login: str) -> MqttSettings:
    """Bus settings of one of the cluster's generated logins."""
    host, _, port = cluster.broker_url.removeprefix("mqtt://").rpartition(":")
    secret = read_secret(cluster.credentials(login).password_file)
    return MqttSettings(host=host, port=int(port), username=login, password=secret)
