"""Benchmark: replay real traces through the twin under each policy.

Run on demand (not a test): ``.venv/bin/python -m bench.replay``. It first
sets the twin's EASY beside a textbook EASY loop (``bench/replay/textbook_easy.py``)
on the same jobs, checks job by job that both compute the same schedule (or
the yardstick would not measure the same work), and shows what a priority
source costs over plain EASY (the targets: 1.5x and 2x), once on each build of
the hot path (``--builds``: pure Python, and the mypyc build of the ``compiled``
package where a fresh one is installed; the textbook loop is pure Python in
both, so it is the same yardstick, and each ratio is taken against its
fastest run of the trace: it reads compiled ``Job`` values more slowly than
plain ones). Each replay
runs in a fresh child process so its peak memory (VmHWM) is its own; the
table shows jobs per second, events per second, the decision time per event,
wall time and peak memory, and for the time targets the fraction of the
budget used: EASY on all of CTC-SP2 in <= 10 s, SDSC-BLUE in <= 30 s, memory
< 1 GB. Ratios say more than seconds on these noisy 2-core machines, and CPU
seconds are the fairer reading when other work shares the cores. AccaSim (a
Python simulator on PyPI) needs about 150 CPU-seconds for the CTC-SP2 replay
on this kind of machine: a reported figure, quoted, not measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from compiled.hook import PURE_ENV, describe

ROOT = Path(__file__).resolve().parents[2]
PWA = ROOT.parent / "shared" / "workloads" / "pwa"
TRACES = {
    "KTH-SP2": "KTH-SP2-1996-2.1-cln.swf.gz",
    "SDSC-SP2": "SDSC-SP2-1998-4.2-cln.swf.gz",
    "CTC-SP2": "CTC-SP2-1996-3.1-cln.swf.gz",
    "SDSC-BLUE": "SDSC-BLUE-2000-4.2-cln.swf.gz",
}
#: (trace, policy) -> the target's wall-second budget.
TARGETS = {("CTC-SP2", "easy"): 10.0, ("SDSC-BLUE", "easy"): 30.0}
ACCASIM_CTC_CPU_SECONDS = 150.0


def child(trace: str, policy: str) -> None:
    """Runs in the child: load, replay, report one JSON line."""
    from accordion.experiments.runs import load_workload, run_policy

    t0 = time.perf_counter()
    cpu0 = time.process_time()
    workload = load_workload(PWA / TRACES[trace], cluster=None, jobs=None)
    # ``POLICY+predict``: the replay also predicts each job's start at its submission.
    spec, _, extra = policy.partition("+")
    run = run_policy(workload, spec, predict=extra == "predict")
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    hwm_kb = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm_kb = int(line.split()[1])
    perf = run.summary["performance"]
    print(
        json.dumps(
            {
                "jobs": len(workload.jobs),
                "wall": wall,
                "cpu": cpu,
                "replay_wall": perf["wall_seconds"],
                "events_per_second": perf["events_per_second"],
                "decision_mean_ms": perf["decision_time_mean_ms"],
                "decision_p99_ms": perf["decision_time_p99_ms"],
                "peak_mb": hwm_kb / 1024,
                "bounded_slowdown": run.metrics.bounded_slowdown_mean,
                "counters": run.summary["policy_counters"],
            }
        )
    )


YARDSTICK_TRACES = ("KTH-SP2", "CTC-SP2")
#: The targets: EASY within 1.5x of the textbook loop; a priority source at most 2x EASY.
YARDSTICK_TARGET = 1.5
PRIORITY_TARGET = 2.0
PRIORITY_SPECS = ("easy:fairshare", "easy:multifactor")
REPEATS = 3


def yardstick(trace: str, repeats: int = REPEATS) -> None:
    """Runs in the child: the twin's EASY against the textbook loop on one trace, and
    EASY with each priority source, best CPU time of ``repeats`` interleaved runs each
    (interleaved so a neighbour's burst of work hits both sides alike)."""
    import gc

    from textbook_easy import textbook_easy  # beside this file, on sys.path[0]

    from accordion.experiments.runs import load_workload
    from scheduler.policies.registry import build_policy
    from twin.simulate import simulate

    workload = load_workload(PWA / TRACES[trace], cluster=None, jobs=None)
    gc.collect()
    gc.freeze()
    (machine,) = workload.machines
    best: dict[str, float] = {}
    schedules: dict[str, dict[str, float]] = {}
    specs = ("textbook", "easy", *PRIORITY_SPECS)
    for _ in range(repeats):
        for spec in specs:
            cpu0 = time.process_time()
            if spec == "textbook":
                starts = textbook_easy(workload.jobs, machine.cpus)
            else:
                result = simulate(
                    workload.jobs, machines=workload.machines, policy=build_policy(spec)
                )
                starts = {o.job.id: o.start for o in result.outcomes}
            cpu = time.process_time() - cpu0
            best[spec] = min(best.get(spec, cpu), cpu)
            schedules[spec] = starts
    ours, book = schedules["easy"], schedules["textbook"]
    differ = sum(1 for j, t in ours.items() if book.get(j) != t) + len(book.keys() - ours.keys())
    print(json.dumps({"jobs": len(ours), "cpu": best, "differ": differ, "build": describe()}))


def yardstick_table(
    console: Console, traces: list[str], builds: list[str], repeats: int = REPEATS
) -> None:
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    table = Table(
        title=f"EASY against a textbook EASY loop (bench/replay/textbook_easy.py); "
        f"CPU seconds of the replay, best of {repeats} interleaved runs; "
        f"load average at the start {load}"
    )
    for col in (
        "trace",
        "build",
        "jobs",
        "textbook s",
        "easy s",
        "easy / fastest textbook",
        "same schedule",
        *(f"{spec} s" for spec in PRIORITY_SPECS),
        *(f"{spec} / easy" for spec in PRIORITY_SPECS),
    ):
        table.add_column(col, justify="right")
    for trace in traces:
        results: dict[str, dict[str, Any]] = {}
        for build in builds:
            console.print(f"yardstick on {trace}, {build} build ...", style="dim")
            proc = subprocess.run(
                [sys.executable, __file__, "--yardstick-child", trace, "--repeats", str(repeats)],
                capture_output=True,
                text=True,
                check=False,
                env=_build_env(build),
            )
            if proc.returncode != 0:
                console.print(f"[red]{trace} yardstick failed:[/] {proc.stderr.strip()[-500:]}")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            if build == "compiled" and not r["build"].startswith("compiled"):
                console.print(f"[red]{trace}: no compiled build to measure:[/] {r['build']}")
                continue
            results[build] = r
        # The textbook loop is pure Python in every build, but it reads compiled Job
        # values more slowly than plain ones; every row's ratio is against the fastest
        # textbook run of the trace, so no build is flattered by a slower yardstick.
        yard = min((r["cpu"]["textbook"] for r in results.values()), default=0.0)
        for build, r in results.items():
            _yardstick_row(table, trace, build, r, yard)
    console.print(table)
    console.print(
        "load average at the end " + " ".join(f"{x:.1f}" for x in os.getloadavg()), style="dim"
    )


def _build_env(build: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    if build == "pure":
        env[PURE_ENV] = "1"
    return env


def _yardstick_row(table: Table, trace: str, build: str, r: dict[str, Any], yard: float) -> None:
    cpu = r["cpu"]
    ratio = cpu["easy"] / yard
    table.add_row(
        trace,
        build,
        f"{r['jobs']:,}",
        f"{cpu['textbook']:.2f}",
        f"{cpu['easy']:.2f}",
        _against(ratio, YARDSTICK_TARGET),
        "yes, job by job" if r["differ"] == 0 else f"[red]no: {r['differ']} jobs differ",
        *(f"{cpu[spec]:.2f}" for spec in PRIORITY_SPECS),
        *(_against(cpu[spec] / cpu["easy"], PRIORITY_TARGET) for spec in PRIORITY_SPECS),
    )


def _against(ratio: float, target: float) -> str:
    mark = "" if ratio <= target else " [red](over)[/]"
    return f"{ratio:.2f}x (target <= {target}x){mark}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default="KTH-SP2,SDSC-SP2,CTC-SP2,SDSC-BLUE")
    parser.add_argument(
        "--policies",
        default="fcfs,fifo-backfill,easy,conservative",
        help="POLICY[:PRIORITY][+predict], comma-separated (+predict: with predicted starts)",
    )
    parser.add_argument(
        "--yardstick",
        default=",".join(YARDSTICK_TRACES),
        help="traces for the textbook-EASY and priority-cost table ('' to skip)",
    )
    parser.add_argument(
        "--builds",
        default="pure,compiled",
        help="builds of the hot path the yardstick table measures: pure, compiled or both "
        "(compiled needs ACCORDION_COMPILE=1 scripts/setup)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=REPEATS,
        help=f"interleaved runs of the yardstick table, best taken (default {REPEATS})",
    )
    parser.add_argument("--child", nargs=2, metavar=("TRACE", "POLICY"), help=argparse.SUPPRESS)
    parser.add_argument("--yardstick-child", metavar="TRACE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.repeats < 1:
        sys.exit("bench: --repeats must be >= 1")
    if args.yardstick_child:
        yardstick(args.yardstick_child, args.repeats)
        return
    if not PWA.is_dir():
        sys.exit(f"bench: {PWA} not found (the shared traces sit beside the checkout)")
    console = Console(width=None if sys.stdout.isatty() else 200)
    builds = [b for b in args.builds.split(",") if b]
    if any(b not in {"pure", "compiled"} for b in builds):
        sys.exit(f"bench: --builds takes pure and/or compiled, not {args.builds!r}")
    console.print(f"this process imports the hot path {describe()}", style="dim")
    if args.yardstick:
        yardstick_table(console, args.yardstick.split(","), builds, args.repeats)
    if not args.policies:
        return
    table = Table(title=f"twin replay of real traces (whole trace, one process each; {describe()})")
    for col in (
        "trace",
        "policy",
        "jobs",
        "wall s",
        "cpu s",
        "jobs/s",
        "events/s",
        "decision mean ms",
        "decision p99 ms",
        "peak MB",
        "budget used",
        "vs AccaSim CPU",
    ):
        table.add_column(col, justify="right")
    for trace in args.traces.split(","):
        for policy in args.policies.split(","):
            console.print(f"replaying {trace} under {policy} ...", style="dim")
            proc = subprocess.run(
                [sys.executable, __file__, "--child", trace, policy],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                console.print(f"[red]{trace}/{policy} failed:[/] {proc.stderr.strip()[-500:]}")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            budget = TARGETS.get((trace, policy))
            table.add_row(
                trace,
                policy,
                f"{r['jobs']:,}",
                f"{r['wall']:.1f}",
                f"{r['cpu']:.1f}",
                f"{r['jobs'] / r['wall']:,.0f}",
                f"{r['events_per_second']:,.0f}",
                f"{r['decision_mean_ms']:.3f}",
                f"{r['decision_p99_ms']:.3f}",
                f"{r['peak_mb']:.0f}",
                f"{r['wall'] / budget:.0%} wall, {r['cpu'] / budget:.0%} cpu of {budget:.0f} s"
                if budget
                else "",
                f"{ACCASIM_CTC_CPU_SECONDS / r['cpu']:.1f}x less"
                if (trace, policy) == ("CTC-SP2", "easy")
                else "",
            )
    console.print(table)


if __name__ == "__main__":
    main()
