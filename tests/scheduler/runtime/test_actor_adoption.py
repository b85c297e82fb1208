"""Holding a lost agent's parts for adoption (``scheduler.live.agent_hold``), in the live actor.

Fake agents over the memory bus, a manual clock (cluster seconds at K = 1): a
will from an agent that declares ``adopts`` with a lease of 8 s holds its
parts; a new incarnation listing them within the lease adopts them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from broker.messages import JobEvent, PartFinished, PartStarted, RunningPart
from scheduler.live.settings import JobEvents
from scheduler.runtime.journal import Journal
from tests.builders import spec
from tests.scheduler.runtime.harness import SETTINGS, Cluster, FakeAgent, eventually

LEASE = 8.0


def sample(cluster: Cluster, name: str, labels: dict[str, str] | None = None) -> float | None:
    assert cluster.actor is not None
    return cluster.actor.metrics.registry.get_sample_value(name, labels or {})


async def _adopting(cluster: Cluster, agent_id: str = "a1") -> FakeAgent:
    return await cluster.agent(agent_id, 4, lease=LEASE, adopts=True)


async def _restart(agent: FakeAgent, incarnation: str, running: list[RunningPart]) -> None:
    agent.incarnation = incarnation
    await agent.start(announce=running)


def _events(cluster: Cluster, job_id: str) -> list[str]:
    with Journal(cluster.path) as journal:
        return [e.event for e in journal.job_events([job_id])]


async def test_a_will_holds_the_parts_and_a_new_incarnation_adopts_them(
    cluster: Cluster,
) -> None:
    a1 = await _adopting(cluster)
    other = await cluster.agent("other", 4)
    await cluster.client.submit(spec("j", 2))
    await eventually(lambda: a1.started("j"))
    with Journal(cluster.path) as journal:
        before = journal.job("j")
    assert before is not None
    part = a1.part("j")
    cluster.clock.advance(3.0)
    await a1.kill()
    await eventually(lambda: cluster.agent_state("a1") == "held")
    # Held: still running there, nothing requeued, no new part on the machine.
    assert cluster.state("j") == "running"
    assert not other.started("j")
    await cluster.client.submit(spec("probe", 1))
    await eventually(lambda: other.started("probe"))
    assert not a1.started("probe")
    cluster.clock.advance(4.0)  # within the 8 s lease
    await _restart(a1, "i2", [part])
    await eventually(lambda: cluster.agent_state("a1") == "online")
    await cluster.client.inbox.expect(JobEvent, lambda e: e.job_id == "j" and e.event == "adopted")
    await a1.heartbeat(running=["j"])
    await other.heartbeat()
    await cluster.tick(9.0)  # past the hold-off: nothing more happens to it
    assert cluster.state("j") == "running"
    await a1.finish("j")
    await eventually(lambda: cluster.state("j") == "finished")
    with Journal(cluster.path) as journal:
        row = journal.job("j")
    assert row is not None
    # Its run is continuous: the same start, no requeue, started once.
    assert (row.requeues, row.start) == (0, before.start)
    assert len(a1.starts()) == 1
    assert "held" in _events(cluster, "j")
    assert sample(cluster, "accordion_scheduler_agents_adopted_parts_total") == 1
    assert sample(cluster, "accordion_scheduler_agent_holds_total", {"outcome": "adopted"}) == 1
    assert sample(cluster, "accordion_scheduler_requeues_total") == 0


async def test_parts_the_new_incarnation_does_not_list_are_requeued_at_once(
    cluster: Cluster,
) -> None:
    a1 = await _adopting(cluster)
    await cluster.client.submit(spec("kept", 2), spec("gone", 2))
    await eventually(lambda: a1.started("kept") and a1.started("gone"))
    kept = a1.part("kept")
    await a1.kill()
    await eventually(lambda: cluster.agent_state("a1") == "held")
    a1.running.pop("gone")
    await _restart(a1, "i2", [kept])
    await eventually(lambda: cluster.state("gone") == "queued" or len(a1.starts()) == 3)
    assert cluster.state("kept") == "running"
    with Journal(cluster.path) as journal:
        gone = journal.job("gone")
    assert gone is not None
    assert gone.requeues == 1


async def test_the_hold_ends_after_the_lease_and_the_job_is_requeued_once(
    cluster: Cluster,
) -> None:
    a1 = await _adopting(cluster)
    other = await cluster.agent("other", 4)
    await cluster.client.submit(spec("j", 4))
    await eventually(lambda: a1.started("j"))
    await a1.kill()
    await eventually(lambda: cluster.agent_state("a1") == "held")
    await cluster.tick(LEASE - 0.5)
    assert cluster.state("j") == "running"
    assert not other.started("j")
    await other.heartbeat()
    await cluster.tick(1.0)  # past the lease: the parts stopped by themselves
    assert cluster.agent_state("a1") == "lost"
    await eventually(lambda: other.started("j"))
    assert [s.attempt for s in other.starts() if s.job and s.job.id == "j"] == [2]
    assert sample(cluster, "accordion_scheduler_agent_holds_total", {"outcome": "expired"}) == 1
    assert sample(cluster, "accordion_scheduler_requeues_total") == 1


async def test_an_agent_that_does_not_adopt_is_lost_at_once(cluster: Cluster) -> None:
    a1 = await cluster.agent("a1", 4, lease=LEASE, adopts=False)
    other = await cluster.agent("other", 4)
    await cluster.client.submit(spec("j", 4))
    await eventually(lambda: a1.started("j"))
    await a1.kill()
    await eventually(lambda: other.started("j"))


async def test_a_new_incarnation_without_a_will_first_adopts_too(cluster: Cluster) -> None:
    a1 = await _adopting(cluster)
    await cluster.client.submit(spec("j", 2))
    await eventually(lambda: a1.started("j"))
    a1.incarnation = "i2"
    await a1.announce([a1.part("j")])
    await cluster.client.inbox.expect(JobEvent, lambda e: e.job_id == "j" and e.event == "adopted")
    assert cluster.agent_state("a1") == "online"
    assert cluster.state("j") == "running"
    assert len(a1.starts()) == 1


async def test_a_scheduler_restart_during_the_hold_waits_it_out(journal_path: Path) -> None:

    # A lease longer than the restart's reconcile grace: the journaled hold decides.
    c = Cluster(journal_path, settings=replace(SETTINGS, reconcile_grace=2.0))
    await c.client.start()
    await c.start()
    try:
        a1 = await c.agent("a1", 4, lease=30.0, adopts=True)
        await c.client.submit(spec("j", 2), spec("k", 2))
        await eventually(lambda: a1.started("j") and a1.started("k"))
        parts = [a1.part("j"), a1.part("k")]
        await a1.kill()
        await eventually(lambda: c.agent_state("a1") == "held")
        await c.kill_scheduler()
        c.clock.advance(5.0)
        await c.start()
        await c.tick(10.0)  # past the reconcile grace, within the 30 s hold
        assert c.state("j") == "running"
        assert c.state("k") == "running"
        # The adopting incarnation lists j only: j goes on, k is lost when heard so.
        a1.running.pop("k")
        await _restart(a1, "i2", parts[:1])
        await a1.heartbeat(running=["j"])
        await eventually(lambda: c.state("k") == "queued" or a1.starts()[-1].job.id == "k")  # type: ignore[union-attr]
        await a1.finish("j")
        await eventually(lambda: c.state("j") == "finished")
        with Journal(c.path) as journal:
            row = journal.job("j")
        assert row is not None
        assert row.requeues == 0
    finally:
        await c.stop()


@pytest.mark.parametrize("job_events", ["lifecycle", "none"])
async def test_a_scheduler_restart_during_the_hold_requeues_after_it(
    journal_path: Path, job_events: JobEvents
) -> None:
    # With no job events journaled, the hold is still in the job's row.
    settings = replace(SETTINGS, reconcile_grace=2.0, job_events=job_events)
    c = Cluster(journal_path, settings=settings)
    await c.client.start()
    await c.start()
    try:
        a1 = await c.agent("a1", 4, lease=30.0, adopts=True)
        await c.client.submit(spec("j", 2))
        await eventually(lambda: a1.started("j"))
        await a1.kill()
        await eventually(lambda: c.agent_state("a1") == "held")
        await c.kill_scheduler()
        await c.start()
        await c.tick(20.0)
        assert c.state("j") == "running"  # pending: the hold has 10 s to go
        await c.tick(11.0)
        assert c.state("j") == "queued"
    finally:
        await c.stop()


async def test_a_start_the_old_incarnation_never_had_is_sent_again_uncharged(
    cluster: Cluster,
) -> None:
    a1 = await cluster.agent("a1", 4, lease=LEASE, adopts=True, ack_starts=False)
    await cluster.client.submit(spec("j", 2))
    await eventually(lambda: a1.started("j"))
    await a1.kill()  # before it acknowledged (or forked) the start
    await eventually(lambda: cluster.agent_state("a1") == "held")
    a1.ack_starts = True
    a1.running.clear()
    await _restart(a1, "i2", [])
    await eventually(lambda: len(a1.starts()) == 2)
    again = a1.starts()[-1]
    assert again.attempt == 1  # the same start: no requeue charged
    await a1.finish("j")
    await eventually(lambda: cluster.state("j") == "finished")
    with Journal(cluster.path) as journal:
        row = journal.job("j")
    assert row is not None
    assert row.requeues == 0


async def test_a_start_fenced_before_it_ran_is_requeued_uncharged(cluster: Cluster) -> None:
    """More fenced refusals than the requeue budget (2): the job is never failed for
    them, and a part fenced after it ran is charged as before."""
    a1 = await cluster.agent("a1", 4, ack_starts=False)
    await cluster.client.submit(spec("j", 2))
    for attempt in (1, 2, 3, 4):
        await eventually(lambda n=attempt: len(a1.starts()) == n)  # type: ignore[misc]
        assert a1.starts()[-1].attempt == attempt
        fenced = PartFinished(
            job_id="j", agent_id="a1", exit_code=-1, reason="fenced", attempt=attempt, at=0.0
        )
        await a1.event(fenced)
    await eventually(lambda: len(a1.starts()) == 5)
    assert cluster.state("j") == "running"
    # Fenced after it ran (the lease lapsed under it): charged, the budget applies.
    await a1.event(PartStarted(job_id="j", agent_id="a1", pid=1, attempt=5, at=0.0))
    for attempt in (5, 6, 7):
        await eventually(lambda n=attempt: len(a1.starts()) >= n)  # type: ignore[misc]
        await a1.event(PartStarted(job_id="j", agent_id="a1", pid=1, attempt=attempt, at=0.0))
        lapsed = PartFinished(
            job_id="j", agent_id="a1", exit_code=129, reason="fenced", attempt=attempt, at=0.0
        )
        await a1.event(lapsed)
    await eventually(lambda: cluster.state("j") == "failed")
    assert len(a1.starts()) == 7


async def test_uncharged_requeues_are_uncharged_after_a_scheduler_restart(
    journal_path: Path,
) -> None:
    """Three fenced-before-it-ran requeues, then a restart: the job still has its whole
    budget of two charged requeues (a restart used to count all three against it)."""
    c = Cluster(journal_path)
    await c.client.start()
    await c.start()
    try:
        a1 = await c.agent("a1", 4, ack_starts=False)
        await c.client.submit(spec("j", 2))
        for attempt in (1, 2, 3):
            await eventually(lambda n=attempt: len(a1.starts()) == n)  # type: ignore[misc]
            fenced = PartFinished(
                job_id="j", agent_id="a1", exit_code=-1, reason="fenced", attempt=attempt, at=0.0
            )
            await a1.event(fenced)
        await eventually(lambda: len(a1.starts()) == 4)
        await c.kill_scheduler()
        with Journal(c.path) as journal:
            row = journal.job("j")
        assert row is not None
        assert (row.requeues, row.uncharged) == (3, 3)
        await c.start()
        await a1.heartbeat(running=[])
        # Lost twice after it ran: charged, within the budget of two.
        for n in (1, 2):
            await eventually(lambda k=4 + n: len(a1.starts()) >= k)  # type: ignore[misc]
            attempt = a1.starts()[-1].attempt
            await a1.event(PartStarted(job_id="j", agent_id="a1", pid=1, attempt=attempt, at=0.0))
            lapsed = PartFinished(
                job_id="j", agent_id="a1", exit_code=129, reason="fenced", attempt=attempt, at=0.0
            )
            await a1.event(lapsed)
        await eventually(lambda: len(a1.starts()) >= 7)
        assert c.state("j") != "failed"
    finally:
        await c.stop()


async def test_a_start_that_never_reached_its_agent_is_requeued_uncharged(
    cluster: Cluster,
) -> None:
    """A StartPart lost on the way (a broker killed after acknowledging it): the agent's
    heartbeats never list the part; past the silence limit since the decision the
    start could no longer run there, and the job goes back to the queue, uncharged."""
    a1 = await cluster.agent("a1", 4, ack_starts=False)
    await cluster.client.submit(spec("j", 2))
    await eventually(lambda: a1.started("j"))
    a1.running.clear()  # as if the start had never arrived
    limit = SETTINGS.silence_limit
    # Within the limit, a heartbeat without it proves nothing (the start may be on its way).
    cluster.clock.advance(limit / 2)
    await a1.heartbeat()
    await cluster.settle()
    assert cluster.state("j") == "running"
    assert len(a1.starts()) == 1
    cluster.clock.advance(limit)
    await a1.heartbeat()
    await eventually(lambda: len(a1.starts()) == 2)  # requeued, then started again
    again = a1.starts()[-1]
    assert again.attempt == 2
    with Journal(cluster.path) as journal:
        row = journal.job("j")
        states = [e.event for e in journal.job_events(["j"])]
    assert row is not None
    assert (row.requeues, row.uncharged) == (1, 1)
    assert "requeued" in states
