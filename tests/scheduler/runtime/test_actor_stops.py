"""Polite stops and drains, as the scheduler actor sees them from its agents and admins.

An agent its operator stopped says ``stopping``: its jobs are held for its next
incarnation (it adopts) or requeued at once (it does not), and nothing is ever
charged to a job's requeue budget for it, with the cause journaled. An admin
drains a machine: nothing new is placed there, its jobs run to their end, the
drain outlasts the agent's restart and the scheduler's; ``resume`` lifts it.
Fake agents on the in-process broker, a manual clock.
"""

from __future__ import annotations

from pathlib import Path

from broker.codec import encode
from broker.messages import (
    AgentOffline,
    DrainMachine,
    DrainReply,
    ErrorReply,
    PartFinished,
)
from broker.vocabulary import DrainRefusal, MachineState
from scheduler.runtime.clock import ManualClock
from tests.scheduler.runtime.harness import TOPICS, Cluster, FakeAgent, eventually, spec

LEASE = 8.0


async def _stopping(agent: FakeAgent) -> None:
    await agent.publish(
        TOPICS.agent_state(agent.id),
        AgentOffline(agent_id=agent.id, incarnation=agent.incarnation, reason="stopping"),
        retain=True,
    )


def _requeues(c: Cluster, job: str) -> list[tuple[str | None, bool | None]]:
    assert c.journal is not None
    return [(e.cause, e.charged) for e in c.journal.history(job) if e.kind == "requeued"]


async def test_a_stopped_agents_jobs_are_held_and_adopted_by_its_next_incarnation(
    tmp_path: Path,
) -> None:
    c = Cluster(tmp_path / "j.sqlite", clock=ManualClock(1000.0))
    await c.client.start()
    await c.start()
    try:
        a1 = await c.agent("a1", 4, lease=LEASE, adopts=True)
        await c.client.submit(spec("kept", 2), spec("gone", 2))
        await eventually(lambda: a1.started("kept") and a1.started("gone"))
        await _stopping(a1)
        await eventually(lambda: c.agent_state("a1") == "stopped")
        assert c.state("kept") == c.state("gone") == "running"
        # Its next incarnation lists one of the two: that one goes on, the other was
        # the operator's stop's doing: requeued, not charged.
        await a1.close()
        b = FakeAgent(c.broker, "a1", 4, incarnation="i2", lease=LEASE, adopts=True)
        b.running["kept"] = a1.running["kept"]
        c.agents["a1"] = b
        await b.start(announce=[b.part("kept")])
        # Waited for by its journaled requeue: the job itself may be placed again at once
        # (the machine has room), so its state alone need not show it was ever queued.
        await eventually(lambda: c.agent_state("a1") == "online" and bool(_requeues(c, "gone")))
        assert c.state("kept") == "running"
        assert _requeues(c, "gone") == [("operator_stop", False)]
        assert not _requeues(c, "kept")
        assert c.actor is not None
        assert c.actor.core.charged_requeues("gone") == 0
    finally:
        await c.stop()


async def test_a_stops_hold_that_ends_requeues_uncharged_however_often(tmp_path: Path) -> None:
    # max_requeues 2: three stops in a row would have failed the job if they counted.
    c = Cluster(tmp_path / "j.sqlite", clock=ManualClock(1000.0))
    await c.client.start()
    await c.start()
    try:
        agent = await c.agent("a1", 2, lease=LEASE, adopts=True)
        await c.client.submit(spec("j", 2))
        for n in range(1, 4):
            await eventually(lambda agent=agent: agent.started("j"))
            await _stopping(agent)
            await eventually(lambda: c.agent_state("a1") == "stopped")
            await c.tick(LEASE + 1)  # the hold passed: nobody adopted
            await eventually(lambda n=n: len(_requeues(c, "j")) == n)
            await agent.close()
            agent = FakeAgent(c.broker, "a1", 2, incarnation=f"i{n + 1}", lease=LEASE, adopts=True)
            c.agents["a1"] = agent
            await agent.start()
        await eventually(lambda: agent.started("j"))
        assert c.state("j") == "running"
        assert _requeues(c, "j") == [("operator_stop", False)] * 3
        await agent.finish("j")
        await eventually(lambda: c.state("j") == "finished")
    finally:
        await c.stop()


async def test_a_stopped_agent_that_does_not_adopt_has_its_jobs_requeued_uncharged(
    tmp_path: Path,
) -> None:
    c = Cluster(tmp_path / "j.sqlite", clock=ManualClock(1000.0))
    await c.client.start()
    await c.start()
    try:
        a1 = await c.agent("a1", 2)
        a2 = await c.agent("a2", 2)
        await c.client.submit(spec("j", 2))
        await eventually(lambda: a1.started("j") or a2.started("j"))
        where = a1 if a1.started("j") else a2
        other = a2 if where is a1 else a1
        await _stopping(where)
        # Its parts, ended as it stops, reported "stopped": repeats of the same rule.
        start = where.running["j"]
        await where.event(
            PartFinished(
                job_id="j",
                agent_id=where.id,
                exit_code=-15,
                at=0.0,
                reason="stopped",
                attempt=start.attempt,
            )
        )
        await eventually(lambda: other.started("j"))
        assert c.agent_state(where.id) == "lost"
        assert _requeues(c, "j") == [("operator_stop", False)]
    finally:
        await c.stop()


async def test_a_heartbeat_in_flight_does_not_bring_a_stopped_agent_back(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "j.sqlite", clock=ManualClock(1000.0))
    await c.client.start()
    await c.start()
    try:
        a1 = await c.agent("a1", 2, lease=LEASE, adopts=True)
        await _stopping(a1)
        await eventually(lambda: c.agent_state("a1") == "stopped")
        await a1.heartbeat()
        await c.settle()
        assert c.agent_state("a1") == "stopped"
    finally:
        await c.stop()


async def _drain(c: Cluster, machine: str, *, drain: bool = True) -> DrainReply | ErrorReply:
    rid = c.client.request_id()
    await c.client.send(
        DrainMachine(request_id=rid, reply_to=c.client.name, machine=machine, drain=drain)
    )
    return await c.client.inbox.expect(
        DrainReply | ErrorReply,  # type: ignore[arg-type]
        lambda r: r.request_id == rid,
    )


async def test_a_drained_machine_gets_nothing_new_and_outlasts_restarts(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "j.sqlite", clock=ManualClock(1000.0))
    await c.client.start()
    await c.start()
    try:
        a1 = await c.agent("a1", 2)
        await c.client.submit(spec("on-a1", 2))
        await eventually(lambda: a1.started("on-a1"))
        reply = await _drain(c, "a1")
        assert isinstance(reply, DrainReply)
        assert (reply.draining, reply.running, reply.code) == (True, 1, None)
        assert c.agent_state("a1") == "draining"
        # Its job runs to its end; nothing new starts there meanwhile.
        await a1.finish("on-a1")
        await c.client.submit(spec("next", 1))
        await c.settle()
        assert c.state("on-a1") == "finished"
        assert (c.state("next"), a1.started("next")) == ("queued", False)
        # A new incarnation of its agent is drained at once.
        await a1.close()
        b = FakeAgent(c.broker, "a1", 2, incarnation="i2")
        c.agents["a1"] = b
        await b.start()
        await eventually(lambda: c.agent_state("a1") == "draining")
        # So is the machine after a restart of the scheduler.
        await c.kill_scheduler()
        await c.start()
        await b.announce()
        await eventually(lambda: "a1" in c.actor.ctx.agents if c.actor else False)
        await eventually(lambda: c.agent_state("a1") == "draining")
        status = c.actor.status(0.0) if c.actor is not None else None
        assert status is not None
        assert [m.state for m in status.machines] == [MachineState.DRAINING]
        assert not b.started("next")
        reply = await _drain(c, "a1", drain=False)
        assert isinstance(reply, DrainReply)
        assert (reply.draining, reply.code) == (False, None)
        await eventually(lambda: b.started("next"))
    finally:
        await c.stop()


async def test_a_drain_of_an_unknown_machine_or_by_a_user_is_refused(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "j.sqlite", clock=ManualClock(1000.0))
    await c.client.start(TOPICS.user_replies("ann", "c1"))
    await c.start()
    try:
        await c.agent("a1", 2)
        reply = await _drain(c, "nowhere")
        assert isinstance(reply, DrainReply)
        assert (reply.draining, reply.code) == (False, DrainRefusal.UNKNOWN_MACHINE)
        ask = DrainMachine(request_id="u1", reply_to="c1", machine="a1")
        await c.client.send_raw(encode(ask), topic=TOPICS.user_requests("ann"))
        refused = await c.client.inbox.expect(ErrorReply, lambda r: r.request_id == "u1")
        assert refused.code == "forbidden"
        assert c.agent_state("a1") == "online"
    finally:
        await c.stop()
