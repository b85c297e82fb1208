"""Prometheus metrics of one node agent, served over HTTP.

A :class:`AgentCollector` reads the agent's state when Prometheus scrapes
(``NodeAgent.stats()``, a snapshot of plain numbers the agent keeps anyway),
so the agent's loop never updates metric objects. It is registered in a
registry the caller owns, never prometheus_client's global default, so
several agents (or an agent and a scheduler) can share one process.

Every series has the label ``agent`` (one value per machine: bounded);
``accordion_agent_parts_finished_total`` also has ``reason`` (the five reasons
of ``PartFinished``; a refused part counts there as ``failed``, or as
``lost`` while the agent stops). Times are not exported here; counts and CPUs
have no time base. ``accordion_agent_info`` (value 1) carries what the caller
passes as ``info`` (``python -m nodeagent``: the machine's speed and
labels, its class in the compose testbed), ``accordion_build_info``
the version; ``serve_metrics(process=True)`` adds client_python's process and
platform collectors (one per OS process: the standalone agent asks for them).
Counters are families built at scrape time, so there are no ``_created``
samples.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from threading import Thread
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from nodeagent.agent.settings import REASONS, AgentStats


def version() -> str:
    """The installed accordion's version ("unknown" when run from a bare source tree)."""
    try:
        return metadata.version("accordion")
    except metadata.PackageNotFoundError:
        return "unknown"


class AgentCollector(Collector):
    """The agent's metrics, computed from ``stats()`` at every scrape."""

    def __init__(
        self, stats: Callable[[], AgentStats], info: Mapping[str, str] | None = None
    ) -> None:
        self._stats = stats
        self._info = dict(info or {})

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        agent = [s.agent_id]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=["agent"])
            family.add_metric(agent, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=["agent"])
            family.add_metric(agent, value)
            return family

        info = InfoMetricFamily("accordion_agent", "This machine.", labels=["agent"])
        info.add_metric(agent, self._info)
        yield info
        build = InfoMetricFamily("accordion_build", "The accordion build.", labels=[])
        build.add_metric([], {"version": version(), "python": platform.python_version()})
        yield build
        yield gauge("accordion_agent_cpus", "CPUs of this machine.", s.cpus)
        yield gauge("accordion_agent_cpus_busy", "CPUs held by running parts.", s.cpus_busy)
        yield gauge("accordion_agent_parts_running", "Job parts running here.", s.parts_running)
        yield counter("accordion_agent_parts_started", "Job processes started.", s.parts_started)
        finished = CounterMetricFamily(
            "accordion_agent_parts_finished",
            "Parts reported finished (PartFinished), by reason; refusals included.",
            labels=["agent", "reason"],
        )
        for reason in REASONS:
            finished.add_metric([s.agent_id, reason], s.parts_finished.get(reason, 0))
        yield finished
        yield counter(
            "accordion_agent_bad_messages",
            "Commands that could not be decoded or applied.",
            s.bad_messages,
        )
        yield counter("accordion_agent_heartbeats", "Heartbeats published.", s.heartbeats)
        yield gauge("accordion_agent_cores", "Real host cores the agent pins ranks to.", s.cores)
        yield gauge(
            "accordion_agent_emulated",
            "1 if the agent declares more CPUs than it has cores (packing not physical).",
            1.0 if s.emulated else 0.0,
        )
        if s.speed_score is not None:
            yield gauge(
                "accordion_agent_speed_score",
                "Measured benchmark speed (nodeagent.job.kernel; 1.0 = its reference machine).",
                s.speed_score,
            )
        yield counter("accordion_agent_resizes", "Resizes applied (ranks re-pinned).", s.resizes)
        yield counter(
            "accordion_agent_parts_adopted",
            "Parts a previous incarnation left running that this one adopted at start.",
            s.adopted,
        )
        yield counter(
            "accordion_agent_parts_not_adopted",
            "Parts a previous incarnation left that this one could not adopt (reported fenced).",
            s.not_adopted,
        )


@dataclass(frozen=True, slots=True)
class MetricsServer:
    """A running metrics endpoint; ``close()`` stops it."""

    port: int
    registry: CollectorRegistry
    _server: WSGIServer
    _thread: Thread

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def serve_metrics(
    stats: Callable[[], AgentStats],
    *,
    port: int = 0,
    addr: str = "127.0.0.1",
    registry: CollectorRegistry | None = None,
    process: bool = False,
    info: Mapping[str, str] | None = None,
) -> MetricsServer:
    """Serve the agent's metrics on ``addr:port`` (port 0 picks a free one; see ``.port``)."""
    registry = registry if registry is not None else CollectorRegistry()
    registry.register(AgentCollector(stats, info))
    if process:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
    server, thread = start_http_server(port, addr=addr, registry=registry)
    return MetricsServer(server.server_port, registry, server, thread)
