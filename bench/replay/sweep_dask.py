"""Benchmark: one sweep on the local process pool, then on a Dask LocalCluster, same host.

Run on demand (not a test): ``.venv/bin/python -m bench.replay.sweep_dask``
(``--seeds 1-2``, ``--workers 2``). It runs the EG-EDF grid sweep (5 policies x
5 mean inter-arrival times x the seeds; the full sweep is 20 seeds) twice in
one process: first on a ``ProcessPoolExecutor`` of ``--workers`` processes,
the yardstick, which is what ``accordion sweep`` does by default; then on a
``distributed.LocalCluster`` of as many one-thread worker processes, through
``accordion sweep --dask``'s own executor (its checks included). It prints the
wall-clock seconds of each, the cluster's start-up apart, and whether the two
CSVs are the same bytes.

On one host Dask cannot beat the pool: both run the same replays on the same
cores, and Dask adds a scheduler, a network hop per task and its own
processes. What it buys is more hosts: ``dask worker`` on each of them.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.table import Table

from accordion.commands.sweep import parse_seeds
from accordion.experiments.dask_pool import dask_executor
from accordion.experiments.sweep import Source, run_sweep, tasks
from scheduler.planning.placement import PlacementRule
from workload.grid_preset import INTERARRIVAL_MEANS

POLICIES = ("fcfs", "easy", "flexible", "eg-edf", "eg-edf-tabu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", default="1-2", help="e.g. 1-20 for the full sweep")
    parser.add_argument("--workers", type=int, default=2, help="processes, and Dask workers")
    args = parser.parse_args()
    import distributed

    source = Source(preset="eg-edf-grid", placement=PlacementRule.SINGLE)
    todo = tasks(source, POLICIES, "interarrival", INTERARRIVAL_MEANS, parse_seeds(args.seeds))
    with tempfile.TemporaryDirectory() as tmp:
        local_csv, dask_csv = Path(tmp, "local", "sweep.csv"), Path(tmp, "dask", "sweep.csv")
        t0 = time.perf_counter()
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            run_sweep(todo, local_csv, pool)
        local_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        with distributed.LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster:
            start_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            with dask_executor(cluster.scheduler_address, files=[], timeout=30.0) as dask_pool:
                run_sweep(todo, dask_csv, dask_pool.executor)
            dask_s = time.perf_counter() - t0
        same = local_csv.read_bytes() == dask_csv.read_bytes()

    runs = len(todo)
    table = Table(title=f"eg-edf-grid sweep, {runs} runs, {args.workers} workers, one host")
    for column in ("executor", "wall s", "runs/s", "x local pool"):
        table.add_column(column, justify="left" if column == "executor" else "right")
    table.add_row("process pool (yardstick)", f"{local_s:.1f}", f"{runs / local_s:.2f}", "1.00")
    table.add_row(
        "Dask LocalCluster", f"{dask_s:.1f}", f"{runs / dask_s:.2f}", f"{dask_s / local_s:.2f}"
    )
    console = Console()
    console.print(table)
    console.print(
        f"Dask cluster start-up (not in its row): {start_s:.1f} s; "
        f"same CSV bytes: {'yes' if same else 'NO'}",
        highlight=False,
    )
    if not same:
        raise SystemExit("the two sweeps wrote different CSVs")


if __name__ == "__main__":
    main()
