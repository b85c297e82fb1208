"""A SIGKILLed ``--no-adopt`` agent leaves nothing behind: its launcher and jobs stop.

A real ``python -m nodeagent`` on the session's Mosquitto runs one part; the
test learns the job's pid from ``PartStarted`` and the launcher's from
``/proc``, SIGKILLs the agent, and waits on both pids' pidfds (readable
once the process is gone): the launcher reads EOF on its socket, the job
reads EOF on its relay pipe, and both exit on their own. (An adopting agent's
parts outlive it within their lease instead: ``test_adoption``.)
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from uuid import uuid4

import pytest

from broker.messages import AgentOnline, MpiSpec, PartProgress, PartStarted, StartPart
from broker.mqtt import MqttBus, MqttSettings
from broker.topics import Topics
from nodeagent.launch.forkserver import MODULE
from tests.builders import spec
from tests.integration.conftest import BrokerEndpoint
from tests.nodeagent.harness import HANG, Scheduler

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


async def ranks_of(leader: int, count: int) -> list[int]:
    """The leader's rank processes, once it has forked ``count`` of them."""
    async with asyncio.timeout(HANG):
        while len(found := children(leader)) < count:
            await asyncio.sleep(0.005)
    return found


async def gone(pid: int) -> None:
    """Until ``pid`` has exited (its pidfd turns readable); at once if it already has."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, lambda: done.done() or done.set_result(None))
    try:
        async with asyncio.timeout(HANG):
            await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


@pytest.mark.parametrize("workload", ["sleep", "mpi"])
async def test_a_killed_agent_leaves_no_launcher_and_no_job(
    mosquitto: BrokerEndpoint, workload: str, tmp_path: Path
) -> None:
    """Also an MPI-like job's ranks: nothing of the part outlives a ``--no-adopt``
    agent (the scheduler requeues its parts at once, and a part left running would
    run twice)."""
    topics = Topics(f"kill-{uuid4().hex[:6]}/v1")
    settings = MqttSettings(mosquitto.host, mosquitto.port)
    agent = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodeagent",
        f"--host={mosquitto.host}",
        f"--port={mosquitto.port}",
        f"--root={topics.root}",
        "--name=k1",
        "--cpus=1",
        "--heartbeat=0.2",
        "--no-adopt",
        f"--state-dir={tmp_path / 'state'}",
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with MqttBus(settings, f"sched-{uuid4().hex[:6]}") as bus, asyncio.TaskGroup() as tg:
            await bus.subscribe(topics.agent_state("k1"))
            await bus.subscribe(topics.agent_events("k1"))
            scheduler = Scheduler(bus, "k1", topics)
            reader = tg.create_task(scheduler.read(), name="test-kill-scheduler")
            await scheduler.expect(AgentOnline)
            mpi = MpiSpec(iterations=100_000, compute=0.01) if workload == "mpi" else None
            procs = 2 if workload == "mpi" else 1
            job = spec(
                "victim",
                procs,
                work=3600.0,
                walltime=7200.0,
                workload=workload,  # type: ignore[arg-type]
                mpi=mpi,
            )
            await scheduler.send(StartPart(job=job, cpus=1, job_cpus=1))
            started = await scheduler.expect(PartStarted)
            await scheduler.expect(PartProgress)  # the job process is up
            launchers = [
                pid
                for pid in children(agent.pid)
                if MODULE.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
            ]
            assert len(launchers) == 1
            assert started.pid in children(launchers[0])
            ranks = await ranks_of(started.pid, procs if workload == "mpi" else 0)
            agent.send_signal(signal.SIGKILL)
            assert await agent.wait() == -signal.SIGKILL
            await gone(launchers[0])
            await gone(started.pid)
            for rank in ranks:
                await gone(rank)
            reader.cancel()
    finally:
        if agent.returncode is None:
            agent.kill()
            await agent.wait()
