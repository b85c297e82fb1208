"""What the live scheduler plans and why: predicted starts and reasons in ``status``, the
``planned`` event in a job's history, the predicted-wait histogram, priorities by
factor, the what-if snapshot, and what a hostile request gets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import msgpack
import pytest

from broker.insight import (
    PriorityReply,
    PriorityRequest,
    SnapshotReply,
    SnapshotRequest,
)
from broker.messages import (
    ErrorReply,
    HistoryReply,
    HistoryRequest,
    JobStatus,
    StatusReply,
    StatusRequest,
)
from broker.topics import PROTOCOL_VERSION
from broker.vocabulary import BadMessage, JobEventKind, WaitReason
from scheduler.live import requests
from scheduler.live.limits import Limits
from tests.scheduler.runtime.harness import SETTINGS, TOPICS, Cluster, eventually, spec

FAST = replace(SETTINGS, predict_interval=0.001)


async def started(path: Path, policy: str = "easy", **kwargs: object) -> Cluster:
    settings = replace(FAST, **kwargs)  # type: ignore[arg-type]
    c = Cluster(path, policy=policy, settings=settings)
    await c.client.start(TOPICS.events)
    await c.start()
    return c


async def status(c: Cluster) -> StatusReply:
    rid = c.client.request_id()
    await c.client.send(StatusRequest(request_id=rid, reply_to=c.client.name))
    return await c.client.inbox.expect(StatusReply, lambda r: r.request_id == rid)


async def predicted(c: Cluster, *job_ids: str) -> dict[str, JobStatus]:
    """The queue's rows once each of ``job_ids`` has a prediction."""
    rows: dict[str, JobStatus] = {}

    async def look() -> bool:
        nonlocal rows
        rows = {j.id: j for j in (await status(c)).queue}
        return all(rows.get(j) is not None and rows[j].predicted_start is not None for j in job_ids)

    while not await look():
        await c.settle()
        assert c.actor is not None
        c.actor.tick()  # a pass runs after a batch: make one
    return rows


async def test_status_shows_each_queued_jobs_predicted_start_and_reason(tmp_path: Path) -> None:
    c = await started(tmp_path / "j.sqlite")
    try:
        a1 = await c.agent("a1", 4)
        await c.client.submit(
            spec("run", 4, walltime=100.0), spec("head", 4, walltime=50.0), spec("small", 1)
        )
        await eventually(lambda: a1.started("run"))
        rows = await predicted(c, "head", "small")
        now = 1000.0  # the ManualClock's: nothing moved it
        head, small = rows["head"], rows["small"]
        assert head.predicted_start == now + 100.0  # when "run" is expected to end
        assert head.reason is WaitReason.RESOURCES
        assert head.reason_detail == "its reservation at t=1,100 s"
        assert [(p.machine, p.cpus) for p in head.parts] == [("a1", 4)]
        assert small.predicted_start == now + 150.0  # after the head, which takes all 4
        assert small.reason is WaitReason.PRIORITY
        assert small.reason_detail == "behind 1 higher-priority job"
        assert all(j.predicted_start is None for j in (await status(c)).running)
    finally:
        await c.stop()


async def test_the_first_prediction_is_in_the_history_and_the_histogram(tmp_path: Path) -> None:
    c = await started(tmp_path / "j.sqlite")
    try:
        a1 = await c.agent("a1", 2)
        await c.client.submit(spec("run", 2, walltime=300.0), spec("next", 2, walltime=10.0))
        await eventually(lambda: a1.started("run"))
        await predicted(c, "next")
        # Passes go on; the first is the one told, once.
        for _ in range(3):
            await c.tick()
        rid = c.client.request_id()
        await c.client.send(
            HistoryRequest(request_id=rid, reply_to=c.client.name, job_ids=("next",))
        )
        reply = await c.client.inbox.expect(HistoryReply, lambda r: r.request_id == rid)
        planned = [e for e in reply.events if e.event is JobEventKind.PLANNED]
        assert len(planned) == 1
        assert planned[0].seq == 0  # unnumbered: the published sequence has no gap
        assert planned[0].detail.startswith("predicted to start at t=1,300 s (reserved)")
        assert [e.seq for e in reply.events if e.seq] == [1]  # "queued"
        # Never published: watchers see only the numbered events.
        published = c.client.inbox.all(type(reply.events[0]), lambda e: e.job_id == "next")
        assert all(e.event is not JobEventKind.PLANNED for e in published)
        assert c.actor is not None
        sample = c.actor.metrics.registry.get_sample_value
        assert sample("accordion_scheduler_predicted_wait_cluster_seconds_count") == 1
        assert sample("accordion_scheduler_predicted_wait_cluster_seconds_sum") == 300.0
        assert sample("accordion_scheduler_prediction_wall_seconds_count") >= 1
    finally:
        await c.stop()


async def test_no_predictions_when_turned_off(tmp_path: Path) -> None:
    c = await started(tmp_path / "j.sqlite", predict_interval=0.0)
    try:
        a1 = await c.agent("a1", 2)
        await c.client.submit(spec("run", 2), spec("next", 2))
        await eventually(lambda: a1.started("run"))
        for _ in range(3):
            await c.tick()
        (row,) = (await status(c)).queue
        assert (row.predicted_start, row.reason, row.parts) == (None, None, ())
        assert c.actor is not None
        assert c.actor.predictions == 0
    finally:
        await c.stop()


async def test_a_job_wider_than_the_cpus_online_says_so(tmp_path: Path) -> None:
    c = await started(tmp_path / "j.sqlite")
    try:
        a1 = await c.agent("a1", 2)
        a2 = await c.agent("a2", 2)
        await a2.kill()  # its Last Will: lost, not retired; the cluster as configured is 4
        await eventually(lambda: not c.online("a2"))
        await c.client.submit(spec("wide", 4))
        rows: dict[str, JobStatus] = {}
        while "wide" not in rows or rows["wide"].reason is None:
            c.actor.tick()  # type: ignore[union-attr]
            await c.settle()
            rows = {j.id: j for j in (await status(c)).queue}
        assert rows["wide"].reason is WaitReason.WIDER_THAN_ONLINE
        assert rows["wide"].reason_detail == "needs 4 CPUs; 2 online"
        assert rows["wide"].predicted_start is None
        assert not a1.started("wide")
    finally:
        await c.stop()


async def test_a_job_held_by_the_per_user_cpu_limit_says_so(tmp_path: Path) -> None:
    c = await started(tmp_path / "j.sqlite", limits=Limits(max_user_cpus=2))
    try:
        a1 = await c.agent("a1", 4)
        await c.client.submit(
            spec("ann1", 2, user="ann"), spec("ann2", 1, user="ann"), spec("bob1", 1, user="bob")
        )
        await eventually(lambda: a1.started("ann1") and a1.started("bob1"))
        rows: dict[str, JobStatus] = {}
        while "ann2" not in rows or rows["ann2"].reason is None:
            c.actor.tick()  # type: ignore[union-attr]
            await c.settle()
            rows = {j.id: j for j in (await status(c)).queue}
        # The CPUs are free; the limit, not the cluster, holds it, and no policy sees it.
        assert rows["ann2"].reason is WaitReason.USER_LIMIT
        assert (
            rows["ann2"].reason_detail == "ann runs 2 CPUs of the 2 one user may hold; it needs 1"
        )
        assert rows["ann2"].predicted_start is None
        assert not a1.started("ann2")
    finally:
        await c.stop()


async def test_priority_shows_each_factor(tmp_path: Path) -> None:
    c = await started(tmp_path / "j.sqlite", policy="easy:multifactor")
    try:
        a1 = await c.agent("a1", 2)
        await c.client.submit(
            spec("hog", 2, user="bob"), spec("b2", 1, user="bob"), spec("a1", 2, user="ann")
        )
        await eventually(lambda: a1.started("hog"))
        rid = c.client.request_id()
        await c.client.send(PriorityRequest(request_id=rid, reply_to=c.client.name))
        reply = await c.client.inbox.expect(PriorityReply, lambda r: r.request_id == rid)
        assert (reply.policy, reply.source) == ("easy:multifactor", "multifactor")
        assert [(r.job_id, r.rank) for r in reply.rows] == [("a1", 1), ("b2", 2)]
        for row in reply.rows:
            names = [f.name for f in row.factors]
            assert names == ["age", "fairshare", "size", "qos"]
            assert row.priority is not None
            assert abs(sum(f.value for f in row.factors) - row.priority) < 1e-6
    finally:
        await c.stop()


async def test_snapshot_holds_machines_running_queue_and_reservations(tmp_path: Path) -> None:
    c = await started(tmp_path / "j.sqlite")
    try:
        a1 = await c.agent("a1", 4, speed=2.0)
        await c.client.submit(spec("run", 4, walltime=100.0, work=60.0), spec("head", 4))
        await eventually(lambda: a1.started("run"))
        assert c.actor is not None
        c.clock.advance(10.0)
        rid = c.client.request_id()
        await c.client.send(SnapshotRequest(request_id=rid, reply_to=c.client.name))
        reply = await c.client.inbox.expect(SnapshotReply, lambda r: r.request_id == rid)
        assert reply.now == 1010.0
        assert [(m.id, m.cpus, m.speed, m.cordoned) for m in reply.machines] == [
            ("a1", 4, 2.0, False)
        ]
        (run,) = reply.running
        assert (run.job.id, run.job.walltime, run.start) == ("run", 100.0, 1000.0)
        # Twice the reference speed: 10 s on the machine did 20 s of its wall time.
        assert run.done == 20.0
        assert run.est_end == 1050.0
        assert [j.id for j in reply.queue] == ["head"]
        assert [(r.job_id, r.start) for r in reply.reservations] == [("head", 1050.0)]
    finally:
        await c.stop()


async def test_a_bad_request_is_answered_and_counted_and_the_rest_goes_on(tmp_path: Path) -> None:
    c = await started(tmp_path / "j.sqlite")
    try:
        await c.agent("a1", 2)
        # An unknown field, and a forged kind of reply sent as a request.
        await c.client.send_raw(
            msgpack.packb(
                {
                    "kind": "priority_request",
                    "v": PROTOCOL_VERSION,
                    "reply_to": c.client.name,
                    "bad": 1,
                }
            )
        )
        await c.client.send(
            PriorityReply(request_id="x", now=0.0, policy="easy", source="fifo", rows=())
        )
        await c.client.inbox.expect(ErrorReply)
        assert c.actor is not None
        sample = c.actor.metrics.registry.get_sample_value
        await eventually(
            lambda: (
                sample("accordion_scheduler_bad_messages_total", {"reason": BadMessage.UNEXPECTED})
                == 1
            )
        )
        assert sample("accordion_scheduler_bad_messages_total", {"reason": "invalid"}) == 1
        # The scheduler still answers.
        rid = c.client.request_id()
        await c.client.send(SnapshotRequest(request_id=rid, reply_to=c.client.name))
        await c.client.inbox.expect(SnapshotReply, lambda r: r.request_id == rid)
    finally:
        await c.stop()


async def test_an_answer_over_the_message_limit_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A priority or snapshot reply covers the whole queue (it has no pages): past the
    # message limit it is refused, not sent. The limit is lowered so that 40 jobs pass it.
    monkeypatch.setattr(requests, "MAX_MESSAGE_BYTES", 500)
    c = await started(tmp_path / "j.sqlite")
    try:
        a1 = await c.agent("a1", 1)
        await c.client.submit(*(spec(f"j{i}", 1) for i in range(40)))
        await eventually(lambda: a1.started("j0"))
        for ask in (PriorityRequest, SnapshotRequest):
            rid = c.client.request_id()
            await c.client.send(ask(request_id=rid, reply_to=c.client.name))
            error = await c.client.inbox.expect(ErrorReply, lambda r, rid=rid: r.request_id == rid)
            assert error.code is BadMessage.TOO_LARGE
            assert "over the message limit of 500" in error.error
        assert c.actor is not None
        sample = c.actor.metrics.registry.get_sample_value
        assert sample("accordion_scheduler_bad_messages_total", {"reason": "too_large"}) == 2
        # Nothing was lost: every job is still there, and a status still answers.
        reply = await status(c)
        assert len(reply.queue) + len(reply.running) == 40
    finally:
        await c.stop()


async def test_while_reconciling_every_queued_job_is_held(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    c = await started(path)
    try:
        a1 = await c.agent("a1", 4)
        await c.client.submit(spec("run", 4), spec("q", 1))
        await eventually(lambda: a1.started("run"))
        await c.kill_scheduler()
        actor = await c.start()
        assert actor.reconciling
        rows: dict[str, JobStatus] = {}
        while "q" not in rows or rows["q"].reason is None:
            actor.tick()
            await c.settle()
            rows = {j.id: j for j in (await status(c)).queue}
        assert rows["q"].reason is WaitReason.HELD
        assert "reconciling" in rows["q"].reason_detail
        await a1.heartbeat()
        await eventually(lambda: not actor.reconciling)
    finally:
        await c.stop()
