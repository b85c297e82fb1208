"""The scheduler's Prometheus metrics, served on HTTP.

Theory of operation. Two kinds of metric, as prometheus/client_python
intends:

- *counters and histograms* are incremented by the actor as things happen
  (:class:`SchedulerMetrics`); the job histograms (wait, response, bounded
  slowdown) are observed when a job finishes;
- *gauges* of the cluster's state are read at scrape time by a custom
  collector (``scheduler.runtime.gauges.StateCollector``) from the latest
  ``GaugeState`` the actor published. The actor replaces that immutable value
  after every batch of messages, so the HTTP thread never walks the core's
  containers while the actor changes them.

Every metric lives in a registry the caller injects, never the process-wide
default, so several actors (tests, a single-process demo) can share a process.
Labels have bounded cardinality: a result, a reason, a state, a policy, a
job-size class, a machine (one per agent), and ``job`` only on
``accordion_scheduler_running_job_cpus`` and ``_procs``, whose series are the running jobs
(at most one per CPU of the cluster).

*No ``_created`` series.* client_python exports a ``<name>_created`` sample
beside every counter and histogram (18 of the scheduler's 59 samples). Our
counters and histograms live in a private registry that is exported through
:class:`WithoutCreated`, which drops those samples; no process-wide switch is
flipped.

*Totals survive a restart.* :meth:`SchedulerMetrics.restore` sets every total
from the journal at start-up, from two sources:

- what the job rows tell: accepted submissions, jobs by final state,
  requeues, and the job histograms (every finished job observed again);
- the journal's ``totals`` table for the counters no job row can tell
  (:data:`JOURNALED`: rejected and duplicate submissions, rejections by
  reason, bad messages by reason, agent losses by reason, suspect agents,
  stale reports, resizes by direction). Those counters are
  ``scheduler.runtime.journaled_counters.JournaledCounter``: each increment is also
  tallied in a plain dict, and the actor writes
  :meth:`SchedulerMetrics.unsaved_totals` (what changed since the last batch)
  into the transaction of every batch, so a count is durable with the batch
  that counted it, for about 0.2 µs a batch that counted nothing.

Only the decision-time and prediction histograms (wall seconds of this
process, and the predicted waits, told once per job) start empty on a
restart, which ``rate``/``increase`` read as a counter reset.

Time bases: every time is named for its base. ``_wall_seconds`` are wall
seconds (``accordion_scheduler_decision_wall_seconds``: the time
``SchedulerCore.schedule`` took); ``_cluster_seconds`` are cluster seconds
(= wall seconds x K, K exported as ``accordion_scheduler_time_scale``): the
job histograms and ``accordion_scheduler_cluster_time_cluster_seconds``.
"""

from __future__ import annotations

import logging
import platform
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import InfoMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from broker.vocabulary import BadMessage, Rejection
from model.metrics import DEFAULT_TAU
from scheduler.core.job_lifecycle import JobState, is_final
from scheduler.runtime.gauges import PREFIX, GaugeState, MachineGauge, StateCollector
from scheduler.runtime.journal import JournalState, TotalKey
from scheduler.runtime.journaled_counters import JournaledCounter, Tally

__all__ = [
    "BAD_MESSAGE_REASONS",
    "DECISION_BUCKETS",
    "JOURNALED",
    "PREFIX",
    "GaugeState",  # scheduler.runtime.gauges's, here for the actor
    "MachineGauge",  # likewise
    "MetricsServer",
    "SchedulerMetrics",
    "serve",
    "size_class",
    "version",
]

log = logging.getLogger(__name__)


#: The counters kept in the journal's ``totals`` table (by attribute of
#: :class:`SchedulerMetrics`); ``submissions{result="accepted"}`` is left out,
#: since the job rows tell it.
JOURNALED = (
    "submissions",
    "rejections",
    "bad_messages",
    "agents_lost",
    "agents_suspect",
    "stale_reports",
    "job_resizes",
    "agent_holds",
    "adopted_parts",
    "requeues_uncharged",
    "journal_failures",
)
#: Accepted submissions: counted from the job rows, not journaled as a total.
ACCEPTED = (("result", "accepted"),)

SUBMISSION_RESULTS = ("accepted", "rejected", "duplicate")
#: How an agent's hold for adoption ended (``scheduler.live.agent_hold``).
HOLD_OUTCOMES = ("adopted", "rejoined", "expired")
#: Why a submission was refused: the codes of ``broker.vocabulary.Rejection`` (wider than
#: the cluster as configured; beyond the maximum wall time; an invalid spec; a job id
#: already used by another spec).
REJECTION_REASONS = tuple(code.value for code in Rejection)
#: Why a message was refused: the codes of ``broker.vocabulary.BadMessage``.
BAD_MESSAGE_REASONS = tuple(code.value for code in BadMessage)
FINAL_STATES = tuple(state.value for state in JobState if is_final(state))
LOSS_REASONS = ("will", "silence", "incarnation", "goodbye", "stop")
#: Why a job was requeued without charging its budget (``scheduler.live.coupling.Cause``).
UNCHARGED_CAUSES = ("never_ran", "operator_stop")
RESIZE_DIRECTIONS = ("shrink", "expand")
#: Job-size classes by processes: 1; 2-8; 9-32; more.
SIZE_CLASSES = ("serial", "small", "medium", "large")

# Wall seconds: a decision over a short queue takes 50-200 us (measured p50 53-175 us),
# one over a long queue tens of milliseconds.
DECISION_BUCKETS = (
    0.00001,
    0.000025,
    0.00005,
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
    1.0,
)
# Cluster seconds: the traces' waits and responses go from seconds to days.
JOB_TIME_BUCKETS = (
    1.0,
    10.0,
    30.0,
    60.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
    43200.0,
    86400.0,
    259200.0,
    604800.0,
)
SLOWDOWN_BUCKETS = (1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 1000.0)


def size_class(procs: int) -> str:
    """The job-size label of a job of ``procs`` processes (:data:`SIZE_CLASSES`)."""
    if procs <= 1:
        return "serial"
    if procs <= 8:
        return "small"
    if procs <= 32:
        return "medium"
    return "large"


def version() -> str:
    """The installed accordion's version ("unknown" when run from a bare source tree)."""
    try:
        return metadata.version("accordion")
    except metadata.PackageNotFoundError:
        return "unknown"


class WithoutCreated(Collector):
    """``registry``'s metrics without client_python's ``_created`` samples."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def describe(self) -> Iterable[Metric]:
        return self._registry.collect()

    def collect(self) -> Iterable[Metric]:
        for metric in self._registry.collect():
            kept = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            kept.samples = [s for s in metric.samples if not s.name.endswith("_created")]
            yield kept


class RunInfo(Collector):
    """``accordion_build_info`` and ``accordion_scheduler_policy_info`` (value 1)."""

    def __init__(self, policy: Callable[[], str]) -> None:
        self._policy = policy

    def collect(self) -> Iterable[Metric]:
        build = InfoMetricFamily(
            "accordion_build", "The accordion build serving these metrics.", labels=[]
        )
        build.add_metric([], {"version": version(), "python": platform.python_version()})
        policy = InfoMetricFamily(f"{PREFIX}_policy", "The scheduling policy deciding.", labels=[])
        policy.add_metric([], {"policy": self._policy()})
        return [build, policy]


class SchedulerMetrics:
    """The scheduler's counters and histograms, plus its state collector, in ``registry``.

    ``process=True`` adds client_python's process and platform collectors
    (CPU seconds, memory, open files, Python version): one per OS process, so
    the standalone scheduler asks for them and in-process tests do not.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        state: Callable[[], GaugeState] | None = None,
        *,
        process: bool = False,
    ) -> None:
        self.registry = registry
        own = CollectorRegistry()
        self.policy = "-"
        tally = self._tally = Tally()
        self.submissions = JournaledCounter(
            Counter(
                f"{PREFIX}_submissions",
                "Jobs submitted, by result (a duplicate is an accepted resubmission of a "
                "known job).",
                ["result"],
                registry=own,
            ),
            tally,
            untallied=[ACCEPTED],
        )
        self.rejections = JournaledCounter(
            Counter(
                f"{PREFIX}_rejections",
                "Jobs refused at submission, by reason (see REJECTION_REASONS).",
                ["reason"],
                registry=own,
            ),
            tally,
        )
        self.bad_messages = JournaledCounter(
            Counter(
                f"{PREFIX}_bad_messages",
                "Payloads refused on receipt, by kind of failure.",
                ["reason"],
                registry=own,
            ),
            tally,
        )
        self.jobs_finished = Counter(
            f"{PREFIX}_jobs_finished",
            "Jobs that left the system, by final state.",
            ["state"],
            registry=own,
        )
        self.decision_seconds = Histogram(
            f"{PREFIX}_decision_wall_seconds",
            "Wall seconds of one policy decision (SchedulerCore.schedule).",
            buckets=DECISION_BUCKETS,
            registry=own,
        )
        self.prediction_seconds = Histogram(
            f"{PREFIX}_prediction_wall_seconds",
            "Wall seconds of one prediction pass over the queue (predicted starts and "
            "reasons, scheduler.live.insight).",
            buckets=DECISION_BUCKETS,
            registry=own,
        )
        self.predicted_wait = Histogram(
            f"{PREFIX}_predicted_wait_cluster_seconds",
            "A queued job's wait as the scheduler first predicted it (predicted start minus "
            "submission), observed once per job.",
            buckets=JOB_TIME_BUCKETS,
            registry=own,
        )
        self.agents_lost = JournaledCounter(
            Counter(
                f"{PREFIX}_agents_lost",
                "Agents lost with their parts (Last Will, heartbeat silence, new incarnation, "
                "goodbye with parts running, a stop its operator asked for), by how it was "
                "noticed.",
                ["reason"],
                registry=own,
            ),
            tally,
        )
        self.requeues = Counter(
            f"{PREFIX}_requeues",
            "Jobs requeued after losing a machine.",
            registry=own,
        )
        self.requeues_uncharged = JournaledCounter(
            Counter(
                f"{PREFIX}_requeues_uncharged",
                "Of the requeues, those not counted against a job's requeue budget, by "
                "cause: never_ran (its start was refused or lost before it ran), "
                "operator_stop (its agent's operator stopped the agent).",
                ["cause"],
                registry=own,
            ),
            tally,
        )
        self.journal_failures = JournaledCounter(
            Counter(
                f"{PREFIX}_journal_failures",
                "Times the journal could no longer be written (its disk full, read-only or "
                "failing); new submissions are refused until it can again.",
                registry=own,
            ),
            tally,
        )
        self.agents_suspect = JournaledCounter(
            Counter(
                f"{PREFIX}_agents_suspect",
                "Times an agent's heartbeats stopped long enough to make it suspect.",
                registry=own,
            ),
            tally,
        )
        self.stale_reports = JournaledCounter(
            Counter(
                f"{PREFIX}_stale_reports",
                "Part reports of another attempt than the job's current one (fencing); each "
                "is answered with a CancelPart of that attempt.",
                registry=own,
            ),
            tally,
        )
        self.agent_holds = JournaledCounter(
            Counter(
                f"{PREFIX}_agent_holds",
                "Agents whose parts were held for adoption after their Last Will (or a new "
                "incarnation), by how the hold ended: adopted (a new incarnation listed "
                "parts), rejoined (the same process heard again), expired (the lost-agent "
                "rule after the hold-off).",
                ["outcome"],
                registry=own,
            ),
            tally,
        )
        self.adopted_parts = JournaledCounter(
            Counter(
                f"{PREFIX}_agents_adopted_parts",
                "Running parts a new agent incarnation adopted (kept running, not requeued).",
                registry=own,
            ),
            tally,
        )
        self.job_wait = Histogram(
            "accordion_job_wait_cluster_seconds",
            "Finished jobs' wait (start - submit), cluster seconds, by policy and size class.",
            ["policy", "size"],
            buckets=JOB_TIME_BUCKETS,
            registry=own,
        )
        self.job_response = Histogram(
            "accordion_job_response_cluster_seconds",
            "Finished jobs' response (end - submit), cluster seconds, by policy and size class.",
            ["policy", "size"],
            buckets=JOB_TIME_BUCKETS,
            registry=own,
        )
        self.job_slowdown = Histogram(
            "accordion_job_bounded_slowdown",
            f"Finished jobs' bounded slowdown max(response / max(run, {DEFAULT_TAU:g} s), 1), "
            "by policy and size class.",
            ["policy", "size"],
            buckets=SLOWDOWN_BUCKETS,
            registry=own,
        )
        # Zero-initialise the known label values so dashboards see every series.
        for result in SUBMISSION_RESULTS:
            self.submissions.labels(result=result)
        for why in REJECTION_REASONS:
            self.rejections.labels(reason=why)
        for reason in BAD_MESSAGE_REASONS:
            self.bad_messages.labels(reason=reason)
        for final in FINAL_STATES:
            self.jobs_finished.labels(state=final)
        for loss in LOSS_REASONS:
            self.agents_lost.labels(reason=loss)
        for outcome in HOLD_OUTCOMES:
            self.agent_holds.labels(outcome=outcome)
        for cause in UNCHARGED_CAUSES:
            self.requeues_uncharged.labels(cause=cause)
        self.job_resizes = JournaledCounter(
            Counter(
                "accordion_job_resizes",
                "Running jobs resized by the policy (FCFS-malleable), by direction: shrink "
                "(fewer CPUs, MPL up to 2) or expand (more CPUs). One per job resized.",
                ["direction"],
                registry=own,
            ),
            tally,
        )
        for direction in RESIZE_DIRECTIONS:
            self.job_resizes.labels(direction=direction)
        self.part_launch = Histogram(
            "accordion_part_launch_wall_seconds",
            "Wall seconds from an agent's admission of a StartPart to its process's fork, "
            "as the agent measured it on its own clock (PartStarted.launch_seconds).",
            buckets=DECISION_BUCKETS,
            registry=own,
        )
        registry.register(WithoutCreated(own))
        registry.register(RunInfo(lambda: self.policy))
        if process:
            ProcessCollector(registry=registry)
            PlatformCollector(registry=registry)
        self._journaled: dict[str, JournaledCounter] = {
            counter.name: counter for counter in (getattr(self, attr) for attr in JOURNALED)
        }
        self._state: GaugeState = GaugeState()
        self._source = state if state is not None else self.gauge_state
        registry.register(StateCollector(self._source))

    def gauge_state(self) -> GaugeState:
        return self._state

    def publish_state(self, state: GaugeState) -> None:
        """Replace the state the collector reports (one reference swap; thread-safe)."""
        self._state = state

    def job_finished(self, *, procs: int, submit: float, start: float, end: float) -> None:
        """Observe one finished job's wait, response and bounded slowdown (cluster seconds)."""
        labels = {"policy": self.policy, "size": size_class(procs)}
        response = end - submit
        self.job_wait.labels(**labels).observe(max(start - submit, 0.0))
        self.job_response.labels(**labels).observe(max(response, 0.0))
        run = max(end - start, 0.0)
        self.job_slowdown.labels(**labels).observe(max(response / max(run, DEFAULT_TAU), 1.0))

    def restore(self, state: JournalState) -> None:
        """Set the totals the journal knows (call once, on a fresh instance, at start-up)."""
        accepted = requeues = 0
        for job in state.jobs:
            accepted += 1
            requeues += job.requeues
            if is_final(job.state):
                self.jobs_finished.labels(state=job.state.value).inc()
            if job.state is JobState.FINISHED and job.start is not None and job.end is not None:
                self.job_finished(
                    procs=job.spec.procs, submit=job.submit, start=job.start, end=job.end
                )
        # The jobs moved to the archive count as ever (their wait and slowdown
        # observations are not kept: the histograms restart from the journal's jobs).
        archived = state.archived
        for final, n in archived.ended.items():
            self.jobs_finished.labels(state=final).inc(n)
        self.submissions.labels(result="accepted").inc(accepted + archived.accepted)
        self.requeues.inc(requeues + archived.requeues)
        for (name, labels), value in state.totals.items():
            counter = self._journaled.get(name)
            if counter is None or (name, labels) == (self.submissions.name, ACCEPTED):
                # A family this scheduler no longer counts (or a newer one's).
                log.warning("journal total %s%s not restored: not counted here", name, labels)
                continue
            try:
                (counter.labels(**dict(labels)) if labels else counter).inc(value)
            except ValueError:
                # Its labels changed since it was journaled (client_python refuses them).
                log.warning("journal total %s%s not restored: labels differ", name, labels)
        self._tally.take_changed()  # what the journal holds is saved

    def totals(self) -> dict[TotalKey, int]:
        """The :data:`JOURNALED` counters' values now, by family name and labels."""
        return self._tally.totals()

    def unsaved_totals(self) -> dict[TotalKey, int]:
        """The totals changed since the last call (or the restore), to journal now."""
        return self._tally.take_changed()


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
