"""A scheduler killed and restarted on its journal loses no job and reconciles with agents."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from broker.messages import AnyMessage, JobSpec, ResizePart, RunningPart, StartPart
from scheduler.runtime.journal import Journal
from tests.builders import spec
from tests.scheduler.runtime.harness import Cluster, FakeAgent, eventually


async def started_cluster(path: Path) -> Cluster:
    c = Cluster(path)
    await c.client.start()
    await c.start()
    return c


@asynccontextmanager
async def killed_while_running(
    path: Path, *jobs: JobSpec
) -> AsyncIterator[tuple[Cluster, FakeAgent]]:
    """A scheduler killed once agent ``a1`` (4 CPUs) runs the first of ``jobs`` (all
    accepted, the others queued); not restarted yet. Everything stops on exit."""
    c = await started_cluster(path)
    try:
        a1 = await c.agent("a1", 4)
        reply = await c.client.submit(*jobs)
        assert all(r.accepted for r in reply.results)
        await eventually(lambda: a1.started(jobs[0].id))
        await c.kill_scheduler()
        yield c, a1
    finally:
        await c.stop()


async def test_killed_scheduler_restarts_without_losing_an_accepted_job(tmp_path: Path) -> None:
    jobs = (spec("run", 4), spec("q1", 2), spec("q2", 4), spec("q3", 1))
    async with killed_while_running(tmp_path / "j.sqlite", *jobs) as (c, a1):
        c.clock.advance(3.0)
        actor = await c.start()
        # Everything accepted is back: the queue in its order, the running job pending.
        assert [j.id for j in actor.core.queue] == ["q1", "q2", "q3"]
        assert list(actor.core.pending) == ["run"]
        assert actor.reconciling
        assert [j.submit for j in actor.core.queue] == [1000.0] * 3
        # The agent's retained AgentOnline lists no part (it was published at its
        # start); its next heartbeat does, and that confirms the part.
        await eventually(lambda: c.online("a1"))
        assert actor.reconciling
        await a1.heartbeat()
        await eventually(lambda: not actor.reconciling)
        assert c.state("run") == "running"
        assert [r.job.id for r in actor.core.running] == ["run"]
        assert actor.core.free("a1") == 0
        assert a1.cancels("run") == 0
        # Idempotency survives the restart; a new job queues behind the old ones.
        again = await c.client.submit(spec("q1", 2), spec("run", 4), spec("new", 1))
        assert [(r.accepted, r.duplicate) for r in again.results] == [
            (True, True),
            (True, True),
            (True, False),
        ]
        assert [j.id for j in actor.core.queue] == ["q1", "q2", "q3", "new"]
        # The reconciled job ends normally and the queue moves on, in order.
        await a1.finish("run")
        await eventually(lambda: a1.started("q1"))
        assert c.state("run") == "finished"
        assert not a1.started("q2")


async def test_a_running_job_whose_agent_is_gone_is_requeued_after_the_grace(
    tmp_path: Path,
) -> None:
    async with killed_while_running(tmp_path / "j.sqlite", spec("run", 4)) as (c, a1):
        await a1.kill()  # its will is retained: the restarted scheduler ignores it
        actor = await c.start()
        a2 = await c.agent("a2", 4)
        await c.tick(5.0)
        assert actor.reconciling
        assert not a2.started("run")
        await a2.heartbeat()
        await c.tick(6.0)  # past the 10 s grace (K = 1)
        # 6 s silent made a2 SUSPECT (cordoned: no new parts); its heartbeat lifts that.
        await a2.heartbeat()
        await eventually(lambda: a2.started("run"))
        await eventually(lambda: not actor.reconciling)
        assert actor.core.requeues("run") == 1
        with Journal(tmp_path / "j.sqlite") as journal:
            row = journal.job("run")
        assert row is not None
        assert row.requeues == 1


async def test_a_start_the_agent_never_ran_is_sent_again_at_no_requeue(tmp_path: Path) -> None:
    """A start in flight when the scheduler died: it used to be refused after the
    restart ("does not run it after the restart; already requeued 2 times"). The
    requeue budget is for jobs lost while running; a job its agent never started
    costs none: the same start goes again."""
    async with killed_while_running(tmp_path / "j.sqlite", spec("run", 2)) as (c, a1):
        a1.running.clear()  # the agent never had it (journalled, then the kill)
        actor = await c.start()
        await eventually(lambda: c.online("a1"))
        await a1.heartbeat()
        await eventually(lambda: not actor.reconciling)
        first, again = a1.starts()
        assert again.attempt == first.attempt == 1
        assert (again.cpus, again.job) == (first.cpus, first.job)
        assert actor.core.requeues("run") == 0
        assert c.state("run") == "running"
        with Journal(tmp_path / "j.sqlite") as journal:
            row = journal.job("run")
        assert row is not None
        assert row.requeues == 0
        await a1.finish("run")
        await eventually(lambda: c.state("run") == "finished")


async def test_a_start_sent_again_and_still_not_run_is_requeued_after_the_grace(
    tmp_path: Path,
) -> None:
    async with killed_while_running(tmp_path / "j.sqlite", spec("run", 2)) as (c, a1):
        a1.running.clear()
        react = a1._react

        async def deaf(message: AnyMessage) -> None:
            if not isinstance(message, StartPart):  # it ignores starts from now on
                await react(message)

        a1._react = deaf  # type: ignore[method-assign]
        actor = await c.start()
        await eventually(lambda: c.online("a1"))
        await a1.heartbeat()
        await eventually(lambda: len(a1.starts()) == 2)
        await a1.heartbeat()  # still not running it: sent once only, and it waits
        await c.tick(4.0)
        await a1.heartbeat()
        assert len(a1.starts()) == 2
        assert actor.reconciling
        await c.tick(7.0)  # past the 10 s grace (K = 1)
        await a1.heartbeat()
        await eventually(lambda: not actor.reconciling)
        assert actor.core.requeues("run") == 1
        await eventually(lambda: len(a1.starts()) == 3)
        assert a1.starts()[-1].attempt == 2


async def test_a_part_reannounced_with_other_cpus_is_resized_to_the_journal(
    tmp_path: Path,
) -> None:
    job = spec("run", 4, malleable=True)
    async with killed_while_running(tmp_path / "j.sqlite", job) as (c, a1):
        # An agent that keeps its retained state current re-announces its parts.
        await a1.announce([RunningPart(job_id="run", cpus=2, started=0.0)])
        actor = await c.start()
        await eventually(lambda: not actor.reconciling)
        assert c.state("run") == "running"
        await eventually(lambda: any(isinstance(cmd, ResizePart) for cmd in a1.commands))
        resizes = [cmd for cmd in a1.commands if isinstance(cmd, ResizePart)]
        assert [(r.job_id, r.cpus) for r in resizes] == [("run", 4)]


async def test_a_part_end_queued_for_the_restarting_scheduler_still_counts(
    tmp_path: Path,
) -> None:
    async with killed_while_running(tmp_path / "j.sqlite", spec("run", 2)) as (c, a1):
        actor = await c.start()
        # The end arrives before the agent is heard of again (MQTT queued it).
        await a1.finish("run")
        await eventually(lambda: c.state("run") == "finished")
        assert not actor.reconciling


async def test_a_clean_stop_and_restart_keeps_the_clock_base(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    c = await started_cluster(path)
    try:
        await c.agent("a1", 1)
        await c.client.submit(spec("a", 1), spec("b", 1))
        assert c.actor is not None
        c.actor.stop()
        assert c.task is not None
        await c.task
        assert c.journal is not None
        c.journal.close()
        c.journal = None
        assert c.bus is not None
        await c.bus.__aexit__(None, None, None)
        actor = await c.start()
        assert [j.id for j in actor.core.queue] == ["b"]
        assert list(actor.core.pending) == ["a"]
    finally:
        await c.stop()
