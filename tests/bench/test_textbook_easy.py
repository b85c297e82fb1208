"""The benchmark's yardstick computes the twin's EASY schedule, job by job.

``bench/replay/textbook_easy.py`` is only an honest yardstick if it does the same
work as the twin: here both replay generated workloads (overestimated wall
times, so backfilling and the shadow time matter) and must agree on every
start.
"""

from __future__ import annotations

import random

import pytest

from bench.replay.textbook_easy import textbook_easy
from model.job import Job
from model.machine import Machine
from scheduler.policies.easy import EasyBackfill
from tests.builders import job
from twin.simulate import simulate


def workload(seed: int, n: int = 300, cpus: int = 32) -> list[Job]:
    rng = random.Random(seed)
    t = 0.0
    jobs = []
    for i in range(n):
        t += rng.choice([0.0, rng.expovariate(1 / 30)])
        runtime = float(rng.randint(1, 400))
        jobs.append(
            job(
                f"j{i}",
                rng.choice([1, 1, 2, 4, 8, 16, cpus, cpus + 1]),
                submit=t,
                runtime=runtime,
                # Overdue jobs too (runtime above the estimate): scheduler.planning.overdue.
                walltime=runtime * rng.choice([0.5, 1.0, 1.0, 2.0, 5.0]),
            )
        )
    return jobs


@pytest.mark.parametrize("seed", range(8))
def test_the_yardstick_and_the_twin_start_every_job_at_the_same_instant(seed: int) -> None:
    jobs = workload(seed)
    result = simulate(jobs, machines=[Machine(id="m", cpus=32)], policy=EasyBackfill())
    twin = {o.job.id: o.start for o in result.outcomes}
    assert textbook_easy(jobs, 32) == twin
    assert len(twin) < len(jobs)  # the jobs wider than the machine were left out by both
