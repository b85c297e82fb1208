"""Benchmark: the EG-EDF grid sweep's cost against its 10-minute target.

Run on demand (not a test): ``.venv/bin/python -m bench.replay.sweep``. The target:
5 policies x 5 mean inter-arrival times x 20 seeds on the
``eg-edf-grid`` preset in under 10 minutes on this 2-core machine. This
replays one seed of every (policy, mean) in this process, measures each
run's CPU seconds (fairer than wall time when other work shares the cores),
and projects the whole sweep: 20 times the sum, over the workers. The
yardstick, measured in the same run, is FCFS on the same workload, the
cheapest policy: each policy's cost is shown as a multiple of it.
"""

from __future__ import annotations

import argparse
import os
import time

from rich.console import Console
from rich.table import Table

from accordion.experiments.sweep import Source, run_task, tasks
from scheduler.planning.placement import PlacementRule
from workload.grid_preset import INTERARRIVAL_MEANS

POLICIES = ("fcfs", "easy", "flexible", "eg-edf", "eg-edf-tabu")
TARGET_SECONDS = 600.0
SEEDS = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    source = Source(preset="eg-edf-grid", placement=PlacementRule.SINGLE)
    cost: dict[tuple[str, float], float] = {}
    for task in tasks(source, POLICIES, "interarrival", INTERARRIVAL_MEANS, [args.seed]):
        cpu0 = time.process_time()
        run_task(task)
        cost[(task.policy, task.value)] = time.process_time() - cpu0
    table = Table(title=f"eg-edf-grid: CPU seconds per run (seed {args.seed})")
    table.add_column("policy")
    for mean in INTERARRIVAL_MEANS:
        table.add_column(f"mean {mean:g} s", justify="right")
    table.add_column("x fcfs", justify="right")
    yardstick = sum(cost[("fcfs", m)] for m in INTERARRIVAL_MEANS)
    for policy in POLICIES:
        row = [f"{cost[(policy, m)]:.2f}" for m in INTERARRIVAL_MEANS]
        total = sum(cost[(policy, m)] for m in INTERARRIVAL_MEANS)
        table.add_row(policy, *row, f"{total / yardstick:.1f}")
    Console().print(table)
    projected = SEEDS * sum(cost.values()) / args.workers
    Console().print(
        f"projected sweep ({len(POLICIES)} x {len(INTERARRIVAL_MEANS)} x {SEEDS} runs on "
        f"{args.workers} workers): {projected:,.0f} s of CPU per worker, "
        f"{projected / TARGET_SECONDS:.2f} x the {TARGET_SECONDS:.0f} s target",
        highlight=False,
    )


if __name__ == "__main__":
    main()
