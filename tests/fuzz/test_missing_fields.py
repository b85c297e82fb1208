"""A message missing a required field reaches no handler: each receiver counts it and goes on.

For every seed message of every topic family (``tests.fuzz.corpus``), one
payload per required field, with that field left out, goes through the real
receiver's decode-and-dispatch function, each followed by a good message. Each
must be counted once as ``invalid`` and answered where someone can be
answered; the good messages around them must all be served (nothing lost).
Before protocol 2 these payloads decoded, with placeholders (a ``StartPart``
without a job, a ``PartFinished`` without an exit code read as a success).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from broker.bus import Delivery
from broker.codec import decode, encode
from broker.memory import MemoryBroker
from broker.messages import (
    AgentOnline,
    CancelPart,
    ErrorReply,
    JobSpec,
    MachineSpec,
    ResizePart,
    StatusReply,
    StatusRequest,
)
from broker.topics import Topics
from broker.vocabulary import BadMessage
from nodeagent.job.sleep_job import SleepJob
from nodeagent.launch.contract import Launch
from scheduler.policies.registry import build_policy
from scheduler.runtime.actor import SchedulerActor
from scheduler.runtime.clock import ManualClock
from scheduler.runtime.journal import Journal
from tests.fuzz.corpus import BY_NAME
from tests.nodeagent.harness import running_agent, settled

TOPICS = Topics("fuzz/v2")


def stripped(family: str) -> list[tuple[str, bytes]]:
    """``(field, payload)`` for every seed of ``family`` less each of its required fields."""
    out = []
    for seed in BY_NAME[family].seeds:
        message = decode(seed)
        for field in msgspec.structs.fields(message):
            if field.required:
                fields: dict[str, Any] = msgspec.msgpack.decode(seed)
                del fields[field.name]
                out.append((field.name, msgspec.msgpack.encode(fields)))
    return out


def test_every_family_has_required_fields_to_leave_out() -> None:
    for family in ("requests", "agent_state", "agent_events", "agent_commands", "job_control"):
        assert stripped(family), family


@pytest.fixture
def actor(tmp_path: Path) -> SchedulerActor:
    journal = Journal(tmp_path / "journal.sqlite")
    journal.ensure_meta(epoch=0.0, time_scale=1.0, policy="fcfs")
    return SchedulerActor(
        MemoryBroker().client("scheduler"),
        TOPICS,
        policy=build_policy("fcfs"),
        journal=journal,
        clock=ManualClock(1.0),
    )


def _invalid(actor: SchedulerActor) -> float:
    sample = actor.metrics.registry.get_sample_value
    return sample("accordion_scheduler_bad_messages_total", {"reason": "invalid"}) or 0.0


def test_the_scheduler_answers_each_request_and_serves_the_next(actor: SchedulerActor) -> None:
    bad = stripped("requests")
    for i, (field, payload) in enumerate(bad):
        actor._on_delivery(Delivery(TOPICS.requests, payload), float(i))
        good = StatusRequest(request_id=f"ok-{i}", reply_to="fuzzer")
        actor._on_delivery(Delivery(TOPICS.requests, encode(good)), float(i))
        out = [item.message for item in actor.ctx.out.take()]
        # Its envelope is readable: the client hears why, by code and in words.
        (error,) = [m for m in out if isinstance(m, ErrorReply)]
        assert error.code is BadMessage.INVALID
        assert f"missing required field `{field}`" in error.error
        assert [m.request_id for m in out if isinstance(m, StatusReply)] == [f"ok-{i}"]
    assert _invalid(actor) == len(bad)


@pytest.mark.parametrize("family", ["agent_state", "agent_events"])
def test_the_scheduler_counts_an_agents_and_registers_the_next(
    actor: SchedulerActor, family: str
) -> None:
    bad = stripped(family)
    for i, (_, payload) in enumerate(bad):
        agent = f"fz-{i}"
        topic = TOPICS.agent_state(agent) if family == "agent_state" else TOPICS.agent_events(agent)
        actor._on_delivery(Delivery(topic, payload), float(i))
        online = AgentOnline(
            machine=MachineSpec(id=agent, cpus=2), incarnation=f"inc-{i}", running=()
        )
        actor._on_delivery(Delivery(TOPICS.agent_state(agent), encode(online)), float(i))
    assert _invalid(actor) == len(bad)
    assert sorted(actor.ctx.agents) == sorted(f"fz-{i}" for i in range(len(bad)))


async def _no_spawn(launch: Launch) -> Any:
    raise AssertionError(f"a start of {launch.job_id} without its required fields was spawned")


async def test_the_agent_counts_each_command_and_serves_the_next() -> None:
    bad = stripped("agent_commands")
    assert {field for field, _ in bad} >= {"job", "cpus", "job_id"}
    async with running_agent(name="fz-node", spawn=_no_spawn) as run:
        for _, payload in bad:
            await run.scheduler.send_raw(payload)
            # A good command: a cancel of a part not running here is served (ignored, not bad).
            await run.scheduler.send(CancelPart(job_id="none"))
        await settled(run.scheduler)
        stats = run.agent.stats()
    assert stats.bad_messages == len(bad)
    assert stats.parts_running == 0


async def test_the_job_process_counts_each_control_message_and_serves_the_next() -> None:
    launch = Launch(
        agent="fz-node", job_id="fz-1", procs=2, cpus=2, pace=1.0, work=1e6, root=TOPICS.root
    )
    async with MemoryBroker().client("job-fz") as bus:
        job = SleepJob(launch, bus)
        topic = TOPICS.job_control("fz-1")
        bad = stripped("job_control")
        for _, payload in bad:
            await job._handle(Delivery(topic, payload))
        assert job.bad_messages == len(bad)
        # The resize that follows them is obeyed (two processes on one CPU).
        resize = ResizePart(job_id="fz-1", cpus=1, pace=1.0)
        assert await job._handle(Delivery(topic, encode(resize)))
        assert (job.cpus, job.bad_messages) == (1, len(bad))


def test_a_job_spec_missing_a_field_is_refused_within_a_submission(
    actor: SchedulerActor,
) -> None:
    job = msgspec.msgpack.decode(
        msgspec.msgpack.encode(JobSpec(id="j", procs=1, walltime=9.0, work=1.0))
    )
    del job["work"]
    payload = msgspec.msgpack.encode(
        {"kind": "submit_jobs", "v": 2, "request_id": "r", "reply_to": "fuzzer", "jobs": [job]}
    )
    actor._on_delivery(Delivery(TOPICS.requests, payload), 0.0)
    (error,) = [item.message for item in actor.ctx.out.take()]
    assert isinstance(error, ErrorReply)
    assert (error.request_id, error.code) == ("r", BadMessage.INVALID)
    assert "missing required field `work` - at `$.jobs[0]`" in error.error
    assert actor.core.job("j") is None
