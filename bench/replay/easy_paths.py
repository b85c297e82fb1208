"""Benchmark: EASY's one-machine path beside its general path, in one run.

Run on demand (not a test): ``.venv/bin/python -m bench.replay.easy_paths
[--traces KTH-SP2,SDSC-SP2,CTC-SP2] [--repeats 3]``.

``EasyBackfill.decide`` (``scheduler/policies/easy.py``) takes
``decide_one_machine`` on a cluster of one machine, every event of a
homogeneous trace, and ``decide_general`` on any other. The general path is
correct on one machine too, so the second path is kept only if it pays. This
replays each trace through the twin under both (the general one forced by a
wrapper policy defined here), interleaved so that a neighbour's burst of work
hits both alike, in one child process per trace; it takes the best CPU
seconds of ``--repeats`` runs of each, checks job by job that both computed
the same schedule (or the comparison would not be of the same work), and
prints the ratio. The figures in ``EasyBackfill``'s docstring come from here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rich.console import Console
from rich.table import Table

from scheduler.core.snapshot import Decisions, SnapshotView
from scheduler.policies.easy import EasyBackfill

ROOT = Path(__file__).resolve().parents[2]
PWA = ROOT.parent / "shared" / "workloads" / "pwa"
TRACES = {
    "KTH-SP2": "KTH-SP2-1996-2.1-cln.swf.gz",
    "SDSC-SP2": "SDSC-SP2-1998-4.2-cln.swf.gz",
    "CTC-SP2": "CTC-SP2-1996-3.1-cln.swf.gz",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class GeneralEasy:
    """EASY forced down its general path, whatever the cluster."""

    idle_on_empty_queue: ClassVar[bool] = True
    easy: EasyBackfill
    name: str = "easy (general path)"

    def decide(self, snapshot: SnapshotView) -> Decisions:
        return self.easy.decide_general(snapshot)


def child(trace: str, repeats: int) -> None:
    """Runs in the child: both paths on one trace, best CPU seconds of ``repeats``."""
    import gc

    from accordion.experiments.runs import load_workload
    from twin.simulate import simulate

    workload = load_workload(PWA / TRACES[trace], cluster=None, jobs=None)
    gc.collect()
    gc.freeze()
    policies = {"one": EasyBackfill(), "general": GeneralEasy(easy=EasyBackfill())}
    best: dict[str, float] = {}
    starts: dict[str, dict[str, float]] = {}
    for _ in range(repeats):
        for path, policy in policies.items():
            cpu0 = time.process_time()
            result = simulate(workload.jobs, machines=workload.machines, policy=policy)
            cpu = time.process_time() - cpu0
            best[path] = min(best.get(path, cpu), cpu)
            starts[path] = {o.job.id: o.start for o in result.outcomes}
    one, general = starts["one"], starts["general"]
    differ = sum(1 for j, t in one.items() if general.get(j) != t) + len(general.keys() - one)
    print(json.dumps({"jobs": len(one), "cpu": best, "differ": differ}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", metavar="TRACE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats < 1:
        sys.exit("bench: --repeats must be >= 1")
    if args.child:
        child(args.child, args.repeats)
        return
    console = Console()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    table = Table(
        title=f"EASY's one-machine path beside its general path; CPU seconds of the replay, "
        f"best of {args.repeats} interleaved runs; load average at the start {load}"
    )
    for col in ("trace", "jobs", "general s", "one-machine s", "general / one", "same schedule"):
        table.add_column(col, justify="right")
    repeats = ["--repeats", str(args.repeats)]
    for trace in args.traces.split(","):
        if trace not in TRACES:
            sys.exit(f"bench: unknown trace {trace!r} (known: {', '.join(TRACES)})")
        console.print(f"{trace} ...", style="dim")
        proc = subprocess.run(
            [sys.executable, "-m", "bench.replay.easy_paths", "--child", trace, *repeats],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        if proc.returncode != 0:
            console.print(f"[red]{trace} failed:[/] {proc.stderr.strip()[-500:]}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        cpu = r["cpu"]
        table.add_row(
            trace,
            f"{r['jobs']:,}",
            f"{cpu['general']:.2f}",
            f"{cpu['one']:.2f}",
            f"{cpu['general'] / cpu['one']:.2f}x",
            "yes, job by job" if r["differ"] == 0 else f"[red]no: {r['differ']} jobs differ",
        )
    console.print(table)
    console.print(
        "load average at the end " + " ".join(f"{x:.1f}" for x in os.getloadavg()), style="dim"
    )


if __name__ == "__main__":
    main()
