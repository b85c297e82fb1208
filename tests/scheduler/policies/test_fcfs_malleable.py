"""FCFS-malleable: the paper's Fig. 2 example, the readings of Algorithm 1, invariants.

Utrera et al., sec. 3.1 and Fig. 2; the rule is written out in
``scheduler.policies.fcfs_malleable``. Pure policy tests drive the
scheduler core event by event; the example and the invariants run through
the twin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Machine, Part
from model.metrics import compute_metrics
from model.outcome import Segment
from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Decisions, Policy, Resize, Snapshot, Start
from scheduler.planning.placement import Placement, PlacementRule
from scheduler.policies.easy import EasyBackfill
from scheduler.policies.fcfs import Fcfs
from scheduler.policies.fcfs_malleable import FcfsMalleable
from tests.builders import job, on
from tests.scheduler.policies.properties import assert_books_balance, clusters
from twin.simulate import simulate

TEN = [Machine(id="m", cpus=10)]
#: What a decision that shrinks, or expands, one job counts (the twin's resize figures).
SHRUNK_ONE = {"shrinks": 1}
EXPANDED_ONE = {"expands": 1}


# --- the paper's Fig. 2: 10 CPUs, six jobs arriving at 0 in this order -------

PROCS = (8, 4, 2, 8, 4, 10)
EXEC = (2, 1, 1, 2, 2, 1)


def fig2_jobs() -> list[Job]:
    """Submitted at 0, exact estimates, CPU utilisation 1: as the paper's example assumes."""
    return [
        job(f"J{i + 1}", p, runtime=t) for i, (p, t) in enumerate(zip(PROCS, EXEC, strict=True))
    ]


@pytest.mark.parametrize(
    ("policy", "starts", "ends", "response", "slowdown", "fragmentation"),
    [
        # Fig. 2(a): the paper's 4.66, 3.5 and 30 %.
        (Fcfs(), (0, 2, 2, 3, 5, 7), (2, 3, 3, 5, 7, 8), 28 / 6, 3.5, 0.30),
        # Fig. 2(b): J3 backfills beside J1; the paper's 4.33, 3.16 and 30 %.
        (EasyBackfill(), (0, 2, 0, 3, 5, 7), (2, 3, 1, 5, 7, 8), 26 / 6, 19 / 6, 0.30),
        # Fig. 2(c): the paper's 3.66 and 2.5. The paper says 0 % fragmentation,
        # but its own timeline leaves 4 CPUs idle from 4 to 5 while J6 waits,
        # which formula (2) counts: 4 / (6 * 10) = 6.7 %.
        (FcfsMalleable(), (0, 0, 0, 1, 1, 5), (4, 1, 1, 5, 5, 6), 22 / 6, 2.5, 4 / 60),
    ],
    ids=["fcfs", "easy", "fcfs-malleable"],
)
def test_fig2(  # noqa: PLR0917 (one parameter per column of the table)
    policy: Policy,
    starts: tuple[int, ...],
    ends: tuple[int, ...],
    response: float,
    slowdown: float,
    fragmentation: float,
) -> None:
    result = simulate(fig2_jobs(), machines=TEN, policy=policy)
    got = {o.job.id: (o.start, o.end) for o in result.outcomes}
    # The example's times are exact in binary floating point.
    assert got == {f"J{i + 1}": (s, e) for i, (s, e) in enumerate(zip(starts, ends, strict=True))}
    m = compute_metrics(result.outcomes, total_cpus=10, time_base="example time units")
    assert m.response_mean == pytest.approx(response)
    # Formula (1), no tau: response over the expanded run time.
    assert m.malleable_slowdown_mean == pytest.approx(slowdown)
    assert m.fragmentation == pytest.approx(fragmentation)


def test_fig2c_allocations() -> None:
    result = simulate(fig2_jobs(), machines=TEN, policy=FcfsMalleable())
    segments = {o.job.id: o.segments for o in result.outcomes}
    assert segments == {
        # J1's 8 processes on 4 CPUs (MPL 2) from the start: within one call it
        # shrinks for J2, then for J3, and starts on what is left.
        "J1": (Segment(0, 4, 4),),
        "J2": (Segment(0, 1, 4),),  # expanded
        "J3": (Segment(0, 1, 2),),  # expanded
        # Shrunk at 1, and still shrunk after J1 ends at 4: J6 waits, so no expansion.
        "J4": (Segment(1, 5, 4),),
        "J5": (Segment(1, 5, 2),),
        "J6": (Segment(5, 6, 10),),
    }


def test_fig2c_arrival_by_arrival() -> None:
    """Algorithm 1 runs at each arrival: the two readings the example fixes."""
    core = SchedulerCore(policy=FcfsMalleable(), machines=TEN)
    j1, j2, j3, j4, j5, j6 = fig2_jobs()

    core.submit(j1)
    assert core.schedule(0) == Decisions(starts=[Start(j1, on("m", 8))])
    # Shrink the oldest only as far as needed: J1 gives 2, J2 starts expanded.
    core.submit(j2)
    assert core.schedule(0) == Decisions(
        starts=[Start(j2, on("m", 4))], resizes=[Resize(j1, on("m", 6))], counters=SHRUNK_ONE
    )
    core.submit(j3)
    assert core.schedule(0) == Decisions(
        starts=[Start(j3, on("m", 2))], resizes=[Resize(j1, on("m", 4))], counters=SHRUNK_ONE
    )
    # J4 needs 4 even shrunk; J1 is at its floor and J2, J3 could free only 3:
    # it waits and nobody shrinks for nothing.
    core.submit(j4)
    assert core.schedule(0) == Decisions()
    core.submit(j5)
    core.submit(j6)
    assert core.schedule(0) == Decisions()

    # Nothing can shrink, yet J4 and J5 start shrunk on ceil(p/2) CPUs.
    core.finished("J2", 1)
    core.finished("J3", 1)
    assert core.schedule(1) == Decisions(starts=[Start(j4, on("m", 4)), Start(j5, on("m", 2))])
    # J1 ends, J6 waits: the free CPUs stay free.
    core.finished("J1", 4)
    assert core.schedule(4) == Decisions()
    assert core.free("m") == 4
    core.finished("J4", 5)
    core.finished("J5", 5)
    assert core.schedule(5) == Decisions(starts=[Start(j6, on("m", 10))])


# --- rigid jobs ---------------------------------------------------------------


def test_rigid_jobs_are_never_resized() -> None:
    core = SchedulerCore(policy=FcfsMalleable(), machines=TEN)
    # R is the oldest, so first in line to shrink if it could.
    r = job("R", 6, runtime=100, malleable=False)
    m = job("M", 4, runtime=100)
    core.submit(r)
    core.submit(m)
    assert core.schedule(0) == Decisions(starts=[Start(r, on("m", 6)), Start(m, on("m", 4))])
    # A malleable newcomer: R is skipped, M (the oldest malleable job) gives 2.
    n = job("N", 2, runtime=100)
    core.submit(n)
    assert core.schedule(1) == Decisions(
        starts=[Start(n, on("m", 2))], resizes=[Resize(m, on("m", 2))], counters=SHRUNK_ONE
    )
    # A rigid newcomer starts only expanded: nothing can give it 4 CPUs, so it
    # waits, and the small job behind it waits too (no backfilling).
    q = job("Q", 4, runtime=100, malleable=False)
    core.submit(q)
    core.submit(job("behind", runtime=100))
    assert core.schedule(2) == Decisions()
    # N ends: 2 free and M at its floor. A malleable Q would start shrunk on
    # those 2 CPUs; the rigid one keeps waiting.
    core.finished("N", 3)
    assert core.schedule(3) == Decisions()


def test_a_rigid_head_may_shrink_malleable_jobs() -> None:
    core = SchedulerCore(policy=FcfsMalleable(), machines=TEN)
    m = job("M", 10, runtime=100)
    q = job("Q", 4, runtime=100, malleable=False)
    core.submit(m)
    assert core.schedule(0) == Decisions(starts=[Start(m, on("m", 10))])
    core.submit(q)
    assert core.schedule(1) == Decisions(
        starts=[Start(q, on("m", 4))], resizes=[Resize(m, on("m", 6))], counters=SHRUNK_ONE
    )


# --- expansion ----------------------------------------------------------------


def test_expands_oldest_first_when_the_queue_empties() -> None:
    core = SchedulerCore(policy=FcfsMalleable(), machines=TEN)
    a, b, c = job("A", 8, runtime=100), job("B", 6, runtime=100), job("C", 4, runtime=10)
    for j in (a, b, c):
        core.submit(j)
    # A starts on 8, gives 4 to B (expanded on 6); C fits only shrunk and takes
    # its 2 from B, the oldest job that still has CPUs above its floor.
    assert core.schedule(0) == Decisions(
        starts=[Start(a, on("m", 4)), Start(b, on("m", 4)), Start(c, on("m", 2))]
    )
    # C ends with the queue empty: its 2 CPUs go to A, the oldest, not to B.
    core.finished("C", 20)
    assert core.schedule(20) == Decisions(resizes=[Resize(a, on("m", 6))], counters=EXPANDED_ONE)
    # A ends: B takes what it lacks (2) and the rest stays free.
    core.finished("A", 140)
    assert core.schedule(140) == Decisions(resizes=[Resize(b, on("m", 6))], counters=EXPANDED_ONE)
    assert core.free("m") == 4


def test_no_expansion_while_a_job_waits() -> None:
    core = SchedulerCore(policy=FcfsMalleable(), machines=TEN)
    a, b, wide = (
        job("A", 8, runtime=100),
        job("B", 4, runtime=10),
        job("W", 10, runtime=5, malleable=False),
    )
    for j in (a, b, wide):
        core.submit(j)
    assert core.schedule(0) == Decisions(starts=[Start(a, on("m", 6)), Start(b, on("m", 4))])
    core.finished("B", 10)
    assert core.schedule(10) == Decisions()  # W waits for 10: A stays on 6
    assert core.free("m") == 4


def test_expansion_through_the_twin() -> None:
    jobs = [job("A", 8, runtime=100), job("B", 6, runtime=100), job("C", 4, runtime=10)]
    result = simulate(jobs, machines=TEN, policy=FcfsMalleable())
    seg = {o.job.id: o.segments for o in result.outcomes}
    # C: 10 units at MPL 2 -> ends at 20. A: 10 done by 20 at pace 1/2, then
    # 90 at MPL 8/6 (pace 3/4) -> 120 more. B: MPL 1.5 (pace 2/3) until 140,
    # 93.33 done; the last 6.67 expanded.
    assert seg["C"] == (Segment(0, 20, 2),)
    (a1, a2), (b1, b2) = seg["A"], seg["B"]
    assert a1 == Segment(0, 20, 4)
    assert (a2.start, a2.cpus) == (20, 6)
    assert a2.end == pytest.approx(140)
    assert (b1.start, b1.cpus, b2.cpus) == (0, 4, 6)
    assert b1.end == b2.start == pytest.approx(140)
    assert b2.end == pytest.approx(140 + 20 / 3)
    # Formula (1): the expanded run time is the denominator, whatever the segments.
    expanded = {o.job.id: o.expanded_runtime for o in result.outcomes}
    assert expanded == {"A": 100, "B": 100, "C": 10}


# --- several machines ---------------------------------------------------------


def test_a_job_keeps_its_machines() -> None:
    machines = [Machine(id="a", cpus=4), Machine(id="b", cpus=4)]
    core = SchedulerCore(policy=FcfsMalleable(), machines=machines)
    w = job("W", 8, runtime=100)
    core.submit(w)
    assert core.schedule(0) == Decisions(starts=[Start(w, (Part("a", 4), Part("b", 4)))])
    # Shrinking takes CPUs from W's parts, never drops a machine.
    q = job("Q", 2, runtime=10)
    core.submit(q)
    assert core.schedule(1) == Decisions(
        starts=[Start(q, on("a", 2))],
        resizes=[Resize(w, (Part("a", 2), Part("b", 4)))],
        counters=SHRUNK_ONE,
    )
    core.finished("Q", 11)
    assert core.schedule(11) == Decisions(
        resizes=[Resize(w, (Part("a", 4), Part("b", 4)))], counters=EXPANDED_ONE
    )


def test_expansion_never_adds_a_machine() -> None:
    machines = [Machine(id="a", cpus=4), Machine(id="b", cpus=2)]
    core = SchedulerCore(policy=FcfsMalleable(), machines=machines)
    w, r, q = (
        job("W", 4, runtime=100),
        job("R", 2, runtime=5, malleable=False),
        job("Q", 4, runtime=50),
    )
    for j in (w, r, q):
        core.submit(j)
    # Q finds no free CPU and can have 2 of W's on a: both run at MPL 2.
    assert core.schedule(0) == Decisions(
        starts=[Start(w, on("a", 2)), Start(r, on("b", 2)), Start(q, on("a", 2))]
    )
    # R ends: b is free, but neither W nor Q holds b, so nobody expands.
    core.finished("R", 5)
    assert core.schedule(5) == Decisions()
    core.finished("Q", 100)
    assert core.schedule(100) == Decisions(resizes=[Resize(w, on("a", 4))], counters=EXPANDED_ONE)


# --- with no malleable job it is FCFS -----------------------------------------


@st.composite
def instances(draw: st.DrawFn, *, malleable: bool) -> tuple[list[Machine], list[Job]]:
    cluster = draw(clusters())
    total = sum(m.cpus for m in cluster)
    n_jobs = draw(st.integers(1, 14))
    submits = sorted(draw(st.lists(st.integers(0, 40), min_size=n_jobs, max_size=n_jobs)))
    jobs = []
    for i, submit in enumerate(submits):
        is_malleable = malleable and draw(st.booleans())
        # A malleable job may ask for more processes than the cluster has CPUs:
        # it can only ever run shrunk, never expanded.
        procs = draw(st.integers(1, 2 * total if is_malleable else total))
        runtime = float(draw(st.integers(0, 30)))
        jobs.append(
            job(
                f"j{i}",
                submit=float(submit),
                procs=procs,
                runtime=runtime,
                walltime=max(runtime, 1.0),
                malleable=is_malleable,
                cpu_util=draw(st.sampled_from([0.25, 0.5, 1.0])),
            )
        )
    return cluster, jobs


RULES = st.sampled_from([PlacementRule.FASTEST, PlacementRule.BEST_FIT])


@settings(max_examples=100, deadline=None)
@given(instance=instances(malleable=False), rule=RULES)
def test_without_malleable_jobs_it_is_fcfs(
    instance: tuple[list[Machine], list[Job]], rule: PlacementRule
) -> None:
    machines, jobs = instance
    placement = Placement(rule=rule)
    ours = simulate(jobs, machines=machines, policy=FcfsMalleable(placement=placement))
    fcfs = simulate(jobs, machines=machines, policy=Fcfs(placement=placement))
    assert sorted((o.job.id, o.start, o.end, o.parts) for o in ours.outcomes) == sorted(
        (o.job.id, o.start, o.end, o.parts) for o in fcfs.outcomes
    )


# --- invariants on random mixes -----------------------------------------------


@dataclass
class Checker:
    """Wraps the policy and checks the state it sees and the decisions it makes."""

    inner: Policy
    machines_of: dict[str, frozenset[str]] = field(default_factory=dict)
    snapshots: int = 0
    name: str = "checker"
    #: The wrapped FCFS-malleable folds jobs; the core asks the policy it is given.
    folds: ClassVar[bool] = True

    def decide(self, snapshot: Snapshot) -> Decisions:
        self.snapshots += 1
        assert_books_balance(snapshot)
        for r in snapshot.running:
            assert r.cpus == sum(p.cpus for p in r.parts)
            # MPL in [1, 2]; rigid jobs always at 1.
            assert 1 <= r.job.procs / r.cpus <= 2
            if not r.job.malleable:
                assert r.cpus == r.job.procs

        d = self.inner.decide(snapshot)

        for s in d.starts:
            assert s.job.submit <= snapshot.now
            c = sum(p.cpus for p in s.parts)
            assert s.job.min_cpus <= c <= s.job.procs
            self.machines_of[s.job.id] = frozenset(p.machine for p in s.parts)
        for z in d.resizes:
            assert z.job.malleable, f"rigid job {z.job.id} resized"
            assert 1 <= z.job.procs / sum(p.cpus for p in z.parts) <= 2
            # A job keeps the machines it started on.
            assert frozenset(p.machine for p in z.parts) == self.machines_of[z.job.id]

        # After the decisions: if the queue is empty, no free CPU sits on a
        # machine held by a shrunk job (it would have been given to it).
        if len(d.starts) == len(snapshot.queue):
            free = dict(snapshot.free)
            holding = {r.job.id: (r.job, r.parts) for r in snapshot.running}
            for z in d.resizes:
                for p in holding[z.job.id][1]:
                    free[p.machine] += p.cpus
                holding[z.job.id] = (z.job, z.parts)
                for p in z.parts:
                    free[p.machine] -= p.cpus
            for s in d.starts:
                holding[s.job.id] = (s.job, s.parts)
                for p in s.parts:
                    free[p.machine] -= p.cpus
            assert all(f >= 0 for f in free.values())
            for j, parts in holding.values():
                if sum(p.cpus for p in parts) < j.procs:
                    assert all(free[p.machine] == 0 for p in parts), (j.id, parts, free)
        return d


@settings(max_examples=200, deadline=None)
@given(instance=instances(malleable=True), rule=RULES)
def test_invariants_on_random_mixes(
    instance: tuple[list[Machine], list[Job]], rule: PlacementRule
) -> None:
    machines, jobs = instance
    checker = Checker(FcfsMalleable(placement=Placement(rule=rule)))
    result = simulate(jobs, machines=machines, policy=checker)
    assert checker.snapshots > 0
    # Every job finishes, none starts before its submission.
    assert not result.rejected
    assert sorted(o.job.id for o in result.outcomes) == sorted(j.id for j in jobs)
    for o in result.outcomes:
        assert o.start >= o.job.submit
        assert o.end >= o.start
        for s in o.segments:
            assert o.job.min_cpus <= s.cpus <= o.job.procs
    # FCFS: jobs start in arrival order (no backfilling).
    start_of = {o.job.id: o.start for o in result.outcomes}
    starts = [start_of[j.id] for j in jobs]
    assert starts == sorted(starts)
    total = sum(m.cpus for m in machines)
    m = compute_metrics(result.outcomes, total_cpus=total, time_base="virtual seconds")
    assert m.peak_busy_cpus <= total
    assert m.busy_mpl == 0.0 or 1.0 - 1e-9 <= m.busy_mpl <= 2.0 + 1e-9
