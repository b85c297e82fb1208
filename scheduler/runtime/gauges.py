"""The scheduler's gauges: the cluster's state, read at scrape time.

The actor publishes an immutable :class:`GaugeState` after every batch of
messages (``SchedulerMetrics.publish_state``: one reference swap); the
:class:`StateCollector` turns the latest one into gauge families when
Prometheus scrapes, on the HTTP thread, which never walks the core's
containers while the actor changes them. Labels stay bounded: a machine (one
per agent), or ``job`` on the per-running-job gauges only (at most one series
per CPU of the cluster).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

PREFIX = "accordion_scheduler"


@dataclass(frozen=True, slots=True)
class MachineGauge:
    """One machine as the scheduler sees it."""

    id: str
    cpus: int
    busy: int
    online: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class GaugeState:
    """The cluster as the last batch left it (read at scrape time)."""

    queued: int = 0
    running: int = 0
    cpus: int = 0
    cpus_free: int = 0
    #: CPUs of every machine not retired (online, suspect or lost): the width a job
    #: may have and still be accepted.
    cpus_configured: int = 0
    machines_online: int = 0
    machines_offline: int = 0
    #: Cluster seconds (= wall seconds x time_scale).
    cluster_time: float = 0.0
    time_scale: float = 1.0
    reconciling: bool = False
    #: Machines by their agent's state (``scheduler.live.agent_lifecycle``), every state.
    machine_states: Mapping[str, int] | None = None
    #: Whether the journal can be written, and the writes held in memory meanwhile.
    journal_writable: bool = True
    journal_held_writes: int = 0
    machines: tuple[MachineGauge, ...] = ()
    #: CPUs held by each running job, by job id.
    job_cpus: Mapping[str, int] | None = None
    #: Processes of each running job, by job id (procs / CPUs is its MPL).
    job_procs: Mapping[str, int] | None = None


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

        machine_cpus = GaugeMetricFamily(
            f"{PREFIX}_machine_cpus",
            "CPUs of each known machine, by machine and whether it is online.",
            labels=["machine", "online"],
        )
        machine_busy = GaugeMetricFamily(
            f"{PREFIX}_machine_cpus_busy",
            "CPUs the scheduler has given to running jobs on each machine.",
            labels=["machine"],
        )
        for m in s.machines:
            machine_cpus.add_metric([m.id, "1" if m.online else "0"], m.cpus)
            machine_busy.add_metric([m.id], m.busy)
        job_cpus = GaugeMetricFamily(
            f"{PREFIX}_running_job_cpus",
            "CPUs held by each running job (series come and go with the jobs).",
            labels=["job"],
        )
        for job, cpus in sorted((s.job_cpus or {}).items()):
            job_cpus.add_metric([job], cpus)
        job_procs = GaugeMetricFamily(
            f"{PREFIX}_running_job_procs",
            "Processes of each running job; procs / CPUs is its multiprogramming level (MPL).",
            labels=["job"],
        )
        for job, procs in sorted((s.job_procs or {}).items()):
            job_procs.add_metric([job], procs)
        by_state = GaugeMetricFamily(
            f"{PREFIX}_machines",
            "Known machines by their agent's state (online, suspect, draining, held, "
            "stopped, lost, gone).",
            labels=["state"],
        )
        for state, n in sorted((s.machine_states or {}).items()):
            by_state.add_metric([state], n)
        return [
            gauge("queued_jobs", "Jobs waiting in the queue.", s.queued),
            gauge("running_jobs", "Jobs on CPUs (or awaiting reconciliation).", s.running),
            gauge("cpus", "CPUs of the machines online.", s.cpus),
            gauge("cpus_free", "Free CPUs of the machines online.", s.cpus_free),
            gauge(
                "cpus_configured",
                "CPUs of the machines not retired (online, suspect or lost; an agent "
                "that said goodbye is retired): the widest job accepted.",
                s.cpus_configured,
            ),
            gauge("machines_online", "Machines whose agent is online.", s.machines_online),
            gauge(
                "machines_offline", "Machines known but offline (lost or gone).", s.machines_offline
            ),
            gauge(
                "cluster_time_cluster_seconds",
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
            gauge(
                "journal_writable",
                "1 while the journal can be written; 0 while its disk refuses writes (new "
                "submissions are refused, reports are held in memory).",
                1.0 if s.journal_writable else 0.0,
            ),
            gauge(
                "journal_held_writes",
                "Journal writes held in memory until the disk takes them again.",
                s.journal_held_writes,
            ),
            by_state,
            machine_cpus,
            machine_busy,
            job_cpus,
            job_procs,
        ]
