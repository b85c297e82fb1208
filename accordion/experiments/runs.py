"""The pipeline behind ``simulate`` and ``compare``: load, replay, write the results.

Kept apart from the CLI so the benchmarks and tests run exactly what the
commands run.
"""

from __future__ import annotations

import csv
import gc
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from accordion.cluster.speed import HostSpeed
from accordion.errors import UserError
from accordion.experiments.chart import write_chart
from accordion.experiments.twin_options import Window
from model.execution import DEFAULT_MODEL, ExecutionModel
from model.job import Job
from model.machine import Machine
from model.metrics import DEFAULT_TAU, ScheduleMetrics
from scheduler.planning.placement import PlacementRule
from scheduler.policies.registry import build_policy_with, policy_info
from twin.report import metrics_of, summary, write_jobs_csv, write_summary
from twin.simulate import ProgressFn, SimulationResult, simulate
from workload.cluster import cluster_from_header, load_cluster
from workload.deadlines import HEADER_KEY as DEADLINES_KEY
from workload.deadlines import DeadlineRule, assign_deadlines, rule_from_text
from workload.rigidity import RigidRule, mark_rigid
from workload.swf import read_header, write_swf
from workload.swf_load import load_jobs
from workload.swf_rules import SwfRules
from workload.swf_schedule import records_from_schedule


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """Jobs ready to replay, the machines to replay them on, and what was left out."""

    name: str
    path: Path
    jobs: list[Job]
    machines: tuple[Machine, ...]
    cluster_source: str
    skipped: Counter[str]
    variation: Variation
    window: Window | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path),
            "jobs": len(self.jobs),
            "window": None if self.window is None else str(self.window),
            "skipped": dict(self.skipped),
            "cluster_source": self.cluster_source,
            **self.variation.describe(),
        }


def trace_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".swf"):
        name = name.removesuffix(suffix)
    return name


@dataclass(frozen=True, slots=True, kw_only=True)
class Variation:
    """What the run adds to the trace: deadlines (traces carry none), rigid jobs.

    Every job is malleable unless ``rigid`` marks a share of them rigid
    (``workload.rigidity``); only FCFS-malleable reads it.
    """

    deadlines: DeadlineRule | None = None
    rigid: RigidRule | None = None

    def apply(self, jobs: list[Job]) -> list[Job]:
        if self.deadlines is not None:
            jobs = assign_deadlines(jobs, self.deadlines)
        if self.rigid is not None:
            jobs = mark_rigid(jobs, self.rigid)
        return jobs

    def describe(self) -> dict[str, Any]:
        d = self.deadlines
        return {
            "deadlines": None
            if d is None
            else {
                "share": d.share,
                "slack_min": d.slack_min,
                "slack_max": d.slack_max,
                "estimate": d.estimate,
                "seed": d.seed,
            },
            "rigid": None
            if self.rigid is None
            else {"share": self.rigid.share, "seed": self.rigid.seed},
        }


def load_workload(
    trace: Path,
    *,
    cluster: Path | None,
    jobs: int | None = None,
    rules: SwfRules | None = None,
    variation: Variation | None = None,
    window: Window | None = None,
    cpus: int | None = None,
) -> Workload:
    """Read ``trace`` (SWF) and the machines: a cluster file, or the trace's header.

    ``window`` keeps the jobs at those positions (``accordion.commands.options``; ``jobs=N``
    is the window ``0:N``); ``cpus`` replaces the header's machine size. A
    cluster file's ``reference_speed`` (the speed the trace's run times were
    measured at) becomes every job's ``ref_speed``, so a job takes
    ``runtime * reference_speed / speed`` on a machine; ``rules`` that state
    another reference speed are a user error.
    """
    rules = rules or SwfRules()
    if cluster is not None:
        if cpus is not None:
            raise UserError("--cpus sets the size of the trace's one machine; not with --cluster")
        spec = load_cluster(cluster, auto_speed=HostSpeed())
        machines = spec.machines
        source = str(cluster)
        if rules.ref_speed not in (SwfRules().ref_speed, spec.reference_speed):
            raise UserError(
                f"{cluster}: reference_speed {spec.reference_speed:g} disagrees with the "
                f"conversion rules' {rules.ref_speed:g}"
            )
        rules = replace(rules, ref_speed=spec.reference_speed)
    else:
        spec = cluster_from_header(read_header(trace))
        machines = spec.machines
        source = "trace header"
        if cpus is not None:
            machines = (replace(machines[0], cpus=cpus),)
            source = f"trace header, {cpus} CPUs (--cpus)"
    if window is None and jobs is not None:
        window = Window(0, jobs)
    total = sum(m.cpus for m in machines)
    limit = None if window is None else window.stop
    loaded = load_jobs(trace, rules, limit=limit, total_cpus=total)
    kept = loaded.jobs if window is None else loaded.jobs[window.start :]
    if not kept:
        raise UserError(f"{trace}: no job left to replay (skipped: {dict(loaded.skipped)})")
    variation = variation or Variation()
    stated = loaded.header.get(DEADLINES_KEY)
    if stated is not None and variation.deadlines is None:
        # A generated trace states its deadline rule in its header (workload.deadlines).
        variation = replace(variation, deadlines=rule_from_text(stated))
    return Workload(
        name=trace_name(trace),
        path=trace,
        jobs=variation.apply(kept),
        machines=tuple(machines),
        cluster_source=source,
        skipped=loaded.skipped,
        variation=variation,
        window=window,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One policy replayed on one workload."""

    spec: str
    result: SimulationResult
    metrics: ScheduleMetrics
    summary: dict[str, Any]


UNNAMED_APP = "(none)"
"""The ``jobs_by_app`` key of jobs that name no application."""


def applications(jobs: list[Job], execution: ExecutionModel) -> dict[str, int] | None:
    """Under the calibrated model, how many jobs run each application (those naming
    none under :data:`UNNAMED_APP`: they fall back to the ``linear`` reading, see
    ``model.execution``), for the summary; None under the other models. A job naming
    an application the calibration lacks is the user's error, found before the replay.
    """
    cal = execution.calibration
    if cal is None:
        return None
    counts = Counter(UNNAMED_APP if j.app is None else j.app for j in jobs)
    unknown = sorted(app for app in counts if app != UNNAMED_APP and cal.get(app) is None)
    if unknown:
        raise UserError(
            f"the trace's jobs run {', '.join(unknown)}, which calibration {cal.name!r} "
            f"does not measure (it has {', '.join(cal.names())})"
        )
    return dict(sorted(counts.items()))


def run_policy(
    workload: Workload,
    spec: str,
    *,
    placement: PlacementRule = PlacementRule.FASTEST,
    execution: ExecutionModel = DEFAULT_MODEL,
    progress: ProgressFn | None = None,
    options: Mapping[str, str] | None = None,
    tau: float = DEFAULT_TAU,
    max_user_cpus: int | None = None,
) -> Run:
    """Replay ``workload`` under ``spec`` with its ``options`` (``--policy-opt``);
    ``max_user_cpus``: the live scheduler's per-user CPU limit (``--max-user-cpus``)."""
    options = dict(options or {})
    apps = applications(workload.jobs, execution)
    policy = build_policy_with(spec, options, placement=placement)
    if policy_info(spec).single_machine:
        widest = max(m.cpus for m in workload.machines)
        # Single-machine policies never fold a job: it needs all its processes' CPUs.
        too_wide = sum(1 for j in workload.jobs if j.procs > widest)
        if too_wide:
            raise UserError(
                f"{spec} runs each job on one machine, but {too_wide} job(s) need more "
                f"than the widest machine's {widest} CPUs; use a cluster file whose "
                "machines fit every job"
            )
    # The loaded trace is long-lived: keep the cyclic collector from rescanning it,
    # or its full collections show up as 100 ms "decisions" in the timing.
    gc.collect()
    gc.freeze()
    result = simulate(
        workload.jobs,
        machines=workload.machines,
        policy=policy,
        execution=execution,
        progress=progress,
        max_user_cpus=max_user_cpus,
    )
    metrics = metrics_of(result, tau=tau)
    data = summary(result, metrics, workload=workload.describe())
    data["placement"] = str(placement)
    data["policy_options"] = options
    data["max_user_cpus"] = max_user_cpus
    model = data["execution_model"] = execution.describe()
    if apps is not None:
        model["jobs_by_app"] = apps
    return Run(spec=spec, result=result, metrics=metrics, summary=data)


def safe_name(spec: str) -> str:
    return spec.replace(":", "+").replace("/", "_")


def write_run(out: Path, run: Run, *, per_job: bool = True) -> list[Path]:
    """``<policy>.summary.json`` under ``out``, and with ``per_job`` the per-job
    ``<policy>.jobs.csv`` and the schedule as ``<policy>.swf``."""
    out.mkdir(parents=True, exist_ok=True)
    stem = safe_name(run.spec)
    paths = [out / f"{stem}.summary.json"]
    write_summary(paths[0], run.summary)
    if per_job:
        paths.append(out / f"{stem}.jobs.csv")
        write_jobs_csv(paths[-1], run.result)
        path = out / f"{stem}.swf"
        rows = sorted(run.result.outcomes, key=lambda o: (o.job.submit, o.job.id))
        write_swf(
            path,
            records_from_schedule((o.job, o.start, o.end, o.max_cpus, 1) for o in rows),
            header={
                "Note": f"schedule simulated by accordion's twin, policy {run.spec}",
                "MaxProcs": str(run.result.total_cpus),
            },
        )
        paths.append(path)
    return paths


def _flat(run: Run) -> dict[str, Any]:
    row: dict[str, Any] = {"policy": run.spec}
    row.update(run.summary["metrics"])
    row.update({k: v for k, v in run.summary["performance"].items() if k != "time_base"})
    return row


def write_compare(out: Path, name: str, runs: list[Run], base: Run) -> tuple[Path, Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    rows = [_flat(r) for r in runs]
    base_row = _flat(base)
    numeric = [k for k, v in base_row.items() if isinstance(v, int | float) and k != "policy"]
    csv_path = out / "compare.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["policy", *numeric, *(f"{k}_change_pct" for k in numeric)])
        for row in rows:
            changes = [
                "" if base_row[k] == 0 else f"{100 * (row[k] - base_row[k]) / abs(base_row[k]):.3f}"
                for k in numeric
            ]
            writer.writerow([row["policy"], *(row[k] for k in numeric), *changes])
    json_path = out / "compare.json"
    json_path.write_text(
        json.dumps({"baseline": base.spec, "runs": [r.summary for r in runs]}, indent=2) + "\n",
        encoding="utf-8",
    )
    png_path = out / "compare.png"
    write_chart(png_path, f"{name}: {len(base.result.outcomes)} jobs", rows, [r.spec for r in runs])
    return csv_path, json_path, png_path
