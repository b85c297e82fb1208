"""A run is dated by its agents' measurements, not by when the scheduler hears of it.

The fake agent reports its part's launch latency (``PartStarted.launch_seconds``)
and its process's run (``PartFinished.run_seconds``); the scheduler's clock is
moved a minute on before the end is reported, as a slow broker or a busy
scheduler would. The journal, which the live metrics are read from
(``accordion.experiments.demo.outcomes_from_journal``), then holds the start at the
decision plus the launch latency and the end one measured run later.
"""

from __future__ import annotations

from broker.messages import PartFinished, PartStarted
from scheduler.runtime.journal import JournalJob
from tests.builders import spec
from tests.scheduler.runtime.harness import Cluster, eventually


def row(cluster: Cluster, job_id: str) -> JournalJob:
    assert cluster.journal is not None
    return next(r for r in cluster.journal.load().jobs if r.spec.id == job_id)


async def later(cluster: Cluster, seconds: float) -> None:
    """The scheduler's clock moves on (no liveness check: the agents are not silent)."""
    await cluster.settle()
    cluster.clock.advance(seconds)


def launches(cluster: Cluster) -> float | None:
    assert cluster.actor is not None
    registry = cluster.actor.metrics.registry
    return registry.get_sample_value("accordion_part_launch_wall_seconds_count")


async def test_a_run_is_dated_by_its_agents_measurements(cluster: Cluster) -> None:
    a1 = await cluster.agent("a1", 4)
    await cluster.client.submit(spec("j", 2))
    await eventually(lambda: a1.started("j"))
    decided = row(cluster, "j").start
    assert decided is not None
    await a1.event(
        PartStarted(job_id="j", agent_id="a1", pid=1, attempt=1, launch_seconds=0.5, at=0.0)
    )
    await later(cluster, 60.0)  # the end is heard of a minute after the decision
    await a1.event(
        PartFinished(
            job_id="j",
            agent_id="a1",
            exit_code=0,
            attempt=1,
            run_seconds=10.0,
            at=0.0,
            reason="done",
        )
    )
    await eventually(lambda: cluster.state("j") == "finished")
    dated = row(cluster, "j")
    assert (dated.start, dated.end) == (decided + 0.5, decided + 10.5)
    assert launches(cluster) == 1.0


async def test_a_job_over_two_agents_runs_from_its_last_launch_to_its_last_exit(
    cluster: Cluster,
) -> None:
    a1 = await cluster.agent("a1", 2)
    a2 = await cluster.agent("a2", 2)
    await cluster.client.submit(spec("w", 4))
    await eventually(lambda: a1.started("w") and a2.started("w"))
    decided = row(cluster, "w").start
    assert decided is not None
    for agent, launch in ((a1, 0.25), (a2, 1.0)):
        await agent.event(
            PartStarted(
                job_id="w", agent_id=agent.id, pid=1, attempt=1, launch_seconds=launch, at=0.0
            )
        )
    await later(cluster, 60.0)
    for agent, run in ((a1, 20.0), (a2, 5.0)):
        await agent.event(
            PartFinished(
                job_id="w",
                agent_id=agent.id,
                exit_code=0,
                attempt=1,
                run_seconds=run,
                at=0.0,
                reason="done",
            )
        )
    await eventually(lambda: cluster.state("w") == "finished")
    dated = row(cluster, "w")
    # Whole from a2's fork (decision + 1.0); over at a1's exit (decision + 0.25 + 20).
    assert (dated.start, dated.end) == (decided + 1.0, decided + 20.25)


async def test_without_measurements_the_run_is_dated_as_heard(cluster: Cluster) -> None:
    """An older agent says neither: the decision to the handling of the last report."""
    a1 = await cluster.agent("a1", 4)
    await cluster.client.submit(spec("o", 2))
    await eventually(lambda: a1.started("o"))
    decided = row(cluster, "o").start
    assert decided is not None
    await later(cluster, 60.0)
    await a1.finish("o")
    await eventually(lambda: cluster.state("o") == "finished")
    heard = row(cluster, "o")
    assert (heard.start, heard.end) == (decided, decided + 60.0)
    assert launches(cluster) == 0.0


async def test_a_measured_end_is_never_after_the_scheduler_heard_of_it(cluster: Cluster) -> None:
    """A run longer than decision-to-now (an agent's clock running fast) is cut at now."""
    a1 = await cluster.agent("a1", 4)
    await cluster.client.submit(spec("f", 2))
    await eventually(lambda: a1.started("f"))
    decided = row(cluster, "f").start
    assert decided is not None
    await a1.event(
        PartStarted(job_id="f", agent_id="a1", pid=1, attempt=1, launch_seconds=0.5, at=0.0)
    )
    await later(cluster, 30.0)
    await a1.event(
        PartFinished(
            job_id="f",
            agent_id="a1",
            exit_code=0,
            attempt=1,
            run_seconds=45.0,
            at=0.0,
            reason="done",
        )
    )
    await eventually(lambda: cluster.state("f") == "finished")
    cut = row(cluster, "f")
    assert (cut.start, cut.end) == (decided + 0.5, decided + 30.0)
