"""Hash the twin's schedules of real traces, to show a speed change changed no result.

Run on demand (not a test): ``.venv/bin/python -m bench.replay.schedule_hash --save
before.json`` on the code before a change, then ``--check before.json`` on the
code after it. Each (trace, policy) replay runs in a child process (two at a
time with ``--workers 2``) and is reduced to one SHA-256 over every outcome:
job id, start, end, parts and CPU segments, with the floats written by
``repr`` so a difference in the last bit shows. ``--check`` prints each pair
as "same" or "DIFFERENT" and exits 1 if any differs or is missing.

Policies whose replay of a whole trace takes minutes (EG-EDF, Tabu, DPSA,
conservative) are hashed on the first ``--short`` jobs of each trace.

The children import the hot path as this process does: compiled where a fresh
build is installed (``ACCORDION_COMPILE=1 scripts/setup``), pure Python under
``ACCORDION_PURE=1``; the first line printed says which.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from compiled.hook import describe

ROOT = Path(__file__).resolve().parents[2]
PWA = ROOT.parent / "shared" / "workloads" / "pwa"
TRACES = {
    "KTH-SP2": "KTH-SP2-1996-2.1-cln.swf.gz",
    "SDSC-SP2": "SDSC-SP2-1998-4.2-cln.swf.gz",
    "CTC-SP2": "CTC-SP2-1996-3.1-cln.swf.gz",
}
#: Replayed whole.
FULL = (
    "fcfs",
    "fifo-backfill",
    "easy",
    "easy:fairshare",
    "easy:multifactor",
    "fifo-backfill:fairshare",
    "fcfs-malleable",
)
#: Replayed on the first ``--short`` jobs (minutes per whole trace otherwise).
SHORT = (
    "conservative",
    "conservative:multifactor",
    "dpsa-p",
    "flexible",
    "eg-edf",
    "eg-edf-tabu",
)


def child(trace: str, policy: str, jobs: int | None) -> None:
    from accordion.experiments.runs import load_workload, run_policy

    workload = load_workload(PWA / TRACES[trace], cluster=None, jobs=jobs)
    run = run_policy(workload, policy)
    digest = hashlib.sha256()
    for o in sorted(run.result.outcomes, key=lambda o: o.job.id):
        digest.update(
            repr(
                (o.job.id, o.start, o.end, o.parts, o.segments, o.expanded_runtime, o.failed)
            ).encode()
        )
    print(json.dumps({"hash": digest.hexdigest(), "jobs": len(run.result.outcomes)}))


def run_one(trace: str, policy: str, jobs: int | None) -> tuple[str, str]:
    cmd = [sys.executable, __file__, "--child", trace, policy]
    if jobs is not None:
        cmd += ["--jobs", str(jobs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    key = f"{trace} {policy}" + (f" first {jobs}" if jobs is not None else "")
    if proc.returncode != 0:
        return key, "failed: " + proc.stderr.strip()[-300:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    return key, f"{r['hash']} ({r['jobs']} jobs)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, help="write the hashes to this JSON file")
    parser.add_argument("--check", type=Path, help="compare with hashes saved earlier")
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--policies", default=",".join(FULL))
    parser.add_argument("--short-policies", default=",".join(SHORT))
    parser.add_argument("--short", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.jobs)
        return
    print(f"the hot path: {describe()}", flush=True)
    work = [(t, p, None) for t in args.traces.split(",") for p in args.policies.split(",") if p] + [
        (t, p, args.short)
        for t in args.traces.split(",")
        for p in args.short_policies.split(",")
        if p
    ]
    with ThreadPoolExecutor(args.workers) as pool:
        hashes = dict(pool.map(lambda w: run_one(*w), work))
    if args.save:
        args.save.write_text(json.dumps(hashes, indent=1) + "\n")
    bad = 0
    saved = json.loads(args.check.read_text()) if args.check else {}
    for key, value in hashes.items():
        if args.check:
            same = saved.get(key) == value and not value.startswith("failed")
            bad += not same
            print(f"{'same     ' if same else 'DIFFERENT'} {key}: {value}")
        else:
            print(f"{key}: {value}")
    if bad:
        sys.exit(f"{bad} schedule(s) differ from {args.check}")


if __name__ == "__main__":
    main()
