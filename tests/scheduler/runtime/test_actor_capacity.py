"""The capacity rule: reject only what can never fit the cluster as configured.

The cluster as configured is every machine whose agent registered and has not
said goodbye (``Context.configured_cpus``): a transient loss queues a wide job,
a scale-down (goodbye) makes it too wide.
"""

from __future__ import annotations

from broker.messages import AgentOffline
from broker.vocabulary import Rejection
from tests.builders import spec
from tests.scheduler.runtime.harness import TOPICS, Cluster, eventually


def rejections(cluster: Cluster, reason: str) -> float | None:
    assert cluster.actor is not None
    return cluster.actor.metrics.registry.get_sample_value(
        "accordion_scheduler_rejections_total", {"reason": reason}
    )


async def test_a_job_wider_than_the_machines_online_waits_while_one_is_lost(
    cluster: Cluster,
) -> None:
    await cluster.agent("a1", 4)
    a2 = await cluster.agent("a2", 4)
    await a2.kill()  # its Last Will: lost, not retired
    await eventually(lambda: not cluster.online("a2"))
    reply = await cluster.client.submit(spec("wide", 8))
    assert reply.results[0].accepted, reply.results[0].reason
    assert cluster.state("wide") == "queued"
    assert rejections(cluster, "too_wide") == 0
    gauge = cluster.actor.metrics.registry.get_sample_value  # type: ignore[union-attr]
    await cluster.tick()
    assert gauge("accordion_scheduler_cpus") == 4
    assert gauge("accordion_scheduler_cpus_configured") == 8
    back = await cluster.agent("a2", 4, incarnation="i2")  # back: the job starts
    await eventually(lambda: back.started("wide"))


async def test_a_job_wider_than_the_cluster_after_a_goodbye_is_rejected(
    cluster: Cluster,
) -> None:
    await cluster.agent("a1", 4)
    a2 = await cluster.agent("a2", 4)
    await a2.publish(
        TOPICS.agent_state("a2"),
        AgentOffline(agent_id="a2", incarnation=a2.incarnation, reason="goodbye"),
        retain=True,
    )
    await eventually(lambda: cluster.agent_state("a2") == "gone")
    reply = await cluster.client.submit(spec("wide", 8), spec("fits", 4))
    wide, fits = reply.results
    assert (wide.accepted, wide.code) == (False, Rejection.TOO_WIDE)
    assert "the cluster as configured has 4" in (wide.reason or "")
    assert fits.accepted
    assert rejections(cluster, "too_wide") == 1


async def test_the_walltime_bound_and_a_reused_id_are_counted_by_reason(cluster: Cluster) -> None:
    await cluster.agent("a1", 4)
    await cluster.client.submit(spec("x", 1))
    await cluster.client.submit(spec("x", 2), spec("long", 1, walltime=1e9, work=1.0))
    assert rejections(cluster, "id_reused") == 1
    assert rejections(cluster, "walltime") == 1
