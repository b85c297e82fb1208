"""The idle-while-waiting checker (``bench/replay/idle_while_waiting.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.replay.idle_while_waiting import (
    IdleSpan,
    Placed,
    cluster_cpus,
    longest_idle_while_waiting,
    read_jobs_csv,
)
from model.job import Job
from model.machine import Machine
from scheduler.policies.easy import EasyBackfill
from twin.report import write_jobs_csv
from twin.simulate import simulate


def span(jobs: list[Placed], cpus: int = 10) -> tuple[float, float, float] | None:
    found = longest_idle_while_waiting(jobs, cpus)
    return None if found is None else (found.start, found.end, found.total)


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        ([], None),
        # Started on arrival: never waiting.
        ([Placed(0, 0, 50, 4, 4)], None),
        # Waits 10..30 with 10 CPUs free and needs 4: idle while waiting.
        ([Placed(10, 30, 40, 4, 4)], (10, 30, 20)),
        # Needs 8 while 6 are free (another job holds 4): not idle; then 10 free at 20.
        ([Placed(0, 0, 20, 4, 4), Placed(5, 20, 30, 8, 8)], None),
        ([Placed(0, 0, 20, 4, 4), Placed(5, 25, 30, 8, 8)], (20, 25, 5)),
        # Two intervals: the longest is reported, the total counts both.
        (
            [Placed(0, 0, 100, 10, 10), Placed(100, 103, 110, 2, 2), Placed(200, 210, 220, 2, 2)],
            (200, 210, 13),
        ),
        # The smallest waiting job is what counts: a wide one waits, a small one fits.
        ([Placed(0, 0, 50, 6, 6), Placed(1, 50, 60, 10, 10), Placed(2, 40, 45, 4, 4)], (2, 40, 38)),
    ],
)
def test_longest_interval(jobs: list[Placed], expected: tuple[float, float, float] | None) -> None:
    assert span(jobs) == expected


def test_the_span_says_what_was_free_and_what_waited() -> None:
    found = longest_idle_while_waiting([Placed(0, 0, 50, 6, 6), Placed(2, 40, 45, 3, 3)], 10)
    assert found == IdleSpan(start=2, end=40, free=4, smallest_waiting=3, total=38)
    assert found.length == 38


def test_reads_the_twins_per_job_csv(tmp_path: Path) -> None:
    jobs = [
        Job(id="a", submit=0.0, procs=6, walltime=100.0, runtime=100.0),
        Job(id="b", submit=1.0, procs=6, walltime=50.0, runtime=50.0),
        Job(id="c", submit=2.0, procs=2, walltime=500.0, runtime=500.0),
    ]
    result = simulate(jobs, machines=[Machine(id="m", cpus=10)], policy=EasyBackfill())
    path = tmp_path / "easy.jobs.csv"
    write_jobs_csv(path, result)
    (tmp_path / "easy.summary.json").write_text(json.dumps({"cluster": {"total_cpus": 10}}))
    placed = read_jobs_csv(path)
    assert sorted(placed, key=lambda p: p.submit) == [
        Placed(o.job.submit, o.start, o.end, o.job.procs, o.max_cpus)
        for o in sorted(result.outcomes, key=lambda o: o.job.submit)
    ]
    assert cluster_cpus(path) == 10
