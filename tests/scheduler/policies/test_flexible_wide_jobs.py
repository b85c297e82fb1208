"""Flexible backfilling and wide jobs under deadlines: a reported starvation, pinned down.

Reported: on a 1,664-CPU trace at 32 % utilisation with jobs up to 1,280
CPUs, ``--deadlines 0.7`` made Flexible backfilling's jobs of 256 CPUs or
more wait 279,073 s on average against EASY's 13,942 s. With the trace (SDSC
DataStar) the cause turned out to lie in no part of the score: a job 76 days
past its estimate was planned to end "now", which pinned a wide job's
reservation at every event (``test_overdue_jobs.py``, docs/results/README.md,
section 5). What the paper says keeps wide jobs from starving, and what these
tests pin, still holds:

* Aging (sec. 3.1: "Aging aims to avoid job starvation") grows without
  bound while the other two heuristics are bounded (Deadline by ``Max``,
  Wait Minimisation by ``boostvalue``), so with the paper's constants no job
  is ever ranked behind one submitted more than
  ``(Max - Min + boostvalue) / agefactor`` = 2,190 s after it.
* "When a job goes over its deadline before it is scheduled, its updating
  priority value is set to Min" is the Deadline heuristic's value, not the
  whole ``P(J)``: the sentence sits in that heuristic's paragraph, and
  ``P(J) = Aging + Deadline + WaitMinimization`` is recomputed from zero at
  every event. Read as the whole ``P(J)``, a job that missed its deadline
  would lose its aging and wait behind every job still able to meet one:
  starvation for exactly the jobs that wait longest, the wide ones.
* "The reservation for the first queued job is maintained through events"
  (sec. 4): the reserved job stays first until it starts
  (``FlexibleBackfill.keep_reservation``), and EASY's reservation protects it.

The regression workload: a seeded DataStar-shaped trace (1,664 CPUs, sizes
up to 1,280, lognormal run times, estimates 1 to 10 times the run time and
5 % overruns, about 32 % utilisation) with the EG-EDF paper's 70 % deadlines.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Machine
from scheduler.policies.easy import EasyBackfill
from scheduler.policies.flexible import FlexibleBackfill
from scheduler.priority.flexible_score import (
    AGE_FACTOR,
    BOOST_VALUE,
    MAX_SCORE,
    MIN_SCORE,
    FlexiblePriority,
)
from tests.builders import job, snapshot
from twin.simulate import simulate
from workload.deadlines import DeadlineRule, assign_deadlines

DATASTAR = Machine(id="ds", cpus=1664)
SIZES = (1, 2, 4, 8, 8, 8, 16, 16, 32, 32, 64, 64, 128, 256, 512, 1024, 1280)
WIDE = 256
OVERTAKE_BOUND = (MAX_SCORE - MIN_SCORE + BOOST_VALUE) / AGE_FACTOR
"""Seconds: a job submitted more than this after another never ranks above it."""
BUSY = {DATASTAR.id: 0}
"""Every CPU taken, as when wide jobs wait."""


def datastar_like(seed: int, *, n: int = 600, load: float = 0.32) -> list[Job]:
    """The regression workload (module docstring); its own seeded generator."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        procs = rng.choice(SIZES)
        run = rng.lognormvariate(7.5, 1.8) + 1
        estimate = run * (rng.uniform(0.1, 0.9) if rng.random() < 0.05 else rng.uniform(1, 10))
        rows.append((procs, run, estimate))
    gap = sum(p * r for p, r, _ in rows) / n / (DATASTAR.cpus * load)
    t = 0.0
    jobs = []
    for i, (procs, run, estimate) in enumerate(rows):
        t += rng.expovariate(1 / gap)
        jobs.append(
            job(
                f"j{i:04d}",
                procs,
                walltime=float(max(1, round(estimate))),
                runtime=float(max(1, round(run))),
                submit=float(round(t)),
            )
        )
    return assign_deadlines(jobs, DeadlineRule(share=0.7, seed=seed))


def waits(jobs: list[Job], policy: EasyBackfill | FlexibleBackfill) -> dict[str, float]:
    result = simulate(jobs, machines=[DATASTAR], policy=policy)
    return {o.job.id: o.start - o.job.submit for o in result.outcomes}


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_wide_jobs_wait_under_flexible_as_under_easy_with_deadlines() -> None:
    for seed in range(4):
        jobs = datastar_like(seed)
        wide = [j.id for j in jobs if j.procs >= WIDE]
        assert len(wide) >= 60
        assert sum(j.deadline is not None for j in jobs) > len(jobs) // 2
        easy, flex = waits(jobs, EasyBackfill()), waits(jobs, FlexibleBackfill())
        # Measured equal on these seeds; the report had 20 times EASY's wait.
        assert mean([flex[i] for i in wide]) <= 1.1 * mean([easy[i] for i in wide])
        assert mean(list(flex.values())) <= 1.1 * mean(list(easy.values()))
        assert max(flex.values()) <= 1.25 * max(easy.values())


def test_a_job_past_its_deadline_keeps_its_aging() -> None:
    # "wide" (1,280 CPUs, 10 h estimate) missed its deadline an hour ago, after
    # three hours in the queue; "fresh" arrived a minute ago and is inside its
    # deadline window. Its Deadline score drops to Min, its aging (108) stays.
    wide = job("wide", 1280, walltime=36_000.0, deadline=7_200.0)
    fresh = job("fresh", 8, walltime=600.0, submit=10_740.0, deadline=12_000.0)
    snap = snapshot(now=10_800.0, queue=[wide, fresh], machines=[DATASTAR], free=BUSY)
    scores = FlexiblePriority().scores(snap)
    assert scores["wide"].deadline == MIN_SCORE
    assert scores["wide"].aging == AGE_FACTOR * 10_800.0
    assert scores["fresh"].deadline > MIN_SCORE
    assert [j.id for j in FlexiblePriority().order(snap)] == ["wide", "fresh"]


@st.composite
def queues(draw: st.DrawFn) -> tuple[float, list[Job]]:
    n = draw(st.integers(2, 10))
    submits = sorted(draw(st.lists(st.integers(0, 20_000), min_size=n, max_size=n)))
    now = float(submits[-1] + draw(st.integers(0, 20_000)))
    jobs = []
    for i, submit in enumerate(submits):
        walltime = float(draw(st.integers(1, 50_000)))
        slack = draw(st.none() | st.floats(0.0, 5.0))
        jobs.append(
            job(
                f"j{i}",
                submit=float(submit),
                procs=draw(st.sampled_from(SIZES)),
                walltime=walltime,
                deadline=None if slack is None else submit + slack * walltime,
            )
        )
    return now, jobs


@settings(max_examples=300, deadline=None)
@given(queues())
def test_no_job_is_overtaken_by_one_submitted_past_the_bound(case: tuple[float, list[Job]]) -> None:
    """Aging against the two bounded heuristics, with the paper's constants."""
    now, queue = case
    rank = {
        j.id: k
        for k, j in enumerate(
            FlexiblePriority().order(snapshot(now=now, queue=queue, machines=[DATASTAR], free=BUSY))
        )
    }
    for a in queue:
        for b in queue:
            if b.submit - a.submit > OVERTAKE_BOUND:
                assert rank[a.id] < rank[b.id], (a, b)
