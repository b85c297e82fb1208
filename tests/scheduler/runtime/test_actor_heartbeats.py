"""What a heartbeat costs the scheduler: nothing but a time stamp when it changes nothing,
the full handling when it does. Counted (decisions, gauge rebuilds, journal rows,
renewals), never timed."""

from __future__ import annotations

from broker.messages import Heartbeat
from tests.builders import spec
from tests.scheduler.runtime.harness import SETTINGS, Cluster, FakeAgent, eventually


def journal_rows(cluster: Cluster) -> int:
    """Rows the journal's connection has written so far (SQLite's total_changes)."""
    assert cluster.journal is not None
    return int(cluster.journal._db.total_changes)


def counts(cluster: Cluster) -> tuple[int, int, int]:
    assert cluster.actor is not None
    return cluster.actor.decisions, cluster.actor.gauge_rebuilds, journal_rows(cluster)


async def beats(cluster: Cluster, agent: FakeAgent, n: int) -> None:
    """``n`` heartbeats from ``agent``, handled (as renewals or not) by the actor."""
    for _ in range(n):
        await agent.heartbeat()
    await cluster.settle()


async def test_a_heartbeat_that_changes_nothing_costs_no_pass_no_write_no_rebuild(
    cluster: Cluster,
) -> None:
    idle = await cluster.agent("idle", 2)
    busy = await cluster.agent("busy", 2)
    await cluster.client.submit(spec("j", 2))
    await eventually(lambda: busy.started("j") or idle.started("j"))
    runner, other = (busy, idle) if busy.started("j") else (idle, busy)
    # The part's first listing moves it from starting to running: a change.
    await runner.heartbeat()
    await cluster.settle()
    assert cluster.actor is not None
    assert cluster.actor.ctx.placements["j"].parts[runner.id].state.value == "running"
    before, renewed = counts(cluster), cluster.actor.renewals
    stamps = {a: cluster.actor.ctx.agents[a].last_heartbeat for a in ("idle", "busy")}
    cluster.clock.advance(1.0)

    await beats(cluster, runner, 5)  # lists its running part, as the scheduler holds it
    await beats(cluster, other, 5)  # lists nothing, and runs nothing

    assert cluster.actor.renewals == renewed + 10
    assert counts(cluster) == before  # no decision, no gauge rebuild, no journal row
    for a in ("idle", "busy"):
        assert cluster.actor.ctx.agents[a].last_heartbeat > stamps[a]
    assert cluster.state("j") == "running"


async def test_a_heartbeat_that_changes_something_still_does_the_work(cluster: Cluster) -> None:
    a1, a2 = await cluster.job_on_the_faster_of_two()
    await a1.heartbeat()
    await cluster.settle()
    assert cluster.actor is not None
    decisions, rebuilds, _rows = counts(cluster)
    renewed = cluster.actor.renewals

    # a2 falls silent past the suspect limit while a1 keeps beating: cordoned.
    cluster.clock.advance(SETTINGS.suspect_limit * cluster.clock.time_scale + 1.0)
    await a1.heartbeat()
    await cluster.tick()
    assert cluster.agent_state("a2") == "suspect"
    assert cluster.actor.gauge_rebuilds > rebuilds
    # Its next heartbeat lifts the cordon: a change, so a decision pass and a rebuild.
    decisions, rebuilds, _rows = counts(cluster)
    renewed = cluster.actor.renewals
    await a2.heartbeat()
    await cluster.settle()
    assert cluster.agent_state("a2") == "online"
    assert cluster.actor.renewals == renewed
    assert cluster.actor.decisions == decisions + 1
    assert cluster.actor.gauge_rebuilds == rebuilds + 1

    # A heartbeat that leaves out a running part is a miss counted against it.
    renewed = cluster.actor.renewals
    await a1.heartbeat(running=[])
    await cluster.settle()
    assert cluster.actor.renewals == renewed
    assert cluster.actor.ctx.placements["j"].parts["a1"].misses == 1
    # And the next one that lists it again clears the miss: still no renewal.
    await a1.heartbeat()
    await cluster.settle()
    assert cluster.actor.renewals == renewed
    assert cluster.actor.ctx.placements["j"].parts["a1"].misses == 0
    # From then on, it is a renewal again.
    await a1.heartbeat()
    await cluster.settle()
    assert cluster.actor.renewals == renewed + 1


async def test_forged_heartbeats_are_never_renewals(cluster: Cluster) -> None:
    a1, _a2 = await cluster.job_on_the_faster_of_two()
    await a1.heartbeat()
    await cluster.settle()
    assert cluster.actor is not None
    renewed = cluster.actor.renewals
    part = a1.part("j")
    # Another agent's name on a1's topic; a stale attempt; the same part twice.
    await a1.event(Heartbeat(agent_id="a2", seq=100, running=()))
    stale = type(part)(job_id="j", cpus=part.cpus, started=0.0, attempt=part.attempt + 5)
    await a1.event(Heartbeat(agent_id="a1", seq=101, running=(stale,)))
    await a1.event(Heartbeat(agent_id="a1", seq=102, running=(part, part)))
    await cluster.settle()
    assert cluster.actor.renewals == renewed
    # The stale attempt was told to stop, as before the fast path.
    assert a1.cancels("j") >= 1
