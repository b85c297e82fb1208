"""Benchmark: one live prediction pass over a queue of 10,000 jobs, beside yardsticks.

Run on demand (not a test): ``.venv/bin/python -m bench.live.prediction``.
The live scheduler predicts every queued job's start and reason in a *pass*
(``scheduler.live.insight.forecast``: ``predict`` then ``wait_reasons``,
the sans-I/O code the actor runs); the target is a pass over 10,000 queued
jobs in under 50 ms.

The queue is the first 10,000 jobs of a Parallel Workloads Archive trace
(their sizes and wall-time estimates; KTH-SP2 by default), all submitted at
once to a core whose policy has started what fits; the pass runs on the
core's snapshot after that decision, as the actor's does. Two clusters:

* the trace's own machine (one machine of its size), the twin's and a
  homogeneous partition's case, where the pass takes the one-machine path;
* ``examples/cluster.toml`` (64 CPUs on 7 machines at three speeds, what
  ``accordion up`` runs), where every job is placed by the placement rule
  over several machines (a job wider than 64 CPUs takes 64).

Beside each pass, in the same run, two yardsticks: the floor of any pass
(one loop over the queue building one tuple per job), and conservative
backfilling's decision on the same snapshot, which plans every queued job
too and keeps that plan anyway. Times are CPU milliseconds of this process,
the best of ``--repeat`` runs: on a shared 2-core machine the best run is
the one least disturbed, and the yardsticks move with the load the same
way.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from model.job import Job
from model.machine import Machine
from scheduler.core.core import SchedulerCore
from scheduler.planning.prediction import predict
from scheduler.planning.wait_reasons import wait_reasons
from scheduler.policies.registry import build_policy
from workload.cluster import cluster_from_header, load_cluster
from workload.swf import read_header
from workload.swf_load import load_jobs
from workload.swf_rules import SwfRules

ROOT = Path(__file__).resolve().parents[2]
PWA = ROOT.parent / "shared" / "workloads" / "pwa"
TRACE = PWA / "KTH-SP2-1996-2.1-cln.swf.gz"
TARGET_MS = 50.0


def queue_of(trace: Path, jobs: int, widest: int) -> list[Job]:
    """The first ``jobs`` jobs of ``trace``, submitted at 0, at most ``widest`` wide."""
    loaded = load_jobs(trace, SwfRules(), limit=jobs)
    return [
        replace(j, submit=0.0, procs=min(j.procs, widest), user=j.user) for j in loaded.jobs[:jobs]
    ]


def best_ms(run: Callable[[], object], repeat: int) -> float:
    """The least CPU time of ``repeat`` runs of ``run``, in milliseconds."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.process_time()
        run()
        best = min(best, time.process_time() - t0)
    return best * 1000.0


def measure(
    name: str, machines: list[Machine], jobs: list[Job], policy: str, repeat: int
) -> list[str]:
    core = SchedulerCore(policy=build_policy(policy), machines=machines)
    for j in jobs:
        core.submit(j)
    core.schedule(0.0)
    snapshot = core.snapshot(0.0)
    queued = len(snapshot.queue)

    def one_pass() -> object:
        plan = predict(snapshot, core.policy)
        return wait_reasons(plan, snapshot, core.policy)

    plan = predict(snapshot, core.policy)
    placed = len(plan.queued)
    pass_ms = best_ms(one_pass, repeat)
    predict_ms = best_ms(lambda: predict(snapshot, core.policy), repeat)
    floor_ms = best_ms(lambda: [(j.id, j.procs, j.walltime) for j in snapshot.queue], repeat)
    conservative = build_policy("conservative")
    yard = SchedulerCore(policy=conservative, machines=machines)
    for j in jobs:
        yard.submit(j)
    yard.schedule(0.0)
    ysnap = yard.snapshot(0.0)
    conservative_ms = best_ms(lambda: conservative.decide(ysnap), max(1, repeat // 2))
    verdict = "met" if pass_ms <= TARGET_MS else "NOT met"
    return [
        name,
        policy,
        f"{queued:,} ({placed:,} placed)",
        f"{pass_ms:,.1f}",
        f"{predict_ms:,.1f}",
        f"{floor_ms:,.2f}",
        f"{conservative_ms:,.1f}",
        f"{pass_ms / conservative_ms:.2f}",
        f"{verdict} ({pass_ms / TARGET_MS:.0%} of {TARGET_MS:g} ms)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--policies", default="easy,fcfs")
    args = parser.parse_args()
    own = list(cluster_from_header(read_header(args.trace)).machines)
    demo = list(load_cluster(ROOT / "examples" / "cluster.toml").machines)
    table = Table(
        title=f"one prediction pass (predicted starts and reasons) over the first "
        f"{args.jobs:,} jobs of {args.trace.name}, all queued at once; CPU ms, best of "
        f"{args.repeat}"
    )
    for col in (
        "cluster",
        "policy",
        "queued",
        "pass (ms)",
        "of which predict",
        "floor: a loop over the queue",
        "yardstick: conservative's decision",
        "pass / conservative",
        "target: < 50 ms",
    ):
        table.add_column(col, justify="left" if col in ("cluster", "policy") else "right")
    for policy in args.policies.split(","):
        for name, machines in (
            (f"the trace's machine ({sum(m.cpus for m in own)} CPUs)", own),
            ("examples/cluster.toml (64 CPUs, 7 machines)", demo),
        ):
            widest = sum(m.cpus for m in machines)
            jobs = queue_of(args.trace, args.jobs, widest)
            table.add_row(*measure(name, machines, jobs, policy, args.repeat))
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
