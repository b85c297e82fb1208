"""Idle while waiting: the longest time CPUs sat free that a queued job could have used.

A scheduler that works keeps no CPUs idle for long while a job that fits
them waits. This checker reads a schedule (the twin's per-job output) and
finds the longest interval during which, at every instant, some queued job
(submitted, not yet started) needed no more CPUs than were free. Backfilling
can hold a small job back for a while on purpose (it would delay the
reservation of a wider one), but only for about the estimates of the jobs
that reservation waits for; an interval of days means CPUs were held for a
promise that never came due, as Flexible backfilling's were on SDSC DataStar
(``docs/results/README.md``).

What "could have used" means here: a job needs its ``processes`` CPUs, and
the free CPUs are counted over the whole cluster, which is exact for the
one-machine cluster a trace replays on and for placement rules that span
machines. A job's CPUs are the ones it held at most (the per-job output's
``cpus``); policies that resize jobs (FCFS-malleable) are therefore
approximated, the others exact.

Run on the per-job CSVs that ``accordion compare`` or ``accordion simulate``
write (``<policy>.jobs.csv``, the cluster size read from the
``<policy>.summary.json`` beside it)::

    .venv/bin/python -m bench.replay.idle_while_waiting out/compare/*.jobs.csv --limit 86400

It prints one row per file and exits 1 if any interval is longer than
``--limit`` seconds (default one day).
"""

from __future__ import annotations

import argparse
import csv
import heapq
import json
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

DAY = 86_400.0
"""Seconds: the default limit (the issue's target: no such interval over a day)."""


@dataclass(frozen=True, slots=True)
class Placed:
    """One job of a schedule: when it came, ran and ended, what it needed and held."""

    submit: float
    start: float
    end: float
    need: int
    held: int


@dataclass(frozen=True, slots=True)
class IdleSpan:
    """The longest interval of idle-while-waiting, and what it looked like at its start."""

    start: float
    end: float
    free: int
    smallest_waiting: int
    #: Total time (seconds) over the whole schedule with idle-while-waiting CPUs.
    total: float

    @property
    def length(self) -> float:
        return self.end - self.start


def longest_idle_while_waiting(jobs: Iterable[Placed], cpus: int) -> IdleSpan | None:
    """The longest interval in which some waiting job needed at most the free CPUs.

    None if there was never such an instant. All the events of one instant are
    applied before the state is read, so a job that starts when it arrives is
    never counted as waiting.
    """
    # (time, kind, value): kind 0 frees ``value`` CPUs (an end), 1 queues a job of
    # ``value`` CPUs, 2 starts one (takes it off the queue and its CPUs).
    events: list[tuple[float, int, int, int]] = []
    for j in jobs:
        if j.start > j.submit:
            events.append((j.submit, 1, j.need, 0))
            events.append((j.start, 2, j.need, j.held))
        else:
            events.append((j.start, 2, 0, j.held))
        events.append((j.end, 0, 0, j.held))
    events.sort()
    waiting: Counter[int] = Counter()
    sizes: list[int] = []  # a heap of waiting sizes, stale entries dropped lazily
    free = cpus
    best: IdleSpan | None = None
    since: float | None = None
    since_state = (0, 0)
    total = 0.0
    i, n = 0, len(events)
    while i < n:
        now = events[i][0]
        while i < n and events[i][0] == now:
            _, kind, need, held = events[i]
            if kind == 0:
                free += held
            elif kind == 1:
                waiting[need] += 1
                heapq.heappush(sizes, need)
            else:
                if need:
                    waiting[need] -= 1
                free -= held
            i += 1
        while sizes and waiting[sizes[0]] == 0:
            heapq.heappop(sizes)
        idle = bool(sizes) and sizes[0] <= free
        if idle and since is None:
            since, since_state = now, (free, sizes[0])
        elif not idle and since is not None:
            total += now - since
            if best is None or now - since > best.length:
                best = IdleSpan(since, now, since_state[0], since_state[1], 0.0)
            since = None
    if best is None:
        return None
    return IdleSpan(best.start, best.end, best.free, best.smallest_waiting, total)


def read_jobs_csv(path: Path) -> list[Placed]:
    """The jobs of a per-job CSV (``twin.report.write_jobs_csv``'s columns)."""
    with path.open(newline="", encoding="utf-8") as fh:
        return [
            Placed(
                submit=float(row["submit"]),
                start=float(row["start"]),
                end=float(row["end"]),
                need=int(row["processes"]),
                held=int(row["cpus"]),
            )
            for row in csv.DictReader(fh)
        ]


def summary_of(jobs_csv: Path) -> Path:
    """The ``<policy>.summary.json`` written beside a ``<policy>.jobs.csv``."""
    return jobs_csv.with_name(jobs_csv.name.removesuffix(".jobs.csv") + ".summary.json")


def cluster_cpus(jobs_csv: Path) -> int:
    """Total CPUs from the summary written beside a per-job CSV."""
    summary = summary_of(jobs_csv)
    return int(json.loads(summary.read_text(encoding="utf-8"))["cluster"]["total_cpus"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jobs_csv", nargs="+", type=Path, help="<policy>.jobs.csv files")
    parser.add_argument("--cpus", type=int, help="cluster size (default: from the summary)")
    parser.add_argument("--limit", type=float, default=DAY, help="seconds (default: a day)")
    args = parser.parse_args()
    for path in args.jobs_csv:
        if not path.is_file():
            parser.error(f"{path}: no such file")
        if args.cpus is None and not summary_of(path).is_file():
            parser.error(f"{path}: no {summary_of(path).name} beside it; pass --cpus")
    over = 0
    print(
        f"{'policy':<24} {'longest (s)':>12} {'from':>12} {'to':>12} {'free':>6} "
        f"{'waiting':>8} {'total (s)':>12}"
    )
    for path in args.jobs_csv:
        cpus = args.cpus if args.cpus is not None else cluster_cpus(path)
        span = longest_idle_while_waiting(read_jobs_csv(path), cpus)
        name = path.name.removesuffix(".jobs.csv")
        if span is None:
            print(f"{name:<24} {0:>12,.0f}")
            continue
        over += span.length > args.limit
        print(
            f"{name:<24} {span.length:>12,.0f} {span.start:>12,.0f} {span.end:>12,.0f} "
            f"{span.free:>6} {span.smallest_waiting:>8} {span.total:>12,.0f}"
        )
    if over:
        sys.exit(
            f"{over} schedule(s) had CPUs idle while a job that fits waited "
            f"longer than {args.limit:,.0f} s"
        )


if __name__ == "__main__":
    main()
