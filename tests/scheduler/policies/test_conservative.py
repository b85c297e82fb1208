"""Conservative backfilling (``scheduler.policies.conservative``).

Table-driven cases on hand-made snapshots, one case where EASY and
conservative differ (both asserted), and hypothesis properties over a tiny
discrete-event loop that drives the real ``SchedulerCore`` with exact
estimates (run time == wall time).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.allocation import pace
from model.job import Job
from model.machine import Machine, Part
from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Decisions, Policy, RunningJob
from scheduler.planning.placement import Placement, PlacementRule, sort_machines
from scheduler.policies.conservative import ConservativeBackfill
from scheduler.policies.easy import EasyBackfill
from tests.builders import job, reservation, running, snapshot

ONE = [Machine(id="m", cpus=10)]
FAST_SLOW = sort_machines([Machine(id="fast", cpus=4, speed=2.0), Machine(id="slow", cpus=4)])


def summary(d: Decisions) -> tuple[list[str], dict[str, float]]:
    return [s.job.id for s in d.starts], {r.job.id: r.start for r in d.reservations}


# -- table-driven cases -------------------------------------------------------

R8 = running(job("r", 8, walltime=10.0), est_end=10.0)  # 2 CPUs free until 10


@dataclass(frozen=True)
class Case:
    name: str
    queue: list[Job]
    starts: list[str]
    reservations: dict[str, float]
    running_jobs: list[RunningJob] = field(default_factory=lambda: [R8])
    machines: list[Machine] = field(default_factory=lambda: ONE)


CASES = [
    Case(
        "empty queue",
        queue=[],
        starts=[],
        reservations={},
    ),
    Case(
        "narrow short job fills the hole before the wide job's reservation",
        queue=[job("wide", 10, walltime=10.0), job("narrow", 2, walltime=5.0)],
        starts=["narrow"],
        reservations={"wide": 10.0},
    ),
    Case(
        "narrow job ending exactly at the reservation still fits the hole",
        queue=[job("wide", 10, walltime=10.0), job("narrow", 2, walltime=10.0)],
        starts=["narrow"],
        reservations={"wide": 10.0},
    ),
    Case(
        "narrow long job would delay the reservation: it waits for after it",
        queue=[job("wide", 10, walltime=10.0), job("narrow", 2, walltime=15.0)],
        starts=[],
        reservations={"wide": 10.0, "narrow": 20.0},
    ),
    Case(
        "every job gets a reservation, later ones around earlier ones",
        queue=[job("a", 6, walltime=10.0), job("b", 9, walltime=10.0), job("c", 4, walltime=5.0)],
        starts=[],
        # a on [10, 20) leaves 4 CPUs, enough for c there; b waits for a.
        reservations={"a": 10.0, "b": 20.0, "c": 10.0},
    ),
    Case(
        "jobs that fit now start in priority order",
        queue=[job("a", walltime=50.0), job("b", walltime=50.0), job("c", walltime=50.0)],
        starts=["a", "b"],
        reservations={"c": 10.0},
    ),
    Case(
        "idle machine: everything that fits starts, the rest is planned",
        queue=[job("a", 6, walltime=10.0), job("b", 6, walltime=10.0), job("c", 4, walltime=30.0)],
        running_jobs=[],
        starts=["a", "c"],
        reservations={"b": 10.0},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_table(case: Case) -> None:
    snap = snapshot(machines=case.machines, queue=case.queue, running=case.running_jobs)
    starts, reservations = summary(ConservativeBackfill().decide(snap))
    assert starts == case.starts
    assert reservations == case.reservations


def test_easy_starts_a_job_that_conservative_holds_back() -> None:
    """C fits now and spares the head's reservation, but would delay B's.

    10 CPUs, 2 free until 10. A (6 CPUs, 10 s) is reserved at 10 and leaves 4
    CPUs spare on [10, 20); B (9 CPUs) can only go at 20. C (2 CPUs, 25 s)
    fits now; EASY lets it run past A's start on A's spare CPUs, which holds B
    until C ends at 25. Conservative sees that [20, 25) has 1 free CPU after
    B's reservation, so C waits until B is done.
    """
    queue = [job("a", 6, walltime=10.0), job("b", 9, walltime=10.0), job("c", 2, walltime=25.0)]
    snap = snapshot(machines=ONE, queue=queue, running=[R8])
    assert summary(EasyBackfill().decide(snap)) == (["c"], {"a": 10.0})
    assert summary(ConservativeBackfill().decide(snap)) == ([], {"a": 10.0, "b": 20.0, "c": 30.0})


def test_heterogeneous_machines_use_the_pace_of_the_parts() -> None:
    """Fast (2x, 4 CPUs) busy until 5; slow (1x, 4 CPUs) idle."""
    busy = running(job("r", 4, walltime=10.0), machine="fast", est_end=5.0)
    queue = [
        job("a", 4, walltime=10.0),
        job("b", 4, walltime=10.0),
        job("c", 8, walltime=4.0),
        job("d", 2, walltime=2.0),
    ]
    d = ConservativeBackfill().decide(snapshot(machines=FAST_SLOW, queue=queue, running=[busy]))
    assert [(s.job.id, s.parts) for s in d.starts] == [("a", (Part("slow", 4),))]
    # a takes slow now rather than wait for fast (same end, 10). b gets fast at 5
    # (5 s at 2x); c needs both machines, at the slow pace, on [10, 14); d finds no
    # hole before (fast is b's, then c's) and runs 1 s on fast from 14.
    assert [(r.job.id, r.start, r.parts) for r in d.reservations] == [
        ("b", 5.0, (Part("fast", 4),)),
        ("c", 10.0, (Part("fast", 4), Part("slow", 4))),
        ("d", 14.0, (Part("fast", 2),)),
    ]


def test_a_job_that_can_never_fit_blocks_nothing() -> None:
    machines = sort_machines([Machine(id="a", cpus=4), Machine(id="b", cpus=4)])
    queue = [job("huge", 6, walltime=10.0), job("small", 2, walltime=10.0)]
    policy = ConservativeBackfill(placement=Placement(rule=PlacementRule.SINGLE))
    d = policy.decide(snapshot(machines=machines, queue=queue))
    assert summary(d) == (["small"], {})


def test_a_reservation_is_kept_as_a_promise_and_only_moves_earlier() -> None:
    queue = [job("wide", 10, walltime=10.0), job("late", 2, walltime=15.0)]
    first = ConservativeBackfill().decide(snapshot(machines=ONE, queue=queue, running=[R8]))
    promised = {r.job.id: r for r in first.reservations}
    assert {k: r.start for k, r in promised.items()} == {"wide": 10.0, "late": 20.0}

    # A newcomer of higher priority in queue order cannot take a promised slot:
    # ``early`` (arrived at 1, but placed first in the queue) goes after late's [20, 35).
    early = job("early", 10, walltime=5.0, submit=1.0)
    again = ConservativeBackfill().decide(
        snapshot(
            now=1.0,
            machines=ONE,
            queue=[early, *queue],
            running=[R8],
            reservations=promised.values(),
        )
    )
    assert summary(again) == ([], {"early": 35.0, "wide": 10.0, "late": 20.0})
    # Unchanged reservations are handed back as the very same objects.
    kept = {r.job.id: r for r in again.reservations}
    assert kept["wide"] is promised["wide"]

    # The running job ends early at 4: both promises compress to now.
    early_end = ConservativeBackfill().decide(
        snapshot(now=4.0, machines=ONE, queue=queue, reservations=promised.values())
    )
    assert summary(early_end) == (["wide"], {"late": 14.0})


def test_a_broken_promise_is_replaced_at_the_earliest_fit() -> None:
    """The running job outlives its estimate: the promise cannot be kept."""
    queue = [job("wide", 10, walltime=10.0), job("narrow", 2, walltime=5.0)]
    promised = [reservation(queue[0], start=10.0)]
    overdue = running(job("r", 8, walltime=10.0), est_end=10.0)
    d = ConservativeBackfill().decide(
        snapshot(now=12.0, machines=ONE, queue=queue, running=[overdue], reservations=promised)
    )
    # The overdue job, 2 s over, is planned to end at 10 + 4 (scheduler.planning.overdue),
    # so wide is planned at 14 (later than promised, the only way a reservation
    # moves later); narrow, which would run into it, is planned after it.
    assert summary(d) == ([], {"wide": 14.0, "narrow": 24.0})


# -- properties over a tiny discrete-event loop ---------------------------------


@dataclass
class Replay:
    starts: dict[str, float] = field(default_factory=dict)
    first_reservation: dict[str, float] = field(default_factory=dict)
    decisions: int = 0


def replay(
    policy: Policy, machines: Sequence[Machine], jobs: Sequence[Job], *, wakeups: bool
) -> Replay:
    """Drive ``SchedulerCore`` with exact estimates, checking invariants at every decision.

    With ``wakeups`` the loop also decides at the earliest future reservation,
    as a twin must when a reservation can fall between events.
    """
    core = SchedulerCore(policy=policy, machines=machines)
    speeds = {m.id: m.speed for m in machines}
    arrivals = sorted(jobs, key=lambda j: (j.submit, j.id))
    ends: list[tuple[float, str]] = []
    wake: list[float] = []
    out = Replay()
    promised: dict[str, float] = {}
    a = 0
    while a < len(arrivals) or ends or (wake and core.queue):
        now = min(
            arrivals[a].submit if a < len(arrivals) else float("inf"),
            ends[0][0] if ends else float("inf"),
            wake[0] if wake else float("inf"),
        )
        while wake and wake[0] <= now:
            heapq.heappop(wake)
        while ends and ends[0][0] <= now:
            core.finished(heapq.heappop(ends)[1], now)
        while a < len(arrivals) and arrivals[a].submit <= now:
            assert core.submit(arrivals[a]).job_id == arrivals[a].id
            a += 1
        # What the policy is handed back is exactly what it returned last time.
        assert {r.job.id: r.start for r in core.reservations} == promised
        decisions = core.schedule(now)  # raises PolicyError on a double-booked CPU
        out.decisions += 1
        for m in machines:
            assert 0 <= core.free(m.id) <= m.cpus
        for s in decisions.starts:
            j = s.job
            assert now >= j.submit, f"{j.id} started before it was submitted"
            if j.id in promised:
                assert now <= promised[j.id], f"{j.id} started after its reservation"
            out.starts[j.id] = now
            heapq.heappush(ends, (now + j.estimate_on(pace(s.parts, speeds)), j.id))
        for r in decisions.reservations:
            assert r.start >= now
            if r.job.id in promised:
                assert r.start <= promised[r.job.id], f"{r.job.id}'s reservation moved later"
            out.first_reservation.setdefault(r.job.id, r.start)
        promised = {r.job.id: r.start for r in decisions.reservations}
        if wakeups and promised:
            heapq.heappush(wake, min(promised.values()))
        assert out.decisions < 10_000, "the loop does not terminate"
    return out


@st.composite
def workloads(draw: st.DrawFn, *, several: bool) -> tuple[list[Machine], list[Job]]:
    if several:
        n_machines = draw(st.integers(1, 3))
        machines = sort_machines(
            [
                Machine(
                    id=f"m{i}",
                    cpus=draw(st.integers(1, 6)),
                    speed=draw(st.sampled_from([1.0, 1.5, 2.0, 3.0])),
                )
                for i in range(n_machines)
            ]
        )
    else:
        machines = [Machine(id="m", cpus=draw(st.integers(1, 12)))]
    total = sum(m.cpus for m in machines)
    n_jobs = draw(st.integers(1, 12))
    jobs = [
        job(
            f"j{i:02d}",
            submit=float(draw(st.integers(0, 30))),
            procs=draw(st.integers(1, total)),
            walltime=float(draw(st.integers(1, 20))),
        )
        for i in range(n_jobs)
    ]
    return machines, jobs


def check_replay(out: Replay, jobs: Sequence[Job]) -> None:
    assert set(out.starts) == {j.id for j in jobs}, "some job never started"
    for j in jobs:
        assert out.starts[j.id] >= j.submit
        # Exact estimates: a job starts no later than its first reservation.
        if j.id in out.first_reservation:
            assert out.starts[j.id] <= out.first_reservation[j.id]


@settings(max_examples=100, deadline=None)
@given(workloads(several=False))
def test_property_one_machine(workload: tuple[list[Machine], list[Job]]) -> None:
    # No wake-ups: on one machine every reservation falls on an event (an end).
    machines, jobs = workload
    check_replay(replay(ConservativeBackfill(), machines, jobs, wakeups=False), jobs)


@settings(max_examples=100, deadline=None)
@given(
    workloads(several=True),
    st.sampled_from([PlacementRule.FASTEST, PlacementRule.BEST_FIT]),
)
def test_property_heterogeneous(
    workload: tuple[list[Machine], list[Job]], rule: PlacementRule
) -> None:
    machines, jobs = workload
    policy = ConservativeBackfill(placement=Placement(rule=rule))
    check_replay(replay(policy, machines, jobs, wakeups=True), jobs)


@settings(max_examples=50, deadline=None)
@given(workloads(several=True))
def test_property_single_rule_never_blocks_on_impossible_jobs(
    workload: tuple[list[Machine], list[Job]],
) -> None:
    machines, jobs = workload
    widest = max(m.cpus for m in machines)
    possible = [j for j in jobs if j.procs <= widest]
    policy = ConservativeBackfill(placement=Placement(rule=PlacementRule.SINGLE))
    out = replay(policy, machines, jobs, wakeups=True)
    # Jobs wider than every machine never start and never get a reservation;
    # everything else still runs.
    check_replay(out, possible)
    assert not set(out.first_reservation) - {j.id for j in possible}
