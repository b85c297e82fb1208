"""The sweep engine: policies x values of one parameter x seeds, one tidy CSV row per run.

Theory of operation. A sweep is a list of :class:`Task` values (small, frozen,
picklable), each naming a policy, the swept parameter's value and a seed, and
sharing one :class:`Source` (a preset such as the EG-EDF grid, or a trace with
its options). :func:`run_task` replays one task and returns its row: the
schedule metrics only, never a wall-clock number, so that a row depends on
the task alone and the CSV of a sweep is byte-identical from run to run.

:func:`run_sweep` hands the tasks to any ``concurrent.futures.Executor`` (the
CLI uses a ``ProcessPoolExecutor`` over all cores), records each row as it
arrives in ``<csv>.partial``, and at the end writes the CSV sorted by
``(policy, value, seed)`` and removes the partial file. A repeated run reads
the rows of both files first and only submits the tasks it lacks, so an
interrupted sweep resumes and a finished one costs nothing.

The swept parameters (:data:`PARAMETERS`): ``interarrival`` (the preset's mean
inter-arrival time, s), ``tau`` (bounded slowdown), ``overhead`` (formula
(4)'s OV of the linear/max models), ``deadlines`` (share of jobs with a
deadline) and ``cpus`` (trace machine size). The seed draws the preset's jobs,
the deadlines and the paper model's per-job OV.
"""

from __future__ import annotations

import csv
import math
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path

from accordion.experiments.runs import Variation, Workload, load_workload, run_policy
from accordion.experiments.twin_options import Window, execution_model
from model.execution import ModelKind
from model.job import Job
from model.metrics import DEFAULT_TAU
from scheduler.planning.placement import PlacementRule
from twin.report import metrics_of
from workload.cluster import parse_cluster
from workload.deadlines import DeadlineRule
from workload.grid_preset import PRESET_NAME, GridPreset, cluster_toml, records
from workload.rigidity import RigidRule
from workload.swf_rules import SwfRules, record_to_job

PARAMETERS = ("interarrival", "tau", "overhead", "deadlines", "cpus")

KEY_COLUMNS = ("policy", "parameter", "value", "seed")
METRIC_COLUMNS = (
    "jobs",
    "makespan",
    "wait_mean",
    "wait_p95",
    "response_mean",
    "bounded_slowdown_mean",
    "slowdown_mean",
    "malleable_slowdown_mean",
    "utilisation",
    "fragmentation",
    "system_usage",
    "average_mpl",
    "deadline_jobs",
    "deadline_missed",
    "deadline_miss_rate",
    "cpu_util_mean",
)
"""Schedule metrics (``model.metrics``), then ``cpu_util_mean``: the jobs' mean ``u``."""
COLUMNS = (*KEY_COLUMNS, *METRIC_COLUMNS)

Row = dict[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """What every task replays: a preset (``preset`` set) or a trace (``trace`` set)."""

    preset: str | None = None
    trace: Path | None = None
    cluster: Path | None = None
    window: Window | None = None
    cpus: int | None = None
    placement: PlacementRule = PlacementRule.FASTEST
    model: ModelKind = ModelKind.LINEAR
    overhead: float = 0.0
    #: The calibrated model's file (``workload.calibration``), read by every task.
    calibration: Path | None = None
    missing_util: float = 1.0
    #: Share of jobs made rigid (``workload.rigidity``, seeded with the task's seed).
    rigid: float = 0.0
    deadlines: float | None = None
    interarrival: float = 10.0
    tau: float = DEFAULT_TAU

    def __post_init__(self) -> None:
        if (self.preset is None) == (self.trace is None):
            raise ValueError("a sweep replays either a trace or a --preset, exactly one")
        if self.preset is not None and self.preset != PRESET_NAME:
            raise ValueError(f"unknown preset {self.preset!r}; known: {PRESET_NAME}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    source: Source
    policy: str
    parameter: str
    value: float
    seed: int

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.policy, self.parameter, _num(self.value), str(self.seed))


def tasks(
    source: Source,
    policies: Sequence[str],
    parameter: str,
    values: Sequence[float],
    seeds: Sequence[int],
) -> list[Task]:
    """Every combination, in a fixed order; checks that the parameter fits the source."""
    if parameter not in PARAMETERS:
        raise ValueError(f"unknown parameter {parameter!r}; sweepable: {', '.join(PARAMETERS)}")
    if parameter == "interarrival" and source.preset is None:
        raise ValueError("interarrival is a preset's parameter; a trace has its own arrivals")
    if parameter == "cpus" and source.trace is None:
        raise ValueError("cpus sizes a trace's machine; a preset has its own grid")
    # Seed-major: a sweep stopped half-way has every policy and value for its first seeds.
    return [
        Task(source=source, policy=p, parameter=parameter, value=v, seed=s)
        for s in seeds
        for v in values
        for p in policies
    ]


def _num(x: float) -> str:
    """A value as CSV text: whole numbers without a point, others by ``repr`` (exact)."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _workload(task: Task) -> tuple[Workload, Source]:
    """The task's workload, and its source with the swept parameter applied."""
    src = task.source
    value = task.value
    if task.parameter == "interarrival":
        src = replace(src, interarrival=value)
    elif task.parameter == "tau":
        src = replace(src, tau=value)
    elif task.parameter == "overhead":
        src = replace(src, overhead=value)
    elif task.parameter == "deadlines":
        src = replace(src, deadlines=value)
    elif task.parameter == "cpus":
        if not value.is_integer() or value < 1:
            raise ValueError(f"cpus must be whole and >= 1, got {value!r}")
        src = replace(src, cpus=int(value))
    rules = SwfRules(missing_cpu_util=src.missing_util)
    deadline_rule = (
        None if src.deadlines is None else DeadlineRule(share=src.deadlines, seed=task.seed)
    )
    rigid = RigidRule(share=src.rigid, seed=task.seed) if src.rigid else None
    variation = Variation(deadlines=deadline_rule, rigid=rigid)
    if src.trace is not None:
        work = load_workload(
            src.trace,
            cluster=src.cluster,
            rules=rules,
            variation=variation,
            window=src.window,
            cpus=src.cpus,
        )
        return work, src
    preset = GridPreset(seed=task.seed, interarrival=src.interarrival)
    if src.deadlines is not None:
        preset = replace(preset, deadline_share=src.deadlines)
    spec = parse_cluster(tomllib.loads(cluster_toml(preset)), source=PRESET_NAME)
    jobs: list[Job] = []
    for rec in records(preset):
        job = record_to_job(rec, rules)
        if not isinstance(job, Job):  # the preset writes only replayable records
            raise AssertionError(f"preset record {rec.job_number} not replayable: {job}")
        jobs.append(job)
    variation = Variation(deadlines=preset.deadline_rule, rigid=rigid)
    work = Workload(
        name=PRESET_NAME,
        path=Path(PRESET_NAME),
        jobs=variation.apply(jobs),
        machines=spec.machines,
        cluster_source=f"preset {PRESET_NAME}",
        skipped=Counter(),
        variation=variation,
    )
    return work, src


def run_task(task: Task) -> Row:
    """Replay one task; its row (keys and schedule metrics, as CSV text)."""
    return run_group((task,))[0]


def run_group(group: Sequence[Task]) -> list[Row]:
    """Rows of tasks that differ in ``tau`` alone, from one replay.

    ``tau`` only enters the metrics, never the schedule, so a tau sweep replays
    each (policy, seed) once and scores the schedule at every tau.
    """
    first = group[0]
    if any(replace(t, value=first.value) != first for t in group) or (
        len(group) > 1 and first.parameter != "tau"
    ):
        raise ValueError("a group holds tasks that differ in the tau value alone")
    work, src = _workload(first)
    execution = execution_model(
        src.model, overhead=src.overhead, seed=first.seed, calibration=src.calibration
    )
    run = run_policy(work, first.policy, placement=src.placement, execution=execution, tau=src.tau)
    u_mean = math.fsum(j.cpu_util for j in work.jobs) / len(work.jobs)
    rows = []
    for task in group:
        scored = run.metrics if task is first else metrics_of(run.result, tau=task.value)
        metrics: dict[str, float | int | str] = dict(scored.as_dict())
        metrics["cpu_util_mean"] = u_mean
        row = dict(zip(KEY_COLUMNS, task.key, strict=True))
        for column in METRIC_COLUMNS:
            value = metrics[column]
            row[column] = _num(float(value)) if isinstance(value, int | float) else str(value)
        rows.append(row)
    return rows


def _groups(todo: Sequence[Task]) -> list[tuple[Task, ...]]:
    """One group per task, except that a tau sweep groups a (policy, seed)'s values."""
    groups: dict[object, list[Task]] = {}
    for t in todo:
        key = (t.policy, t.seed) if t.parameter == "tau" else t.key
        groups.setdefault(key, []).append(t)
    return [tuple(g) for g in groups.values()]


def read_rows(path: Path) -> dict[tuple[str, ...], Row]:
    """Rows already in a sweep CSV (or its partial file), by key; none if absent."""
    if not path.exists():
        return {}
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or tuple(reader.fieldnames) != COLUMNS:
            raise ValueError(
                f"{path}: not a sweep CSV of this version (columns differ); move it away"
            )
        return {tuple(r[k] for k in KEY_COLUMNS): r for r in reader}


def _sort_key(row: Row) -> tuple[str, float, int]:
    return (row["policy"], float(row["value"]), int(row["seed"]))


def write_rows(path: Path, rows: Iterable[Row]) -> None:
    ordered = sorted(rows, key=_sort_key)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(ordered)


def run_sweep(
    todo: Sequence[Task],
    csv_path: Path,
    executor: Executor,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[Row], int]:
    """Run the tasks not yet in ``csv_path``; returns all their rows and how many ran now."""
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    partial = csv_path.with_name(csv_path.name + ".partial")
    done = {**read_rows(csv_path), **read_rows(partial)}
    wanted = {t.key: t for t in todo}
    missing = [t for k, t in wanted.items() if k not in done]
    total = len(wanted)
    finished = total - len(missing)
    if progress is not None:
        progress(finished, total)
    if missing:
        new_file = not partial.exists()
        with partial.open("a", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
            if new_file:
                writer.writeheader()
            futures = [executor.submit(run_group, g) for g in _groups(missing)]
            for future in as_completed(futures):
                for row in future.result():
                    writer.writerow(row)
                    done[tuple(row[k] for k in KEY_COLUMNS)] = row
                    finished += 1
                fh.flush()  # a crash keeps every finished row for the next run
                if progress is not None:
                    progress(finished, total)
    rows = [done[k] for k in wanted]
    # The CSV keeps rows of earlier sweeps with other keys as well: it only grows.
    write_rows(csv_path, done.values())
    partial.unlink(missing_ok=True)
    return rows, len(missing)
