"""FCFS, FIFO with backfill and EASY on the papers' worked examples, through the twin."""

from __future__ import annotations

import pytest

from model.job import Job
from model.machine import Machine
from scheduler.core.core import Accepted, SchedulerCore
from scheduler.core.snapshot import Policy
from scheduler.planning.placement import Placement, PlacementRule
from scheduler.policies.easy import EasyBackfill
from scheduler.policies.fcfs import Fcfs
from scheduler.policies.fifo_backfill import FifoBackfill
from tests.builders import job
from twin.simulate import simulate

HOUR = 3600.0


def starts(policy: Policy, jobs: list[Job], machines: list[Machine]) -> dict[str, float]:
    result = simulate(jobs, machines=machines, policy=policy)
    return {o.job.id: o.start for o in result.outcomes}


def fig2_jobs() -> list[Job]:
    """FCFS-malleable paper, Fig. 2: six jobs at 0, in order, on 10 CPUs."""
    procs = [8, 4, 2, 8, 4, 10]
    times = [2, 1, 1, 2, 2, 1]
    return [
        job(f"J{i + 1}", p, runtime=t) for i, (p, t) in enumerate(zip(procs, times, strict=True))
    ]


TEN = [Machine(id="m", cpus=10)]


def test_fcfs_fig2a() -> None:
    assert starts(Fcfs(), fig2_jobs(), TEN) == {
        "J1": 0,
        "J2": 2,
        "J3": 2,
        "J4": 3,
        "J5": 5,
        "J6": 7,
    }


def test_easy_fig2b() -> None:
    # J3 backfills beside J1 without delaying J2's reservation at 2.
    assert starts(EasyBackfill(), fig2_jobs(), TEN) == {
        "J1": 0,
        "J2": 2,
        "J3": 0,
        "J4": 3,
        "J5": 5,
        "J6": 7,
    }


def mix() -> list[Job]:
    """The scheduling-algorithms text's "typical" job mix on four nodes."""
    return [
        job("123", 2, runtime=2 * HOUR),
        job("124", 2, runtime=2 * HOUR),
        job("125", runtime=1 * HOUR),
        job("126", 4, runtime=4 * HOUR),
    ]


def test_fifo_backfill_text_example_seven_hours_89_percent() -> None:
    result = simulate(mix(), machines=[Machine(id="n", cpus=4)], policy=FifoBackfill())
    end = max(o.end for o in result.outcomes)
    busy = sum(o.run * o.max_cpus for o in result.outcomes)
    assert end == 7 * HOUR
    assert busy / (4 * end) == pytest.approx(0.89, abs=0.005)


def test_fifo_backfill_has_no_reservation_easy_does() -> None:
    # A wide job at the head: FIFO-backfill lets a long narrow job overtake it for
    # good, EASY does not start the narrow job because it would delay the head.
    jobs = [
        job("run", 2, runtime=10),
        job("wide", 4, runtime=5, submit=1),
        job("narrow", runtime=100, submit=2),
    ]
    four = [Machine(id="n", cpus=4)]
    assert starts(FifoBackfill(), jobs, four)["narrow"] == 2
    assert starts(FifoBackfill(), jobs, four)["wide"] == 102
    assert starts(EasyBackfill(), jobs, four) == {"run": 0, "wide": 10, "narrow": 15}


def test_easy_backfills_into_extra_cpus_past_the_shadow() -> None:
    # Head needs 3 of 4 CPUs at t=10; one CPU is extra, so a long 1-CPU job may run.
    jobs = [
        job("a", 3, runtime=10),
        job("head", 3, runtime=5, submit=1),
        job("long", runtime=100, submit=2),
    ]
    got = starts(EasyBackfill(), jobs, [Machine(id="n", cpus=4)])
    assert got == {"a": 0, "head": 10, "long": 2}


def test_dpsa_fig1_easy_starts_j2_first() -> None:
    # The DPSA paper's Fig. 1 situation, EASY side: at t=2 EASY reserves J1 and starts
    # J2 because it is the highest-priority job that fits (DPSA would pick J3+J4).
    machines = [Machine(id="n", cpus=10)]
    jobs = [
        job("R1", 6, runtime=7),  # running until 7
        job("R2", 4, runtime=2),  # ends at 2 and triggers the decision
        job("J1", 10, runtime=3, submit=1),
        job("J2", 2, runtime=4, submit=1),
        job("J3", 2, runtime=5, submit=1),
        job("J4", 2, runtime=5, submit=1),
    ]
    got = starts(EasyBackfill(), jobs, machines)
    assert got["J2"] == 2
    assert got["J1"] == 7


def test_heterogeneous_job_runs_at_its_slowest_parts_pace() -> None:
    machines = [Machine(id="fast", cpus=4, speed=2.0), Machine(id="slow", cpus=4, speed=1.0)]
    result = simulate([job("wide", 6, runtime=100)], machines=machines, policy=Fcfs())
    (o,) = result.outcomes
    assert {p.machine for p in o.parts} == {"fast", "slow"}
    assert o.run == 100.0  # speed 1 of the slow part, not 2


def test_fastest_placement_prefers_a_single_fast_machine() -> None:
    machines = [Machine(id="fast", cpus=4, speed=2.0), Machine(id="slow", cpus=8, speed=1.0)]
    result = simulate([job("j", 4, runtime=100)], machines=machines, policy=Fcfs())
    (o,) = result.outcomes
    assert [p.machine for p in o.parts] == ["fast"]
    assert o.run == 50.0


def test_single_placement_never_spans_and_wide_jobs_do_not_block() -> None:
    machines = [Machine(id="a", cpus=4), Machine(id="b", cpus=4)]
    single = Placement(rule=PlacementRule.SINGLE)
    # "wide" needs 6 CPUs: the cluster has 8, so it is accepted, but no single
    # machine has 6, so under this rule it can never start. The jobs behind it must.
    jobs = [job("wide", 6, runtime=10), job("long", 4, runtime=1000), job("small", 2, runtime=10)]

    def decide(policy: Policy) -> tuple[dict[str, tuple[str, ...]], list[str]]:
        core = SchedulerCore(policy=policy, machines=machines)
        for j in jobs:
            assert isinstance(core.submit(j), Accepted)
        d = core.schedule(0.0)
        placed = {s.job.id: tuple(p.machine for p in s.parts) for s in d.starts}
        return placed, [r.job.id for r in d.reservations]

    placed, reserved = decide(EasyBackfill(placement=single))
    assert placed == {"long": ("a",), "small": ("b",)}  # one machine each, nothing spans
    assert reserved == []  # no promise to a job that can never run
    # The same jobs under FCFS, which stops at a head that does not fit: this is
    # what "blocking" looks like, so the assertion above can fail.
    assert decide(Fcfs(placement=single)) == ({}, [])
