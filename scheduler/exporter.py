"""The scheduler's Prometheus metrics, served on HTTP.

Theory of operation. Two kinds of metric, as prometheus/client_python
intends:

- *counters and the decision histogram* are incremented by the actor as
  things happen (:class:`SchedulerMetrics`);
- *gauges* of the cluster's state are read at scrape time by a custom
  collector (:class:`StateCollector`) from the latest :class:`GaugeState` the
  actor published. The actor replaces that immutable value after every batch
  of messages, so the HTTP thread never walks the core's containers while the
  actor changes them.

Every metric lives in a registry the caller injects, never the process-wide
default, so several actors (tests, a single-process demo) can share a process.
Labels have bounded cardinality: a result, a reason, a state; never a job or
agent id.

Time bases. ``accordion_scheduler_decision_seconds`` is wall seconds (the
time ``SchedulerCore.schedule`` took). ``accordion_scheduler_cluster_time_seconds``
is cluster seconds; cluster seconds = wall seconds x K, with K exported as
``accordion_scheduler_time_scale``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

PREFIX = "accordion_scheduler"

SUBMISSION_RESULTS = ("accepted", "rejected", "duplicate")
BAD_MESSAGE_REASONS = (
    "not_msgpack",
    "unknown_kind",
    "invalid",
    "version",
    "unexpected",
    # A user's request about another user's job (cancel, history): answered "no such job".
    "forbidden",
)
FINAL_STATES = ("finished", "failed", "cancelled")
LOSS_REASONS = ("will", "silence", "incarnation", "goodbye")
RESIZE_DIRECTIONS = ("shrink", "expand")

# Wall seconds: a live decision over a long queue can take tens of milliseconds.
DECISION_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class GaugeState:
    """The cluster as the last batch left it (read at scrape time)."""

    queued: int = 0
    running: int = 0
    cpus: int = 0
    cpus_free: int = 0
    machines_online: int = 0
    machines_offline: int = 0
    #: Cluster seconds (= wall seconds x time_scale).
    cluster_time: float = 0.0
    time_scale: float = 1.0
    reconciling: bool = False


class StateCollector(Collector):
    """Gauges derived from the actor's state at scrape time."""

    def __init__(self, state: Callable[[], GaugeState]) -> None:
        self._state = state

    def describe(self) -> Iterable[Metric]:
        # Same families, empty: lets the registry check names without reading state.
        return self._families(GaugeState())

    def collect(self) -> Iterable[Metric]:
        return self._families(self._state())

    @staticmethod
    def _families(s: GaugeState) -> list[Metric]:
        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"{PREFIX}_{name}", doc, value=value)

        return [
            gauge("queued_jobs", "Jobs waiting in the queue.", s.queued),
            gauge("running_jobs", "Jobs on CPUs (or awaiting reconciliation).", s.running),
            gauge("cpus", "CPUs of the machines online.", s.cpus),
            gauge("cpus_free", "Free CPUs of the machines online.", s.cpus_free),
            gauge("machines_online", "Machines whose agent is online.", s.machines_online),
            gauge(
                "machines_offline", "Machines known but offline (lost or gone).", s.machines_offline
            ),
            gauge(
                "cluster_time_seconds",
                "Cluster time now, in cluster seconds (= wall seconds x time_scale).",
                s.cluster_time,
            ),
            gauge(
                "time_scale", "K: cluster seconds per wall second (time compression).", s.time_scale
            ),
            gauge(
                "reconciling",
                "1 while a restarted scheduler waits for agents to confirm running jobs.",
                1.0 if s.reconciling else 0.0,
            ),
        ]


class SchedulerMetrics:
    """The scheduler's counters and histogram, plus its state collector, in ``registry``."""

    def __init__(
        self,
        registry: CollectorRegistry,
        state: Callable[[], GaugeState] | None = None,
    ) -> None:
        self.registry = registry
        self.submissions = Counter(
            f"{PREFIX}_submissions",
            "Jobs submitted, by result (a duplicate is an accepted resubmission of a known job).",
            ["result"],
            registry=registry,
        )
        self.bad_messages = Counter(
            f"{PREFIX}_bad_messages",
            "Payloads refused on receipt, by kind of failure.",
            ["reason"],
            registry=registry,
        )
        self.jobs_finished = Counter(
            f"{PREFIX}_jobs_finished",
            "Jobs that left the system, by final state.",
            ["state"],
            registry=registry,
        )
        self.decision_seconds = Histogram(
            f"{PREFIX}_decision_seconds",
            "Wall seconds of one policy decision (SchedulerCore.schedule).",
            buckets=DECISION_BUCKETS,
            registry=registry,
        )
        self.agents_lost = Counter(
            f"{PREFIX}_agents_lost",
            "Agents lost with their parts (Last Will, heartbeat silence, new incarnation, "
            "goodbye with parts running), by how it was noticed.",
            ["reason"],
            registry=registry,
        )
        self.requeues = Counter(
            f"{PREFIX}_requeues",
            "Jobs requeued after losing a machine.",
            registry=registry,
        )
        self.agents_suspect = Counter(
            f"{PREFIX}_agents_suspect",
            "Times an agent's heartbeats stopped long enough to make it suspect.",
            registry=registry,
        )
        self.stale_reports = Counter(
            f"{PREFIX}_stale_reports",
            "Part reports of another attempt than the job's current one (fencing); each "
            "is answered with a CancelPart of that attempt.",
            registry=registry,
        )
        # Zero-initialise the known label values so dashboards see every series.
        for result in SUBMISSION_RESULTS:
            self.submissions.labels(result=result)
        for reason in BAD_MESSAGE_REASONS:
            self.bad_messages.labels(reason=reason)
        for final in FINAL_STATES:
            self.jobs_finished.labels(state=final)
        for loss in LOSS_REASONS:
            self.agents_lost.labels(reason=loss)
        self.job_resizes = Counter(
            "accordion_job_resizes",
            "Running jobs resized by the policy (FCFS-malleable), by direction: shrink "
            "(fewer CPUs, MPL up to 2) or expand (more CPUs). One per job resized.",
            ["direction"],
            registry=registry,
        )
        for direction in RESIZE_DIRECTIONS:
            self.job_resizes.labels(direction=direction)
        self._state: GaugeState = GaugeState()
        self._source = state if state is not None else self.gauge_state
        registry.register(StateCollector(self._source))

    def gauge_state(self) -> GaugeState:
        return self._state

    def publish_state(self, state: GaugeState) -> None:
        """Replace the state the collector reports (one reference swap; thread-safe)."""
        self._state = state


@dataclass(slots=True)
class MetricsServer:
    """A running HTTP endpoint; :meth:`close` stops it."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve(registry: CollectorRegistry, port: int, addr: str = "127.0.0.1") -> MetricsServer:
    """Serve ``registry`` as Prometheus text on ``http://addr:port/metrics`` (0: any port)."""
    server, thread = start_http_server(port, addr=addr, registry=registry)
    return MetricsServer(server, thread)
