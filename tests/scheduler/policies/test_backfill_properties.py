"""Invariants of the queue policies on random instances (hypothesis).

No CPU is double-booked (the core raises on an over-booking and we also watch
the free counts), a job never starts before it is submitted, every job ends,
and EASY never starts its head job later than the reservation it gave it
(estimates exact, so the promise is checkable).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Machine
from scheduler.core.snapshot import Decisions, SnapshotView
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


@dataclass(frozen=True, slots=True)
class GeneralPath:
    """EASY forced down its general path, whatever the cluster."""

    idle_on_empty_queue: ClassVar[bool] = True
    easy: EasyBackfill
    name: str = "easy-general"

    def decide(self, snapshot: SnapshotView) -> Decisions:
        return self.easy.decide_general(snapshot)


@st.composite
def one_machine(draw: st.DrawFn) -> tuple[Machine, list[Job]]:
    """One machine and jobs whose wall times may overestimate their run times, so
    that reservations move and an earlier promise is kept or dropped."""
    machine = Machine(id="m", cpus=draw(st.integers(1, 16)))
    n_jobs = draw(st.integers(1, 20))
    submits = sorted(draw(st.lists(st.integers(0, 40), min_size=n_jobs, max_size=n_jobs)))
    jobs = []
    for i, submit in enumerate(submits):
        runtime = float(draw(st.integers(1, 30)))
        jobs.append(
            Job(
                id=f"j{i}",
                submit=float(submit),
                procs=draw(st.integers(1, machine.cpus)),
                runtime=runtime,
                walltime=runtime + draw(st.integers(0, 30)),
            )
        )
    return machine, jobs


@settings(max_examples=200, deadline=None)
@given(instance=one_machine())
def test_easy_on_one_machine_decides_as_its_general_path(
    instance: tuple[Machine, list[Job]],
) -> None:
    # decide_one_machine is the general rule in integers (scheduler/policies/easy.py):
    # the same starts and the same promises, event by event.
    machine, jobs = instance
    one, general = Recorder(EasyBackfill()), Recorder(GeneralPath(EasyBackfill()))
    a = simulate(jobs, machines=[machine], policy=one)
    b = simulate(jobs, machines=[machine], policy=general)
    assert [(o.job.id, o.start, o.parts) for o in a.outcomes] == [
        (o.job.id, o.start, o.parts) for o in b.outcomes
    ]
    assert one.promises == general.promises
