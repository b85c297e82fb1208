"""Fencing with real processes: an agent frozen (SIGSTOP) past the scheduler's silence
limit loses its job to another agent, and the job never runs twice at once.

A real scheduler and two real agents on Mosquitto (``local_cluster``). The job's
process on the frozen agent stops by itself when the agent's lease lapses (the
agent cannot renew it while frozen); the scheduler requeues the job only after
its silence limit, which is longer than the lease. The test watches the job
processes themselves (``/proc``): the old attempt's process is gone before the
new attempt's process exists. After SIGCONT the agent rejoins, and its stale
attempt's end changes nothing.

The margin between lease and silence is made wide here (lease 2 heartbeats,
silence 6), so the ordering the test checks does not hang on machine load.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from accordion.client.live_client import connect, run_async
from accordion.client.specs import job_spec
from accordion.cluster.local_cluster import LocalCluster
from scheduler.core.job_lifecycle import JobState
from scheduler.runtime.journal import Journal
from tests.accordion.live.conftest import two_agents
from tests.integration.conftest import BrokerEndpoint

pytestmark = pytest.mark.integration

BOUND = 60.0
HEARTBEAT = 0.5


def job_processes(job_id: str) -> dict[int, int]:
    """``pid -> attempt`` of every live job process of ``job_id`` on this machine."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # NULs between exec'd arguments, spaces in a forked job's title.
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").split()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z" or b"nodeagent.job" not in argv:
            continue
        args = [a.decode() for a in argv]
        if f"--job-id={job_id}" in args:
            attempt = next((int(a.split("=", 1)[1]) for a in args if a.startswith("--attempt=")), 1)
            found[int(entry.name)] = attempt
    return found


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.02)


def test_a_frozen_agent_never_runs_its_job_twice(mosquitto: BrokerEndpoint, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    cluster = LocalCluster(
        two_agents(tag),
        tmp_path,
        policy="easy",
        time_scale=1.0,
        broker_url=mosquitto.url,
        root=f"fence-{tag}/v1",
        heartbeat=HEARTBEAT,
        lease=2 * HEARTBEAT,
    )
    job_id = f"j-{tag}"
    with cluster:

        async def submit() -> None:
            async with connect(cluster.broker_url, cluster.root, timeout=10.0) as client:
                await cluster.ready(client, timeout=BOUND)
                # One CPU for 10 minutes: placed on the fast machine (placement "fastest").
                spec = job_spec(job_id=job_id, procs=1, walltime=600.0, work=600.0)
                reply = await client.submit([spec])
                assert reply.results[0].accepted, reply.results[0].reason

        run_async(submit())
        wait_until(lambda: 1 in job_processes(job_id).values(), "attempt 1 runs")
        (old_pid,) = job_processes(job_id)
        fast = next(c for c in cluster.children() if c.name == f"agent-fast-{tag}")
        os.kill(fast.pid, signal.SIGSTOP)
        try:
            # Whichever comes first is recorded; the lease (1 s) is far below the
            # scheduler's silence limit (3 s), so the old attempt must stop first.
            order: list[str] = []

            def watch() -> bool:
                procs = job_processes(job_id)
                if old_pid not in procs and "old gone" not in order:
                    order.append("old gone")
                if 2 in procs.values() and "new running" not in order:
                    order.append("new running")
                return len(order) == 2

            wait_until(watch, "attempt 1 stopped and attempt 2 started")
            assert order == ["old gone", "new running"], order
            assert all(attempt == 2 for attempt in job_processes(job_id).values()), job_processes(
                job_id
            )
        finally:
            os.kill(fast.pid, signal.SIGCONT)

        async def check() -> None:
            async with connect(cluster.broker_url, cluster.root, timeout=10.0) as client:
                # Back from its freeze, the agent rejoins.
                deadline = time.monotonic() + BOUND
                while True:
                    status = await client.status()
                    online = {m.id for m in status.machines if m.online}
                    if f"fast-{tag}" in online:
                        break
                    assert time.monotonic() < deadline, "the thawed agent did not rejoin"
                running = {j.id: j for j in status.running}
                assert job_id in running
                assert [p.machine for p in running[job_id].parts] == [f"slow-{tag}"]
                reply = await client.cancel(job_id)
                assert reply.cancelled

        run_async(check())
        wait_until(lambda: not job_processes(job_id), "no process of the job is left")
    with Journal(cluster.journal) as journal:
        row = journal.job(job_id)
        assert row is not None
        assert row.state is JobState.CANCELLED
        assert row.requeues == 1
