"""Benchmark: the instructions a replay executes, which the machine's load does not move.

Run on demand (not a test), where valgrind is installed:
``.venv/bin/python -m bench.replay.instructions [--trace CTC-SP2] [--jobs 20000]
[--specs textbook,easy]``. CPU seconds on a shared 2-core machine move by 10
to 20 % between runs (``bench/replay/__main__.py`` takes the best of interleaved runs
and still does); a count of executed instructions is not moved by load. Each
spec runs in its own process under ``valgrind --tool=cachegrind
--cache-sim=no`` with ``PYTHONHASHSEED=0``, once uncounted first so bytecode
compilation is never counted, and so does the loading alone (twice); the
replay's count is the difference. The loading (the whole trace is parsed even
for its first jobs) itself moves by some 15-30 M instructions between runs, so
a replay is read against that spread, which is printed: KTH-SP2's first 2,000
jobs are within it, its first 10,000 well above it. ``textbook``
is ``bench/replay/textbook_easy.py``, ``easy-general`` EASY forced down its
general path (``bench/replay/easy_paths.py``), any other spec a policy as
``accordion simulate`` takes it. Instructions are not time (a dict lookup that misses the
cache costs more than its count says), so the seconds of ``bench/replay/__main__.py``
stay the target's measure; this is the steering wheel.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PWA = ROOT.parent / "shared" / "workloads" / "pwa"
TRACES = {
    "KTH-SP2": "KTH-SP2-1996-2.1-cln.swf.gz",
    "SDSC-SP2": "SDSC-SP2-1998-4.2-cln.swf.gz",
    "CTC-SP2": "CTC-SP2-1996-3.1-cln.swf.gz",
}
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def child(trace: str, spec: str, jobs: int | None) -> None:
    """Runs under valgrind: load the trace, then replay it under ``spec`` (or not)."""
    from accordion.experiments.runs import load_workload

    workload = load_workload(PWA / TRACES[trace], cluster=None, jobs=jobs)
    if spec == "load-only":
        return
    if spec == "textbook":
        from textbook_easy import textbook_easy  # beside this file, on sys.path[0]

        (machine,) = workload.machines
        textbook_easy(workload.jobs, machine.cpus)
        return
    from scheduler.policies.registry import build_policy
    from twin.simulate import simulate

    if spec == "easy-general":
        from easy_paths import GeneralEasy  # beside this file, on sys.path[0]

        from scheduler.policies.easy import EasyBackfill

        policy = GeneralEasy(easy=EasyBackfill())
    else:
        policy = build_policy(spec)
    result = simulate(workload.jobs, machines=workload.machines, policy=policy)
    _ = {o.job.id: o.start for o in result.outcomes}  # what bench/replay/__main__.py reads too


def warm(trace: str, spec: str, jobs: int | None) -> None:
    """Run one child once uncounted, so the modules it imports are compiled to
    bytecode before any count: in a fresh checkout the first child would
    otherwise count the compilation (enough to make a short textbook replay
    come out below the loading it is measured against)."""
    cmd = [sys.executable, __file__, "--child", trace, spec]
    # Always passed: the child's default is the first 20,000, and 0 means all.
    cmd += ["--jobs", str(jobs or 0)]
    subprocess.run(cmd, check=True, capture_output=True)


def count(trace: str, spec: str, jobs: int | None) -> int:
    """Instructions of one child process under cachegrind."""
    cmd = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--child",
        trace,
        spec,
    ]
    # Always passed: the child's default is the first 20,000, and 0 means all.
    cmd += ["--jobs", str(jobs or 0)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    found = _REFS.search(proc.stderr)
    if proc.returncode != 0 or found is None:
        sys.exit(f"bench: {trace} {spec} failed under valgrind: {proc.stderr.strip()[-500:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="CTC-SP2", choices=sorted(TRACES))
    parser.add_argument("--jobs", type=int, default=20000, help="first N jobs (0: all)")
    parser.add_argument("--specs", default="textbook,easy")
    parser.add_argument("--child", nargs=2, metavar=("TRACE", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    jobs = args.jobs or None
    if args.child:
        trace, spec = args.child
        child(trace, spec, jobs)
        return
    if shutil.which("valgrind") is None:
        sys.exit("bench: valgrind is not installed (apt-get install valgrind)")
    if not PWA.is_dir():
        sys.exit(f"bench: {PWA} not found (the shared traces sit beside the checkout)")
    started = time.perf_counter()
    specs = [s for s in args.specs.split(",") if s]
    for spec in ("load-only", *specs):
        warm(args.trace, spec, jobs)
    # Loading alone moves by some 30 M instructions between runs (the whole trace is
    # parsed even for its first jobs): counted twice, its spread is printed, and a
    # replay that costs less than a few spreads is within that noise.
    loads = [count(args.trace, "load-only", jobs) for _ in range(2)]
    base = sum(loads) // 2
    spread = abs(loads[0] - loads[1])
    counts = {spec: count(args.trace, spec, jobs) - base for spec in specs}
    print(f"{args.trace}, {'all' if jobs is None else f'first {jobs:,}'} jobs")
    print(f"{'spec':<20} {'M instructions':>15} {'/ first':>8}")
    first = counts[specs[0]]
    for spec, n in counts.items():
        ratio = f"{n / first:>7.2f}x" if first > 0 else "      -"
        print(f"{spec:<20} {n / 1e6:>15,.0f} {ratio}")
    print(f"loading subtracted: {base / 1e6:,.0f} M, spread of two runs {spread / 1e6:,.0f} M")
    if min(counts.values()) < 3 * spread:
        print("warning: a replay is within 3 spreads of the loading's noise: use more --jobs")
    print(f"({time.perf_counter() - started:.0f} s under valgrind)")


if __name__ == "__main__":
    main()
