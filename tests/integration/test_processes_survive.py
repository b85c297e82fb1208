"""Real processes on a real Mosquitto: poison payloads and a broker restart end none of them.

The scheduler (``python -m scheduler``), an agent (``python -m nodeagent``)
and the job process it starts run as OS processes on a Mosquitto of this
test's own (it is killed and restarted). Poison payloads (invalid UTF-8 in a
msgpack string) and a few hundred fuzzed payloads that do not
decode go to every topic each of them reads; then the broker is SIGKILLed and restarted on the
same port. Every process must still be alive, and the job must finish once,
in the process that started it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from uuid import uuid4

import pytest

from broker.codec import WireError, decode, encode
from broker.messages import JobEvent, StatusReply, StatusRequest, SubmitJobs, SubmitReply
from broker.mqtt import MqttBus, MqttSettings
from broker.topics import Topics
from tests.broker.scenarios import Inbox
from tests.brokers import MosquittoProcess
from tests.builders import spec
from tests.fuzz.corpus import BY_NAME, payloads

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def child(*argv: str, log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("w") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(15):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()


def _decodes(payload: bytes) -> bool:
    try:
        decode(payload)
    except WireError:
        return False
    return True


def children_of(pid: int) -> list[int]:
    """Every descendant of ``pid``: the agent's job processes are its launcher's children."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    children = [int(p) for p in out.stdout.split()]
    return sorted(children + [d for c in children for d in children_of(c)])


async def ask_status(bus: MqttBus, box: Inbox, topics: Topics, n: int) -> StatusReply:
    """A StatusReply, asking again until one comes (the scheduler may be connecting)."""
    while True:
        n += 1
        rid = f"st{n}"
        await bus.publish(topics.requests, encode(StatusRequest(request_id=rid, reply_to="cli")))
        try:
            async with asyncio.timeout(1.0):
                while True:
                    message = decode((await box.next(timeout=1.0)).payload)
                    if isinstance(message, StatusReply) and message.request_id == rid:
                        return message
        except TimeoutError:
            continue


async def test_poison_and_a_broker_restart_end_no_process(
    private_mosquitto: MosquittoProcess, tmp_path: Path
) -> None:
    broker = private_mosquitto
    topics = Topics(f"surv-{uuid4().hex[:6]}/v1")
    common = ["--host", broker.host, "--port", str(broker.port), "--root", topics.root]
    settings = MqttSettings(broker.host, broker.port)
    async with (
        child(
            "-m", "scheduler", *common, "--journal", str(tmp_path / "j.sqlite"),
            "--time-scale", "10", "--policy", "fcfs", "--heartbeat-interval", "2",
            log=tmp_path / "scheduler.log",
        ) as scheduler,
        child(
            "-m", "nodeagent", *common, "--name", "n1", "--cpus", "2", "--heartbeat", "2",
            "--state-dir", str(tmp_path / "state"),
            log=tmp_path / "agent.log",
        ) as agent,
        MqttBus(settings, "cli") as cli,
        Inbox(cli) as box,
    ):  # fmt: skip
        await cli.subscribe(topics.replies("cli"))
        await cli.subscribe(topics.events)
        async with asyncio.timeout(30):
            while not (await ask_status(cli, box, topics, 0)).machines:
                pass
        job = spec("long", walltime=1000.0, work=60.0)  # 6 s at scale 10
        await cli.publish(
            topics.requests, encode(SubmitJobs(request_id="s1", reply_to="cli", jobs=(job,)))
        )
        async with asyncio.timeout(30):
            while True:
                message = decode((await box.next(timeout=30)).payload)
                if isinstance(message, SubmitReply):
                    assert message.results[0].accepted
                if isinstance(message, JobEvent) and message.event == "running":
                    break
        async with asyncio.timeout(30):
            while not children_of(agent.pid):
                await asyncio.sleep(0.05)
        job_pids = children_of(agent.pid)

        hostile = {
            topics.requests: "requests",
            topics.agent_state("n1"): "agent_state",
            topics.agent_events("n1"): "agent_events",
            topics.agent_commands("n1"): "agent_commands",
            topics.job_control("long"): "job_control",
        }
        sent = 0
        for topic, family in hostile.items():
            for payload in payloads(BY_NAME[family], 300, seed=7):
                if _decodes(payload):
                    continue  # a forged valid message is the ACLs' to stop, not the codec's
                await cli.publish(topic, payload)
                sent += 1
        # Wait for a round trip through the scheduler, after all of it.
        await ask_status(cli, box, topics, 100)
        assert sent > 1400
        assert scheduler.returncode is None
        assert agent.returncode is None
        assert children_of(agent.pid) == job_pids  # the job process lives on

        broker.kill()
        assert await asyncio.to_thread(broker.start)
        reply = await ask_status(cli, box, topics, 200)
        assert [m.id for m in reply.machines] == ["n1"]
        async with asyncio.timeout(60):
            while True:
                message = decode((await box.next(timeout=60)).payload)
                if (
                    isinstance(message, JobEvent)
                    and message.job_id == "long"
                    and message.state.final
                ):
                    break
        assert message.event == "finished", message
        assert scheduler.returncode is None
        assert agent.returncode is None
