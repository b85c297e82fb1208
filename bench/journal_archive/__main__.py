"""Benchmark: a scheduler's restart, and its journal's size, with ended jobs hot or archived.

Run on demand (not a test): ``.venv/bin/python -m bench.journal_archive
[--jobs 100000] [--live 300]``. It fills a journal through ``Journal``'s own
writes with ``--jobs`` ended jobs (each as the scheduler journals it: its
row, a ``started`` and an end event, and three job events: queued, running,
its end) and ``--live`` more, half running and half queued, then copies the
file and measures, in the same run:

- the yardstick: a restart on the journal with every ended job hot, that is
  what the scheduler does before it subscribes (open the journal with its
  ``quick_check``, ``load``, the exporter's restore and
  ``scheduler.live.reconcile.restore`` into a fresh actor's core);
- archiving every ended job of the copy, batch by batch as the actor does
  (``--batch`` jobs each): jobs per second, and the slowest batch, which is
  how long one holds the actor's loop;
- the same restart on the copy, now that only the live jobs are hot;
- bytes per ended job: the journal with every job hot, over the jobs; the
  archive file, over the jobs; and the journal after archiving, as it lies on
  disk (SQLite keeps the freed pages for the rows to come: the file stops
  growing, it does not shrink) and after a ``VACUUM``.

Times are wall seconds on this machine (shared with other work); each restart
is the best of ``--repeat``.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from broker.memory import MemoryBroker  # noqa: E402
from broker.messages import JobEvent, JobSpec, PartSpec  # noqa: E402
from broker.topics import Topics  # noqa: E402
from broker.vocabulary import JobEventKind  # noqa: E402
from model.machine import Part  # noqa: E402
from scheduler.core.job_lifecycle import JobState  # noqa: E402
from scheduler.live import reconcile  # noqa: E402
from scheduler.policies.registry import build_policy  # noqa: E402
from scheduler.runtime.actor import SchedulerActor  # noqa: E402
from scheduler.runtime.clock import ManualClock  # noqa: E402
from scheduler.runtime.journal import Journal  # noqa: E402
from scheduler.runtime.journal_archive import archive_path  # noqa: E402

#: Jobs journalled per transaction while filling (the actor commits per batch too).
FILL_BATCH = 5_000
MACHINES = 64


def job_spec(n: int) -> JobSpec:
    return JobSpec(
        id=f"job-{n:08d}",
        procs=1 + n % 8,
        walltime=3600.0,
        work=600.0,
        workload="sleep",
        user=f"user{n % 50}",
        group=f"group{n % 5}",
    )


def fill(path: Path, ended: int, live: int) -> None:
    """``ended`` jobs over and ``live`` more (half running, half queued)."""
    stream = 0
    with Journal(path, synchronous="NORMAL") as j:
        j.ensure_meta(epoch=0.0, time_scale=1.0, policy="fcfs")
        total = ended + live
        for first in range(0, total, FILL_BATCH):
            with j.transaction():
                numbers = range(first, min(first + FILL_BATCH, total))
                j.record_submissions([(job_spec(n), float(n)) for n in numbers])
                for n in numbers:
                    stream = _life(j, n, ended, live, stream)


def _life(j: Journal, n: int, ended: int, live: int, stream: int) -> int:
    job_id = job_spec(n).id
    owner = f"user{n % 50}"
    parts = [Part(f"m{n % MACHINES}", 1 + n % 8)]
    placed = tuple(PartSpec(machine=p.machine, cpus=p.cpus) for p in parts)
    kinds = [JobEventKind.QUEUED]
    if n < ended + live // 2:
        j.record_start(job_id, n + 10.0, parts)
        kinds.append(JobEventKind.RUNNING)
    if n < ended:
        j.record_end(job_id, n + 70.0, JobState.FINISHED, "exit 0")
        kinds.append(JobEventKind.FINISHED)
    for seq, kind in enumerate(kinds, 1):
        stream += 1
        event = JobEvent(
            job_id=job_id,
            seq=seq,
            at=float(n + 10 * seq),
            event=kind,
            parts=placed if kind is JobEventKind.RUNNING else (),
            stream=stream,
        )
        j.record_event(event, owner=owner, owner_stream=stream)
    return stream


def restart(path: Path) -> tuple[float, int, int]:
    """Seconds of a restart's reading (module docstring), and the jobs it restored:
    queued, running."""
    t0 = time.perf_counter()
    journal = Journal(path, check=True)
    try:
        actor = SchedulerActor(
            MemoryBroker().client("bench"),
            Topics("bench"),
            policy=build_policy("fcfs"),
            journal=journal,
            clock=ManualClock(10.0**9),
        )
        state = journal.load()
        actor.metrics.restore(state)
        reconcile.restore(
            actor.ctx,
            state.jobs,
            journal.last_event_seqs(),
            10.0**9,
            streams=journal.last_streams(),
            drained=journal.drained(),
            usage=state.usage.sums,
            usage_period=state.usage.period,
        )
        seconds = time.perf_counter() - t0
        return seconds, len(actor.core.queue), len(actor.core.pending)
    finally:
        journal.close()


def best(repeat: int, run: Callable[[], tuple[float, int, int]]) -> tuple[float, int, int]:
    return min((run() for _ in range(repeat)), key=lambda r: r[0])


def archive_all(path: Path, batch: int) -> tuple[int, float, float]:
    """Jobs moved, their seconds in all, and the slowest batch's seconds."""
    moved, slowest = 0, 0.0
    with Journal(path, archive=True) as j:
        t0 = time.perf_counter()
        while True:
            b0 = time.perf_counter()
            n = j.archive(float("inf"), batch).jobs
            slowest = max(slowest, time.perf_counter() - b0)
            moved += n
            if n < batch:
                break
        return moved, time.perf_counter() - t0, slowest


def on_disk(path: Path) -> int:
    """The file's bytes once its WAL is checkpointed into it."""
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def vacuumed(path: Path) -> int:
    with closing(sqlite3.connect(path)) as db:
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.journal_archive", description=__doc__)
    p.add_argument("--jobs", type=int, default=100_000, help="ended jobs in the journal")
    p.add_argument("--live", type=int, default=300, help="running and queued jobs besides")
    p.add_argument("--batch", type=int, default=500, help="jobs per archiving batch")
    p.add_argument("--repeat", type=int, default=3, help="restarts measured, the best kept")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="journal-archive-") as tmp:
        hot = Path(tmp) / "hot" / "journal.sqlite"
        archived = Path(tmp) / "archived" / "journal.sqlite"
        hot.parent.mkdir()
        archived.parent.mkdir()
        t0 = time.perf_counter()
        fill(hot, args.jobs, args.live)
        filled = time.perf_counter() - t0
        hot_bytes = on_disk(hot)
        shutil.copy(hot, archived)
        before = best(args.repeat, lambda: restart(hot))
        moved, seconds, slowest = archive_all(archived, args.batch)
        after = best(args.repeat, lambda: restart(archived))
        left = on_disk(archived)
        archive_bytes = on_disk(archive_path(archived))
        small = vacuumed(archived)
        after_vacuum = best(args.repeat, lambda: restart(archived))
    n = args.jobs
    print(f"{n:,} ended jobs + {args.live} live (filled in {filled:.1f} s); batch {args.batch}")
    print("| | restart (s) | restored queued / running | journal file | bytes per ended job |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| every job hot (yardstick) | {before[0]:.3f} | {before[1]} / {before[2]} "
        f"| {hot_bytes / 1e6:.1f} MB | {hot_bytes / n:,.0f} |"
    )
    print(
        f"| ended jobs archived | {after[0]:.3f} | {after[1]} / {after[2]} "
        f"| {left / 1e6:.1f} MB (freed pages kept) | - |"
    )
    print(
        f"| archived, journal vacuumed | {after_vacuum[0]:.3f} | {after_vacuum[1]} / "
        f"{after_vacuum[2]} | {small / 1e6:.2f} MB | - |"
    )
    print(f"| the archive file | - | - | {archive_bytes / 1e6:.1f} MB | {archive_bytes / n:,.0f} |")
    print(
        f"archiving: {moved:,} jobs in {seconds:.2f} s = {moved / seconds:,.0f} jobs/s; "
        f"slowest batch of {args.batch}: {slowest * 1000:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
