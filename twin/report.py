"""What a twin run leaves behind: the per-job CSV and the summary JSON.

The CSV has one row per job. ``machines`` is where the job started;
``segments`` where it ran over time, for the Gantt chart
(``accordion.gantt.twin_run``): each placement as ``TIME@MACHINE:CPUS;...``,
the instant it began and its parts, placements separated by ``|`` (one for a
job never resized; each lasts until the next, the last until ``end``).
``deadline`` is the job's absolute deadline, empty for a job without one.

The summary holds every schedule metric (``model.metrics``), the decision time
per event (mean, p99, max, in milliseconds of wall time) and the events per
second of the replay, and says which time base each number uses: schedule
metrics are in virtual trace seconds, decision times in wall-clock time.

When the replay predicted starts (``twin.forecasts``), the CSV has each job's
prediction at its submission beside its real start (``predicted_start``,
empty otherwise) and the summary its error (:func:`prediction_errors`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from model.metrics import DEFAULT_TAU, ScheduleMetrics, compute_metrics
from model.outcome import JobOutcome
from twin.simulate import SimulationResult

TIME_BASE = "virtual trace seconds"

CSV_COLUMNS = (
    "id",
    "user",
    "submit",
    "start",
    "end",
    "processes",
    "cpus",
    "machines",
    "wait",
    "response",
    "bounded_slowdown",
    "deadline_met",
    "segments",
    "deadline",
    "predicted_start",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionTimes:
    """Wall time of the policy per scheduling event, milliseconds."""

    mean_ms: float
    p99_ms: float
    max_ms: float
    count: int


def decision_times(result: SimulationResult) -> DecisionTimes:
    ns = np.frombuffer(result.decision_ns, dtype=np.int64) if len(result.decision_ns) else None
    if ns is None:
        return DecisionTimes(mean_ms=0.0, p99_ms=0.0, max_ms=0.0, count=0)
    return DecisionTimes(
        mean_ms=float(ns.mean()) / 1e6,
        p99_ms=float(np.percentile(ns, 99)) / 1e6,
        max_ms=float(ns.max()) / 1e6,
        count=int(ns.size),
    )


def metrics_of(result: SimulationResult, *, tau: float = DEFAULT_TAU) -> ScheduleMetrics:
    return compute_metrics(
        result.outcomes, total_cpus=result.total_cpus, time_base=TIME_BASE, tau=tau
    )


def summary(
    result: SimulationResult,
    metrics: ScheduleMetrics,
    *,
    workload: Mapping[str, Any],
) -> dict[str, Any]:
    """The summary JSON as a dict (policy, workload, cluster, metrics, performance)."""
    times = decision_times(result)
    return {
        "policy": result.policy,
        "workload": dict(workload),
        "cluster": {
            "machines": [{"id": m.id, "cpus": m.cpus, "speed": m.speed} for m in result.machines],
            "total_cpus": result.total_cpus,
        },
        "metrics": metrics.as_dict(),
        **({} if result.forecasts is None else {"prediction": prediction_errors(result)}),
        "rejected": dict(result.rejected),
        "policy_counters": dict(result.counters),
        "performance": {
            "time_base": "wall-clock seconds of this replay",
            "wall_seconds": result.wall_seconds,
            "events": result.events,
            "events_per_second": result.events / result.wall_seconds
            if result.wall_seconds > 0
            else 0.0,
            "jobs_per_second": len(result.outcomes) / result.wall_seconds
            if result.wall_seconds > 0
            else 0.0,
            "decision_time_mean_ms": times.mean_ms,
            "decision_time_p99_ms": times.p99_ms,
            "decision_time_max_ms": times.max_ms,
            "decisions": times.count,
        },
    }


def write_summary(path: Path, data: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def prediction_errors(result: SimulationResult) -> dict[str, Any]:
    """How far each job's predicted start at its submission was from its real start.

    Over the jobs that waited (still queued after the decision at their
    submission: a job started at once was predicted exactly, by construction)
    and had a place in the plan: the median, 90th percentile and mean of
    ``|predicted - real|``, the share within 10 % of the job's real wait and the
    share within one hour, and the share that started later than predicted.
    """
    forecasts = result.forecasts
    if forecasts is None:
        raise ValueError("the replay made no predictions")
    at_submit = forecasts.at_submit
    waited = forecasts.waited
    errors: list[float] = []
    waits: list[float] = []
    late = 0
    unplaced = 0
    for o in result.outcomes:
        job_id = o.job.id
        if job_id not in waited:
            continue
        predicted = at_submit.get(job_id)
        if predicted is None:
            unplaced += 1
            continue
        errors.append(abs(predicted - o.start))
        waits.append(o.start - o.job.submit)
        late += o.start > predicted
    n = len(errors)
    err = np.asarray(errors, dtype=np.float64)
    wait = np.asarray(waits, dtype=np.float64)
    return {
        "time_base": TIME_BASE,
        "rule": str(forecasts.rule),
        "jobs_waited": n,
        "jobs_unplaced": unplaced,
        "jobs_started_at_submission": len(at_submit) - len(waited),
        "median_abs_error": float(np.median(err)) if n else 0.0,
        "p90_abs_error": float(np.percentile(err, 90)) if n else 0.0,
        "mean_abs_error": float(err.mean()) if n else 0.0,
        "within_10pct": float(np.mean(err <= 0.1 * wait)) if n else 0.0,
        "within_1h": float(np.mean(err <= 3600.0)) if n else 0.0,
        "started_later": late / n if n else 0.0,
    }


def write_jobs_csv(path: Path, result: SimulationResult, *, tau: float = DEFAULT_TAU) -> None:
    """One row per job, in order of job end (the order the twin finished them)."""
    predicted: dict[str, float | None] = (
        {} if result.forecasts is None else result.forecasts.at_submit
    )
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(CSV_COLUMNS)
        for o in result.outcomes:
            run = o.end - o.start
            bsld = max((o.wait + run) / max(run, tau), 1.0)
            met = o.deadline_met
            out.writerow(
                (
                    o.job.id,
                    o.job.user,
                    _num(o.job.submit),
                    _num(o.start),
                    _num(o.end),
                    o.job.procs,
                    o.max_cpus,
                    ";".join(f"{p.machine}:{p.cpus}" for p in o.parts),
                    _num(o.wait),
                    _num(o.response),
                    f"{bsld:.6g}",
                    "" if met is None else str(met).lower(),
                    _placements(o),
                    "" if o.job.deadline is None else _num(o.job.deadline),
                    _opt(predicted.get(o.job.id)),
                )
            )


def _placements(o: JobOutcome) -> str:
    """The ``segments`` column (module docstring)."""
    if not o.segment_parts:
        return f"{_num(o.start)}@" + ";".join(f"{p.machine}:{p.cpus}" for p in o.parts)
    return "|".join(
        f"{_num(seg.start)}@" + ";".join(f"{p.machine}:{p.cpus}" for p in parts)
        for seg, parts in o.placements()
    )


def _opt(x: float | None) -> str:
    return "" if x is None else _num(x)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.6f}"
