"""``accordion``: replay traces through the twin and compare policies.

Every user error (unknown policy, missing file, bad trace, bad cluster file)
ends in one clear line on stderr and exit status 2; a bug still shows its
traceback.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from accordion.chart import write_chart
from accordion.runs import Run, Variation, load_workload, run_policy, safe_name, write_run
from model.execution import ExecutionModel
from model.job import JobError
from model.machine import MachineError
from scheduler.placement import PlacementRule
from scheduler.policies.registry import POLICIES, PRIORITIES, UnknownPolicyError, build_policy
from workload.cluster import ClusterError
from workload.convert import SwfRules
from workload.deadlines import DeadlineRule
from workload.swf import SwfError, write_swf
from workload.synthetic import SyntheticSpec
from workload.synthetic import generate as generate_records
from workload.synthetic import header as synthetic_header

app = typer.Typer(
    name="accordion",
    help="Accordion: batch-scheduling policies on a discrete-event twin (and live, later).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output (CI logs, files) gets wide tables instead of rich's 80-column default.
out_console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True)

USER_ERRORS = (
    SwfError,
    ClusterError,
    UnknownPolicyError,
    JobError,
    MachineError,
    FileNotFoundError,
    IsADirectoryError,
    PermissionError,
    ValueError,
)

#: (summary key path, label, format) of the rows the tables show.
ROWS: tuple[tuple[str, str, str], ...] = (
    ("metrics.jobs", "jobs", "{:.0f}"),
    ("metrics.makespan", "makespan (s)", "{:.0f}"),
    ("metrics.wait_mean", "mean wait (s)", "{:.1f}"),
    ("metrics.wait_p95", "p95 wait (s)", "{:.1f}"),
    ("metrics.response_mean", "mean response (s)", "{:.1f}"),
    ("metrics.bounded_slowdown_mean", "mean bounded slowdown (tau 10 s)", "{:.3f}"),
    ("metrics.slowdown_mean", "mean slowdown", "{:.3f}"),
    ("metrics.malleable_slowdown_mean", "mean slowdown, formula (1)", "{:.3f}"),
    ("metrics.utilisation", "utilisation", "{:.2%}"),
    ("metrics.fragmentation", "fragmentation, formula (2)", "{:.2%}"),
    ("metrics.system_usage", "system usage (EG-EDF)", "{:.2%}"),
    ("metrics.average_mpl", "average MPL", "{:.3f}"),
    ("metrics.deadline_miss_rate", "deadline misses", "{:.2%}"),
    ("performance.decision_time_mean_ms", "decision time mean (ms, wall)", "{:.3f}"),
    ("performance.decision_time_p99_ms", "decision time p99 (ms, wall)", "{:.3f}"),
    ("performance.events_per_second", "events per second (wall)", "{:,.0f}"),
)


def _get(data: dict[str, Any], path: str) -> float:
    node: Any = data
    for key in path.split("."):
        node = node[key]
    return float(node)


@contextmanager
def user_errors() -> Iterator[None]:
    try:
        yield
    except USER_ERRORS as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from exc


@contextmanager
def progress_bar(label: str, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    if not enabled:
        yield None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


TraceArg = Annotated[Path, typer.Argument(help="SWF trace (.swf or .swf.gz)")]
ClusterOpt = Annotated[
    Path | None,
    typer.Option("--cluster", help="cluster file (TOML); default: one machine from the header"),
]
JobsOpt = Annotated[int | None, typer.Option("--jobs", min=1, help="replay only the first N jobs")]
PlacementOpt = Annotated[
    PlacementRule, typer.Option("--placement", help="how jobs are placed on machines")
]
WalltimeOpt = Annotated[
    str,
    typer.Option(
        "--missing-walltime",
        help="estimate for jobs without a requested time: 'runtime', 'runtime*F' or seconds",
    ),
]


DeadlinesOpt = Annotated[
    float | None,
    typer.Option(
        "--deadlines",
        min=0.0,
        max=1.0,
        help="give this share of jobs a deadline (EG-EDF paper: 0.7); see workload/deadlines.py",
    ),
]
SlackOpt = Annotated[
    str, typer.Option("--deadline-slack", help="MIN:MAX slack factors times the wall time")
]
SeedOpt = Annotated[int, typer.Option("--seed", help="seed of the deadline draws")]
MalleableOpt = Annotated[
    bool, typer.Option("--malleable", help="treat every job as malleable (FCFS-malleable paper)")
]
OverheadOpt = Annotated[
    float, typer.Option("--overhead", min=0.0, help="OV of formula (4) while a job runs shrunk")
]


def _rules(missing_walltime: str) -> SwfRules:
    return SwfRules.from_fallback(missing_walltime)


def _variation(deadlines: float | None, slack: str, seed: int, malleable: bool) -> Variation:
    rule = None
    if deadlines is not None:
        lo, sep, hi = slack.partition(":")
        try:
            slack_min, slack_max = float(lo), float(hi if sep else lo)
        except ValueError as exc:
            raise ValueError(f"--deadline-slack wants MIN:MAX, got {slack!r}") from exc
        rule = DeadlineRule(share=deadlines, slack_min=slack_min, slack_max=slack_max, seed=seed)
    return Variation(deadlines=rule, malleable=malleable)


@app.command()
def simulate(
    trace: TraceArg,
    policy: Annotated[str, typer.Option("--policy", "-p", help="POLICY[:PRIORITY]")] = "easy",
    cluster: ClusterOpt = None,
    jobs: JobsOpt = None,
    out: Annotated[Path | None, typer.Option("--out", help="write CSV, JSON, SWF here")] = None,
    placement: PlacementOpt = PlacementRule.FASTEST,
    missing_walltime: WalltimeOpt = "runtime",
    deadlines: DeadlinesOpt = None,
    deadline_slack: SlackOpt = "1.5:4",
    seed: SeedOpt = 0,
    malleable: MalleableOpt = False,
    overhead: OverheadOpt = 0.0,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Replay TRACE under one policy and print its metrics."""
    with user_errors():
        build_policy(policy, placement=placement)  # fail fast on a bad name
        workload = load_workload(
            trace,
            cluster=cluster,
            jobs=jobs,
            rules=_rules(missing_walltime),
            variation=_variation(deadlines, deadline_slack, seed, malleable),
        )
        execution = ExecutionModel(overhead=overhead)
        with progress_bar(policy, progress and len(workload.jobs) >= 2000) as update:
            run = run_policy(
                workload, policy, placement=placement, execution=execution, progress=update
            )
        table = Table(title=f"{workload.name}: {len(workload.jobs)} jobs, policy {policy}")
        table.add_column("metric")
        table.add_column(policy, justify="right")
        for path, label, fmt in ROWS:
            table.add_row(label, fmt.format(_get(run.summary, path)))
        out_console.print(table)
        _print_skipped(workload.skipped)
        if out is not None:
            for written in write_run(out, run):
                out_console.print(f"wrote {written}")


def _print_skipped(skipped: dict[str, int]) -> None:
    if skipped:
        text = ", ".join(f"{n} {why}" for why, n in sorted(skipped.items()))
        out_console.print(f"skipped from the trace: {text}")


@app.command()
def compare(
    trace: TraceArg,
    policies: Annotated[
        str, typer.Option("--policies", help="comma-separated POLICY[:PRIORITY]; first is baseline")
    ] = "easy,fcfs,fifo-backfill,conservative",
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="policy to compare against (default: first)")
    ] = None,
    cluster: ClusterOpt = None,
    jobs: JobsOpt = None,
    out: Annotated[
        Path, typer.Option("--out", help="directory for CSVs, JSON and the chart")
    ] = Path("out/compare"),
    placement: PlacementOpt = PlacementRule.FASTEST,
    missing_walltime: WalltimeOpt = "runtime",
    deadlines: DeadlinesOpt = None,
    deadline_slack: SlackOpt = "1.5:4",
    seed: SeedOpt = 0,
    malleable: MalleableOpt = False,
    overhead: OverheadOpt = 0.0,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
    per_job: Annotated[
        bool, typer.Option(help="also write each policy's per-job CSV and SWF schedule")
    ] = True,
) -> None:
    """Replay TRACE under several policies; print every metric against a baseline."""
    with user_errors():
        specs = [s.strip() for s in policies.split(",") if s.strip()]
        if not specs:
            raise ValueError("--policies names no policy")
        if len(set(specs)) != len(specs):
            raise ValueError(f"--policies names a policy twice: {policies}")
        for spec in specs:
            build_policy(spec, placement=placement)
        base = baseline or specs[0]
        if base not in specs:
            specs.insert(0, base)
            build_policy(base, placement=placement)
        workload = load_workload(
            trace,
            cluster=cluster,
            jobs=jobs,
            rules=_rules(missing_walltime),
            variation=_variation(deadlines, deadline_slack, seed, malleable),
        )
        execution = ExecutionModel(overhead=overhead)
        runs: list[Run] = []
        for spec in specs:
            with progress_bar(spec, progress and len(workload.jobs) >= 2000) as update:
                runs.append(
                    run_policy(
                        workload,
                        spec,
                        placement=placement,
                        execution=execution,
                        progress=update,
                    )
                )
        for run in runs:
            write_run(out, run, per_job=per_job)
        base_run = next(r for r in runs if r.spec == base)
        _compare_table(workload.name, len(workload.jobs), runs, base_run)
        _print_skipped(workload.skipped)
        csv_path, json_path, png_path = _write_compare(out, workload.name, runs, base_run)
        out_console.print(
            f"wrote {csv_path}, {json_path}, {png_path} and per-policy files in {out}"
        )


def _delta(value: float, base: float) -> str:
    if base == 0:
        return "" if value == 0 else " (n/a)"
    return f" ({(value - base) / abs(base):+.1%})"


def _compare_table(name: str, n_jobs: int, runs: list[Run], base: Run) -> None:
    table = Table(title=f"{name}: {n_jobs} jobs; change against {base.spec}")
    table.add_column("metric")
    for run in runs:
        table.add_column(run.spec + (" (baseline)" if run is base else ""), justify="right")
    for path, label, fmt in ROWS:
        b = _get(base.summary, path)
        cells = []
        for run in runs:
            v = _get(run.summary, path)
            cells.append(fmt.format(v) + ("" if run is base else _delta(v, b)))
        table.add_row(label, *cells)
    out_console.print(table)


def _flat(run: Run) -> dict[str, Any]:
    row: dict[str, Any] = {"policy": run.spec}
    row.update(run.summary["metrics"])
    row.update({k: v for k, v in run.summary["performance"].items() if k != "time_base"})
    return row


def _write_compare(out: Path, name: str, runs: list[Run], base: Run) -> tuple[Path, Path, Path]:
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


@app.command()
def generate(
    out: Annotated[Path, typer.Argument(help="SWF file to write (.swf or .swf.gz)")],
    jobs: Annotated[int, typer.Option("--jobs", min=1)] = 500,
    cpus: Annotated[int, typer.Option("--cpus", min=1)] = 64,
    load: Annotated[float, typer.Option("--load", min=0.01, max=10.0)] = 0.9,
    users: Annotated[int, typer.Option("--users", min=1)] = 12,
    seed: Annotated[int, typer.Option("--seed")] = 1,
) -> None:
    """Write a small seeded synthetic trace (see workload/synthetic.py for the recipe)."""
    with user_errors():
        spec = SyntheticSpec(jobs=jobs, cpus=cpus, load=load, users=users, seed=seed)
        count = write_swf(out, generate_records(spec), header=synthetic_header(spec))
        out_console.print(f"wrote {count} jobs to {out}")


@app.command("policies")
def list_policies() -> None:
    """List the policies and priority sources."""
    table = Table(title="policies (POLICY[:PRIORITY])")
    table.add_column("name")
    table.add_column("what it does")
    for info in POLICIES.values():
        table.add_row(info.name, info.summary)
    out_console.print(table)
    out_console.print("priority sources: " + ", ".join(PRIORITIES))


def main() -> None:
    app()


__all__ = ["app", "main", "safe_name"]
