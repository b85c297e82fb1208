"""Prometheus metrics of an agent's launcher and relay, read at scrape time.

Registered beside ``nodeagent.agent.exporter.AgentCollector`` in the agent's own
registry. Series (label ``agent``, one value per machine):

- ``accordion_agent_launch_seconds`` (histogram): from the agent's decision
  to start a part to its process running (the fork), per launch;
- ``accordion_agent_launcher_restarts_total``: fork servers that died (their
  job processes were killed and reported lost);
- ``accordion_agent_relay_messages_total{direction}``: frames relayed
  ``up`` (a job's publishes) and ``down`` (deliveries to a job);
- ``accordion_agent_relay_dropped_total{reason}``: ``forged_publish``,
  ``forged_subscribe`` (outside the job's own topics), ``bad_frame`` (the job
  was killed), ``overflow`` (a job that did not read its deliveries).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from nodeagent.launch.forkserver import LAUNCH_BUCKETS, ForkServerStats
from nodeagent.launch.relay import RelayStats


class LauncherCollector(Collector):
    """Reads the launcher's and the relay's counters when Prometheus scrapes."""

    def __init__(self, agent_id: str, launcher: ForkServerStats, relay: RelayStats) -> None:
        self._agent = agent_id
        self._launcher = launcher
        self._relay = relay

    def collect(self) -> Iterator[Metric]:
        agent = [self._agent]
        s, r = self._launcher, self._relay
        histogram = HistogramMetricFamily(
            "accordion_agent_launch_seconds",
            "From the decision to start a part to its process running (wall s).",
            labels=["agent"],
        )
        bounds = [repr(b) for b in LAUNCH_BUCKETS] + ["+Inf"]
        histogram.add_metric(
            agent, list(zip(bounds, map(float, s.buckets), strict=True)), s.latency_sum
        )
        yield histogram
        restarts = CounterMetricFamily(
            "accordion_agent_launcher_restarts",
            "Fork servers that died (their job processes were reported lost).",
            labels=["agent"],
        )
        restarts.add_metric(agent, s.restarts)
        yield restarts
        messages = CounterMetricFamily(
            "accordion_agent_relay_messages",
            "Frames relayed between job processes and the broker.",
            labels=["agent", "direction"],
        )
        messages.add_metric([self._agent, "up"], r.published)
        messages.add_metric([self._agent, "down"], r.delivered)
        yield messages
        dropped = CounterMetricFamily(
            "accordion_agent_relay_dropped",
            "Frames of job processes dropped by the relay, by reason.",
            labels=["agent", "reason"],
        )
        for reason, value in (
            ("forged_publish", r.forged_publish),
            ("forged_subscribe", r.forged_subscribe),
            ("bad_frame", r.bad_frames),
            ("overflow", r.overflow),
            ("rejoin_refused", r.rejoin_refused),
        ):
            dropped.add_metric([self._agent, reason], value)
        yield dropped
        rejoins = CounterMetricFamily(
            "accordion_agent_rejoins",
            "Adopted job processes that rejoined this agent over its relay socket.",
            labels=["agent"],
        )
        rejoins.add_metric(agent, r.rejoined)
        yield rejoins
