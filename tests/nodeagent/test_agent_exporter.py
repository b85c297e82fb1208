"""The agent's Prometheus metrics: read from the agent's state at scrape time."""

from __future__ import annotations

import urllib.request

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.messages import PartFinished
from nodeagent.agent.exporter import AgentCollector, serve_metrics
from nodeagent.agent.node_agent import REASONS, AgentStats
from tests.builders import spec
from tests.nodeagent.harness import UNLIMITED, running_agent, start


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


STATS = AgentStats(
    agent_id="node1",
    cpus=8,
    cpus_busy=3,
    parts_running=2,
    parts_started=5,
    parts_finished={"done": 2, "cancelled": 1},
    bad_messages=4,
    heartbeats=17,
    emulated=True,
    cores=2,
    speed_score=1.5,
    resizes=3,
)


def test_collector_exposes_every_metric_with_bounded_labels() -> None:
    registry = CollectorRegistry()
    registry.register(AgentCollector(lambda: STATS))
    got = samples(generate_latest(registry).decode())
    agent = (("agent", "node1"),)
    assert got[("accordion_agent_cpus", agent)] == 8
    assert got[("accordion_agent_cpus_busy", agent)] == 3
    assert got[("accordion_agent_parts_running", agent)] == 2
    assert got[("accordion_agent_parts_started_total", agent)] == 5
    assert got[("accordion_agent_bad_messages_total", agent)] == 4
    assert got[("accordion_agent_heartbeats_total", agent)] == 17
    assert got[("accordion_agent_cores", agent)] == 2
    assert got[("accordion_agent_emulated", agent)] == 1
    assert got[("accordion_agent_speed_score", agent)] == 1.5
    assert got[("accordion_agent_resizes_total", agent)] == 3
    finished = {
        reason: got[
            ("accordion_agent_parts_finished_total", (("agent", "node1"), ("reason", reason)))
        ]
        for reason in REASONS
    }
    assert finished == {
        "done": 2,
        "failed": 0,
        "cancelled": 1,
        "walltime": 0,
        "lost": 0,
        "fenced": 0,
        "stopped": 0,
    }


def test_collector_reads_the_state_at_every_scrape() -> None:
    calls: list[int] = []

    def stats() -> AgentStats:
        calls.append(1)
        return STATS

    registry = CollectorRegistry()
    registry.register(AgentCollector(stats))
    generate_latest(registry)
    generate_latest(registry)
    assert len(calls) >= 2


def test_serve_metrics_on_a_free_port() -> None:
    server = serve_metrics(lambda: STATS, port=0)
    try:
        assert server.port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
            body = r.read().decode()
        assert 'accordion_agent_cpus{agent="node1"} 8.0' in body
    finally:
        server.close()


async def test_metrics_of_a_running_agent() -> None:
    async with running_agent() as run:
        registry = CollectorRegistry()
        registry.register(AgentCollector(run.agent.stats))
        # The agent handles commands in order: once the part it starts next has
        # finished, the malformed one before it has been counted.
        await run.scheduler.send_raw(b"\xc1")
        await run.scheduler.send(start(spec("j1", 2, work=10.0, walltime=UNLIMITED)))
        await run.scheduler.expect(PartFinished)
        got = samples(generate_latest(registry).decode())
    agent = (("agent", "node1"),)
    assert got[("accordion_agent_parts_started_total", agent)] == 1
    assert got[("accordion_agent_parts_finished_total", (*agent, ("reason", "done")))] == 1
    assert got[("accordion_agent_bad_messages_total", agent)] == 1
    assert got[("accordion_agent_cpus_busy", agent)] == 0
    assert got[("accordion_agent_heartbeats_total", agent)] >= 1
