"""Invariants of the queue policies on random instances (hypothesis).

No CPU is double-booked (the core raises on an over-booking and we also watch
the free counts), a job never starts before it is submitted, every job ends,
and EASY never starts its head job later than the reservation it gave it
(estimates exact, so the promise is checkable).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Machine
from scheduler.planning.placement import Placement, PlacementRule
from scheduler.policies.easy import EasyBackfill
from scheduler.policies.fcfs import Fcfs
from scheduler.policies.fifo_backfill import FifoBackfill
from tests.builders import job
from tests.scheduler.policies.properties import (
    Recorder,
    assert_promises_kept,
    assert_within_the_machines,
    clusters,
)
from twin.simulate import simulate


@st.composite
def instances(draw: st.DrawFn) -> tuple[list[Machine], list[Job]]:
    cluster = draw(clusters())
    total = sum(m.cpus for m in cluster)
    n_jobs = draw(st.integers(1, 14))
    submits = sorted(draw(st.lists(st.integers(0, 40), min_size=n_jobs, max_size=n_jobs)))
    jobs = []
    for i, submit in enumerate(submits):
        runtime = float(draw(st.integers(1, 30)))
        jobs.append(
            job(f"j{i}", submit=float(submit), procs=draw(st.integers(1, total)), walltime=runtime)
        )
    return cluster, jobs


POLICIES = [
    lambda rule: Fcfs(placement=Placement(rule=rule)),
    lambda rule: FifoBackfill(placement=Placement(rule=rule)),
    lambda rule: EasyBackfill(placement=Placement(rule=rule)),
]


@settings(max_examples=150, deadline=None)
@given(
    instance=instances(),
    which=st.integers(0, len(POLICIES) - 1),
    rule=st.sampled_from([PlacementRule.FASTEST, PlacementRule.BEST_FIT]),
)
def test_no_double_booking_no_early_start_all_finish(
    instance: tuple[list[Machine], list[Job]], which: int, rule: PlacementRule
) -> None:
    cluster, jobs = instance
    recorder = Recorder(POLICIES[which](rule))
    result = simulate(jobs, machines=cluster, policy=recorder)
    assert len(result.outcomes) == len(jobs)
    assert_within_the_machines(result.outcomes, cluster)


@settings(max_examples=200, deadline=None)
@given(instance=instances())
def test_easy_never_delays_its_reservation(instance: tuple[list[Machine], list[Job]]) -> None:
    cluster, jobs = instance
    recorder = Recorder(EasyBackfill())
    result = simulate(jobs, machines=cluster, policy=recorder)
    assert_promises_kept(recorder.promises, {o.job.id: o.start for o in result.outcomes})
