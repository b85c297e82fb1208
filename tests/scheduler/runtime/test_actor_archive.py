"""The actor archives ended jobs past ``archive_after`` (an injected clock says when), a
restart reads only what is left, and the history request still finds archived jobs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from accordion.gantt.live import LiveTimeline
from broker.insight import PriorityReply, PriorityRequest
from broker.messages import HistoryReply, HistoryRequest, StatusReply, StatusRequest
from broker.vocabulary import Rejection
from scheduler.runtime.actor import SchedulerActor
from tests.builders import spec
from tests.scheduler.runtime.harness import SETTINGS, Cluster, FakeAgent, eventually

#: A minute after its end (wall seconds; the harness's clock runs at K = 1).
ARCHIVING = replace(SETTINGS, archive_after=60.0, archive_batch=2)


def submitted(actor: SchedulerActor, result: str) -> float:
    value = actor.metrics.registry.get_sample_value(
        "accordion_scheduler_submissions_total", {"result": result}
    )
    return value or 0.0


async def passed(c: Cluster, actor: SchedulerActor) -> None:
    """A tick, and its batch done, archiving pass included: the actor handles its mailbox
    in order, so a request sent after the answer to one sent after the tick is handled
    once the tick's batch is over. The agents beat first: the clock jumped."""
    for agent in c.agents.values():
        await agent.heartbeat()
    actor.tick()
    for rid in (f"s{actor.batches}", f"t{actor.batches}"):
        await c.client.send(StatusRequest(request_id=rid, reply_to="c1"))
        await c.client.inbox.expect(StatusReply, lambda r, rid=rid: r.request_id == rid)  # type: ignore[misc]


async def ended_then_archived(c: Cluster) -> tuple[SchedulerActor, FakeAgent]:
    """Agent ``a1`` (4 CPUs) ran ``d1`` to its end at 1010 and ``d2`` to 1040; ``run``
    runs and ``q`` waits. Each moves at the first tick past its end plus a minute."""
    actor = await c.start()
    a1 = await c.agent("a1", 4)
    reply = await c.client.submit(spec("d1", 4), spec("d2", 4), spec("run", 4), spec("q", 2))
    assert all(r.accepted for r in reply.results)
    await eventually(lambda: a1.started("d1"))
    c.clock.advance(10.0)
    await a1.finish("d1")
    await eventually(lambda: a1.started("d2"))
    c.clock.advance(30.0)
    await a1.finish("d2")
    await eventually(lambda: a1.started("run"))
    assert c.journal is not None
    assert {row.spec.id: row.end for row in c.journal.load().jobs if row.end} == {
        "d1": 1010.0,
        "d2": 1040.0,
    }
    c.clock.advance(29.0)  # 1069: d1 ended 59 s ago
    await passed(c, actor)
    assert actor.archived == 0
    c.clock.advance(2.0)  # 1071: d1 61 s ago, d2 31 s ago
    await passed(c, actor)
    assert actor.archived == 1
    assert [row.spec.id for row in c.journal.load().jobs] == ["d2", "run", "q"]
    c.clock.advance(30.0)
    await passed(c, actor)
    assert actor.archived == 2
    assert [row.spec.id for row in c.journal.load().jobs] == ["run", "q"]
    return actor, a1


async def test_a_restart_after_archiving_recovers_its_jobs_and_still_tells_the_ended(
    tmp_path: Path,
) -> None:
    c = Cluster(tmp_path / "journal.sqlite", settings=ARCHIVING, archive=True)
    await c.client.start()
    try:
        before, a1 = await ended_then_archived(c)
        queued = [j.id for j in before.core.queue]
        accepted = submitted(before, "accepted")
        await c.kill_scheduler()
        actor = await c.start()
        # The queue and the running job are back as before; the archived ones are not read.
        assert [j.id for j in actor.core.queue] == queued == ["q"]
        assert list(actor.core.pending) == ["run"]
        assert actor.core.job("d1") is None
        assert submitted(actor, "accepted") == accepted == 4
        await a1.heartbeat()
        await eventually(lambda: not actor.reconciling)
        assert [r.job.id for r in actor.core.running] == ["run"]
        # Their history is still theirs to read, from the archive.
        await c.client.send(
            HistoryRequest(request_id="h", reply_to="c1", job_ids=("d1", "ghost", "run"))
        )
        history = await c.client.inbox.expect(HistoryReply, lambda r: r.request_id == "h")
        assert [(e.job_id, e.event) for e in history.events if e.job_id == "d1"] == [
            ("d1", "queued"),
            ("d1", "running"),
            ("d1", "finished"),
        ]
        assert c.journal is not None
        assert list(history.events) == c.journal.job_events(["d1", "run"])
        assert history.events[-1].job_id == "run"
        assert history.unknown == ("ghost",)
        # ... and draw: the Gantt chart of a live cluster takes them as any history.
        timeline = LiveTimeline()
        for e in history.events:
            timeline.event(e)
        timeline.status(actor.status(c.clock.now()))
        bars = {(b.job_id, b.machine) for b in timeline.gantt().bars}
        assert ("d1", "a1") in bars
        # Their ids stay taken: the same spec is a duplicate, another one is refused.
        again = await c.client.submit(spec("d1", 4), spec("d2", 2))
        assert [(r.accepted, r.duplicate) for r in again.results] == [(True, True), (False, False)]
        assert again.results[1].code == Rejection.ID_REUSED
        assert actor.core.job("d1") is None
    finally:
        await c.stop()


async def priorities(c: Cluster) -> list[tuple[str, int, float | None, list[float]]]:
    """The ``accordion priority`` answer: each queued job's rank, priority and factors."""
    rid = c.client.request_id()
    await c.client.send(PriorityRequest(request_id=rid, reply_to=c.client.name))
    reply = await c.client.inbox.expect(PriorityReply, lambda r: r.request_id == rid)
    return [(r.job_id, r.rank, r.priority, [f.value for f in r.factors]) for r in reply.rows]


async def test_a_restart_after_archiving_keeps_the_fair_share_standing(tmp_path: Path) -> None:
    c = Cluster(
        tmp_path / "journal.sqlite", policy="fcfs:fairshare", settings=ARCHIVING, archive=True
    )
    await c.client.start()
    try:
        actor = await c.start()
        a1 = await c.agent("a1", 4)
        await c.client.submit(
            spec("d1", 4, user="ann", group="g1"),
            spec("d2", 4, user="bob", group="g1"),
            spec("run", 4, user="cid", group="g2"),
            *(spec(f"q-{u}", 2, user=u, group="g2") for u in ("ann", "bob", "dan")),
        )
        await eventually(lambda: a1.started("d1"))
        c.clock.advance(10.0)
        await a1.finish("d1")
        await eventually(lambda: a1.started("d2"))
        c.clock.advance(30.0)
        await a1.finish("d2")
        await eventually(lambda: a1.started("run"))
        c.clock.advance(120.0)
        before = await priorities(c)
        # dan never ran, ann ran 40 CPU-seconds and bob 120: the order tells them apart.
        assert [(job, rank) for job, rank, _, _ in before] == [
            ("q-dan", 1),
            ("q-ann", 2),
            ("q-bob", 3),
        ]
        usage = actor.core.usage
        sums = {n: usage.decayed("user", n, 0, 7, 0.7) for n in ("ann", "bob", "cid")}
        assert sums == {"ann": 40.0, "bob": 120.0, "cid": 0.0}
        await passed(c, actor)
        assert actor.archived == 2
        assert c.journal is not None
        assert [row.spec.id for row in c.journal.load().jobs] == ["run", "q-ann", "q-bob", "q-dan"]
        await c.kill_scheduler()
        actor = await c.start()
        await a1.heartbeat()
        await eventually(lambda: not actor.reconciling)
        # The archived runs are charged as before the restart: same sums, same answer.
        usage = actor.core.usage
        assert {n: usage.decayed("user", n, 0, 7, 0.7) for n in sums} == sums
        assert usage.decayed("group", "g1", 0, 7, 0.7) == 160.0
        assert await priorities(c) == before
    finally:
        await c.stop()


async def test_never_archiving_keeps_every_job_in_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    c = Cluster(path, settings=replace(SETTINGS, archive_after=None))
    await c.client.start()
    try:
        actor = await c.start()
        a1 = await c.agent("a1", 4)
        await c.client.submit(spec("d1", 4))
        await eventually(lambda: a1.started("d1"))
        await a1.finish("d1")
        await eventually(lambda: c.state("d1") == "finished")
        c.clock.advance(10_000.0)
        await passed(c, actor)
        assert actor.archived == 0
        assert c.journal is not None
        assert [row.spec.id for row in c.journal.load().jobs] == ["d1"]
        assert not (tmp_path / "journal-archive.sqlite").exists()
    finally:
        await c.stop()
