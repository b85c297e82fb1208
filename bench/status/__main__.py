"""Benchmark: status, replay's questions and bulk cancel with one user's 90,000 queued jobs.

Run on demand (not a test): ``.venv/bin/python -m bench.status [--jobs 90000]``.
Issue 19, finding 1: with 90,000 jobs of 128-character ids queued by alice,
the unpaged status reply grew to 17.5 MB, past the client's limit, and every
user's ``status`` and ``replay`` failed; at 50,000 a status took 3.1 s where it
took 0.7 s on an empty queue. This bench starts ``accordion up``'s cluster
(Mosquitto with logins, the scheduler, one agent of 2 CPUs that an admin's
job fills, so everything else queues), measures each question on the empty
queue first (the yardstick, in the same run), then queues ``--jobs`` jobs of
alice's and measures again:

- bob's ``accordion status`` as a process (the CLI's 50 rows), wall seconds;
- a status page through the client: the CLI's 50 rows, and the largest page
  (10,000 rows asked), its seconds and bytes (the bound is 1 MiB);
- the whole queue, page by page: pages, seconds, and the bytes of them all
  (what one unpaged reply would have been);
- what ``accordion replay`` asks after its own jobs (``live_ids`` of 5,000),
  and what ``up``'s readiness reads (every machine, no job);
- one bulk cancel of all of alice's queued jobs: seconds, and the journal's
  rows it changed.

Every process runs on this machine and talks to 127.0.0.1 only; the times
are wall seconds and include the other processes sharing the cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from accordion.client.live_client import LiveClient, connect, run_async  # noqa: E402
from accordion.client.specs import job_spec  # noqa: E402
from accordion.cluster.local_cluster import LocalCluster  # noqa: E402
from accordion.cluster.wiring import Sharing  # noqa: E402
from broker.codec import encode  # noqa: E402
from broker.limits import MAX_REPLY_BYTES  # noqa: E402
from broker.messages import JobSpec  # noqa: E402
from broker.vocabulary import JobState  # noqa: E402
from model.machine import Machine  # noqa: E402
from scheduler.core.job_lifecycle import JobState as Stored  # noqa: E402
from scheduler.runtime.journal import Journal  # noqa: E402
from workload.cluster import ClusterSpec  # noqa: E402

T = TypeVar("T")
ACCORDION = str(Path(sys.executable).with_name("accordion"))
Row = tuple[str, str, str]


def flood(n: int, tag: str) -> list[JobSpec]:
    """``n`` one-CPU jobs with 128-character ids (the issue's)."""
    return [
        job_spec(job_id=f"{tag}-{i:06}-".ljust(128, "x"), procs=1, walltime=600.0) for i in range(n)
    ]


async def timed(ask: Callable[[], Awaitable[T]], repeat: int = 5) -> tuple[float, T]:
    """The median wall seconds of ``repeat`` asks, and the last answer."""
    times = []
    answer: T | None = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        answer = await ask()
        times.append(time.perf_counter() - t0)
    assert answer is not None
    return statistics.median(times), answer


def cli_status(local: LocalCluster, repeat: int = 3) -> float:
    """Median wall seconds of bob's ``accordion status`` process (its 50 rows)."""
    assert local.auth_files is not None
    env = {
        **os.environ,
        "ACCORDION_BROKER": local.broker_url,
        "ACCORDION_ROOT": local.root,
        # A login of bob's own: the bench's client holds "bob" (one connection a login).
        "ACCORDION_MQTT_USERNAME": "bob~2",
        "ACCORDION_MQTT_PASSWORD_FILE": str(local.auth_files.secret_of("bob~2")),
    }
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        done = subprocess.run(
            [ACCORDION, "status"], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        times.append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise RuntimeError(f"accordion status failed: {done.stderr.strip()}")
    return statistics.median(times)


async def questions(local: LocalCluster, bob: LiveClient, ids: list[str]) -> dict[str, str]:
    """Every measurement of one state of the queue, as table cells."""
    out: dict[str, str] = {}
    t50, page = await timed(lambda: bob.status(limit=50))
    out["a page of 50 rows (the CLI's)"] = f"{t50 * 1e3:.1f} ms, {len(encode(page)):,} B"
    tbig, big = await timed(lambda: bob.status(limit=10_000, machines=False), repeat=3)
    rows = len(big.running) + len(big.queue)
    size = len(encode(big))
    assert size <= MAX_REPLY_BYTES
    out["the largest page (10,000 asked)"] = f"{tbig * 1e3:.1f} ms, {rows:,} rows, {size:,} B"
    t0 = time.perf_counter()
    pages = total = 0
    cursor: str | None = None
    while True:
        p = await bob.status(cursor=cursor, machines=cursor is None)
        pages += 1
        total += len(encode(p))
        if p.next_cursor is None:
            break
        cursor = p.next_cursor
    whole = time.perf_counter() - t0
    out["the whole queue, page by page"] = f"{whole:.2f} s, {pages} pages, {total:,} B in all"
    asked = ids[:5000]
    tlive, live = await timed(lambda: bob.live_ids(asked), repeat=3)
    out["a replay's 5,000 jobs (live_ids)"] = f"{tlive * 1e3:.1f} ms ({len(live):,} live)"
    tmach, machines = await timed(bob.machines)
    out["up's readiness (every machine)"] = f"{tmach * 1e3:.1f} ms ({len(machines)} machine)"
    out["bob's `accordion status` process"] = f"{cli_status(local):.2f} s"
    return out


async def run(local: LocalCluster, n: int, tag: str) -> tuple[list[Row], str]:
    async with local.connect(timeout=60.0) as admin:
        await local.ready(admin, timeout=120.0)
        blocker = job_spec(job_id=f"{tag}-blocker", procs=2, walltime=86400.0, user="root")
        assert (await admin.submit([blocker])).results[0].accepted
    jobs = flood(n, tag)
    ids = [j.id for j in jobs]
    creds = local.credentials
    async with (
        connect(local.broker_url, local.root, credentials=creds("bob"), timeout=60.0) as bob,
        connect(local.broker_url, local.root, credentials=creds("alice"), timeout=60.0) as alice,
    ):
        before = await questions(local, bob, ids)
        t0 = time.perf_counter()
        for i in range(0, n, 5000):
            reply = await alice.submit(jobs[i : i + 5000])
            assert all(r.accepted for r in reply.results), "a job was refused"
        queued = time.perf_counter() - t0
        after = await questions(local, bob, ids)
        t0 = time.perf_counter()
        done = await alice.cancel_jobs(user="alice", states=(JobState.QUEUED,))
        cancel = time.perf_counter() - t0
    with Journal(local.journal) as journal:
        cancelled = sum(1 for row in journal.load().jobs if row.state is Stored.CANCELLED)
    rows = [(what, before[what], after[what]) for what in before]
    rows.append(("alice queues them (requests of 5,000)", "-", f"{queued:.1f} s"))
    rows.append(
        (
            "one bulk cancel of all of them",
            "-",
            f"{cancel:.2f} s, {done.cancelled:,} cancelled, {cancelled:,} rows in the journal",
        )
    )
    return rows, f"{n:,} jobs of alice, 128-character ids"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--jobs", type=int, default=90_000, help="alice's queued jobs (%(default)s)")
    p.add_argument("--keep", action="store_true", help="keep the run directory")
    args = p.parse_args()
    if args.jobs < 5000:
        p.error("--jobs must be at least 5000 (a replay's question asks after 5,000)")
    tag = uuid.uuid4().hex[:6]
    run_dir = Path(tempfile.mkdtemp(prefix="accordion-status-"))
    spec = ClusterSpec(
        name=f"status-{tag}", reference_speed=1.0, machines=(Machine(id=f"m-{tag}", cpus=2),)
    )
    local = LocalCluster(
        spec,
        run_dir / "run",
        broker="mosquitto",
        root=f"status-{tag}/v3",
        auth=True,
        users=("alice", "bob"),
        sharing=Sharing(values={"max_queued_per_user": args.jobs}),
    )
    console = Console(width=max(150, Console().width))
    with local:
        rows, what = run_async(run(local, args.jobs, tag))
    table = Table(title=f"status with one user's flood: {what} (wall time; bound 1 MiB a page)")
    for col in ("question", "empty queue (yardstick)", f"{args.jobs:,} queued"):
        table.add_column(col, justify="left" if col == "question" else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        console.print(f"run directory kept: {run_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
