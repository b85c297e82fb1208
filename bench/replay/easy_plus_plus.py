"""EASY against EASY++'s run-time predictor on the shared traces: the table of its results.

Run on demand: ``.venv/bin/python -m bench.replay.easy_plus_plus`` (or
``docs/results/reproduce.sh easypp``). It replays every whole trace of
``../shared/workloads/pwa`` twice, each in a child process: under EASY
planning with the users' estimates, and under EASY planning with the
predictor of Tsafrir, Etsion and Feitelson, "Backfilling using
system-generated predictions rather than user runtime estimates" (IEEE
TPDS, 2007): the average of the user's last two run times, capped by the
request (``--policy-opt predictor=last-two``; ``scheduler.core.run_history``
states our rules). Both replays predict each job's start at its submission
(``--predict``), so the table has, for each trace, what the predictor does
to the forecast (median and 90th percentile of |predicted - real start|,
the share within 10 % of the real wait and within one hour) and to the
schedule (mean wait, mean bounded slowdown with tau = 10 s), beside the
paper's direction: predictions more accurate than estimates, and better
wait and slowdown. The paper's EASY++ also backfills the shortest predicted
job first; that order is not in these runs.

It writes ``docs/results/easy-plus-plus/README.md`` (the table and what it
shows) and one ``<trace>.json`` per trace with both runs' summaries; times
are virtual trace seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PWA = ROOT.parent / "shared" / "workloads" / "pwa"
OUT = ROOT / "docs" / "results" / "easy-plus-plus"
TRACES = (
    "KTH-SP2-1996-2.1-cln",
    "SDSC-SP2-1998-4.2-cln",
    "CTC-SP2-1996-3.1-cln",
    "SDSC-BLUE-2000-4.2-cln",
    "SDSC-DS-2004-2.1-cln",
)
VARIANTS = {"easy": {}, "easy++": {"predictor": "last-two"}}


def child(trace: str, variant: str) -> None:
    """In the child: replay, print the summary as one JSON line."""
    from accordion.experiments.runs import load_workload, run_policy

    workload = load_workload(PWA / f"{trace}.swf.gz", cluster=None)
    run = run_policy(workload, "easy", options=VARIANTS[variant], predict=True)
    keep = {k: run.summary[k] for k in ("metrics", "prediction", "policy_options", "workload")}
    # The trace's path as the repository sees it, not this machine's.
    keep["workload"] = {**keep["workload"], "path": os.path.relpath(keep["workload"]["path"], ROOT)}
    print(json.dumps(keep))


def run_one(trace: str, variant: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.replay.easy_plus_plus", "--child", trace, variant],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        sys.exit(f"{trace} under {variant} failed: {proc.stderr.strip()[-800:]}")
    found: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return found


def _change(new: float, old: float) -> str:
    return "" if old == 0 else f" ({(new - old) / abs(old):+.0%})"


def table(results: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The markdown rows: per trace, EASY -> EASY++ for each number."""
    head = (
        "| trace (jobs) | median \\|error\\| (s) | p90 \\|error\\| (s) | within 10 % of the "
        "wait | within 1 h | mean wait (s) | mean bounded slowdown |"
    )
    rows = [head, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for trace, runs in results.items():
        a, b = runs["easy"], runs["easy++"]
        pa, pb = a["prediction"], b["prediction"]
        ma, mb = a["metrics"], b["metrics"]
        rows.append(
            f"| {trace.split('-cln')[0]} ({ma['jobs']:,}) "
            f"| {pa['median_abs_error']:,.0f} → {pb['median_abs_error']:,.0f}"
            f"{_change(pb['median_abs_error'], pa['median_abs_error'])} "
            f"| {pa['p90_abs_error']:,.0f} → {pb['p90_abs_error']:,.0f}"
            f"{_change(pb['p90_abs_error'], pa['p90_abs_error'])} "
            f"| {pa['within_10pct']:.1%} → {pb['within_10pct']:.1%} "
            f"| {pa['within_1h']:.1%} → {pb['within_1h']:.1%} "
            f"| {ma['wait_mean']:,.0f} → {mb['wait_mean']:,.0f}"
            f"{_change(mb['wait_mean'], ma['wait_mean'])} "
            f"| {ma['bounded_slowdown_mean']:,.2f} → {mb['bounded_slowdown_mean']:,.2f}"
            f"{_change(mb['bounded_slowdown_mean'], ma['bounded_slowdown_mean'])} |"
        )
    return rows


def verdict(results: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """What the table shows against the paper's direction, counted from the numbers."""
    n = len(results)
    better: dict[str, int] = {"forecast": 0, "wait": 0, "slowdown": 0}
    for runs in results.values():
        a, b = runs["easy"], runs["easy++"]
        better["forecast"] += (
            b["prediction"]["median_abs_error"] < a["prediction"]["median_abs_error"]
        )
        better["wait"] += b["metrics"]["wait_mean"] < a["metrics"]["wait_mean"]
        better["slowdown"] += (
            b["metrics"]["bounded_slowdown_mean"] < a["metrics"]["bounded_slowdown_mean"]
        )
    return [
        f"- the forecast (median |error|) is better with the predictor on "
        f"{better['forecast']} of {n} traces;",
        f"- the mean wait is lower on {better['wait']} of {n} traces;",
        f"- the mean bounded slowdown is lower on {better['slowdown']} of {n} traces.",
    ]


def write(results: dict[str, dict[str, dict[str, Any]]], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for trace, runs in results.items():
        (out / f"{trace}.json").write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")
    lines = [
        "# EASY++'s run-time predictor on the shared traces",
        "",
        "Written by `bench/replay/easy_plus_plus.py` (`docs/results/reproduce.sh easypp`);",
        "do not edit by hand. Each whole trace is replayed twice under EASY on the",
        "trace's own machine: planning with the users' wall-time estimates, and with",
        "the predictor of Tsafrir, Etsion and Feitelson (2007), the average of the",
        "user's last two run times capped by the request (`--policy-opt",
        "predictor=last-two`; a run that outlives its prediction is expected to end",
        "with its request, as in the paper). Both predict each job's start at its",
        "submission (`--predict`); the errors are over the jobs that waited. Numbers",
        "read EASY → EASY++, in virtual trace seconds; bounded slowdown with tau = 10 s.",
        "",
        *table(results),
        "",
        "Against the paper's direction (predictions better than estimates, and a",
        "better wait and slowdown):",
        "",
        *verdict(results),
        "",
        "The paper's EASY++ also backfills the shortest predicted job first (SJBF);",
        "these runs keep EASY's order, so they measure the predictor alone. Per-trace",
        "summaries of both runs are in the JSON files beside this page.",
        "",
    ]
    page = out / "README.md"
    page.write_text("\n".join(lines), encoding="utf-8")
    return page


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    traces = [t for t in args.traces.split(",") if t]
    work = [(t, v) for t in traces for v in VARIANTS]
    with ThreadPoolExecutor(args.workers) as pool:
        done = list(pool.map(lambda w: (w, run_one(*w)), work))
    results: dict[str, dict[str, dict[str, Any]]] = {t: {} for t in traces}
    for (trace, variant), summary in done:
        results[trace][variant] = summary
    print(write(results, args.out))


if __name__ == "__main__":
    main()
