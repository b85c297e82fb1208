"""``python -m scheduler``: options, refusals, a real run on Mosquitto (killed, restarted)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from broker.bus import Will
from broker.codec import decode, encode
from broker.local import free_port
from broker.messages import (
    AgentOffline,
    AgentOnline,
    AnyMessage,
    Heartbeat,
    JobEvent,
    MachineSpec,
    PartFinished,
    PartStarted,
    RunningPart,
    StartPart,
    StatusReply,
    StatusRequest,
    SubmitJobs,
    SubmitReply,
)
from broker.mqtt import MqttBus, MqttSettings
from broker.topics import DEFAULT_ROOT, Topics
from scheduler.__main__ import parse_args, serve_scheduler
from scheduler.runtime.journal import Journal
from tests.builders import spec
from tests.integration.conftest import BrokerEndpoint
from tests.scheduler.runtime.harness import served_totals

ROOT = Path(__file__).resolve().parents[3]
TOPICS = Topics("itest/v1")


def test_options_and_their_defaults() -> None:
    args = parse_args(["--host", "broker", "--time-scale", "60"])
    assert (args.host, args.port, args.policy, args.placement, args.time_scale) == (
        "broker",
        1883,
        "easy",
        "fastest",
        60.0,
    )
    assert (args.metrics_port, args.root, args.job_events) == (None, DEFAULT_ROOT, "lifecycle")
    assert parse_args([]).time_scale is None  # the journal's, else 1


@pytest.mark.parametrize("scale", ["0", "-2", "2e6"])
def test_a_bad_time_scale_is_refused(scale: str) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--time-scale", scale])


async def test_an_unknown_policy_exits_2(tmp_path: Path) -> None:
    args = parse_args(["--policy", "nope", "--journal", str(tmp_path / "j.sqlite")])
    assert await serve_scheduler(args) == 2


async def test_a_journal_of_another_time_scale_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        journal.ensure_meta(epoch=0.0, time_scale=10.0, policy="easy")
    args = parse_args(["--journal", str(path), "--time-scale", "20"])
    assert await serve_scheduler(args) == 2


async def test_an_unreachable_broker_exits_1_and_keeps_the_journal_scale(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        journal.ensure_meta(epoch=0.0, time_scale=25.0, policy="easy")
    args = parse_args(["--host", "127.0.0.1", "--port", str(free_port()), "--journal", str(path)])
    assert await serve_scheduler(args) == 1
    with Journal(path) as journal:
        meta = journal.meta()
    assert meta is not None
    assert meta.time_scale == 25.0


class Peer:
    """A client or agent on the real broker, recording what it receives."""

    def __init__(self, bus: MqttBus) -> None:
        self.bus = bus
        self.seen: list[AnyMessage] = []
        self.arrived = asyncio.Event()

    async def read(self) -> None:
        async for d in self.bus.deliveries():
            if d.payload:
                self.seen.append(decode(d.payload))
                self.arrived.set()

    async def expect(self, kind: type, where: object = None, timeout: float = 15.0) -> AnyMessage:
        async with asyncio.timeout(timeout):
            while True:
                for m in self.seen:
                    if isinstance(m, kind) and (where is None or where(m)):  # type: ignore[operator]
                        return m
                self.arrived.clear()
                await self.arrived.wait()


@asynccontextmanager
async def peer(
    endpoint: BrokerEndpoint, client_id: str, *topics: str, will: Will | None = None
) -> AsyncIterator[Peer]:
    bus = MqttBus(MqttSettings(host=endpoint.host, port=endpoint.port), client_id, will=will)
    async with bus:
        for topic in topics:
            await bus.subscribe(topic)
        p = Peer(bus)
        task = asyncio.create_task(p.read(), name=f"test-peer-{client_id}")
        try:
            yield p
        finally:
            task.cancel()


async def heartbeats(agent: Peer, running: dict[str, int]) -> None:
    """What a live agent does every 2 s (faster here), listing the parts it runs
    (job id -> CPUs)."""
    seq = 0
    while True:
        seq += 1
        parts = tuple(RunningPart(job_id=j, cpus=c, started=0.0) for j, c in running.items())
        beat = Heartbeat(agent_id="n1", seq=seq, running=parts)
        await agent.bus.publish(TOPICS.agent_events("n1"), encode(beat))
        await asyncio.sleep(0.2)


async def start_scheduler(
    endpoint: BrokerEndpoint, journal: Path, metrics_port: int
) -> asyncio.subprocess.Process:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "scheduler",
        "--host",
        endpoint.host,
        "--port",
        str(endpoint.port),
        "--root",
        TOPICS.root,
        "--journal",
        str(journal),
        "--metrics-port",
        str(metrics_port),
        "--metrics-addr",
        "127.0.0.1",
        "--time-scale",
        "50",
        "--policy",
        "fcfs",
        env=env,
    )


async def status(client: Peer, rid: str, timeout: float = 1.0) -> StatusReply:
    await client.bus.publish(TOPICS.requests, encode(StatusRequest(request_id=rid, reply_to="cli")))
    reply = await client.expect(StatusReply, lambda r: r.request_id == rid, timeout)
    assert isinstance(reply, StatusReply)
    return reply


async def answering(client: Peer, timeout: float = 20.0) -> StatusReply:
    """The first status reply of a scheduler that may still be connecting (asks until then)."""
    async with asyncio.timeout(timeout):
        n = 0
        while True:
            n += 1
            try:
                return await status(client, f"ping-{n}-{len(client.seen)}")
            except TimeoutError:
                continue


async def test_a_killed_scheduler_process_serves_the_same_totals_again(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    journal = tmp_path / "j.sqlite"
    port = free_port()
    proc = await start_scheduler(mosquitto, journal, port)
    try:
        async with (
            peer(mosquitto, "cli", TOPICS.replies("cli")) as client,
            peer(mosquitto, "agent-n1", TOPICS.agent_commands("n1")) as agent,
        ):
            online = AgentOnline(machine=MachineSpec(id="n1", cpus=2), incarnation="i1", running=())
            await agent.bus.publish(TOPICS.agent_state("n1"), encode(online), retain=True)
            await answering(client)
            request = SubmitJobs(
                request_id="s1", reply_to="cli", jobs=(spec("a", 1), spec("wide", 3))
            )
            await client.bus.publish(TOPICS.requests, encode(request))
            await client.expect(SubmitReply)
            await client.bus.publish(TOPICS.requests, encode(request))  # a duplicate, a rejection
            await client.expect(SubmitReply, lambda r: r.results[0].duplicate)
            await client.bus.publish(TOPICS.requests, b"\xc1")
            await client.bus.publish(TOPICS.agent_state("n1"), encode(StatusRequest()))
            # The agent's Last Will, as the broker would publish it.
            will = AgentOffline(agent_id="n1", incarnation="i1", reason="lost")
            await agent.bus.publish(TOPICS.agent_state("n1"), encode(will), retain=True)
            # Handled (and committed) before this reply is published: MQTT keeps order.
            await status(client, "sync", timeout=15.0)
            before = served_totals(port)
            assert (
                before[("accordion_scheduler_bad_messages_total", "[('reason', 'not_msgpack')]")]
                == 1
            )
            assert (
                before[("accordion_scheduler_bad_messages_total", "[('reason', 'unexpected')]")]
                == 1
            )
            assert before[("accordion_scheduler_rejections_total", "[('reason', 'too_wide')]")] == 2
            assert (
                before[("accordion_scheduler_submissions_total", "[('result', 'duplicate')]")] == 1
            )
            assert before[("accordion_scheduler_agents_lost_total", "[('reason', 'will')]")] == 1

            proc.send_signal(signal.SIGKILL)
            assert await proc.wait() == -signal.SIGKILL
            proc = await start_scheduler(mosquitto, journal, port)
            await answering(client)
            assert served_totals(port) == before
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 15) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_the_scheduler_process_on_mosquitto(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    journal = tmp_path / "j.sqlite"
    port = free_port()
    will = Will(
        TOPICS.agent_state("n1"),
        encode(AgentOffline(agent_id="n1", incarnation="i1", reason="lost")),
    )
    proc = await start_scheduler(mosquitto, journal, port)
    beating: asyncio.Task[None] | None = None
    try:
        async with (
            peer(mosquitto, "cli", TOPICS.replies("cli"), TOPICS.events) as client,
            peer(mosquitto, "agent-n1", TOPICS.agent_commands("n1"), will=will) as agent,
        ):
            online = AgentOnline(machine=MachineSpec(id="n1", cpus=2), incarnation="i1", running=())
            await agent.bus.publish(TOPICS.agent_state("n1"), encode(online), retain=True)
            running: dict[str, int] = {}
            beating = asyncio.create_task(heartbeats(agent, running), name="test-heartbeats")
            reply = await answering(client)
            assert [m.id for m in reply.machines] == ["n1"]

            request = SubmitJobs(
                request_id="s1", reply_to="cli", jobs=(spec("a", 2), spec("b", 2), spec("c", 1))
            )
            await client.bus.publish(TOPICS.requests, encode(request))
            submitted = await client.expect(SubmitReply)
            assert isinstance(submitted, SubmitReply)
            assert all(r.accepted for r in submitted.results)
            start = await agent.expect(StartPart)
            assert isinstance(start, StartPart)
            assert start.job is not None
            assert (start.job.id, start.time_scale) == ("a", 50.0)
            await agent.bus.publish(
                TOPICS.agent_events("n1"),
                encode(PartStarted(job_id="a", agent_id="n1", pid=1, at=0.0)),
            )
            running["a"] = 2

            # SIGKILL right after the acknowledgements: nothing accepted is lost.
            proc.send_signal(signal.SIGKILL)
            assert await proc.wait() == -signal.SIGKILL
            proc = await start_scheduler(mosquitto, journal, port)
            # The running part is confirmed by the agent's heartbeat.
            async with asyncio.timeout(20):
                while True:
                    try:
                        after = await status(client, f"after-{len(client.seen)}")
                    except TimeoutError:
                        continue
                    if after.running and after.running[0].state == "running":
                        break
                    await asyncio.sleep(0.1)
            assert [j.id for j in after.running] == ["a"]
            assert [j.id for j in after.queue] == ["b", "c"]

            del running["a"]
            await agent.bus.publish(
                TOPICS.agent_events("n1"),
                encode(PartFinished(job_id="a", agent_id="n1", exit_code=0, reason="done", at=0.0)),
            )
            await client.expect(JobEvent, lambda e: e.job_id == "a" and e.event == "finished")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
            assert 'accordion_scheduler_jobs_finished_total{state="finished"} 1.0' in text
            assert "accordion_scheduler_time_scale 50.0" in text

            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 15) == 0
    finally:
        if beating is not None:
            beating.cancel()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_bad_limits_file_exits_2(tmp_path: Path) -> None:
    limits = tmp_path / "limits.toml"
    limits.write_text("[limits]\nmax_queued_per_user = -1\n")
    args = parse_args(["--limits", str(limits), "--journal", str(tmp_path / "j.sqlite")])
    assert await serve_scheduler(args) == 2
    args = parse_args(["--associations", str(tmp_path / "none.toml")])
    assert await serve_scheduler(args) == 2
    assert parse_args(["--max-user-cpus", "8"]).max_user_cpus == 8
