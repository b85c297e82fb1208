"""The lost-agent rule in the live actor: Last Will, silence, new incarnation, vanished parts."""

from __future__ import annotations

from pathlib import Path

from broker.codec import encode
from broker.messages import AgentOffline, JobEvent, RunningPart, StatusReply, StatusRequest
from scheduler.runtime.clock import ManualClock
from scheduler.runtime.journal import Journal
from tests.builders import spec
from tests.scheduler.runtime.harness import SETTINGS, TOPICS, Cluster, eventually


def lost(cluster: Cluster, reason: str) -> float | None:
    assert cluster.actor is not None
    return cluster.actor.metrics.registry.get_sample_value(
        "accordion_scheduler_agents_lost_total", {"reason": reason}
    )


def requeues(cluster: Cluster) -> float | None:
    assert cluster.actor is not None
    return cluster.actor.metrics.registry.get_sample_value("accordion_scheduler_requeues_total")


async def test_last_will_requeues_the_job_and_it_restarts_on_another_agent(
    cluster: Cluster,
) -> None:
    fast = await cluster.agent("fast", 4, speed=2.0)
    slow = await cluster.agent("slow", 4, speed=1.0)
    await cluster.client.submit(spec("j", 2))
    await eventually(lambda: fast.started("j"))
    cluster.clock.advance(10.0)
    await fast.kill()
    await eventually(lambda: slow.started("j"))
    assert not cluster.online("fast")
    with Journal(cluster.path) as journal:
        row = journal.job("j")
    assert row is not None
    assert (row.state.value, row.requeues, row.start) == ("running", 1, 1010.0)
    assert [(p.machine, p.cpus) for p in row.parts] == [("slow", 2)]
    assert row.submit == 1000.0  # the same job: id and submit time kept
    assert lost(cluster, "will") == 1
    assert requeues(cluster) == 1
    await cluster.client.inbox.expect(JobEvent, lambda e: e.event == "requeued")


async def test_requeued_twice_then_failed(cluster: Cluster) -> None:
    agents = [await cluster.agent(f"a{i}", 4, speed=4.0 - i) for i in range(3)]
    await cluster.client.submit(spec("j", 4))
    for agent in agents:
        await eventually(lambda agent=agent: agent.started("j"))  # type: ignore[misc]
        await agent.kill()
    await eventually(lambda: cluster.state("j") == "failed")
    with Journal(cluster.path) as journal:
        row = journal.job("j")
    assert row is not None
    assert (row.state.value, row.requeues) == ("failed", 2)
    assert "already requeued 2 times" in (row.detail or "")
    assert requeues(cluster) == 2
    assert lost(cluster, "will") == 3
    sample = cluster.actor.metrics.registry.get_sample_value  # type: ignore[union-attr]
    assert sample("accordion_scheduler_jobs_finished_total", {"state": "failed"}) == 1


async def test_a_lost_part_cancels_the_others_and_a_too_wide_job_waits(cluster: Cluster) -> None:
    a1, a2 = await cluster.job_across_two()
    await a1.kill()
    await eventually(lambda: a2.cancels("wide") == 1)
    assert cluster.state("wide") == "queued"
    # Two CPUs are left; the 4-wide job waits for room without blocking a small one.
    await cluster.client.submit(spec("small", 1))
    await eventually(lambda: a2.started("small"))
    big = await cluster.agent("big", 8)
    await eventually(lambda: big.started("wide"))


async def test_requeued_job_keeps_its_place_in_the_queue(cluster: Cluster) -> None:
    a1 = await cluster.agent("a1", 2, speed=2.0)
    await cluster.client.submit(spec("first", 2))
    await eventually(lambda: a1.started("first"))
    cluster.clock.advance(1.0)
    await cluster.client.submit(spec("second", 2), spec("third", 2))
    await a1.kill()
    await eventually(lambda: cluster.state("first") == "queued")
    actor = cluster.actor
    assert actor is not None
    assert [j.id for j in actor.core.queue] == ["first", "second", "third"]
    a2 = await cluster.agent("a2", 2)
    await eventually(lambda: a2.started("first"))
    assert not a2.started("second")


async def test_heartbeat_silence_is_detected(cluster: Cluster) -> None:
    quiet = await cluster.agent("quiet", 4, speed=2.0)
    chatty = await cluster.agent("chatty", 4)
    await cluster.client.submit(spec("j", 2))
    await eventually(lambda: quiet.started("j"))
    # 6 heartbeats of 2 s: 12 s of silence is allowed, more is not; past 1.5 beats
    # (3 s) the agent is suspect but keeps its machine and its part.
    assert SETTINGS.silence_limit == 12.0
    assert SETTINGS.suspect_limit == 3.0
    await chatty.heartbeat()
    await cluster.tick(3.5)
    assert cluster.agent_state("quiet") == "suspect"
    assert cluster.online("quiet")
    for _ in range(4):
        await chatty.heartbeat()
        await cluster.tick(2.0)
    assert cluster.online("quiet")
    assert cluster.agent_state("quiet") == "suspect"
    await chatty.heartbeat()
    await cluster.tick(1.0)
    assert not cluster.online("quiet")
    assert cluster.agent_state("quiet") == "lost"
    assert cluster.online("chatty")
    assert lost(cluster, "silence") == 1
    await eventually(lambda: chatty.started("j"))
    # A silent agent may still be alive: it is told to drop the part.
    await eventually(lambda: quiet.cancels("j") == 1)
    # Heard again: it rejoins, and a part it still reports is cancelled once more.
    await quiet.heartbeat(running=["j"])
    await eventually(lambda: cluster.online("quiet"))
    await eventually(lambda: quiet.cancels("j") == 2)
    assert cluster.state("j") == "running"


async def test_silence_is_measured_in_cluster_time_of_the_scale(journal_path: Path) -> None:
    c = Cluster(journal_path, clock=ManualClock(0.0, time_scale=100.0))
    await c.client.start()
    await c.start()
    try:
        await c.agent("a1", 4)
        await c.tick(1100.0)  # 11 wall seconds at K = 100
        assert c.online("a1")
        await c.tick(200.0)  # 13 wall seconds
        assert not c.online("a1")
    finally:
        await c.stop()


async def test_a_new_incarnation_loses_the_old_ones_parts(cluster: Cluster) -> None:
    a1 = await cluster.agent("a1", 4)
    await cluster.client.submit(spec("j", 2))
    await eventually(lambda: a1.started("j"))
    starts = len(a1.starts())
    a1.incarnation = "i2"
    a1.running.clear()
    await a1.announce()
    await eventually(lambda: len(a1.starts()) == starts + 1)
    assert lost(cluster, "incarnation") == 1
    with Journal(cluster.path) as journal:
        row = journal.job("j")
    assert row is not None
    assert (row.state.value, row.requeues) == ("running", 1)
    # The old incarnation's will, arriving late, changes nothing.
    offline = AgentOffline(agent_id="a1", incarnation="i1", reason="lost")
    await a1.publish(TOPICS.agent_state("a1"), offline)
    await cluster.client.submit(spec("probe", 1))
    assert cluster.online("a1")
    assert cluster.state("j") == "running"


async def test_a_retained_will_of_an_unknown_agent_is_ignored(cluster: Cluster) -> None:
    offline = AgentOffline(agent_id="ghost", incarnation="i9", reason="lost")
    await cluster.client.send_raw(encode(offline), TOPICS.agent_state("ghost"))
    reply = await cluster.client.submit(spec("j", 1))
    assert not reply.results[0].accepted  # no machine at all yet
    sample = cluster.actor.metrics.registry.get_sample_value  # type: ignore[union-attr]
    assert sample("accordion_scheduler_bad_messages_total", {"reason": "unexpected"}) == 0


async def test_a_goodbye_with_parts_given_up_requeues_them_elsewhere(cluster: Cluster) -> None:
    leaving = await cluster.agent("leaving", 4, speed=2.0)
    staying = await cluster.agent("staying", 4)
    await cluster.client.submit(spec("j", 2), spec("k", 2))
    await eventually(lambda: leaving.started("j") and leaving.started("k"))
    # The agent's shutdown rule: parts reported "lost", then a goodbye.
    await leaving.finish("j", exit_code=-15, reason="lost")
    await eventually(lambda: staying.started("j") and staying.started("k"))
    await leaving.finish("k", exit_code=-15, reason="lost")
    goodbye = AgentOffline(agent_id="leaving", incarnation="i1", reason="goodbye")
    await leaving.publish(TOPICS.agent_state("leaving"), goodbye, retain=True)
    await cluster.client.submit(spec("probe", 1))
    assert cluster.state("j") == cluster.state("k") == "running"
    assert len(leaving.starts()) == 2  # nothing new went to the leaving agent
    assert lost(cluster, "goodbye") == 1
    assert requeues(cluster) == 2


async def test_a_goodbye_without_parts_is_not_a_loss(cluster: Cluster) -> None:
    a1 = await cluster.agent("a1", 4)
    goodbye = AgentOffline(agent_id="a1", incarnation="i1", reason="goodbye")
    await a1.publish(TOPICS.agent_state("a1"), goodbye, retain=True)
    await eventually(lambda: not cluster.online("a1"))
    assert lost(cluster, "goodbye") == 0


async def test_a_part_that_vanishes_from_heartbeats_is_lost(cluster: Cluster) -> None:
    a1, a2 = await cluster.job_on_the_faster_of_two()
    await a1.heartbeat()  # lists j
    await a1.heartbeat(running=[])
    await cluster.client.submit(spec("probe", 1))
    assert cluster.state("j") == "running"  # one miss may be a report in flight
    await a1.heartbeat(running=[])
    # Requeued, and started again (on the fastest agent, the same one).
    await eventually(lambda: sum(1 for s in a1.starts() if s.job and s.job.id == "j") == 2)
    assert requeues(cluster) == 1
    assert not a2.started("j")


async def test_an_agent_that_keeps_its_state_current_is_not_reannounced_wrongly(
    cluster: Cluster,
) -> None:
    a1 = await cluster.agent("a1", 4)
    await cluster.client.submit(spec("j", 2))
    await eventually(lambda: a1.started("j"))
    await a1.announce([RunningPart(job_id="j", cpus=2, started=0.0)])
    await a1.heartbeat()
    await cluster.client.submit(spec("probe", 1))
    assert a1.cancels("j") == 0
    assert cluster.state("j") == "running"


async def test_a_suspect_agent_is_cordoned_until_heard_again(cluster: Cluster) -> None:
    """No new part goes to a SUSPECT agent; its running part stays; a heartbeat lifts it."""
    quiet = await cluster.agent("quiet", 4, speed=2.0)
    chatty = await cluster.agent("chatty", 1)
    await cluster.client.submit(spec("running", 2))
    await eventually(lambda: quiet.started("running"))
    await chatty.heartbeat()
    await cluster.tick(3.5)
    assert cluster.agent_state("quiet") == "suspect"
    await chatty.heartbeat()  # chatty was silent as long: heard again, it is not
    await eventually(lambda: cluster.agent_state("chatty") == "online")
    # 3 CPUs: quiet's 2 free ones plus chatty's 1. With quiet cordoned it must wait.
    await cluster.client.submit(spec("wide", 3))
    # A later batch's answer: the decision on the submission has been made by then.
    await cluster.client.send(StatusRequest(request_id="probe", reply_to=cluster.client.name))
    await cluster.client.inbox.expect(StatusReply, lambda r: r.request_id == "probe")
    assert cluster.state("wide") == "queued"
    assert not quiet.started("wide")
    assert cluster.state("running") == "running"
    await quiet.heartbeat(running=["running"])
    await eventually(lambda: quiet.started("wide"))
    assert chatty.started("wide")
    assert cluster.agent_state("quiet") == "online"
