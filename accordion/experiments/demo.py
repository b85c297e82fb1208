"""``accordion up --demo``: a workload through the live cluster, next to the twin's run of it.

1. a seeded synthetic workload sized for the cluster (``workload.synthetic``)
   is replayed in the twin first, and the time scale K is chosen from the
   twin's makespan so that the live run takes about the wanted wall time
   (:func:`plan_demo`);
2. the same jobs go through the live cluster with the code of ``accordion
   replay`` (:mod:`accordion.client.replay`), while the cluster is supervised
   (:func:`run_demo`);
3. once the cluster has stopped, each job's outcome (start, end, parts and
   resizes) is read back from the scheduler's journal (``Journal.load`` and
   ``Journal.history``) and the metrics are computed by
   ``model.metrics.compute_metrics``, as the twin computes its own
   (:func:`report_demo`). Live times are cluster seconds (= wall seconds x K)
   since the scheduler started; the twin's are the trace's virtual seconds.
   Both count in the trace's seconds, so waits, responses and slowdowns
   compare directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from accordion.client.live_client import DEFAULT_TIMEOUT
from accordion.client.replay import Arrival, Changed, ReplayState, arrivals, replay_and_follow
from accordion.cluster.local_cluster import LocalCluster, scrape
from accordion.cluster.processes import UpError
from model.allocation import Allocation
from model.execution import DEFAULT_MODEL, ExecutionModel
from model.job import Job
from model.machine import Part
from model.metrics import ScheduleMetrics, compute_metrics
from model.outcome import JobOutcome, Segment
from scheduler.core.job_lifecycle import JobState
from scheduler.planning.placement import PlacementRule
from scheduler.policies.registry import build_policy_with, policy_info
from scheduler.runtime.actor import job_from_spec
from scheduler.runtime.journal import Journal
from twin.report import TIME_BASE as TWIN_TIME_BASE
from twin.report import DecisionTimes, decision_times
from twin.simulate import simulate
from workload.cluster import ClusterSpec
from workload.swf_load import iter_jobs
from workload.swf_rules import SwfRules
from workload.synthetic import SyntheticSpec, generate


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoPlan:
    """The demo's jobs, the twin's run of them, and the time scale chosen from it."""

    jobs: list[Job]
    arrivals: list[Arrival]
    prefix: str
    time_scale: float
    twin: ScheduleMetrics
    twin_decisions: DecisionTimes
    policy: str
    placement: PlacementRule
    #: The twin's resizes (FCFS-malleable's counters; none for other policies).
    twin_resizes: Resizes = field(default_factory=lambda: Resizes(0, 0))


@dataclass(frozen=True, slots=True)
class Resizes:
    """How many times running jobs were shrunk and expanded."""

    shrinks: int
    expands: int


def nice_scale(value: float) -> float:
    """``value`` rounded to two significant digits, at least 1 (K = 118.7 -> 120)."""
    if value <= 1:
        return 1.0
    digits = 1 - math.floor(math.log10(value))
    return float(round(value, digits))


def demo_jobs(spec: ClusterSpec, *, jobs: int, seed: int, single_machine: bool) -> list[Job]:
    """A seeded synthetic workload sized for the cluster (``workload.synthetic``).

    Offered load 1.0 of the whole cluster, so that jobs queue; widths up to
    half the cluster; run times between 4 and 16 minutes at the reference
    speed. The shape is chosen for a live run on a small machine: with the
    time scale picked for a demo of 30-60 s, the shortest job still runs for
    about 2 s of wall time, longer than its job process takes to start (its
    work counts from the agent's start, so a shorter start-up costs nothing),
    and no job drains the whole cluster, which would start a burst of job
    processes at one instant when it ends.
    """
    width = 1 << (max(1, spec.total_cpus // 2).bit_length() - 1)
    synthetic = SyntheticSpec(
        jobs=jobs,
        cpus=width,  # widths are powers of two up to this
        load=min(10.0, 1.0 * spec.total_cpus / width),  # the generator's load is per `cpus`
        min_runtime=240.0,
        max_runtime=960.0,
        users=6,
        seed=seed,
    )
    rules = SwfRules(ref_speed=spec.reference_speed)
    loaded = list(iter_jobs(generate(synthetic), rules, total_cpus=spec.total_cpus))
    if single_machine:
        # Policies that place a job on one machine need every job to fit the widest.
        widest = max(m.cpus for m in spec.machines)
        loaded = [j if j.procs <= widest else replace(j, procs=widest) for j in loaded]
    return loaded


def plan_demo(
    spec: ClusterSpec,
    *,
    jobs: int = 60,
    seconds: float = 40.0,
    seed: int = 1,
    policy: str = "easy",
    placement: PlacementRule = PlacementRule.FASTEST,
    time_scale: float | None = None,
    prefix: str = "demo-",
    policy_options: Mapping[str, str] | None = None,
    execution: ExecutionModel = DEFAULT_MODEL,
    max_user_cpus: int | None = None,
) -> DemoPlan:
    """Generate the demo's jobs, run them in the twin, pick K for ``seconds`` of wall time.

    ``max_user_cpus``: the live scheduler's per-user CPU limit, applied by the twin
    too, so the two run the same rule."""
    single = policy_info(policy).single_machine or placement is PlacementRule.SINGLE
    workload = demo_jobs(spec, jobs=jobs, seed=seed, single_machine=single)
    result = simulate(
        workload,
        machines=spec.machines,
        policy=build_policy_with(policy, policy_options or {}, placement=placement),
        execution=execution,
        max_user_cpus=max_user_cpus,
    )
    twin = compute_metrics(result.outcomes, total_cpus=result.total_cpus, time_base=TWIN_TIME_BASE)
    scale = time_scale if time_scale is not None else nice_scale(twin.makespan / seconds)
    return DemoPlan(
        jobs=workload,
        arrivals=arrivals(workload, prefix=prefix),
        prefix=prefix,
        time_scale=scale,
        twin=twin,
        twin_decisions=decision_times(result),
        policy=policy,
        placement=placement,
        twin_resizes=Resizes(result.counters.get("shrinks", 0), result.counters.get("expands", 0)),
    )


@dataclass(frozen=True, slots=True)
class DecisionStats:
    """The scheduler's decision times, from its Prometheus histogram (wall ms)."""

    count: int
    mean_ms: float
    #: The upper bound of the histogram bucket holding the 99th percentile.
    p99_ms_at_most: float


def decision_stats(text: str) -> DecisionStats:
    """Read ``accordion_scheduler_decision_wall_seconds`` from a scrape."""
    buckets: list[tuple[float, float]] = []
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != "accordion_scheduler_decision_wall_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                buckets.append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_sum"):
                total = sample.value
            elif sample.name.endswith("_count"):
                count = sample.value
    if not count:
        return DecisionStats(0, 0.0, 0.0)
    buckets.sort()
    p99 = next((le for le, n in buckets if n >= 0.99 * count), math.inf)
    return DecisionStats(int(count), 1000 * total / count, 1000 * p99)


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveRun:
    """What the live part of the demo saw from the client's side."""

    state: ReplayState
    wall_seconds: float
    decisions: DecisionStats


async def run_demo(
    cluster: LocalCluster,
    plan: DemoPlan,
    *,
    on_change: Changed | None = None,
    timeout: float | None = None,
) -> LiveRun:
    """Replay the plan on the running cluster and wait until every job has ended."""
    t0 = time.monotonic()
    # The cluster is supervised meanwhile: a child that dies is restarted.
    supervisor = asyncio.get_running_loop().create_task(
        cluster.supervise_forever(), name="demo-supervisor"
    )
    try:
        async with cluster.connect(timeout=DEFAULT_TIMEOUT, watch=True) as client:
            async with asyncio.timeout(timeout):
                state = await replay_and_follow(
                    client, plan.arrivals, time_scale=plan.time_scale, on_change=on_change
                )
    finally:
        supervisor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await supervisor
    wall = time.monotonic() - t0
    text = await asyncio.to_thread(scrape, cluster.scheduler_metrics)
    return LiveRun(state=state, wall_seconds=wall, decisions=decision_stats(text))


# -- outcomes from the journal ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JournalOutcomes:
    """Finished and failed jobs as outcomes, and how many jobs ended in each state."""

    outcomes: list[JobOutcome]
    states: Counter[str]
    time_scale: float
    #: Every journalled resize of any job (finished or not), by direction.
    resizes: Resizes = field(default_factory=lambda: Resizes(0, 0))


def outcomes_from_journal(
    path: Path, speeds: Mapping[str, float], *, prefix: str = ""
) -> JournalOutcomes:
    """Each finished or failed job of a stopped scheduler's journal as a ``JobOutcome``.

    Start, end and parts come from the job's row; its segments (one per
    resize) from the journal's history since its last start (a requeued job
    starts again). ``expanded_runtime`` is the job's work at its first
    allocation's pace at MPL 1, as the twin reports it. ``prefix`` keeps only
    the jobs whose id starts with it.
    """
    with Journal(path) as journal:
        state = journal.load()
        history: dict[str, list[tuple[float, str, tuple[Part, ...]]]] = {}
        for event in journal.history():
            history.setdefault(event.job_id, []).append((event.at, event.kind, event.parts))
    if state.meta is None:
        raise UpError(f"{path}: the scheduler wrote no journal meta")
    # Only this run's jobs when the journal holds others (a long-running testbed).
    rows = [row for row in state.jobs if row.spec.id.startswith(prefix)]
    states: Counter[str] = Counter(row.state.value for row in rows)
    outcomes: list[JobOutcome] = []
    directions: Counter[str] = Counter()
    for job_id, steps_of_job in history.items():
        if not job_id.startswith(prefix):
            continue
        cpus = 0
        for _, kind, parts in steps_of_job:
            now_cpus = sum(p.cpus for p in parts)
            if kind == "resized" and cpus:
                directions["shrink" if now_cpus < cpus else "expand"] += now_cpus != cpus
            if kind in ("started", "resized"):
                cpus = now_cpus
    for row in rows:
        if row.state not in (JobState.FINISHED, JobState.FAILED) or row.start is None:
            continue
        if row.end is None:
            raise UpError(f"{path}: job {row.spec.id!r} ended without an end time")
        steps: list[tuple[float, tuple[Part, ...]]] = []
        for at, kind, parts in history.get(row.spec.id, []):
            if kind == "started":
                steps = [(at, parts)]
            elif kind == "resized" and steps:
                steps.append((at, parts))
        if not steps:
            steps = [(row.start, row.parts)]
        # The history dates placements by decision; the row's start and end are when
        # the job's processes ran (its agents' measurements, ``scheduler.live.agents``): no
        # segment outside them.
        steps = [(min(max(at, row.start), row.end), parts) for at, parts in steps]
        ends = [at for at, _ in steps[1:]] + [row.end]
        segments = tuple(
            Segment(at, end, sum(p.cpus for p in parts))
            for (at, parts), end in zip(steps, ends, strict=True)
            if end > at
        )
        if not segments:  # a job that ended the instant it started (or was resized)
            segments = (Segment(row.start, row.end, sum(p.cpus for p in steps[-1][1])),)
        first = steps[0][1] or row.parts
        spec = row.spec
        outcomes.append(
            JobOutcome(
                job=job_from_spec(spec, row.submit),
                start=row.start,
                end=row.end,
                parts=first,
                segments=segments,
                expanded_runtime=Allocation.of(first, speeds).expanded_runtime(
                    spec.work, spec.ref_speed
                ),
                failed=row.state is JobState.FAILED,
            )
        )
    return JournalOutcomes(
        outcomes,
        states,
        state.meta.time_scale,
        Resizes(directions["shrink"], directions["expand"]),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoReport:
    """Live metrics next to the twin's, for the same jobs."""

    jobs: int
    time_scale: float
    wall_seconds: float
    live: ScheduleMetrics
    twin: ScheduleMetrics
    live_decisions: DecisionStats
    twin_decisions: DecisionTimes
    states: Counter[str]
    rejected: dict[str, str] = field(default_factory=dict)
    #: Resizes of the live run (its journal) and of the twin.
    live_resizes: Resizes = field(default_factory=lambda: Resizes(0, 0))
    twin_resizes: Resizes = field(default_factory=lambda: Resizes(0, 0))

    @property
    def ok(self) -> bool:
        """Every job accepted and finished (none failed, lost or left running)."""
        return not self.rejected and self.states == Counter({"finished": self.jobs})


def live_time_base(time_scale: float) -> str:
    return f"cluster seconds (= wall seconds x {time_scale:g})"


def report_demo(cluster: LocalCluster, plan: DemoPlan, run: LiveRun) -> DemoReport:
    """Metrics of what really happened (the stopped scheduler's journal) and the twin's."""
    read = outcomes_from_journal(cluster.journal, cluster.spec.speeds)
    if not read.outcomes:
        raise UpError(f"no demo job ran to its end (journal {cluster.journal})")
    live = compute_metrics(
        read.outcomes,
        total_cpus=cluster.spec.total_cpus,
        time_base=live_time_base(read.time_scale),
    )
    return DemoReport(
        jobs=len(plan.jobs),
        time_scale=read.time_scale,
        wall_seconds=run.wall_seconds,
        live=live,
        twin=plan.twin,
        live_decisions=run.decisions,
        twin_decisions=plan.twin_decisions,
        states=read.states,
        rejected=dict(run.state.rejected),
        live_resizes=read.resizes,
        twin_resizes=plan.twin_resizes,
    )


def difference(live: float, twin: float) -> float | None:
    """``(live - twin) / twin``; None when the twin's value is 0."""
    if twin == 0:
        return None
    return (live - twin) / abs(twin)
