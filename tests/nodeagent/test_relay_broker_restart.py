"""Relayed job processes across a broker SIGKILL and restart: none lost, none restarted.

A real Mosquitto of this test's own, the agent wired as ``python -m nodeagent``
wires it (its bus, a ``Relay`` on it, a ``ForkServer``, ``RelaySpawn``), and a
fake scheduler on its own connection. Four parts run long work; the broker is
killed and restarted; once the agent has announced itself again (so both
connections are back), a resize speeds the jobs up so they finish, which
reaches them only through the relay's resubscribed filters. Every job must
finish ``done`` in the process that started it.
"""

from __future__ import annotations

import asyncio
from uuid import uuid4

import pytest

from broker.messages import (
    AgentOnline,
    PartFinished,
    PartProgress,
    PartStarted,
    ResizePart,
    StartPart,
)
from broker.mqtt import MqttBus, MqttSettings
from broker.topics import Topics
from model.machine import Machine
from nodeagent.agent.node_agent import AgentSettings, NodeAgent, agent_will
from nodeagent.launch.forkserver import ForkServer
from nodeagent.launch.relay import Relay, RelaySpawn
from tests.brokers import MosquittoProcess
from tests.builders import spec
from tests.nodeagent.harness import Scheduler

pytestmark = pytest.mark.integration

JOBS = 4


async def test_relayed_jobs_survive_a_broker_restart(private_mosquitto: MosquittoProcess) -> None:
    broker = private_mosquitto
    topics = Topics(f"rr-{uuid4().hex[:6]}/v1")
    settings = MqttSettings(broker.host, broker.port)
    machine = Machine(id="n1", cpus=JOBS, speed=1.0)
    agents: list[NodeAgent] = []

    async def reconnected() -> None:
        for agent in agents:
            await agent.reconnected()

    will = agent_will(topics, "n1", "inc-1")
    async with (
        MqttBus(settings, f"sched-{uuid4().hex[:6]}") as sched_bus,
        MqttBus(settings, "agent-n1", will=will, on_reconnect=reconnected) as bus,
        ForkServer() as launcher,
        asyncio.TaskGroup() as tg,
    ):
        await sched_bus.subscribe(topics.agent_state("n1"))
        await sched_bus.subscribe(topics.agent_events("n1"))
        scheduler = Scheduler(sched_bus, "n1", topics)
        reader = tg.create_task(scheduler.read(), name="test-restart-scheduler")
        relay = Relay(bus, topics, "n1")
        pump = tg.create_task(relay.pump(), name="test-restart-relay")
        agent = NodeAgent(
            bus=relay.agent_bus,
            topics=topics,
            machine=machine,
            spawn=RelaySpawn(launcher, relay),
            settings=AgentSettings(heartbeat_interval=0.2, walltime_grace=5.0),
            incarnation="inc-1",
        )
        agents.append(agent)
        running = tg.create_task(agent.run(), name="test-restart-agent")
        await scheduler.expect(AgentOnline)
        ids = [f"j{i}" for i in range(JOBS)]
        for job_id in ids:
            job = spec(job_id, work=3600.0, walltime=7200.0)
            await scheduler.send(StartPart(job=job, cpus=1))
        for job_id in ids:  # each process is up and subscribed (its first report)
            await scheduler.expect(PartProgress, lambda m, j=job_id: m.job_id == j)  # type: ignore[misc]

        broker.kill()
        assert await asyncio.to_thread(broker.start)
        await scheduler.expect(
            AgentOnline, lambda _: len(scheduler.all(AgentOnline)) >= 2
        )  # the agent announced itself again, and the scheduler's connection heard it
        for job_id in ids:
            await scheduler.send(ResizePart(job_id=job_id, cpus=1, pace=10_000.0))
        finished = {
            job_id: await scheduler.expect(PartFinished, lambda m, j=job_id: m.job_id == j)  # type: ignore[misc]
            for job_id in ids
        }
        lost = [j for j, f in finished.items() if f.reason != "done" or f.exit_code != 0]
        assert lost == []
        started = scheduler.all(PartStarted)
        assert sorted(s.job_id for s in started) == ids  # each started once: none restarted
        assert relay.stats.forged_publish == relay.stats.forged_subscribe == 0
        agent.stop()
        await running
        pump.cancel()
        reader.cancel()
