"""The node agent and its job processes on a real Mosquitto.

Each test uses its own topic root: the broker lives for the whole session and
keeps retained messages.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from broker.local import free_port
from broker.messages import (
    AgentOffline,
    AgentOnline,
    CancelPart,
    Heartbeat,
    MachineSpec,
    PartFinished,
    PartProgress,
    PartStarted,
    ResizePart,
)
from broker.mqtt import MqttBus, MqttSettings
from broker.topics import Topics
from model.machine import Machine
from nodeagent.agent.node_agent import AgentSettings, NodeAgent, agent_will
from nodeagent.launch.contract import EXIT_CANCELLED
from nodeagent.launch.spawn import MqttSpawn
from tests.builders import spec
from tests.integration.conftest import BrokerEndpoint
from tests.nodeagent.harness import HANG, UNLIMITED, Scheduler, gone, start

pytestmark = pytest.mark.integration


@asynccontextmanager
async def watching(
    endpoint: BrokerEndpoint, topics: Topics, agent_id: str
) -> AsyncIterator[Scheduler]:
    settings = MqttSettings(host=endpoint.host, port=endpoint.port)
    async with MqttBus(settings, f"sched-{uuid.uuid4().hex[:8]}") as bus:
        await bus.subscribe(topics.agent_state(agent_id))
        await bus.subscribe(topics.agent_events(agent_id))
        scheduler = Scheduler(bus, agent_id, topics)
        async with asyncio.TaskGroup() as tg:
            reader = tg.create_task(scheduler.read(), name="test-mqtt-scheduler")
            try:
                yield scheduler
            finally:
                reader.cancel()


async def test_agent_runs_mqtt_job_processes(mosquitto: BrokerEndpoint) -> None:
    topics = Topics(f"it-{uuid.uuid4().hex[:8]}/v1")
    settings = MqttSettings(host=mosquitto.host, port=mosquitto.port)
    machine = Machine(id="m1", cpus=4, speed=2.0)
    async with watching(mosquitto, topics, "m1") as scheduler:
        will = agent_will(topics, "m1", "inc-1")
        async with MqttBus(settings, "agent-m1", will=will) as bus:
            agent = NodeAgent(
                bus=bus,
                topics=topics,
                machine=machine,
                spawn=MqttSpawn(mosquitto.host, mosquitto.port),
                settings=AgentSettings(heartbeat_interval=0.1, walltime_grace=1.0),
                incarnation="inc-1",
            )
            async with asyncio.TaskGroup() as tg:
                running = tg.create_task(agent.run(), name="test-agent-m1")
                online = await scheduler.expect(AgentOnline)
                assert online.machine == MachineSpec(id="m1", cpus=4, speed=2.0)
                await scheduler.expect(Heartbeat)

                # A part that completes: 20 units at pace 2 and 100x take 0.1 s.
                await scheduler.send(
                    start(spec("ok", 2, work=20.0, walltime=UNLIMITED), pace=2.0, time_scale=100.0)
                )
                started = await scheduler.expect(PartStarted)
                done = await scheduler.expect(PartFinished)
                assert (done.reason, done.exit_code) == ("done", 0)
                assert done.at >= started.at

                # A part resized, then cancelled over MQTT. Its work would take a day:
                # it is still running when the commands arrive, however loaded the machine.
                job = spec("long", 2, work=1e6, walltime=UNLIMITED, malleable=True)
                await scheduler.send(start(job, cpus=2, pace=2.0, time_scale=1.0))
                first = await scheduler.expect(PartProgress, lambda p: p.job_id == "long")
                # Shrink it to MPL 2: the job process applies it (over the retained control topic).
                await scheduler.send(ResizePart(job_id="long", cpus=1, pace=2.0))
                resized = await scheduler.expect(PartProgress, lambda p: p.rate == 1.0)
                assert first.rate == 2.0
                assert resized.done < 1e6
                await scheduler.send(CancelPart(job_id="long"))
                cancelled = await scheduler.expect(PartFinished, lambda f: f.job_id == "long")
                assert (cancelled.reason, cancelled.exit_code) == ("cancelled", EXIT_CANCELLED)

                agent.stop()
            assert running.done()
        # Stopped by its operator (no state directory: its parts die with it): it will
        # be back, and says so.
        stopping = await scheduler.expect(AgentOffline)
        assert stopping == AgentOffline(agent_id="m1", incarnation="inc-1", reason="stopping")


async def _start_agent_process(
    endpoint: BrokerEndpoint,
    topics: Topics,
    name: str,
    log: Path,
    metrics_port: int,
    *extra: str,
) -> asyncio.subprocess.Process:
    with log.open("wb") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "nodeagent",
            f"--host={endpoint.host}",
            f"--port={endpoint.port}",
            f"--name={name}",
            "--cpus=2",
            "--speed=1.5",
            "--labels=gpu,big",
            f"--root={topics.root}",
            f"--metrics-port={metrics_port}",
            "--metrics-addr=127.0.0.1",
            "--heartbeat=0.2",
            f"--state-dir={log.parent / 'state'}",
            *extra,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body: bytes = response.read()
    return body.decode()


async def test_cli_agent_without_adoption_ends_its_parts_stopped_on_sigterm(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    # An agent whose parts cannot outlive it (--no-adopt) ends them on SIGTERM and says
    # why: a stop its operator asked for, which the scheduler requeues uncharged. (The
    # default, leaving them to the next incarnation, is tests/nodeagent/test_polite_stop.py's.)
    topics = Topics(f"it-{uuid.uuid4().hex[:8]}/v1")
    port = free_port()
    async with watching(mosquitto, topics, "cli1") as scheduler:
        agent = await _start_agent_process(
            mosquitto, topics, "cli1", tmp_path / "a.log", port, "--no-adopt"
        )
        try:
            online = await scheduler.expect(AgentOnline)
            assert online.machine == MachineSpec(
                id="cli1", cpus=2, speed=1.5, labels=("gpu", "big")
            )
            await scheduler.send(
                start(spec("j", 2, work=10.0, walltime=UNLIMITED), time_scale=100.0)
            )
            finished = await scheduler.expect(PartFinished)
            assert finished.reason == "done"
            metrics = await asyncio.to_thread(_scrape, port)
            assert 'accordion_agent_parts_finished_total{agent="cli1",reason="done"} 1.0' in metrics
            await scheduler.send(
                start(spec("long", 2, work=1e6, walltime=UNLIMITED), time_scale=1.0)
            )
            await scheduler.expect(PartProgress, lambda p: p.job_id == "long")
            agent.send_signal(signal.SIGTERM)
            async with asyncio.timeout(HANG):
                assert await agent.wait() == 0
        finally:
            if agent.returncode is None:
                agent.kill()
                await agent.wait()
        stopped = await scheduler.expect(PartFinished, lambda f: f.job_id == "long")
        assert stopped.reason == "stopped"
        stopping = await scheduler.expect(AgentOffline)
        assert (stopping.reason, stopping.incarnation) == ("stopping", online.incarnation)


async def test_killed_cli_agent_is_announced_by_its_will(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    topics = Topics(f"it-{uuid.uuid4().hex[:8]}/v1")
    async with watching(mosquitto, topics, "cli2") as scheduler:
        agent = await _start_agent_process(
            mosquitto, topics, "cli2", tmp_path / "a.log", free_port()
        )
        try:
            online = await scheduler.expect(AgentOnline)
            await scheduler.send(
                start(spec("orphan", 2, work=1e6, walltime=UNLIMITED), time_scale=1.0)
            )
            started = await scheduler.expect(PartStarted)
            await scheduler.expect(PartProgress)
            agent.kill()
            await agent.wait()
        finally:
            if agent.returncode is None:
                agent.kill()
                await agent.wait()
        offline = await scheduler.expect(AgentOffline)
        assert offline == AgentOffline(
            agent_id="cli2", incarnation=online.incarnation, reason="lost"
        )
        # The job process outlives its agent only within its lease (to be adopted by
        # a next incarnation, which never comes here): it stops, and runs on unseen
        # no longer than that.
        await gone(started.pid)
