"""FCFS-malleable in the live scheduler: every resize journalled, evented, counted.

One agent of 4 CPUs. R (rigid, 2 processes) starts first, A (malleable, 2)
beside it; B (malleable, 2) then finds no free CPU: the rigid R is skipped, A
(the oldest malleable job) shrinks to 1 and B starts shrunk on 1. When B ends
the queue is empty and A expands back to 2. R is never resized.
"""

from __future__ import annotations

from pathlib import Path

from broker.codec import encode
from broker.messages import (
    Heartbeat,
    JobEvent,
    PartSpec,
    ResizePart,
    RunningPart,
    StatusReply,
    StatusRequest,
)
from broker.vocabulary import JobEventKind
from model.machine import Part
from scheduler.runtime.actor import SchedulerActor
from scheduler.runtime.journal import Journal
from tests.builders import spec
from tests.scheduler.runtime.harness import TOPICS, Cluster, FakeAgent, eventually

RESIZES = "accordion_job_resizes_total"


def resizes(actor: SchedulerActor, direction: str) -> float:
    value = actor.ctx.metrics.registry.get_sample_value(RESIZES, {"direction": direction})
    assert value is not None
    return value


def events_of(c: Cluster, job_id: str) -> list[JobEvent]:
    return c.client.inbox.all(JobEvent, lambda e: e.job_id == job_id)


def resize_commands(agent: FakeAgent, job_id: str) -> list[int]:
    return [m.cpus for m in agent.commands if isinstance(m, ResizePart) and m.job_id == job_id]


async def shrunk_cluster(path: Path) -> tuple[Cluster, FakeAgent]:
    """R and A running, then B started with A shrunk to 1 CPU (module docstring)."""
    c = Cluster(path, policy="fcfs-malleable")
    await c.client.start(TOPICS.events)
    await c.start()
    a1 = await c.agent("a1", 4)
    await c.client.submit(spec("R", 2, malleable=False), spec("A", 2, malleable=True))
    await eventually(lambda: a1.started("A") and a1.started("R"))
    await c.client.submit(spec("B", 2, malleable=True))
    await eventually(lambda: a1.started("B"))
    return c, a1


async def test_a_shrink_and_an_expand_are_journalled_evented_and_counted(
    tmp_path: Path,
) -> None:
    c, a1 = await shrunk_cluster(tmp_path / "j.sqlite")
    try:
        actor = c.actor
        assert actor is not None
        assert resize_commands(a1, "A") == [1]
        assert [s.cpus for s in a1.starts() if s.job is not None and s.job.id == "B"] == [1]
        assert resizes(actor, "shrink") == 1
        assert resizes(actor, "expand") == 0
        await a1.finish("B")
        await eventually(lambda: resize_commands(a1, "A") == [1, 2])
        assert resizes(actor, "expand") == 1
        assert resizes(actor, "shrink") == 1
        # The rigid job was never touched.
        assert resize_commands(a1, "R") == []

        await eventually(lambda: len(events_of(c, "A")) == 4)
        queued, running, shrunk, expanded = events_of(c, "A")
        assert [e.seq for e in (queued, running, shrunk, expanded)] == [1, 2, 3, 4]
        assert (running.event, shrunk.event, expanded.event) == ("running", "resized", "resized")
        assert (shrunk.cpus_before, shrunk.cpus_after) == (2, 1)
        assert shrunk.detail == "shrunk 2 -> 1 CPUs, MPL 2.00"
        assert (expanded.cpus_before, expanded.cpus_after) == (1, 2)
        assert expanded.detail == "expanded 1 -> 2 CPUs, MPL 1.00"
        assert running.cpus_before is None
        assert all(e.event != "resized" for e in events_of(c, "R"))

        assert c.journal is not None
        history = [e for e in c.journal.history("A") if e.kind == "resized"]
        assert [(e.before, e.parts) for e in history] == [
            ((Part("a1", 2),), (Part("a1", 1),)),
            ((Part("a1", 1),), (Part("a1", 2),)),
        ]
        assert not [e for e in c.journal.history("R") if e.kind == "resized"]
        # A watcher that missed them gets the same events, CPUs included, from the journal.
        assert c.journal.job_events(["A"]) == [queued, running, shrunk, expanded]
    finally:
        await c.stop()


async def test_status_shows_the_resized_parts(tmp_path: Path) -> None:
    c, _ = await shrunk_cluster(tmp_path / "j.sqlite")
    try:
        rid = c.client.request_id()
        await c.client.send(StatusRequest(request_id=rid, reply_to=c.client.name))
        reply = await c.client.inbox.expect(StatusReply, lambda r: r.request_id == rid)
        parts = {j.id: j.parts for j in reply.running}
        assert parts == {
            "R": (PartSpec(machine="a1", cpus=2),),
            "A": (PartSpec(machine="a1", cpus=1),),
            "B": (PartSpec(machine="a1", cpus=1),),
        }
    finally:
        await c.stop()


async def test_a_restarted_scheduler_keeps_the_resized_allocation(tmp_path: Path) -> None:
    """The journal holds A on 1 CPU. An agent that missed the ResizePart re-announces
    A on 2: it is told 1 again; the core plans with 1, and A expands when B ends."""
    c, a1 = await shrunk_cluster(tmp_path / "j.sqlite")
    try:
        await c.kill_scheduler()
        # The fake agent reports each part with its StartPart's CPUs: A on 2.
        assert a1.part("A").cpus == 2
        actor = await c.start()
        assert {p.job.id: p.parts for p in actor.core.pending.values()}["A"] == (Part("a1", 1),)
        await a1.heartbeat()
        await eventually(lambda: not actor.reconciling)
        running = {r.job.id: r.parts for r in actor.core.running}
        assert running == {"R": (Part("a1", 2),), "A": (Part("a1", 1),), "B": (Part("a1", 1),)}
        assert actor.core.free("a1") == 0
        # Told the journal's CPUs again; R and B, re-announced as journalled, are not.
        await eventually(lambda: resize_commands(a1, "A") == [1, 1])
        assert resize_commands(a1, "R") == resize_commands(a1, "B") == []
        # Its event sequence goes on, and it expands when the queue empties.
        await a1.finish("B")
        await eventually(lambda: resize_commands(a1, "A") == [1, 1, 2])
        await eventually(lambda: events_of(c, "A")[-1].cpus_after == 2)
        seqs = [e.seq for e in events_of(c, "A")]
        assert seqs == list(range(1, len(seqs) + 1))
        assert resizes(actor, "expand") == 1  # this process's count (a restart starts at 0)
    finally:
        await c.stop()


async def test_an_agent_that_applied_the_resize_is_not_told_again(tmp_path: Path) -> None:
    c, a1 = await shrunk_cluster(tmp_path / "j.sqlite")
    try:
        await c.kill_scheduler()
        await a1.announce(
            [
                RunningPart(job_id="R", cpus=2, started=0.0, attempt=1),
                RunningPart(job_id="A", cpus=1, started=0.0, attempt=1),
                RunningPart(job_id="B", cpus=1, started=0.0, attempt=1),
            ]
        )
        actor = await c.start()
        await eventually(lambda: not actor.reconciling)
        await c.settle()
        assert resize_commands(a1, "A") == [1]
        assert {r.job.id: r.cpus for r in actor.core.running} == {"R": 2, "A": 1, "B": 1}
    finally:
        await c.stop()


async def test_forged_and_malformed_resize_messages_change_nothing(tmp_path: Path) -> None:
    c, a1 = await shrunk_cluster(tmp_path / "j.sqlite")
    try:
        actor = c.actor
        assert actor is not None

        def layout() -> dict[str, tuple[Part, ...]]:
            return {r.job.id: r.parts for r in actor.core.running}

        before = layout()
        registry = actor.ctx.metrics.registry

        def bad(reason: str) -> float:
            value = registry.get_sample_value(
                "accordion_scheduler_bad_messages_total", {"reason": reason}
            )
            assert value is not None
            return value

        unexpected, invalid = bad("unexpected"), bad("invalid")
        # A ResizePart is a command to agents: forged to the scheduler, it is refused.
        forged = ResizePart(job_id="A", cpus=4, pace=1.0, job_cpus=4, attempt=1)
        await c.client.send(forged)
        await a1.event(forged)
        # Malformed: no CPUs at all, and a resize event with a negative CPU count.
        zero = encode(forged).replace(b"\xa4cpus\x04", b"\xa4cpus\x00")
        assert zero != encode(forged)
        await c.client.send_raw(zero)
        await a1.publish(TOPICS.agent_events("a1"), forged)
        await c.client.send_raw(
            encode(
                JobEvent(job_id="A", event=JobEventKind.RESIZED, seq=9, cpus_after=4, at=0.0)
            ).replace(b"\xaacpus_after\x04", b"\xaacpus_after\xff")
        )
        # A heartbeat (the agent's own topic) claiming A holds all 4 CPUs.
        await a1.event(
            Heartbeat(
                agent_id="a1",
                seq=99,
                running=(
                    RunningPart(job_id="R", cpus=2, started=0.0, attempt=1),
                    RunningPart(job_id="A", cpus=4, started=0.0, attempt=1),
                    RunningPart(job_id="B", cpus=1, started=0.0, attempt=1),
                ),
            )
        )
        await c.settle()
        assert layout() == before
        assert actor.core.free("a1") == 0
        assert bad("unexpected") == unexpected + 3
        assert bad("invalid") == invalid + 2
        assert resizes(actor, "shrink") == 1
        assert resizes(actor, "expand") == 0
        assert resize_commands(a1, "A") == [1]
        # The journal agrees, and nothing was lost: B ends, A expands, all finish.
        with Journal(tmp_path / "j.sqlite") as journal:
            row = journal.job("A")
        assert row is not None
        assert row.parts == (Part("a1", 1),)
        await a1.finish("B")
        await eventually(lambda: resize_commands(a1, "A") == [1, 2])
        await a1.finish("A")
        await a1.finish("R")
        await eventually(lambda: all(c.state(j) == "finished" for j in ("A", "B", "R")))
    finally:
        await c.stop()
