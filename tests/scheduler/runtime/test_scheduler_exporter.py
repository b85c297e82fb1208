"""The scheduler's metrics: collector values at scrape time, counters, the HTTP endpoint."""

from __future__ import annotations

import urllib.request

from prometheus_client import CollectorRegistry

from broker.codec import encode
from broker.messages import StatusReply, StatusTotals
from scheduler.runtime.exporter import GaugeState, SchedulerMetrics, serve
from tests.builders import spec
from tests.scheduler.runtime.harness import Cluster, eventually, served_totals

NO_TOTALS = StatusTotals(queued=0, running=0, cpus=0)


def test_the_collector_reads_the_latest_state_at_scrape_time() -> None:
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry)
    sample = registry.get_sample_value
    assert sample("accordion_scheduler_queued_jobs") == 0
    metrics.publish_state(
        GaugeState(
            queued=7,
            running=2,
            cpus=16,
            cpus_free=3,
            machines_online=2,
            machines_offline=1,
            cluster_time=500.0,
            time_scale=10.0,
            reconciling=True,
        )
    )
    assert sample("accordion_scheduler_queued_jobs") == 7
    assert sample("accordion_scheduler_running_jobs") == 2
    assert sample("accordion_scheduler_cpus") == 16
    assert sample("accordion_scheduler_cpus_free") == 3
    assert sample("accordion_scheduler_machines_online") == 2
    assert sample("accordion_scheduler_machines_offline") == 1
    assert sample("accordion_scheduler_cluster_time_cluster_seconds") == 500.0
    assert sample("accordion_scheduler_time_scale") == 10.0
    assert sample("accordion_scheduler_reconciling") == 1.0
    # Every known label value is there from the start, at zero.
    assert sample("accordion_scheduler_submissions_total", {"result": "duplicate"}) == 0
    assert sample("accordion_scheduler_bad_messages_total", {"reason": "version"}) == 0


def test_two_actors_can_share_a_process() -> None:
    SchedulerMetrics(CollectorRegistry())
    SchedulerMetrics(CollectorRegistry())  # no clash: never the global registry


def test_metrics_are_served_as_prometheus_text() -> None:
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry)
    metrics.decision_seconds.observe(0.002)
    server = serve(registry, 0, "127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        server.close()
    assert "accordion_scheduler_decision_wall_seconds_count 1.0" in text
    assert "cluster seconds (= wall seconds x time_scale)" in text
    assert 'accordion_scheduler_submissions_total{result="accepted"} 0.0' in text


async def test_actor_metrics_follow_the_cluster(cluster: Cluster) -> None:
    a1 = await cluster.agent("a1", 4)
    a2 = await cluster.agent("a2", 2)
    await cluster.client.submit(spec("r", 3), spec("s", 2), spec("q", 4), spec("q", 4))
    await cluster.client.submit(spec("w", 9))
    await eventually(lambda: a1.started("r") and a2.started("s"))
    await a2.kill()
    await eventually(lambda: not cluster.online("a2"))
    await cluster.settle()
    actor = cluster.actor
    assert actor is not None
    sample = actor.metrics.registry.get_sample_value
    assert sample("accordion_scheduler_submissions_total", {"result": "accepted"}) == 3
    assert sample("accordion_scheduler_submissions_total", {"result": "duplicate"}) == 1
    assert sample("accordion_scheduler_submissions_total", {"result": "rejected"}) == 1
    assert sample("accordion_scheduler_agents_lost_total", {"reason": "will"}) == 1
    assert sample("accordion_scheduler_requeues_total") == 1
    assert sample("accordion_scheduler_machines_online") == 1
    assert sample("accordion_scheduler_machines_offline") == 1
    assert sample("accordion_scheduler_cpus") == 4
    assert sample("accordion_scheduler_cpus_free") == 1
    assert sample("accordion_scheduler_running_jobs") == 1
    assert sample("accordion_scheduler_queued_jobs") == 2  # s (requeued) and q
    assert sample("accordion_scheduler_cluster_time_cluster_seconds") == 1000.0
    assert sample("accordion_scheduler_time_scale") == 1.0
    decisions = sample("accordion_scheduler_decision_wall_seconds_count")
    assert decisions is not None
    assert decisions >= 2


def test_no_created_samples_and_run_info() -> None:
    from prometheus_client import generate_latest

    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry, process=True)
    metrics.policy = "easy"
    metrics.job_finished(procs=4, submit=0.0, start=30.0, end=35.0)
    text = generate_latest(registry).decode()
    assert "_created" not in text
    sample = registry.get_sample_value
    assert sample("accordion_scheduler_policy_info", {"policy": "easy"}) == 1
    assert "accordion_build_info{" in text
    assert "process_cpu_seconds_total" in text or "process_" not in text  # Linux only
    labels = {"policy": "easy", "size": "small"}
    assert sample("accordion_job_wait_cluster_seconds_sum", labels) == 30.0
    assert sample("accordion_job_response_cluster_seconds_sum", labels) == 35.0
    # Bounded slowdown: 35 / max(5, tau = 10).
    assert sample("accordion_job_bounded_slowdown_sum", labels) == 3.5


def test_decision_buckets_start_below_the_measured_p50() -> None:
    from scheduler.runtime.exporter import DECISION_BUCKETS

    assert DECISION_BUCKETS[0] <= 0.00001  # measured p50 was 53-175 us
    assert list(DECISION_BUCKETS) == sorted(DECISION_BUCKETS)


def totals_of(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    """The counter totals ``registry`` serves on a metrics endpoint."""
    server = serve(registry, 0, "127.0.0.1")
    try:
        return served_totals(server.port)
    finally:
        server.close()


async def test_totals_survive_a_scheduler_restart(cluster: Cluster) -> None:
    a1 = await cluster.agent("a1", 4)
    a2 = await cluster.agent("a2", 2)
    await cluster.client.submit(spec("j1", 2), spec("j2", 1), spec("j3", 2))
    await eventually(lambda: a1.started("j1") and a1.started("j2") and a2.started("j3"))
    # Counted only in the totals table: rejections, a duplicate, bad messages, a loss.
    await cluster.client.submit(spec("wide", 9), spec("wider", 12), spec("j1", 2))
    await cluster.client.send_raw(b"\xc1")  # a byte msgpack never uses
    await cluster.client.send_raw(
        encode(
            StatusReply(
                request_id="x", now=0.0, machines=(), queue=(), running=(), totals=NO_TOTALS
            )
        )
    )
    await a2.kill()
    await eventually(lambda: not cluster.online("a2"))
    cluster.clock.advance(20.0)
    await a1.finish("j1")
    await eventually(lambda: cluster.state("j1") == "finished")
    await cluster.settle()
    actor = cluster.actor
    assert actor is not None
    before = totals_of(actor.metrics.registry)
    await cluster.kill_scheduler()
    actor = await cluster.start()
    after = totals_of(actor.metrics.registry)
    assert after == before
    sample = actor.metrics.registry.get_sample_value
    assert sample("accordion_scheduler_jobs_finished_total", {"state": "finished"}) == 1
    assert sample("accordion_scheduler_submissions_total", {"result": "accepted"}) == 3
    assert sample("accordion_scheduler_submissions_total", {"result": "rejected"}) == 2
    assert sample("accordion_scheduler_submissions_total", {"result": "duplicate"}) == 1
    assert sample("accordion_scheduler_rejections_total", {"reason": "too_wide"}) == 2
    assert sample("accordion_scheduler_bad_messages_total", {"reason": "not_msgpack"}) == 1
    assert sample("accordion_scheduler_bad_messages_total", {"reason": "unexpected"}) == 1
    assert sample("accordion_scheduler_agents_lost_total", {"reason": "will"}) == 1
    assert sample("accordion_scheduler_requeues_total") == 1
    labels = {"policy": "fcfs", "size": "small"}
    assert sample("accordion_job_response_cluster_seconds_count", labels) == 1
    assert sample("accordion_job_response_cluster_seconds_sum", labels) == 20.0
    # Counting goes on from the restored totals, and is journaled again.
    await cluster.client.submit(spec("widest", 16))
    assert sample("accordion_scheduler_rejections_total", {"reason": "too_wide"}) == 3
    await cluster.kill_scheduler()
    actor = await cluster.start()
    sample = actor.metrics.registry.get_sample_value
    assert sample("accordion_scheduler_rejections_total", {"reason": "too_wide"}) == 3
