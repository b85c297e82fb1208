"""EG-EDF and the Tabu search through the twin (``twin.simulate``) and the real core:
hypothesis properties on random multi-machine instances where every job fits some
machine, a job that fits none, and a replay by hand with exact estimates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Machine
from model.outcome import JobOutcome
from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Decisions, Policy, Reservation, Snapshot, Start
from scheduler.planning.placement import sort_machines
from scheduler.policies.eg_edf import EgEdf
from scheduler.policies.tabu import EgEdfTabu
from tests.builders import job
from tests.scheduler.policies.grid_plans import plan_of
from twin.simulate import simulate

# -- properties through the twin ---------------------------------------------------


@dataclass
class Recorder:
    """Wraps a policy; checks every decision and records the plans it returned."""

    inner: Policy
    machine_of: dict[str, str] = field(default_factory=dict)
    moved: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    last: dict[str, list[str]] = field(default_factory=dict)
    name: str = "recorder"

    def decide(self, snapshot: Snapshot) -> Decisions:
        for m in snapshot.machines:
            held = sum(p.cpus for r in snapshot.running for p in r.parts if p.machine == m.id)
            assert held + snapshot.free[m.id] == m.cpus, "CPUs lost or double-booked"
        d = self.inner.decide(snapshot)
        plans: dict[str, list[str]] = {}
        items: list[Start | Reservation] = [*d.starts, *d.reservations]
        for item in items:
            assert len(item.parts) == 1, "a job spans machines"
            assert item.parts[0].cpus == item.job.procs
            mid = item.parts[0].machine
            if self.machine_of.setdefault(item.job.id, mid) != mid:
                self.moved.append(item.job.id)
        for r in d.reservations:
            assert r.start >= snapshot.now
            assert r.start >= r.job.submit
            plans.setdefault(r.parts[0].machine, []).append(r.job.id)
        for mid, ids in plans.items():
            before = self.last.get(mid, [])
            common = set(before) & set(ids)
            if [i for i in before if i in common] != [i for i in ids if i in common]:
                self.reordered.append(mid)
        self.last = plans
        return d


@st.composite
def instances(draw: st.DrawFn) -> tuple[list[Machine], list[Job]]:
    n_machines = draw(st.integers(2, 3))
    machines = sort_machines(
        [
            Machine(
                id=f"m{i}",
                cpus=draw(st.integers(1, 8)),
                speed=draw(st.sampled_from([0.5, 1.0, 2.0])),
            )
            for i in range(n_machines)
        ]
    )
    widest = max(m.cpus for m in machines)
    n_jobs = draw(st.integers(1, 16))
    submits = sorted(draw(st.lists(st.integers(0, 40), min_size=n_jobs, max_size=n_jobs)))
    jobs = []
    for i, submit in enumerate(submits):
        walltime = draw(st.integers(1, 20))
        # Estimates exact, pessimistic or (in a twin, possible) exceeded.
        runtime = draw(st.sampled_from([walltime, walltime // 2, walltime + 3]))
        deadline = draw(st.none() | st.integers(submit + 1, submit + 80))
        jobs.append(
            job(
                f"j{i:02d}",
                draw(st.integers(1, widest)),
                walltime=float(walltime),
                runtime=float(runtime),
                submit=float(submit),
                deadline=None if deadline is None else float(deadline),
            )
        )
    return machines, jobs


def check_schedule(
    outcomes: Sequence[JobOutcome], machines: Sequence[Machine], jobs: Sequence[Job]
) -> None:
    # Every job finishes, once, on exactly one machine, never before its submission.
    assert sorted(o.job.id for o in outcomes) == sorted(j.id for j in jobs)
    cpus: Mapping[str, int] = {m.id: m.cpus for m in machines}
    for o in outcomes:
        assert len(o.parts) == 1
        assert o.parts[0].cpus == o.job.procs
        assert o.start >= o.job.submit
    # No CPU double-booked: sweep every machine's starts and ends (ends first at a tie).
    for mid, limit in cpus.items():
        steps = sorted(
            [
                (o.end, -o.job.procs)
                for o in outcomes
                if o.parts[0].machine == mid and o.end > o.start
            ]
            + [
                (o.start, o.job.procs)
                for o in outcomes
                if o.parts[0].machine == mid and o.end > o.start
            ]
        )
        used = 0
        for _, delta in steps:
            used += delta
            assert used <= limit, f"{mid} over-booked"


@settings(max_examples=80, deadline=None)
@given(instances(), st.booleans())
def test_property_eg_edf_through_the_twin(
    instance: tuple[list[Machine], list[Job]], keep_order: bool
) -> None:
    machines, jobs = instance
    recorder = Recorder(EgEdf(keep_order=keep_order))
    result = simulate(jobs, machines=machines, policy=recorder)
    check_schedule(result.outcomes, machines, jobs)
    # Incremental: a planned job keeps its machine until it starts (only Tabu moves
    # jobs), and with ``keep_order`` the jobs of a machine keep their order.
    assert recorder.moved == []
    if keep_order:
        assert recorder.reordered == []


@settings(max_examples=80, deadline=None)
@given(instances())
def test_property_eg_edf_tabu_through_the_twin(instance: tuple[list[Machine], list[Job]]) -> None:
    machines, jobs = instance
    result = simulate(jobs, machines=machines, policy=Recorder(EgEdfTabu()))
    check_schedule(result.outcomes, machines, jobs)
    assert result.counters["tabu_moves"] <= result.counters["tabu_iterations"]


def test_a_job_fitting_no_machine_is_reported_stuck_by_the_twin() -> None:
    machines = [Machine(id="a", cpus=2), Machine(id="b", cpus=2)]
    with pytest.raises(RuntimeError, match="waiting forever"):
        simulate([job("wide", 3, walltime=5.0)], machines=machines, policy=EgEdf())


def test_core_replay_with_exact_estimates_starts_jobs_when_planned() -> None:
    """Drive the real core by hand: exact estimates, so every job starts at its plan."""
    machines = sort_machines([Machine(id="a", cpus=4, speed=2.0), Machine(id="b", cpus=2)])
    core = SchedulerCore(policy=EgEdf(), machines=machines)
    for j in [job("x", 4, walltime=20.0), job("y", 4, walltime=10.0), job("z", 2, walltime=6.0)]:
        core.submit(j)
    d = core.schedule(0.0)
    # x starts on a (10 s at speed 2); z in b's idle CPUs; y waits for a.
    assert {s.job.id: s.parts[0].machine for s in d.starts} == {"x": "a", "z": "b"}
    assert plan_of(d)["y"] == ("a", 10.0)
    core.finished("x", 10.0)
    d = core.schedule(10.0)
    assert [s.job.id for s in d.starts] == ["y"]
