"""Fencing and liveness: attempts, stale reports, forged wills, progress that is not a
heartbeat; the restart order; durable events."""

from __future__ import annotations

from pathlib import Path

from broker.codec import encode
from broker.messages import (
    AgentOffline,
    CancelPart,
    ExecutionSpec,
    HistoryReply,
    HistoryRequest,
    JobEvent,
    PartFinished,
    PartProgress,
    StartPart,
    SubmitJobs,
    SubmitReply,
)
from broker.vocabulary import JobEventKind
from model.execution import ExecutionModel, ModelKind
from scheduler.live.settings import ActorSettings
from scheduler.runtime.clock import ManualClock
from tests.builders import spec
from tests.scheduler.runtime.harness import SETTINGS, TOPICS, Cluster, FakeAgent, eventually


def stale(cluster: Cluster) -> float | None:
    assert cluster.actor is not None
    return cluster.actor.metrics.registry.get_sample_value(
        "accordion_scheduler_stale_reports_total"
    )


def cancels_of(agent: FakeAgent, job_id: str, attempt: int) -> int:
    return sum(
        1
        for c in agent.commands
        if isinstance(c, CancelPart) and c.job_id == job_id and c.attempt == attempt
    )


def attempts(agent: FakeAgent, job_id: str) -> list[int]:
    return [
        c.attempt
        for c in agent.commands
        if isinstance(c, StartPart) and c.job is not None and c.job.id == job_id
    ]


async def silence(cluster: Cluster, quiet: FakeAgent, chatty: FakeAgent) -> None:
    """Let ``quiet`` fall silent past the limit while ``chatty`` keeps beating."""
    step = SETTINGS.heartbeat_interval
    for _ in range(int(SETTINGS.silence_factor) + 1):
        await chatty.heartbeat()
        await cluster.tick(step)
    await eventually(lambda: not cluster.online(quiet.id))


async def test_every_start_carries_its_attempt_and_a_stale_end_changes_nothing(
    cluster: Cluster,
) -> None:
    a1, a2 = await cluster.job_on_the_faster_of_two()
    assert attempts(a1, "j") == [1]
    await silence(cluster, a1, a2)
    await eventually(lambda: a2.started("j"))
    assert attempts(a2, "j") == [2]
    # a1 was only cut off: its attempt 1 ends "done" and its report arrives late.
    await a1.event(
        PartFinished(job_id="j", agent_id="a1", exit_code=0, attempt=1, at=0.0, reason="done")
    )
    await cluster.settle()
    assert cluster.state("j") == "running"
    # Attempt 2 ends: the job is done, once.
    await a2.finish("j")
    await eventually(lambda: cluster.state("j") == "finished")


async def test_a_rejoining_agent_is_told_to_kill_its_stale_attempt(cluster: Cluster) -> None:
    a1, a2 = await cluster.job_on_the_faster_of_two()
    await silence(cluster, a1, a2)
    await eventually(lambda: a2.started("j"))
    before = stale(cluster) or 0.0
    # a1 was frozen: it never acted on the CancelPart sent when it was lost, and
    # wakes up still running attempt 1.
    a1.running["j"] = next(c for c in a1.commands if isinstance(c, StartPart))
    await a1.heartbeat()
    await eventually(lambda: cluster.online("a1"))
    # Heard again, still listing attempt 1: it rejoins and attempt 1 is fenced off.
    await eventually(lambda: cancels_of(a1, "j", 1) == 2)
    assert (stale(cluster) or 0.0) > before
    assert cluster.state("j") == "running"
    assert cancels_of(a2, "j", 2) == 0


async def test_a_forged_will_costs_at_most_one_heartbeat_of_double_running(
    cluster: Cluster,
) -> None:
    a1, a2 = await cluster.job_on_the_faster_of_two()
    forged = AgentOffline(agent_id="a1", incarnation="i1", reason="lost")
    await cluster.client.send_raw(encode(forged), TOPICS.agent_state("a1"))
    await eventually(lambda: a2.started("j"))
    # The will's loss already told a1 to stop attempt 1 (it may still be alive) ...
    await eventually(lambda: cancels_of(a1, "j", 1) == 1)
    # ... and its next heartbeat brings it back, with attempt 1 fenced off again.
    await a1.heartbeat(running=[])
    await eventually(lambda: cluster.online("a1"))
    assert cluster.agent_state("a1") == "online"


async def test_progress_is_not_liveness(cluster: Cluster) -> None:
    a1, a2 = await cluster.job_on_the_faster_of_two()
    step = SETTINGS.heartbeat_interval
    for _ in range(int(SETTINGS.silence_factor) + 1):
        # The job process publishes progress on a1's topic; a1 itself is frozen.
        await a1.event(
            PartProgress(job_id="j", agent_id="a1", done=1.0, rate=1.0, attempt=1, at=0.0)
        )
        await a2.heartbeat()
        await cluster.tick(step)
    await eventually(lambda: not cluster.online("a1"))
    await eventually(lambda: a2.started("j"))


async def test_submissions_wait_for_the_startup_grace(journal_path: Path) -> None:
    settings = ActorSettings(
        tick_interval=3600.0, summary_interval=0.0, startup_grace=3.0, job_events="all"
    )
    c = Cluster(journal_path, settings=settings, clock=ManualClock(1000.0))
    await c.client.start()
    await c.start()
    try:
        # A submission queued at the broker arrives before any agent has registered.
        pending = c.client.request_id()
        await c.client.send(SubmitJobs(request_id=pending, reply_to="c1", jobs=(spec("j", 2),)))
        await c.settle()
        assert c.actor is not None
        assert c.actor.holding
        assert not c.client.inbox.all(SubmitReply)
        agent = await c.agent("a1", 4)
        await c.tick(3.0)
        reply = await c.client.inbox.expect(SubmitReply, lambda r: r.request_id == pending)
        assert reply.results[0].accepted, reply.results[0].reason
        await eventually(lambda: agent.started("j"))
    finally:
        await c.stop()


async def test_walltime_above_the_maximum_is_refused(journal_path: Path) -> None:
    settings = ActorSettings(
        tick_interval=3600.0, summary_interval=0.0, startup_grace=0.0, max_walltime=1000.0
    )
    c = Cluster(journal_path, settings=settings)
    await c.client.start()
    await c.start()
    try:
        await c.agent("a1", 4)
        reply = await c.client.submit(spec("long", walltime=1001.0, work=10.0), spec("ok"))
        assert [r.accepted for r in reply.results] == [False, True]
        assert "maximum 1000" in (reply.results[0].reason or "")
    finally:
        await c.stop()


async def test_job_events_are_numbered_journalled_and_answered_on_request(
    cluster: Cluster,
) -> None:
    a1 = await cluster.agent("a1", 4)
    await cluster.client.submit(spec("j", 2))
    await eventually(lambda: a1.started("j"))
    await a1.finish("j")
    await eventually(lambda: cluster.state("j") == "finished")
    seen = await cluster.client.inbox.expect(JobEvent, lambda e: e.event == "finished")
    events = cluster.client.inbox.all(JobEvent, lambda e: e.job_id == "j")
    assert [(e.seq, e.event) for e in events] == [(1, "queued"), (2, "running"), (3, "finished")]
    assert seen.seq == 3
    await cluster.client.send(
        HistoryRequest(request_id="h1", reply_to="c1", job_ids=("j", "nobody"))
    )
    history = await cluster.client.inbox.expect(HistoryReply, lambda r: r.request_id == "h1")
    assert [(e.seq, e.event) for e in history.events] == [
        (1, "queued"),
        (2, "running"),
        (3, "finished"),
    ]
    assert history.unknown == ("nobody",)


async def test_event_numbers_go_on_after_a_restart(journal_path: Path) -> None:
    c = Cluster(journal_path)
    await c.client.start(TOPICS.events)
    await c.start()
    try:
        a1 = await c.agent("a1", 4, auto_finish=False)
        await c.client.submit(spec("j", 2))
        await eventually(lambda: a1.started("j"))
        await c.kill_scheduler()
        await c.start()
        await a1.heartbeat()
        await eventually(lambda: c.actor is not None and not c.actor.reconciling)
        await a1.finish("j")
        # The journal's row is written before the event goes out: wait for the event.
        await c.client.inbox.expect(
            JobEvent, lambda e: e.job_id == "j" and e.event == JobEventKind.FINISHED
        )
        assert c.state("j") == "finished"
        events = c.client.inbox.all(JobEvent, lambda e: e.job_id == "j")
        seqs = [e.seq for e in events]
        assert seqs == list(range(1, len(seqs) + 1)), [(e.seq, e.event) for e in events]
        assert events[-1].state == "finished"
    finally:
        await c.stop()


async def test_starts_carry_the_schedulers_execution_model(journal_path: Path) -> None:
    model = ExecutionModel(kind=ModelKind.PAPER, seed=7, ov_min=0.1, ov_max=0.4)
    c = Cluster(journal_path, execution=model)
    await c.client.start()
    await c.start()
    try:
        agent = await c.agent("a1", 4)
        await c.client.submit(spec("j", 2))
        await eventually(lambda: agent.started("j"))
        (start,) = agent.starts()
        assert start.execution == ExecutionSpec(
            kind="paper", overhead=0.0, ov_min=0.1, ov_max=0.4, seed=7
        )
        assert start.issued > 0
    finally:
        await c.stop()
