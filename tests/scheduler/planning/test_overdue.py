"""The overdue rule (``scheduler.planning.overdue``): when a job past its estimate ends."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Part
from scheduler.core.snapshot import RunningJob
from scheduler.planning.overdue import in_planned_order, planned_end, planned_releases


def running(jid: str, est_end: float, cpus: int = 1) -> RunningJob:
    j = Job(id=jid, submit=0.0, procs=cpus, walltime=100.0)
    return RunningJob(job=j, parts=(Part("m", cpus),), start=0.0, est_end=est_end, cpus=cpus)


@pytest.mark.parametrize(
    ("est_end", "now", "expected"),
    [
        (50.0, 10.0, 50.0),  # within its estimate: its expected end
        (50.0, 50.0, 50.0),  # exactly at it: not overdue, ends now
        (50.0, 50.5, 51.0),  # half a second over: the first allowance, 1 s
        (50.0, 51.0, 52.0),  # at an allowance's end: the next one (2 s)
        (50.0, 80.0, 82.0),  # 30 s over: 32 s
        (50.0, 82.0, 114.0),  # 32 s over: 64 s
        # SDSC DataStar's job 10226, 1.3 M s over: planned at 2**21 s over.
        (5_701_543.0, 7_000_000.0, 5_701_543.0 + 2.0**21),
    ],
)
def test_planned_end(est_end: float, now: float, expected: float) -> None:
    assert planned_end(est_end, now) == expected


@settings(max_examples=300, deadline=None)
@given(
    est_end=st.floats(0, 1e7, allow_nan=False),
    over=st.floats(1e-3, 1e7, allow_nan=False),
    later=st.floats(0, 1, allow_nan=False),
)
def test_an_overdue_job_is_planned_ahead_by_at_most_its_overrun_and_stays_put(
    est_end: float, over: float, later: float
) -> None:
    now = est_end + over
    if now <= est_end:
        return  # the overrun vanished in rounding: not overdue
    end = planned_end(est_end, now)
    assert end > now
    # Within as long again as it has overrun (and at least the first second).
    assert end - now <= max(now - est_end, 1.0) + 1e-6 * now
    # The same instant at every event until it falls due (piecewise constant).
    between = now + later * (end - now)
    if between < end:
        assert planned_end(est_end, between) == end


def test_the_order_is_the_same_sequence_when_nothing_is_overdue() -> None:
    runs = [running("a", 20.0), running("b", 30.0)]
    assert in_planned_order(10.0, runs) is runs
    assert in_planned_order(20.0, runs) is runs


def test_overdue_jobs_are_placed_at_their_planned_ends() -> None:
    # At 100: "a" is 70 s over (planned at 30 + 128 = 158), "b" 1 s over (planned 99 + 2).
    runs = [running("a", 30.0), running("b", 99.0), running("c", 120.0), running("d", 200.0)]
    assert [r.job.id for r in in_planned_order(100.0, runs)] == ["b", "c", "a", "d"]
    assert [t for t, _ in planned_releases(100.0, runs)] == [101.0, 120.0, 158.0, 200.0]


@settings(max_examples=300, deadline=None)
@given(
    ends=st.lists(st.sampled_from([0.0, 1.0, 3.0, 5.0, 6.0, 9.0, 10.0, 13.0, 40.0]), max_size=12),
    now=st.sampled_from([0.0, 4.0, 5.0, 10.0, 20.0]),
)
def test_the_order_is_a_stable_sort_by_planned_end(ends: list[float], now: float) -> None:
    # Equal ends on purpose: ties between overdue and running jobs are where it can slip.
    runs = [running(f"r{k}", t) for k, t in enumerate(sorted(ends))]
    expected = sorted(runs, key=lambda r: planned_end(r.est_end, now))
    assert [r.job.id for r in in_planned_order(now, runs)] == [r.job.id for r in expected]
