"""Invariants of the queue policies on random instances (hypothesis).

No CPU is double-booked (the core raises on an over-booking and we also watch
the free counts), a job never starts before it is submitted, every job ends,
and EASY never starts its head job later than the reservation it gave it
(estimates exact, so the promise is checkable).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Machine
from scheduler.placement import Placement, PlacementRule
from scheduler.policies.easy import EasyBackfill
from scheduler.policies.fcfs import Fcfs
from scheduler.policies.fifo_backfill import FifoBackfill
from scheduler.snapshot import Decisions, Policy, Snapshot
from twin.simulate import simulate


@dataclass
class Recorder:
    """Wraps a policy and records what it saw and promised at every decision."""

    inner: Policy
    promises: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    name: str = "recorder"

    def decide(self, snapshot: Snapshot) -> Decisions:
        assert all(f >= 0 for f in snapshot.free.values())
        for m in snapshot.machines:
            held = sum(p.cpus for r in snapshot.running for p in r.parts if p.machine == m.id)
            assert held + snapshot.free[m.id] == m.cpus, "CPUs lost or double-booked"
        decisions = self.inner.decide(snapshot)
        for r in decisions.reservations:
            self.promises.setdefault(r.job.id, []).append((snapshot.now, r.start))
        return decisions


@st.composite
def instances(draw: st.DrawFn) -> tuple[list[Machine], list[Job]]:
    n_machines = draw(st.integers(1, 3))
    machines = [
        Machine(
            id=f"m{i}",
            cpus=draw(st.integers(1, 8)),
            speed=draw(st.sampled_from([0.5, 1.0, 2.0])),
        )
        for i in range(n_machines)
    ]
    total = sum(m.cpus for m in machines)
    n_jobs = draw(st.integers(1, 14))
    submits = sorted(draw(st.lists(st.integers(0, 40), min_size=n_jobs, max_size=n_jobs)))
    jobs = []
    for i, submit in enumerate(submits):
        runtime = float(draw(st.integers(1, 30)))
        jobs.append(
            Job(
                id=f"j{i}",
                submit=float(submit),
                procs=draw(st.integers(1, total)),
                runtime=runtime,
                walltime=runtime,
            )
        )
    return machines, jobs


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
    machines, jobs = instance
    recorder = Recorder(POLICIES[which](rule))
    result = simulate(jobs, machines=machines, policy=recorder)
    assert len(result.outcomes) == len(jobs)
    for o in result.outcomes:
        assert o.start >= o.job.submit
    # At every instant the CPUs in use on each machine fit the machine.
    for m in machines:
        points = sorted({o.start for o in result.outcomes})
        for t in points:
            used = sum(
                p.cpus
                for o in result.outcomes
                if o.start <= t < o.end
                for p in o.parts
                if p.machine == m.id
            )
            assert used <= m.cpus


@settings(max_examples=200, deadline=None)
@given(instance=instances())
def test_easy_never_delays_its_reservation(instance: tuple[list[Machine], list[Job]]) -> None:
    machines, jobs = instance
    recorder = Recorder(EasyBackfill())
    result = simulate(jobs, machines=machines, policy=recorder)
    started = {o.job.id: o.start for o in result.outcomes}
    for job_id, promises in recorder.promises.items():
        first_promise = promises[0][1]
        assert started[job_id] <= first_promise + 1e-9, (job_id, promises, started[job_id])
        for (_, earlier), (_, later) in itertools.pairwise(promises):
            assert later <= earlier + 1e-9, (job_id, promises)
