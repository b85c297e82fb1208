"""The scheduler actor's requests: submit (durable first), duplicates, refusals, cancel, status."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest

from broker.bus import Delivery
from broker.codec import decode, encode
from broker.memory import MemoryBus
from broker.messages import (
    CancelJob,
    CancelPart,
    CancelReply,
    ClusterSummary,
    ErrorReply,
    JobEvent,
    StartPart,
    StatusReply,
    StatusRequest,
    SubmitJobs,
    SubmitReply,
)
from model.job import JobError
from scheduler.runtime.actor import job_from_spec
from tests.builders import spec
from tests.scheduler.runtime.harness import SETTINGS, TOPICS, Cluster, eventually


def journal_rows(path: Path) -> dict[str, str]:
    """Job id -> state, read by a connection of our own (as another process would)."""
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT id, state FROM jobs").fetchall())


class SpyBus:
    """The scheduler's bus, checking the journal file at every SubmitReply it publishes."""

    def __init__(self, bus: MemoryBus, path: Path) -> None:
        self.inner = bus
        self.path = path
        self.durable_at_reply: list[bool] = []

    @property
    def client_id(self) -> str:
        return self.inner.client_id

    async def publish(
        self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False
    ) -> None:
        message = decode(payload)
        if isinstance(message, SubmitReply):
            rows = journal_rows(self.path)
            accepted = [r.job_id for r in message.results if r.accepted]
            self.durable_at_reply.append(all(j in rows for j in accepted))
        await self.inner.publish(topic, payload, qos=qos, retain=retain)

    async def subscribe(self, pattern: str, *, qos: int = 1) -> None:
        await self.inner.subscribe(pattern, qos=qos)

    def deliveries(self) -> AsyncIterator[Delivery]:
        return self.inner.deliveries()


async def test_submission_is_acknowledged_only_once_in_the_journal(journal_path: Path) -> None:
    spies: list[SpyBus] = []

    def spy(bus: MemoryBus) -> SpyBus:
        spies.append(SpyBus(bus, journal_path))
        return spies[-1]

    c = Cluster(journal_path, wrap_bus=spy)
    await c.client.start()
    await c.start()
    try:
        await c.agent("a1", 4)
        reply = await c.client.submit(spec("j1", 2), spec("j2", 1))
        assert [r.accepted for r in reply.results] == [True, True]
        assert spies[0].durable_at_reply == [True]
        # Started after the reply: the decision comes once the submission is answered.
        await eventually(lambda: journal_rows(journal_path) == {"j1": "running", "j2": "running"})
    finally:
        await c.stop()


async def test_batch_submission_is_one_reply_one_commit_one_decision(cluster: Cluster) -> None:
    await cluster.agent("a1", 4)
    actor = cluster.actor
    assert actor is not None
    decisions = actor.decisions
    specs = [spec(f"b{i:04}", 1) for i in range(2000)]
    reply = await cluster.client.submit(*specs)
    assert len(reply.results) == 2000
    assert all(r.accepted and not r.duplicate for r in reply.results)
    assert len(journal_rows(cluster.path)) == 2000
    await eventually(lambda: len(actor.core.running) == 4)
    assert len(actor.core.queue) == 1996
    assert actor.decisions - decisions == 1
    sample = actor.metrics.registry.get_sample_value
    assert sample("accordion_scheduler_submissions_total", {"result": "accepted"}) == 2000


async def test_many_single_submissions_are_coalesced(cluster: Cluster) -> None:
    await cluster.agent("a1", 4)
    actor = cluster.actor
    assert actor is not None
    batches, decisions = actor.batches, actor.decisions
    for i in range(300):
        await cluster.client.send(
            SubmitJobs(request_id=f"s{i}", reply_to="c1", jobs=(spec(f"s{i}", 1),))
        )
    await eventually(lambda: len(cluster.client.inbox.all(SubmitReply)) == 300)
    assert all(r.results[0].accepted for r in cluster.client.inbox.all(SubmitReply))
    # Queued together, handled together: far fewer batches and decisions than requests.
    assert actor.batches - batches < 30
    assert actor.decisions - decisions < 30


async def test_a_duplicate_submission_makes_one_job(cluster: Cluster) -> None:
    await cluster.agent("a1", 1)
    first = await cluster.client.submit(spec("d1", 1), spec("d2", 1))
    assert [r.duplicate for r in first.results] == [False, False]
    cluster.clock.advance(5.0)
    again = await cluster.client.submit(spec("d2", 1), spec("d1", 1), spec("d1", 1))
    assert [(r.job_id, r.accepted, r.duplicate) for r in again.results] == [
        ("d2", True, True),
        ("d1", True, True),
        ("d1", True, True),
    ]
    actor = cluster.actor
    assert actor is not None
    assert [j.id for j in actor.core.queue] == ["d2"]
    assert [r.job.id for r in actor.core.running] == ["d1"]
    assert actor.core.job("d2").submit == 1000.0  # type: ignore[union-attr]
    assert len(journal_rows(cluster.path)) == 2
    assert len(cluster.agents["a1"].starts()) == 1
    sample = actor.metrics.registry.get_sample_value
    assert sample("accordion_scheduler_submissions_total", {"result": "duplicate"}) == 3


async def test_an_id_reused_for_another_job_is_rejected(cluster: Cluster) -> None:
    await cluster.agent("a1", 4)
    await cluster.client.submit(spec("x", 1))
    reply = await cluster.client.submit(spec("x", 2), spec("y", 1))
    assert not reply.results[0].accepted
    assert "already used by a different job" in (reply.results[0].reason or "")
    assert reply.results[1].accepted


async def test_a_job_wider_than_the_cluster_is_rejected_with_the_reason(cluster: Cluster) -> None:
    await cluster.agent("a1", 4)
    await cluster.agent("a2", 4)
    reply = await cluster.client.submit(spec("wide", 9), spec("fits", 8))
    wide, fits = reply.results
    assert not wide.accepted
    assert wide.reason is not None
    assert "9 processes" in wide.reason
    assert "the cluster as configured has 8" in wide.reason
    assert fits.accepted
    assert "wide" not in journal_rows(cluster.path)
    sample = cluster.actor.metrics.registry.get_sample_value  # type: ignore[union-attr]
    assert sample("accordion_scheduler_submissions_total", {"result": "rejected"}) == 1


async def test_an_infinite_walltime_is_refused_on_the_wire(cluster: Cluster) -> None:
    await cluster.agent("a1", 4)
    rid = cluster.client.request_id()
    request = SubmitJobs(
        request_id=rid, reply_to="c1", jobs=(spec("inf", 1, walltime=float("inf")),)
    )
    await cluster.client.send(request)
    error = await cluster.client.inbox.expect(ErrorReply, lambda e: e.request_id == rid)
    assert "walltime" in error.error
    assert cluster.state("inf") is None


def test_a_spec_the_model_refuses_raises_job_error() -> None:
    # The wire bounds every field today; the actor still rejects (not crashes) if a
    # spec ever gets through that a Job cannot be (struct __init__ does not validate).
    with pytest.raises(JobError, match="walltime"):
        job_from_spec(spec("nan", 1, walltime=float("nan")), 0.0)
    job = job_from_spec(spec("ok", 2, walltime=30.0, work=20.0, deadline=50.0), 100.0)
    assert (job.submit, job.walltime, job.runtime, job.deadline, job.procs) == (
        100.0,
        30.0,
        20.0,
        150.0,
        2,
    )


def raw(**fields: object) -> bytes:
    return msgspec.msgpack.encode(fields)


GOOD_JOB = {"id": "g", "procs": 1, "walltime": 10.0, "work": 5.0}


@pytest.mark.parametrize(
    ("payload", "reason", "request_id", "says"),
    [
        (b"\xc1not msgpack", "not_msgpack", None, None),
        (
            raw(kind="launch_missiles", reply_to="c1", request_id="r-kind"),
            "unknown_kind",
            "r-kind",
            "$.kind",
        ),
        (
            raw(kind="submit_jobs", reply_to="c1", request_id="r-type", jobs="lots"),
            "invalid",
            "r-type",
            "$.jobs",
        ),
        (
            raw(
                kind="submit_jobs",
                reply_to="c1",
                request_id="r-neg",
                jobs=[{**GOOD_JOB, "procs": -4}],
            ),
            "invalid",
            "r-neg",
            "procs",
        ),
        (
            raw(kind="submit_jobs", reply_to="c1", request_id="r-v", v=9, jobs=[GOOD_JOB]),
            "version",
            "r-v",
            "v9",
        ),
        (encode(StartPart(job=spec("g"), cpus=1)), "unexpected", None, None),
    ],
    ids=["not-msgpack", "unknown-kind", "wrong-type", "negative-size", "version", "not-a-request"],
)
async def test_malformed_payloads_are_answered_counted_and_survived(
    cluster: Cluster, payload: bytes, reason: str, request_id: str | None, says: str | None
) -> None:
    await cluster.agent("a1", 4)
    client = cluster.client
    await client.send_raw(payload)
    reply = await client.submit(spec("after", 1))
    assert reply.results[0].accepted
    errors = client.inbox.all(ErrorReply)
    if request_id is None:
        assert errors == []
    else:
        assert [e.request_id for e in errors] == [request_id]
        assert says is not None
        assert says in errors[0].error
    sample = cluster.actor.metrics.registry.get_sample_value  # type: ignore[union-attr]
    assert sample("accordion_scheduler_bad_messages_total", {"reason": reason}) == 1
    assert sample("accordion_scheduler_bad_messages_total", {"reason": "invalid"}) == (
        1 if reason == "invalid" else 0
    )


async def test_bad_messages_on_agent_topics_are_counted_and_the_agent_served(
    cluster: Cluster,
) -> None:
    a1 = await cluster.agent("a1", 4)
    await cluster.client.send_raw(b"\xc1garbage", TOPICS.agent_events("a1"))
    await cluster.client.send_raw(encode(SubmitJobs(jobs=())), TOPICS.agent_events("a1"))
    await cluster.client.submit(spec("j", 1))
    await eventually(lambda: a1.started("j"))
    sample = cluster.actor.metrics.registry.get_sample_value  # type: ignore[union-attr]
    assert sample("accordion_scheduler_bad_messages_total", {"reason": "not_msgpack"}) == 1
    assert sample("accordion_scheduler_bad_messages_total", {"reason": "unexpected"}) == 1


async def test_a_reply_to_that_cannot_be_a_topic_is_refused_without_acting(
    cluster: Cluster,
) -> None:
    await cluster.agent("a1", 4)
    await cluster.client.send(SubmitJobs(request_id="r", reply_to="a/b", jobs=(spec("q", 1),)))
    await cluster.client.submit(spec("z", 1))
    assert cluster.state("q") is None
    assert cluster.state("z") is not None


async def test_a_finished_job_is_journalled_and_counted(cluster: Cluster) -> None:
    a1 = await cluster.agent("a1", 4)
    await cluster.client.submit(spec("f", 2))
    await eventually(lambda: a1.started("f"))
    start = a1.starts()[0]
    assert (start.cpus, start.pace, start.part, start.parts, start.time_scale) == (
        2,
        1.0,
        0,
        1,
        1.0,
    )
    cluster.clock.advance(50.0)
    await a1.finish("f")
    await eventually(lambda: cluster.state("f") == "finished")
    assert journal_rows(cluster.path) == {"f": "finished"}
    events = cluster.client.inbox
    await events.expect(JobEvent, lambda e: e.job_id == "f" and e.event == "finished")
    assert [e.event for e in events.all(JobEvent, lambda e: e.job_id == "f")] == [
        "queued",
        "running",
        "finished",
    ]
    sample = cluster.actor.metrics.registry.get_sample_value  # type: ignore[union-attr]
    assert sample("accordion_scheduler_jobs_finished_total", {"state": "finished"}) == 1


async def test_a_failed_part_fails_the_job_and_cancels_its_other_parts(cluster: Cluster) -> None:
    a1, a2 = await cluster.job_across_two()
    starts = {a.id: a.starts()[0] for a in (a1, a2)}
    assert {s.part for s in starts.values()} == {0, 1}
    assert all(s.parts == 2 for s in starts.values())
    await a1.finish("wide", exit_code=3, reason="failed")
    await eventually(lambda: cluster.state("wide") == "failed")
    await eventually(lambda: a2.cancels("wide") == 1)
    assert a1.cancels("wide") == 0
    assert journal_rows(cluster.path) == {"wide": "failed"}


async def test_cancel_a_queued_and_a_running_job(cluster: Cluster) -> None:
    a1 = await cluster.agent("a1", 2)
    await cluster.client.submit(spec("run", 2), spec("wait", 2))
    await eventually(lambda: a1.started("run"))
    client = cluster.client

    async def cancel(job_id: str) -> CancelReply:
        rid = client.request_id()
        await client.send(CancelJob(request_id=rid, reply_to="c1", job_id=job_id))
        return await client.inbox.expect(CancelReply, lambda r: r.request_id == rid)

    queued = await cancel("wait")
    assert (queued.cancelled, queued.reason) == (True, None)
    running = await cancel("run")
    assert running.cancelled
    await eventually(lambda: a1.cancels("run") == 1)
    again = await cancel("run")
    assert (again.cancelled, again.reason) == (True, "already cancelled")
    unknown = await cancel("nope")
    assert not unknown.cancelled
    assert "no job" in (unknown.reason or "")
    assert journal_rows(cluster.path) == {"run": "cancelled", "wait": "cancelled"}
    assert not a1.started("wait")


async def test_status_reply(cluster: Cluster) -> None:
    fast = await cluster.agent("fast", 4, speed=2.0)
    await cluster.agent("slow", 4, speed=1.0)
    gone = await cluster.agent("gone", 2)
    await gone.kill()
    await eventually(lambda: not cluster.online("gone"))
    cluster.clock.advance(1.0)
    await cluster.client.submit(spec("r1", 3), spec("r2", 4), spec("q1", 4, user="bob"))
    await eventually(lambda: fast.started("r1"))
    rid = cluster.client.request_id()
    await cluster.client.send(StatusRequest(request_id=rid, reply_to="c1"))
    status = await cluster.client.inbox.expect(StatusReply, lambda r: r.request_id == rid)
    assert status.now == 1001.0
    machines = {m.id: (m.cpus, m.speed, m.free, m.online) for m in status.machines}
    assert machines == {
        "fast": (4, 2.0, 1, True),
        "slow": (4, 1.0, 0, True),
        "gone": (2, 1.0, 0, False),
    }
    assert [(j.id, j.state, j.procs, j.user, j.submit) for j in status.queue] == [
        ("q1", "queued", 4, "bob", 1001.0)
    ]
    running = {j.id: (j.start, [(p.machine, p.cpus) for p in j.parts]) for j in status.running}
    assert running == {"r1": (1001.0, [("fast", 3)]), "r2": (1001.0, [("slow", 4)])}


async def test_cluster_summary_is_published_retained(cluster: Cluster) -> None:
    await cluster.agent("a1", 4)
    await cluster.client.submit(spec("s1", 1), spec("s2", 4))
    await cluster.client.inbox.expect(ClusterSummary, lambda s: s.queued == 1 and s.running == 1)
    late = cluster.broker.client("late")
    async with late:
        await late.subscribe(TOPICS.cluster)
        delivery = await anext(late.deliveries())
    summary = decode(delivery.payload)
    assert isinstance(summary, ClusterSummary)
    assert delivery.retain
    assert (summary.machines, summary.cpus, summary.free, summary.policy) == (1, 4, 3, "fcfs")


async def test_cancel_part_for_an_unknown_part_an_agent_reports(cluster: Cluster) -> None:
    a1 = await cluster.agent("a1", 4)
    await a1.heartbeat(running=["ghost"])
    await eventually(lambda: a1.cancels("ghost") == 1)
    assert isinstance(a1.commands[-1], CancelPart)


@pytest.mark.parametrize(
    ("events", "expected"),
    [("all", ["queued", "running"]), ("lifecycle", ["running"]), ("none", [])],
)
async def test_job_events_for_watchers_can_leave_out_submissions(
    journal_path: Path, events: str, expected: list[str]
) -> None:
    c = Cluster(journal_path, settings=replace(SETTINGS, job_events=events))  # type: ignore[arg-type]
    await c.client.start(TOPICS.events)
    await c.start()
    try:
        a1 = await c.agent("a1", 4)
        await c.client.submit(spec("e", 1))
        await eventually(lambda: a1.started("e"))
        await c.settle()
        assert [e.event for e in c.client.inbox.all(JobEvent)] == expected
    finally:
        await c.stop()
