"""The fault bench's process-fault rows: kill or freeze one part of the cluster while jobs run.

Each row submits its workload, injects its fault and returns the accepted
job ids; ``bench.faults`` then waits until they have ended and tallies the
journal. See ``bench/faults/__main__.py`` for what each row means.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

from accordion.client.specs import job_spec
from accordion.cluster.local_cluster import LocalCluster
from accordion.errors import NoReplyError
from bench.faults.cluster import (
    BOUND,
    HEARTBEAT,
    Bench,
    Result,
    agent_child,
    running_at_least,
    submit_all,
    wait_healthy,
    wait_offline,
    wait_requeued,
    workload,
)
from bench.faults.sampler import Sampler
from broker.bus import BusError


async def row_baseline(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    async with cluster.connect(timeout=10.0) as client:
        return await submit_all(client, workload(tag, bench.jobs))


async def row_agent_kill(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    """SIGKILL an agent that is not restarted: its parts stop by their lease and the
    scheduler requeues them once the hold for adoption (the lease) is over."""
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 10)
    machine = cluster.spec.machines[0].id
    cluster.keep_down(f"agent-{machine}")
    t0 = time.monotonic()
    os.kill(agent_child(cluster), signal.SIGKILL)
    await wait_offline(cluster, machine)
    await wait_requeued(cluster, accepted)
    result.recovery = time.monotonic() - t0
    result.note = "not restarted; recovery: until its jobs were requeued (after the hold)"
    return accepted


async def row_agent_restart(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    """SIGKILL an agent and let the supervisor restart it at once: the new incarnation
    adopts the parts still running (expect adopted > 0, requeued 0)."""
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 10)
    t0 = time.monotonic()
    os.kill(agent_child(cluster), signal.SIGKILL)
    await wait_offline(cluster, cluster.spec.machines[0].id)
    result.recovery = await wait_healthy(cluster, t0)
    result.note = "restarted at once; recovery: until the new incarnation is online"
    return accepted


async def row_agent_freeze(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 10)
    pid = agent_child(cluster)
    os.kill(pid, signal.SIGSTOP)
    # Past the scheduler's silence limit (6 heartbeats) by half again.
    await asyncio.sleep(9 * HEARTBEAT)
    t0 = time.monotonic()
    os.kill(pid, signal.SIGCONT)
    result.recovery = await wait_healthy(cluster, t0)
    return accepted


async def row_scheduler_kill(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    # Long jobs: what matters is that no acknowledged submission is lost, not running
    # 3,000 processes; every accepted job is cancelled once the burst is over.
    specs = [
        job_spec(job_id=f"{tag}-b{i}", procs=1, walltime=7200.0, work=3600.0)
        for i in range(bench.burst)
    ]
    accepted: set[str] = set()
    killed_at: float | None = None
    answered_at: float | None = None
    pending = list(specs)
    deadline = time.monotonic() + BOUND
    while pending and time.monotonic() < deadline:
        try:
            async with cluster.connect(timeout=5.0) as client:
                while pending:
                    spec = pending[0]
                    reply = await client.submit([spec], timeout=5.0)
                    if killed_at is not None and answered_at is None:
                        answered_at = time.monotonic()
                    if reply.results[0].accepted:
                        accepted.add(spec.id)
                    pending.pop(0)
                    if killed_at is None and len(accepted) >= len(specs) // 3:
                        pid = cluster.scheduler_pid
                        assert pid is not None
                        os.kill(pid, signal.SIGKILL)
                        killed_at = time.monotonic()
        except (NoReplyError, BusError, OSError):
            await asyncio.sleep(0.2)  # the scheduler is restarting: resend what was unanswered
    if killed_at is not None and answered_at is not None:
        result.recovery = answered_at - killed_at
    async with cluster.connect(timeout=10.0) as client:
        for job_id in sorted(accepted):
            await client.cancel(job_id)
    result.note = (
        f"{bench.burst} single submissions, SIGKILL after {len(specs) // 3}, then all "
        "cancelled; recovery: until the first answer after the kill"
    )
    return accepted


async def row_broker_kill(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 10)
    broker = next(c for c in cluster.children() if c.role == "broker")
    t0 = time.monotonic()
    os.kill(broker.pid, signal.SIGKILL)
    result.recovery = await wait_healthy(cluster, t0)
    return accepted


async def row_job_crash(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 10)
    pid, (job, _) = next(iter(sampler.processes().items()))
    os.kill(pid, signal.SIGKILL)
    result.note = f"crashed {job}: expect failed 1"
    return accepted
