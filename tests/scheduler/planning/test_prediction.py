"""Predicted starts (``scheduler.planning.prediction``): what each policy's prediction is."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Machine, Part
from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import RunningJob, Snapshot
from scheduler.planning.overdue import planned_end
from scheduler.planning.prediction import Meaning, PlanRule, plan_rule, planned_running, predict
from scheduler.policies.conservative import ConservativeBackfill
from scheduler.policies.easy import EasyBackfill
from scheduler.policies.fcfs import Fcfs
from scheduler.policies.registry import POLICIES, build_policy
from tests.builders import job
from tests.scheduler.policies.properties import clusters
from twin.simulate import simulate


def core_with(policy: object, machines: list[Machine], jobs: list[Job]) -> SchedulerCore:
    core = SchedulerCore(policy=policy, machines=machines)  # type: ignore[arg-type]
    for j in jobs:
        core.submit(j)
    core.schedule(0.0)
    return core


def test_every_registered_policy_states_its_rule() -> None:
    rules = {name: plan_rule(build_policy(name)) for name in POLICIES}
    assert rules["conservative"] is PlanRule.RESERVATIONS
    assert rules["eg-edf"] is rules["eg-edf-tabu"] is PlanRule.RESERVATIONS
    assert rules["fcfs"] is rules["fcfs-malleable"] is PlanRule.IN_ORDER
    for name in ("easy", "dpsa-p", "dpsa-n", "dpsa-w", "flexible", "fifo-backfill"):
        assert rules[name] is PlanRule.BACKFILL


def test_conservative_prediction_is_its_reservations() -> None:
    machines = [Machine(id="m", cpus=4)]
    jobs = [
        job("a", 4, runtime=10.0),
        job("b", 2, runtime=5.0),
        job("c", 3, runtime=8.0),
        job("d", 1, runtime=2.0),
    ]
    policy = ConservativeBackfill()
    core = core_with(policy, machines, jobs)
    plan = predict(core.snapshot(0.0), policy)
    held = {r.job.id: r for r in core.reservations}
    assert set(plan.queued) == set(held) == {"b", "c", "d"}
    for job_id, planned in plan.queued.items():
        assert planned.meaning is Meaning.RESERVED
        assert (planned.start, planned.parts) == (held[job_id].start, held[job_id].parts)
    assert plan.queued["b"].end == plan.queued["b"].start + 5.0


def test_easy_reserves_the_head_and_lays_the_rest_around_it() -> None:
    # 4 CPUs: a runs 10 s on 3; b (4 CPUs) is the head, reserved at 10; c (2 CPUs, 20 s)
    # cannot backfill (it would delay b) and is laid after b; d (1 CPU, 5 s) backfills.
    machines = [Machine(id="m", cpus=4)]
    jobs = [
        job("a", 3, runtime=10.0),
        job("b", 4, runtime=5.0),
        job("c", 2, runtime=20.0),
        job("d", 1, runtime=5.0),
    ]
    policy = EasyBackfill()
    core = core_with(policy, machines, jobs)
    assert [r.job.id for r in core.running] == ["d", "a"]
    plan = predict(core.snapshot(0.0), policy)
    assert plan.queued["b"].meaning is Meaning.RESERVED
    assert plan.queued["b"].start == 10.0
    assert plan.queued["c"].meaning is Meaning.ESTIMATED
    assert (plan.queued["c"].start, plan.queued["c"].end) == (15.0, 35.0)
    assert [j.id for j in plan.order] == ["b", "c"]


def test_in_order_no_job_is_planned_before_the_one_ahead() -> None:
    # FCFS: c fits the hole beside a at once, but waits behind b.
    machines = [Machine(id="m", cpus=4)]
    jobs = [job("a", 3, runtime=10.0), job("b", 4, runtime=5.0), job("c", 1, runtime=1.0)]
    policy = Fcfs()
    core = core_with(policy, machines, jobs)
    plan = predict(core.snapshot(0.0), policy)
    assert plan.rule is PlanRule.IN_ORDER
    assert plan.start_of("b") == 10.0
    # Not at 0 beside a (the hole it fits), not before b: after b, which takes all 4.
    assert plan.start_of("c") == 15.0


def test_a_running_job_past_its_estimate_is_planned_by_the_overdue_rule() -> None:
    machines = [Machine(id="m", cpus=4)]
    late = Job(id="late", submit=0.0, procs=4, walltime=10.0, runtime=100.0)
    run = RunningJob(job=late, parts=(Part("m", 4),), start=0.0, est_end=10.0, cpus=4)
    waiting = job("w", 2, runtime=5.0)
    snap = Snapshot(
        now=40.0,
        machines=machines,
        free={"m": 0},
        running=[run],
        queue=[waiting],
        usage=SchedulerCore(policy=EasyBackfill(), machines=machines).usage,
        total_cpus=4,
        speeds={"m": 1.0},
        reservations={},
    )
    plan = predict(snap, EasyBackfill())
    # 30 s over: the next doubling allowance is 32 s past the estimate, at 42, not 40.
    assert plan.start_of("w") == planned_end(10.0, 40.0) == 42.0
    assert planned_running(snap)["late"].end == 42.0


def test_cordoned_machines_take_no_part_in_the_plan() -> None:
    machines = [Machine(id="a", cpus=4), Machine(id="b", cpus=4)]
    jobs = [job("x", 4, runtime=10.0), job("y", 2, runtime=5.0), job("wide", 6, runtime=5.0)]
    policy = EasyBackfill()
    core = SchedulerCore(policy=policy, machines=machines, cordoned={"b"})
    for j in jobs:
        core.submit(j)
    core.schedule(0.0)
    plan = predict(core.snapshot(0.0), policy, cordoned={"b"})
    assert [m.id for m in plan.machines] == ["a"]
    assert all(p.machine == "a" for planned in plan.queued.values() for p in planned.parts)
    assert "wide" not in plan.queued  # it fits only with b's CPUs


@st.composite
def all_at_once(draw: st.DrawFn) -> tuple[list[Machine], list[Job]]:
    """Jobs with exact estimates, all submitted at 0: no later arrival can change a plan."""
    cluster = draw(clusters())
    total = sum(m.cpus for m in cluster)
    n = draw(st.integers(1, 12))
    jobs = []
    for i in range(n):
        runtime = float(draw(st.integers(1, 30)))
        procs = draw(st.integers(1, total))
        jobs.append(Job(id=f"j{i}", submit=0.0, procs=procs, runtime=runtime, walltime=runtime))
    return cluster, jobs


@settings(max_examples=60, deadline=None)
@given(instance=all_at_once(), name=st.sampled_from(["conservative", "fcfs"]))
def test_with_exact_estimates_the_plan_is_what_happens(
    instance: tuple[list[Machine], list[Job]], name: str
) -> None:
    """Conservative's and FCFS's predictions at submission are the real starts when
    estimates are exact and nothing arrives later (on one machine: on several, a
    placement rule asked afresh may pick other machines than a plan that holds)."""
    machines, jobs = instance
    if len(machines) > 1:
        machines = machines[:1]
        jobs = [j for j in jobs if j.procs <= machines[0].cpus] or [
            Job(id="j0", submit=0.0, procs=1, runtime=1.0, walltime=1.0)
        ]
    result = simulate(jobs, machines=machines, policy=build_policy(name), predict=True)
    assert result.forecasts is not None
    predicted = result.forecasts.at_submit
    for o in result.outcomes:
        assert predicted[o.job.id] == pytest.approx(o.start, abs=1e-9), o.job.id


@settings(max_examples=60, deadline=None)
@given(instance=all_at_once())
def test_easy_starts_its_head_no_later_than_predicted(
    instance: tuple[list[Machine], list[Job]],
) -> None:
    machines, jobs = instance
    policy = EasyBackfill()
    core = core_with(policy, machines, jobs)
    plan = predict(core.snapshot(0.0), policy)
    reserved = [p for p in plan.queued.values() if p.meaning is Meaning.RESERVED]
    assert len(reserved) <= 1
    result = simulate(jobs, machines=machines, policy=policy)
    started = {o.job.id: o.start for o in result.outcomes}
    for p in reserved:
        assert started[p.job.id] <= p.start + 1e-9


def _random_jobs(seed: int, n: int, cpus: int) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(1 / 20)
        runtime = rng.uniform(1, 400)
        jobs.append(
            Job(
                id=f"j{i}",
                submit=round(t),
                procs=rng.randint(1, cpus),
                runtime=runtime,
                walltime=runtime * rng.choice([1.0, 1.5, 3.0]),
                user=f"u{rng.randint(0, 4)}",
            )
        )
    return jobs


@pytest.mark.parametrize(
    "spec",
    [
        "easy",
        "easy:fairshare",
        "easy:multifactor",
        "conservative",
        "fcfs",
        "fifo-backfill",
        "dpsa-p",
        "flexible",
        "fcfs-malleable",
        "eg-edf",
    ],
)
def test_predicting_changes_no_schedule(spec: str) -> None:
    machines = [Machine(id="m0", cpus=16, speed=1.0), Machine(id="m1", cpus=16, speed=2.0)]
    jobs = _random_jobs(7, 300, 16)
    off = simulate(jobs, machines=machines, policy=build_policy(spec))
    on = simulate(jobs, machines=machines, policy=build_policy(spec), predict=True)
    key = [(o.job.id, o.start, o.end, o.parts) for o in off.outcomes]
    assert key == [(o.job.id, o.start, o.end, o.parts) for o in on.outcomes]
    assert on.forecasts is not None
    assert off.forecasts is None
    assert set(on.forecasts.at_submit) == {j.id for j in jobs}
