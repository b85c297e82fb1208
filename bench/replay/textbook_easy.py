"""A textbook EASY backfilling loop: the yardstick ``bench.replay`` measures the twin by.

Independent of the scheduler core, the policies and the twin on purpose: it
shares only the loaded :class:`~model.job.Job` values (so both replay the same
jobs after the same trace-cleaning rules), and is written the way a course
would write EASY (Lifka; Mu'alem and Feitelson's formulation) in plain Python,
for one homogeneous machine of speed 1:

* events are job arrivals and job ends (at the job's real run time); all the
  events of one instant are applied (ends first), then the queue is scheduled
  once;
* jobs start in arrival order while the head fits;
* the first job that does not fit gets the *shadow time*: walking the running
  jobs by planned end (start + requested time; one still running past it is
  planned to end when its overrun reaches the next of 1, 2, 4, 8, ... seconds,
  the rule of ``scheduler.planning.overdue``), the first instant at which the
  free CPUs, with every job ending at that instant, cover it; the CPUs free
  then beyond its need are the *extra* CPUs;
* every later job starts now if it fits now and either ends (by its estimate)
  by the shadow time or takes no more than the extra CPUs, which it then uses
  up;
* a shadow time at which no job ends (an overdue job's planned end) is an
  event too: the queue is scheduled again then.

A job wider than the machine is skipped, as the twin rejects it. The result
is every job's start time, which the benchmark compares job by job with the
twin's schedule: a yardstick that computed a different schedule would not be
measuring the same work.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence

from model.job import Job

Running = list[tuple[float, int, int]]
"""Running jobs as ``(estimated end, start number, procs)``, kept sorted."""


def textbook_easy(jobs: Sequence[Job], cpus: int) -> dict[str, float]:
    """Start time of every job of ``jobs`` (sorted by submit) that fits ``cpus``."""
    free = cpus
    queue: list[Job] = []
    running: Running = []
    # Real ends as (end, start number, procs, estimated end).
    ends: list[tuple[float, int, int, float]] = []
    starts: dict[str, float] = {}
    n = len(jobs)
    i = 0
    inf = float("inf")

    def start(job: Job, now: float) -> None:
        assert job.runtime is not None  # the trace loader fills it
        number = len(starts)
        est = now + job.walltime
        bisect.insort(running, (est, number, job.procs))
        heapq.heappush(ends, (now + job.runtime, number, job.procs, est))
        starts[job.id] = now

    # Shadow times that fall due with no job ending then (an overdue job's planned end).
    wakes: list[float] = []
    while i < n or ends:
        now = min(jobs[i].submit if i < n else inf, ends[0][0] if ends else inf)
        if wakes and wakes[0] < now:
            now = wakes[0]
        while wakes and wakes[0] <= now:
            heapq.heappop(wakes)
        while ends and ends[0][0] <= now:
            _, number, procs, est = heapq.heappop(ends)
            del running[bisect.bisect_left(running, (est, number, procs))]
            free += procs
        while i < n and jobs[i].submit <= now:
            if jobs[i].procs <= cpus:
                queue.append(jobs[i])
            i += 1
        k = 0
        while k < len(queue) and queue[k].procs <= free:
            free -= queue[k].procs
            start(queue[k], now)
            k += 1
        if k == len(queue):
            queue = []
            continue
        head = queue[k]
        shadow, extra = _shadow(running, free, now, head.procs)
        kept = [head]
        for m, job in enumerate(queue[k + 1 :], start=k + 1):
            if free == 0:
                kept += queue[m:]
                break
            procs = job.procs
            if procs <= free and (now + job.walltime <= shadow or procs <= extra):
                if now + job.walltime > shadow:
                    extra -= procs
                free -= procs
                start(job, now)
            else:
                kept.append(job)
        queue = kept
        if now < shadow < (ends[0][0] if ends else inf) and (not wakes or shadow < wakes[0]):
            heapq.heappush(wakes, shadow)
    return starts


def _planned(est: float, now: float) -> float:
    """When a job expected to end at ``est`` is planned to end: doubling allowances."""
    if est >= now:
        return est
    allowance = 1.0
    while est + allowance <= now:
        allowance *= 2
    return est + allowance


def _shadow(running: Running, free: int, now: float, need: int) -> tuple[float, int]:
    """The shadow time for a job of ``need`` CPUs and the extra CPUs at it."""
    avail = free
    ends = running
    if running and running[0][0] < now:  # some job is overdue (they come first)
        ends = sorted((_planned(est, now), number, procs) for est, number, procs in running)
    last = len(ends) - 1
    for k, (t, _, procs) in enumerate(ends):
        avail += procs
        if avail >= need and (k == last or ends[k + 1][0] > t):
            return t, avail - need
    return float("inf"), 0
