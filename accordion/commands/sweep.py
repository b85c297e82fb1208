"""``accordion sweep``: policies x parameter values x seeds, in parallel, to one tidy CSV.

The command behind ``accordion sweep`` (the engine is ``accordion.experiments.sweep``, the
statistics and chart ``accordion.experiments.sweep_stats``). ``accordion/cli.py``
registers :func:`sweep` on its app with one line. It runs the replays in a
``concurrent.futures.ProcessPoolExecutor`` (``--workers``, all cores by
default), or with ``--dask ADDRESS`` on a Dask distributed cluster
(``accordion.experiments.dask_pool``: the same tasks, the same CSV bytes),
under a progress bar, and writes into ``--out``:

* ``sweep.csv``: one row per run (policy, parameter, value, seed, metrics);
  sorted, free of wall-clock numbers, so the same sweep gives the same bytes,
  and a repeated run only runs the rows it lacks;
* ``summary.csv``: mean and 95 % interval of every metric per policy and value;
* ``sweep.png``: each metric against the parameter, as the EG-EDF paper's Fig. 1.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from accordion.errors import UserError
from accordion.experiments.dask_pool import dask_executor
from accordion.experiments.sweep import Source, read_rows, run_sweep, tasks
from accordion.experiments.sweep_stats import summarise, write_chart, write_summary
from accordion.experiments.twin_options import (
    CalibrationOpt,
    CpusOpt,
    MissingUtilOpt,
    ModelOpt,
    Window,
    WindowOpt,
    execution_model,
)
from model.execution import ModelKind
from scheduler.planning.placement import PlacementRule
from scheduler.policies.registry import UnknownPolicyError, build_policy
from workload.cluster import ClusterError
from workload.swf import SwfError

out_console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True)

USER_ERRORS = (
    UserError,
    ValueError,
    SwfError,
    ClusterError,
    UnknownPolicyError,
    FileNotFoundError,
    PermissionError,
)


def parse_seeds(text: str) -> list[int]:
    """``1-20``, ``1,2,5`` or a mix (``1-3,7``): the seeds, in the order given."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            seeds.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    except ValueError:
        raise ValueError(f"--seeds wants e.g. 1-20 or 1,2,3, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {text!r}: give each seed once")
    return seeds


def parse_values(text: str) -> tuple[str, list[float]]:
    """``NAME=V1,V2,...`` of ``--param``."""
    name, sep, rest = text.partition("=")
    try:
        values = [float(v) for v in rest.split(",") if v.strip()]
    except ValueError:
        values = []
    if not sep or not values:
        raise ValueError(f"--param wants NAME=V1,V2,..., got {text!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"--param {text!r}: a value is given twice")
    return name.strip(), values


def sweep(  # noqa: PLR0917 (a typer command: one parameter per option)
    trace: Annotated[
        Path | None, typer.Argument(help="SWF trace (or --preset instead)", show_default=False)
    ] = None,
    preset: Annotated[
        str | None, typer.Option("--preset", help="a paper's generated setup: eg-edf-grid")
    ] = None,
    policies: Annotated[
        str, typer.Option("--policies", help="comma-separated POLICY[:PRIORITY]")
    ] = "easy",
    param: Annotated[
        str,
        typer.Option(
            "--param",
            help="NAME=V1,V2,...: interarrival (preset), tau, overhead, deadlines, cpus (trace)",
        ),
    ] = "tau",
    seeds: Annotated[str, typer.Option("--seeds", help="e.g. 1-20 or 1,2,3")] = "1",
    out: Annotated[Path, typer.Option("--out", help="directory for the CSVs and chart")] = Path(
        "out/sweep"
    ),
    workers: Annotated[
        int | None, typer.Option("--workers", min=1, help="processes (default: all cores)")
    ] = None,
    cluster: Annotated[
        Path | None, typer.Option("--cluster", help="cluster file (TOML), with a trace")
    ] = None,
    window: WindowOpt = None,
    cpus: CpusOpt = None,
    placement: Annotated[
        PlacementRule, typer.Option("--placement", help="how jobs are placed on machines")
    ] = PlacementRule.FASTEST,
    model: ModelOpt = ModelKind.LINEAR,
    calibration: CalibrationOpt = None,
    missing_util: MissingUtilOpt = 1.0,
    rigid_fraction: Annotated[
        float,
        typer.Option(
            "--rigid-fraction", min=0.0, max=1.0, help="share of jobs made rigid (per seed)"
        ),
    ] = 0.0,
    deadlines: Annotated[
        float | None,
        typer.Option("--deadlines", min=0.0, max=1.0, help="share of jobs with a deadline"),
    ] = None,
    dask: Annotated[
        str | None,
        typer.Option(
            "--dask",
            help="run on the Dask scheduler at this address (tcp://HOST:8786) instead of "
            "local processes; every worker needs the same accordion installed",
            show_default=False,
        ),
    ] = None,
    dask_timeout: Annotated[
        float,
        typer.Option(
            "--dask-timeout", min=0.1, help="seconds to reach the Dask scheduler and a worker"
        ),
    ] = 10.0,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Replay every policy at every value of one parameter with every seed; CSV and chart."""
    try:
        if dask is not None and workers is not None:
            raise ValueError("--workers sizes the local pool; with --dask, start more Dask workers")
        specs = [s.strip() for s in policies.split(",") if s.strip()]
        if not specs or len(set(specs)) != len(specs):
            raise ValueError(f"--policies must name each policy once, got {policies!r}")
        for spec in specs:
            build_policy(spec, placement=placement)
        name, values = parse_values(param)
        source = Source(
            preset=preset,
            trace=trace,
            cluster=cluster,
            window=None if window is None else Window.parse(window),
            cpus=cpus,
            placement=placement,
            model=model,
            calibration=calibration,
            missing_util=missing_util,
            rigid=rigid_fraction,
            deadlines=deadlines,
        )
        # Read once here, so that a bad file is one error, not one per task.
        execution_model(model, overhead=0.0, seed=0, calibration=calibration)
        if trace is not None and not trace.exists():
            raise FileNotFoundError(f"{trace}: no such trace")
        # Absolute paths: a Dask worker reads them from its own working directory.
        source = replace(
            source,
            trace=None if trace is None else trace.resolve(),
            cluster=None if cluster is None else cluster.resolve(),
            calibration=None if calibration is None else calibration.resolve(),
        )
        todo = tasks(source, specs, name, values, parse_seeds(seeds))
        csv_path = out / "sweep.csv"
        read_rows(csv_path)  # a foreign CSV is refused before any work is done
    except USER_ERRORS as exc:
        _fail(exc)

    files = [f for f in (source.trace, source.cluster, source.calibration) if f is not None]
    try:
        with (
            _executor(dask, workers, files, dask_timeout) as pool,
            Progress(
                TextColumn("sweep"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("runs"),
                TimeElapsedColumn(),
                console=err_console,
                transient=True,
                disable=not progress,
            ) as bar,
        ):
            task_id = bar.add_task("sweep", total=len(todo))

            def update(done: int, total: int) -> None:
                bar.update(task_id, completed=done, total=total)

            rows, ran = run_sweep(todo, csv_path, pool, progress=update)
    except UserError as exc:
        _fail(exc)
    stats = summarise(rows)
    summary_path = out / "summary.csv"
    write_summary(summary_path, name, stats)
    chart_path = out / "sweep.png"
    what = preset if preset is not None else (trace.name if trace is not None else "")
    write_chart(chart_path, f"{what}: {len(rows)} runs, model {model}", name, stats)
    out_console.print(
        f"{len(rows)} runs ({ran} run now, {len(rows) - ran} reused); "
        f"wrote {csv_path}, {summary_path}, {chart_path}",
        highlight=False,
    )


def _fail(exc: Exception) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
    raise typer.Exit(2) from exc


@contextmanager
def _executor(
    dask: str | None, workers: int | None, files: list[Path], timeout: float
) -> Iterator[Executor]:
    """The local process pool, or a checked Dask cluster's executor (its dashboard said)."""
    if dask is None:
        with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
            yield pool
        return
    with dask_executor(dask, files=files, timeout=timeout) as cluster:
        err_console.print(
            f"Dask: {cluster.workers} workers, {cluster.threads} threads; "
            f"dashboard {cluster.dashboard}",
            highlight=False,
            soft_wrap=True,
        )
        for line in cluster.mismatches:
            err_console.print(f"Dask: versions differ: {line}", highlight=False, soft_wrap=True)
        yield cluster.executor
