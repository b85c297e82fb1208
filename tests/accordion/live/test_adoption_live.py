"""A SIGKILLed agent of a live cluster, restarted by the supervisor, adopts its parts.

Real processes end to end (Mosquitto, ``python -m scheduler``, two
``python -m nodeagent``, job processes and MPI-like ranks): the sleep part
and the 2-rank part keep running through the restart, the scheduler holds
them and the new incarnation adopts them, and both jobs finish once, with no
requeue and their journalled start unchanged. Waits are on the journal and on
the scheduler's answers, never on a fixed time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from accordion.client.live_client import connect, run_async
from accordion.client.specs import job_spec
from accordion.cluster.local_cluster import LocalCluster
from broker.messages import MpiSpec
from scheduler.runtime.journal import Journal
from tests.accordion.live.conftest import two_agents
from tests.integration.conftest import BrokerEndpoint

pytestmark = pytest.mark.integration
BOUND = 120.0


def _events(journal: Path, job_id: str) -> list[str]:
    with Journal(journal) as j:
        return [e.event for e in j.job_events([job_id])]


def _forked(root: str) -> set[str]:
    """The job ids of this cluster's job processes alive now (from ``/proc``)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").split()
        except OSError:
            continue
        if b"nodeagent.job" in argv and f"--root={root}".encode() in argv:
            found |= {a[9:].decode() for a in argv if a.startswith(b"--job-id=")}
    return found


async def _until(check: object, cluster: LocalCluster) -> None:
    """Until ``check()`` holds, supervising the cluster meanwhile (bounded)."""
    deadline = time.monotonic() + BOUND
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        cluster.supervise()  # restarts the killed agent, as accordion up does
        await asyncio.sleep(0.05)


def test_a_restarted_agent_adopts_sleep_and_mpi_parts(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    cluster = LocalCluster(
        two_agents(tag),
        tmp_path / "run",
        policy="fcfs",
        time_scale=1.0,
        broker_url=mosquitto.url,
        root=f"adopt-{tag}/v1",
        # A 20 s lease (below the scheduler's 6 x 4 s silence limit): room for the
        # restart on a loaded machine.
        heartbeat=4.0,
        lease=20.0,
    )
    sleep = job_spec(job_id="sleepy", procs=2, walltime=600.0, work=10.0)
    mpi = job_spec(
        job_id="ranks",
        procs=2,
        walltime=600.0,
        work=1.0,
        workload="mpi",
        mpi=MpiSpec(iterations=200, compute=0.02),
    )

    async def scenario() -> None:
        async with connect(cluster.broker_url, cluster.root, timeout=5.0) as client:
            await cluster.ready(client, timeout=60.0)
            reply = await client.submit([sleep, mpi])
            assert all(r.accepted for r in reply.results)

            async def running() -> set[str]:
                status = await client.status()
                return {j.id for j in status.running}

            deadline = time.monotonic() + BOUND
            while await running() != {"sleepy", "ranks"}:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        # Decided is not forked: wait for both job processes to exist.
        await _until(lambda: _forked(cluster.root) >= {"sleepy", "ranks"}, cluster)
        # Both agents at once: wherever each job runs, its agent dies under it.
        for child in cluster.children():
            if child.role == "agent":
                os.kill(child.pid, signal.SIGKILL)
        await _until(
            lambda: all("adopted" in _events(cluster.journal, job) for job in ("sleepy", "ranks")),
            cluster,
        )
        await _until(
            lambda: all("finished" in _events(cluster.journal, job) for job in ("sleepy", "ranks")),
            cluster,
        )
        with Journal(cluster.journal) as j:
            for job in ("sleepy", "ranks"):
                row = j.job(job)
                assert row is not None
                assert (row.state.value, row.requeues) == ("finished", 0)
                held = next(e.at for e in j.job_events([job]) if e.event == "held")
                # Its run continuous: dated from before the kill, not from the adoption.
                assert row.start is not None
                assert row.start < held
        for job in ("sleepy", "ranks"):
            events = _events(cluster.journal, job)
            assert events.index("held") < events.index("adopted") < events.index("finished")
            assert "requeued" not in events

    with cluster:
        run_async(scenario())
        assert all(c.restarts == 1 for c in cluster.children() if c.role == "agent")
