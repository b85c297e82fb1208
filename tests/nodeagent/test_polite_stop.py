"""A stopped agent leaves its parts to its next incarnation; a second agent for a name
that is online is refused and disturbs nothing.

Real ``python -m nodeagent`` processes on the session's Mosquitto, real job
processes. Every wait is on a signal (a message, a process's exit, a pidfd);
the one bounded wait is the name check's own patience, which the test that
needs it shortens with a short heartbeat.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from uuid import uuid4

import pytest

from broker.codec import encode
from broker.messages import (
    AgentOffline,
    AgentOnline,
    Heartbeat,
    MachineSpec,
    PartFinished,
    PartProgress,
    PartStarted,
)
from broker.mqtt import MqttBus, MqttSettings
from broker.topics import Topics
from tests.integration.conftest import BrokerEndpoint
from tests.nodeagent.harness import HANG
from tests.nodeagent.test_adoption import _agent, _alive, _kill, _sleep_job, _watching

pytestmark = pytest.mark.integration


async def _exit(agent: asyncio.subprocess.Process) -> int:
    async with asyncio.timeout(HANG):
        return await agent.wait()


async def test_sigterm_leaves_the_parts_for_the_next_incarnation(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    topics = Topics(f"stop-{uuid4().hex[:6]}/v1")
    state, log = tmp_path / "state", tmp_path / "agent.log"
    async with _watching(mosquitto, topics) as scheduler:
        agent = await _agent(mosquitto, topics, state, log)
        try:
            first = await scheduler.expect(AgentOnline)
            await scheduler.send(_sleep_job("s", work=6.0))
            started = await scheduler.expect(PartStarted)
            await scheduler.expect(PartProgress)
            agent.send_signal(signal.SIGTERM)
            assert await _exit(agent) == 0
            stopping = await scheduler.expect(AgentOffline)
            assert (stopping.reason, stopping.incarnation) == ("stopping", first.incarnation)
            # Nothing ended: no report, the process alive, the record says how it stopped.
            assert scheduler.all(PartFinished) == []
            assert await _alive(started.pid)
            record = json.loads((state / "incarnation.json").read_text())
            assert (record["incarnation"], record["stopped"]) == (first.incarnation, "leave")
            agent = await _agent(mosquitto, topics, state, log)
            second = await scheduler.expect(
                AgentOnline, lambda o: o.incarnation != first.incarnation
            )
            assert [(p.job_id, p.attempt) for p in second.running] == [("s", 1)]
            done = await scheduler.expect(PartFinished)
            assert (done.job_id, done.reason, done.exit_code) == ("s", "done", 0)
            assert [p.pid for p in scheduler.all(PartStarted)] == [started.pid]
        finally:
            await _kill(agent)


async def test_a_part_dead_after_a_stop_is_reported_stopped_by_the_successor(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    topics = Topics(f"stop-{uuid4().hex[:6]}/v1")
    state, log = tmp_path / "state", tmp_path / "agent.log"
    async with _watching(mosquitto, topics) as scheduler:
        agent = await _agent(mosquitto, topics, state, log)
        try:
            await scheduler.expect(AgentOnline)
            await scheduler.send(_sleep_job("s", work=1e5))
            started = await scheduler.expect(PartStarted)
            agent.send_signal(signal.SIGTERM)
            assert await _exit(agent) == 0
            # What an operator's long stop does to it: its lease would end it; here a kill.
            os.kill(started.pid, signal.SIGKILL)
            while await _alive(started.pid):
                await asyncio.sleep(0.05)
            agent = await _agent(mosquitto, topics, state, log)
            lost = await scheduler.expect(PartFinished)
            # Its predecessor was stopped by its operator: not the job's doing.
            assert (lost.job_id, lost.reason) == ("s", "stopped")
            # A restarted scheduler sends that attempt again (a start in flight, to it):
            # reported ended, it is not started again; the next start is.
            await scheduler.send(_sleep_job("s", work=1e5))
            await scheduler.send(_sleep_job("t", work=1.0))
            await scheduler.expect(PartStarted, lambda p: p.job_id == "t")
            assert [p.job_id for p in scheduler.all(PartStarted)] == ["s", "t"]
        finally:
            await _kill(agent)


async def test_drain_on_stop_runs_the_part_to_its_end_and_says_goodbye(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    topics = Topics(f"stop-{uuid4().hex[:6]}/v1")
    state, log = tmp_path / "state", tmp_path / "agent.log"
    async with _watching(mosquitto, topics) as scheduler:
        agent = await _agent(mosquitto, topics, state, log, "--drain-on-stop")
        try:
            await scheduler.expect(AgentOnline)
            await scheduler.send(_sleep_job("d", work=2.0))
            await scheduler.expect(PartProgress)
            agent.send_signal(signal.SIGTERM)
            draining = await scheduler.expect(AgentOnline, lambda o: o.draining)
            assert [p.job_id for p in draining.running] == ["d"]
            assert await _exit(agent) == 0
            done = await scheduler.expect(PartFinished)
            assert (done.reason, done.exit_code) == ("done", 0)
            assert (await scheduler.expect(AgentOffline)).reason == "goodbye"
        finally:
            await _kill(agent)


async def test_a_second_agent_for_an_online_name_is_refused_and_disturbs_nothing(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    topics = Topics(f"dup-{uuid4().hex[:6]}/v1")
    log = tmp_path / "agent.log"
    async with _watching(mosquitto, topics) as scheduler:
        agent = await _agent(mosquitto, topics, tmp_path / "one", log)
        other: asyncio.subprocess.Process | None = None
        try:
            first = await scheduler.expect(AgentOnline)
            await scheduler.send(_sleep_job("s", work=1e5))
            started = await scheduler.expect(PartStarted)
            # The same name and broker, its own state directory: the same client id
            # would take the running agent's connection over at the broker.
            other_log = tmp_path / "other.log"
            other = await _agent(mosquitto, topics, tmp_path / "two", other_log)
            assert await _exit(other) == 2
            errors = [line for line in other_log.read_text().splitlines() if "ERROR" in line]
            assert len(errors) == 1, errors
            assert "refused" in errors[0]
            assert "online already" in errors[0]
            # Untouched: no second registration, no will, no reconnection, its part on.
            assert [o.incarnation for o in scheduler.all(AgentOnline)] == [first.incarnation]
            assert scheduler.all(AgentOffline) == []
            assert "lost its connection" not in log.read_text()
            beats = len(scheduler.all(Heartbeat))
            await scheduler.expect(Heartbeat, lambda _: len(scheduler.all(Heartbeat)) > beats)
            assert await _alive(started.pid)
            assert scheduler.all(PartFinished) == []
        finally:
            await _kill(agent)
            if other is not None:
                await _kill(other)


async def test_a_successor_whose_predecessors_will_is_late_takes_over(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    # A host that died: its agent's registration is still retained, no will yet. The
    # state directory's record names that incarnation: the new agent is its successor.
    topics = Topics(f"dup-{uuid4().hex[:6]}/v1")
    state, log = tmp_path / "state", tmp_path / "agent.log"
    state.mkdir(mode=0o700)
    (state / "incarnation.json").write_text(
        json.dumps({"incarnation": "dead-host", "pid": 1, "started": 0.0, "stopped": None})
    )
    settings = MqttSettings(mosquitto.host, mosquitto.port)
    ghost = AgentOnline(
        machine=MachineSpec(id="a1", cpus=3), incarnation="dead-host", running=(), lease=600.0
    )
    async with MqttBus(settings, f"ghost-{uuid4().hex[:6]}") as bus:
        await bus.publish(topics.agent_state("a1"), encode(ghost), retain=True)
    async with _watching(mosquitto, topics) as scheduler:
        agent = await _agent(mosquitto, topics, state, log)
        try:
            # At once, not after the ghost's 600 s lease.
            online = await scheduler.expect(AgentOnline, lambda o: o.incarnation != "dead-host")
            assert online.machine.id == "a1"
        finally:
            await _kill(agent)


async def test_a_silent_holder_of_the_name_is_taken_over_after_its_patience(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    # Retained but never heard, and not this directory's predecessor: the new agent waits
    # for a heartbeat (up to its patience: lease 0, so 2 heartbeats or 4 s), then goes on.
    topics = Topics(f"dup-{uuid4().hex[:6]}/v1")
    settings = MqttSettings(mosquitto.host, mosquitto.port)
    ghost = AgentOnline(machine=MachineSpec(id="a1", cpus=3), incarnation="stranger", running=())
    async with MqttBus(settings, f"ghost-{uuid4().hex[:6]}") as bus:
        await bus.publish(topics.agent_state("a1"), encode(ghost), retain=True)
    async with _watching(mosquitto, topics) as scheduler:
        agent = await _agent(mosquitto, topics, tmp_path / "state", tmp_path / "agent.log")
        try:
            await scheduler.expect(AgentOnline, lambda o: o.incarnation != "stranger")
            assert "was not heard" in (tmp_path / "agent.log").read_text()
        finally:
            await _kill(agent)
