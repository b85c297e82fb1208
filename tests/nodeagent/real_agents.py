"""A real ``python -m nodeagent`` on the session's Mosquitto, and a fake scheduler watching it.

Shared by the tests of what survives an agent: adoption after a SIGKILL, the
lease, and polite stops. Every wait is on a signal: a message, a pidfd, a file.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from uuid import uuid4

from broker.messages import MpiSpec, StartPart
from broker.mqtt import MqttBus, MqttSettings
from broker.topics import Topics
from tests.builders import spec
from tests.integration.conftest import BrokerEndpoint
from tests.nodeagent.harness import Scheduler

ROOT = Path(__file__).resolve().parents[2]


async def agent_process(
    endpoint: BrokerEndpoint, topics: Topics, state: Path, log: Path, *extra: str
) -> asyncio.subprocess.Process:
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "nodeagent",
            f"--host={endpoint.host}",
            f"--port={endpoint.port}",
            f"--root={topics.root}",
            "--name=a1",
            "--cpus=3",
            "--heartbeat=0.2",
            f"--state-dir={state}",
            # Long enough for a restart on a loaded machine (the last --lease wins).
            "--lease=20",
            *extra,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )


async def kill(agent: asyncio.subprocess.Process) -> None:
    if agent.returncode is None:
        agent.send_signal(signal.SIGKILL)
    await agent.wait()


@asynccontextmanager
async def watching(endpoint: BrokerEndpoint, topics: Topics) -> AsyncIterator[Scheduler]:
    settings = MqttSettings(endpoint.host, endpoint.port)
    async with MqttBus(settings, f"sched-{uuid4().hex[:6]}") as bus, asyncio.TaskGroup() as tg:
        await bus.subscribe(topics.agent_state("a1"))
        await bus.subscribe(topics.agent_events("a1"))
        scheduler = Scheduler(bus, "a1", topics)
        reader = tg.create_task(scheduler.read(), name="test-adopt-scheduler")
        try:
            yield scheduler
        finally:
            reader.cancel()


def sleep_part(job_id: str, work: float) -> StartPart:
    job = spec(job_id, work=work, walltime=1e6)
    return StartPart(job=job, cpus=1, job_cpus=1, time_scale=1.0)


def mpi_part(job_id: str, iterations: int) -> StartPart:
    job = spec(
        job_id,
        2,
        work=1.0,
        walltime=1e6,
        workload="mpi",
        mpi=MpiSpec(iterations=iterations, compute=0.02),
    )
    return StartPart(job=job, cpus=2, job_cpus=2, time_scale=1.0)


async def alive(pid: int) -> bool:
    fd = os.pidfd_open(pid)
    try:
        # A pidfd is readable once its process has exited.
        readable, _, _ = select.select([fd], [], [], 0)
        return not readable
    finally:
        os.close(fd)
