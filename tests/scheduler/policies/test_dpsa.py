"""DPSA (``scheduler.policies.dpsa``): the paper's Fig. 1, brute force, variants, budget.

The paper's motivating example runs through the twin beside EASY; the search
is checked against an independent brute force on hand-made snapshots (one
machine, where "does not delay the reservation" is plain arithmetic); the
variants' tie-breaks and the time bound have table cases; and the queue
policies' invariants hold for DPSA too (hypothesis, reusing
``test_backfill_properties``' instances, ``properties``' recorder and invariants).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Machine, Part
from scheduler.core.snapshot import Decisions, Policy, RunningJob, Snapshot
from scheduler.planning.placement import Placement, PlacementRule
from scheduler.policies.dpsa import DEFAULT_BUDGET, Dpsa, Variant, _search_many, _search_one
from scheduler.policies.easy import EasyBackfill
from tests.builders import job, running, snapshot
from tests.compiled_build import COMPILED
from tests.scheduler.policies.properties import (
    Recorder,
    assert_promises_kept,
    assert_within_the_machines,
)
from tests.scheduler.policies.test_backfill_properties import instances
from twin.simulate import simulate

VARIANTS: tuple[Variant, ...] = ("p", "n", "w")


def starts(policy: Policy, jobs: list[Job], machines: list[Machine]) -> dict[str, float]:
    result = simulate(jobs, machines=machines, policy=policy)
    return {o.job.id: o.start for o in result.outcomes}


def started(decisions: Decisions) -> set[str]:
    return {s.job.id for s in decisions.starts}


# -- the paper's Fig. 1 --------------------------------------------------------


def fig1_jobs() -> list[Job]:
    """Sec. III.A, Fig. 1 on 10 CPUs: at t=2 a running job ends and frees 4 CPUs.

    J1 needs all 10, so its reservation is at 7 when the other running job
    ends. J2 alone fits the 4 free CPUs (3 of them); J3 and J4 together fill
    all 4. Every waiting job ends by 7, so none delays J1.
    """
    return [
        job("R1", 6, runtime=7),  # runs until 7
        job("R2", 4, runtime=2),  # ends at 2: the decision of the figure
        job("J1", 10, runtime=2, submit=1),
        job("J2", 3, runtime=4, submit=1),
        job("J3", 2, runtime=5, submit=1),
        job("J4", 2, runtime=5, submit=1),
    ]


def test_fig1_easy_starts_j2_at_2() -> None:
    # EASY takes the highest-priority job that fits (J2); J3 and J4 wait behind J1.
    got = starts(EasyBackfill(), fig1_jobs(), [Machine(id="n", cpus=10)])
    assert got == {"R1": 0, "R2": 0, "J1": 7, "J2": 2, "J3": 9, "J4": 9}


@pytest.mark.parametrize("variant", VARIANTS)
def test_fig1_dpsa_starts_j3_and_j4_at_2(variant: Variant) -> None:
    # The right side of Fig. 1: J3 + J4 use all 4 free CPUs, J2 only 3; J1 keeps 7.
    got = starts(Dpsa(variant=variant), fig1_jobs(), [Machine(id="n", cpus=10)])
    assert got == {"R1": 0, "R2": 0, "J1": 7, "J2": 9, "J3": 2, "J4": 2}


# -- brute force ---------------------------------------------------------------


def reference(snap: Snapshot, variant: Variant) -> set[str]:
    """What DPSA must start on one machine, worked out independently of the policy.

    Lines 3-7, then the shadow time and extra CPUs by walking the releases,
    then every subset of the eligible jobs: feasible when it fits the free
    CPUs and its long jobs fit the extra ones; best by utilisation, ties to
    the subset first in search order (lexicographic over list positions).
    """
    free = snap.free["m"]
    queue = list(snap.queue)
    now = snap.now
    releases = [(r.est_end, r.cpus) for r in snap.running]
    chosen: set[str] = set()
    i = 0
    while i < len(queue) and queue[i].procs <= free:
        free -= queue[i].procs
        releases.append((now + queue[i].walltime, queue[i].procs))
        chosen.add(queue[i].id)
        i += 1
    if i == len(queue):
        return chosen
    head = queue[i]
    avail = free
    shadow, extra = float("inf"), 0
    for t in sorted({t for t, _ in releases}):
        avail += sum(c for when, c in releases if when == t)
        if avail >= head.procs:
            shadow, extra = t, avail - head.procs
            break
    eligible = [j for j in queue[i + 1 :] if j.procs <= free]
    if variant == "n":
        eligible.sort(key=lambda j: j.procs)
    elif variant == "w":
        eligible.sort(key=lambda j: -j.procs)
    best: tuple[int, tuple[int, ...]] = (0, ())
    for size in range(1, len(eligible) + 1):
        for subset in itertools.combinations(range(len(eligible)), size):
            jobs = [eligible[k] for k in subset]
            used = sum(j.procs for j in jobs)
            past = sum(j.procs for j in jobs if now + j.walltime > shadow)
            if used > free or past > extra:
                continue
            # Higher utilisation first, then the lexicographically smaller subset.
            if used > best[0] or (used == best[0] and subset < best[1]):
                best = (used, subset)
    return chosen | {eligible[k].id for k in best[1]}


@st.composite
def one_machine_snapshots(draw: st.DrawFn) -> Snapshot:
    cpus = draw(st.integers(1, 16))
    now = float(draw(st.integers(0, 5)))
    runs: list[RunningJob] = []
    left = cpus
    for i in range(draw(st.integers(0, 4))):
        if left == 0:
            break
        c = draw(st.integers(1, left))
        end = now + draw(st.integers(0, 30))
        runs.append(running(job(f"run{i}", c, walltime=max(end, 1.0)), est_end=end))
        left -= c
    queue = [
        job(f"q{k}", procs=draw(st.integers(1, cpus)), walltime=float(draw(st.integers(1, 40))))
        for k in range(draw(st.integers(1, 11)))
    ]
    return snapshot(now=now, total_cpus=cpus, running=runs, queue=queue)


@settings(max_examples=400, deadline=None)
@given(snap=one_machine_snapshots(), variant=st.sampled_from(VARIANTS))
def test_unbounded_search_equals_brute_force(snap: Snapshot, variant: Variant) -> None:
    decisions = Dpsa(variant=variant, budget=10**9).decide(snap)
    assert started(decisions) == reference(snap, variant)
    assert decisions.counters.get("dpsa_budget_hits", 0) == 0


def best_subset(
    procs: Sequence[int], long: Sequence[bool], free: int, extra: int
) -> tuple[int, ...]:
    """Brute force of OptimizeUtilization on one machine: most CPUs, then first in order."""
    best: tuple[int, tuple[int, ...]] = (0, ())
    for size in range(1, len(procs) + 1):
        for subset in itertools.combinations(range(len(procs)), size):
            used = sum(procs[k] for k in subset)
            past = sum(procs[k] for k in subset if long[k])
            if used <= free and past <= extra and (used, best[1]) > (best[0], subset):
                best = (used, subset)
    return best[1]


@settings(max_examples=500, deadline=None)
@given(
    procs=st.lists(st.integers(1, 6), min_size=1, max_size=12),
    long_bits=st.lists(st.booleans(), min_size=12, max_size=12),
    free=st.integers(1, 16),
    extra=st.integers(0, 16),
)
# Found by a mutant that left ``extra`` out of the memo's states: {0, 3} and
# {1, 3} both reach position 4 with one free CPU, but only {1, 3} (job 1 is
# short) keeps an extra CPU for the long job 4; the best subset is {1, 3, 4}.
@example(
    procs=[2, 2, 2, 4, 1],
    long_bits=[True, False, True, False, True, *[False] * 7],
    free=7,
    extra=2,
)
def test_both_search_paths_equal_brute_force(
    procs: list[int], long_bits: list[bool], free: int, extra: int
) -> None:
    # Many small, repeated sizes: the twins, the bound and the memo of states all
    # prune here. The several-machine search (placement on scratch maps) must agree
    # where both apply; a long job is one whose estimate (20) ends past the shadow (10).
    long = long_bits[: len(procs)]
    want = best_subset(procs, long, free, extra)
    fast = _search_one(procs, long, free, extra, budget=10**9, out_of_time=None)
    assert fast.chosen == want
    jobs = [
        job(f"j{k}", p, walltime=20.0 if lg else 5.0)
        for k, (p, lg) in enumerate(zip(procs, long, strict=True))
    ]
    slow = _search_many(
        jobs,
        {"m": free},
        {"m": extra},
        now=0.0,
        shadow_time=10.0,
        machines=[Machine(id="m", cpus=16)],
        speeds={"m": 1.0},
        placement=Placement(),
        budget=10**9,
        out_of_time=None,
    )
    assert slow.chosen == want
    assert slow.parts == tuple((Part("m", procs[k]),) for k in want)


# -- variants ------------------------------------------------------------------


def tie_queue() -> list[Job]:
    # 4 CPUs free until 100, when the head needs all 8: nothing may run past 100.
    return [
        job("head", 8, runtime=10),
        job("A", 4, runtime=10),
        job("B", 2, runtime=10),
        job("C", 2, runtime=10),
    ]


def test_n_prefers_more_small_jobs_w_fewer_wide_ones() -> None:
    snap = snapshot(
        total_cpus=8, running=[running(job("run0", 4, walltime=100.0))], queue=tie_queue()
    )
    # Equal utilisation (4 CPUs) either way: n starts B and C, w starts A.
    assert started(Dpsa(variant="n").decide(snap)) == {"B", "C"}
    assert started(Dpsa(variant="w").decide(snap)) == {"A"}
    # p: A has the highest priority of the three.
    assert started(Dpsa(variant="p").decide(snap)) == {"A"}


def p_queue(qos: Sequence[int] = (9, 0, 0, 0, 0)) -> list[Job]:
    sizes = [("head", 8), ("A", 2), ("B", 3), ("C", 1), ("D", 2)]
    return [job(name, p, walltime=10.0, qos=q) for (name, p), q in zip(sizes, qos, strict=True)]


@dataclass(frozen=True, slots=True, kw_only=True)
class ByQos:
    """A priority source: higher QoS first, then arrival order."""

    name: str = "qos"

    def order(self, snapshot: Snapshot) -> Sequence[Job]:
        return sorted(snapshot.queue, key=lambda j: -j.qos)


def test_p_prefers_the_subset_with_the_higher_priority_jobs() -> None:
    # Both {A, D} and {B, C} use the 4 free CPUs. In arrival order A ranks first,
    # so DPSAp picks {A, D}.
    snap = snapshot(
        total_cpus=8, running=[running(job("run0", 4, walltime=100.0))], queue=p_queue()
    )
    assert started(Dpsa(variant="p").decide(snap)) == {"A", "D"}
    # Ranks come from the priority source: with B and C on top, {B, C} wins.
    snap = snapshot(
        total_cpus=8,
        running=[running(job("run0", 4, walltime=100.0))],
        queue=p_queue(qos=(9, 0, 5, 4, 0)),
    )
    assert started(Dpsa(variant="p", priority=ByQos()).decide(snap)) == {"B", "C"}


def test_long_jobs_only_use_the_cpus_left_over_at_the_shadow_time() -> None:
    # 6 free now; the head needs 8 at 50, when 10 are free: 2 extra. A long
    # 4-CPU job would delay the head; a long 2-CPU job and a short 4-CPU one fit.
    queue = [
        job("head", 8, runtime=10),
        job("long4", 4, runtime=100),
        job("long2", 2, runtime=100),
        job("short4", 4, runtime=50),
    ]
    snap = snapshot(total_cpus=10, running=[running(job("run0", 4, walltime=50.0))], queue=queue)
    decisions = Dpsa().decide(snap)
    assert started(decisions) == {"long2", "short4"}
    (reservation,) = decisions.reservations
    assert (reservation.job.id, reservation.start) == ("head", 50.0)


def test_jobs_that_fit_start_first_and_counters_report_one_search() -> None:
    queue = [job("a", 3, runtime=10), job("head", 8, runtime=10), job("b", runtime=10)]
    decisions = Dpsa().decide(
        snapshot(total_cpus=8, running=[running(job("run0", 4, walltime=20.0))], queue=queue)
    )
    assert started(decisions) == {"a", "b"}
    assert decisions.counters == {
        "dpsa_budget_hits": 0,
        "dpsa_searches": 1,
        "dpsa_expansions": 2,  # the root, then {b}, which fills the free CPUs
    }


def test_a_later_subset_of_equal_utilisation_does_not_replace_the_first() -> None:
    # Nothing fills the 6 free CPUs; 5 is the best, first as {X}, later as {Y, Z}
    # and {Z, W}. Line 16 replaces the best only with a strictly better subset.
    queue = [
        job("head", 12, runtime=10),
        job("X", 5, runtime=10),
        job("Y", 2, runtime=10),
        job("Z", 3, runtime=10),
    ]
    queue.append(job("W", 2, runtime=10))
    snap = snapshot(total_cpus=12, running=[running(job("run0", 6, walltime=100.0))], queue=queue)
    assert started(Dpsa(variant="p").decide(snap)) == {"X"}


# -- the time bound ------------------------------------------------------------


def wide_search() -> Snapshot:
    """No subset fills the 10 free CPUs (9 is the best), so the search has to go on."""
    queue = [job("head", 20, runtime=10), *(job(f"j{p}", p, runtime=10) for p in (3, 5, 6, 9))]
    return snapshot(total_cpus=20, running=[running(job("run0", 10, walltime=100.0))], queue=queue)


def test_budget_of_one_expansion_is_hit_and_returns_the_empty_subset() -> None:
    snap = wide_search()
    unbounded = Dpsa(budget=10**9).decide(snap)
    assert unbounded.counters["dpsa_expansions"] == 6  # root, 3, 3+5, 3+6, 5, 6
    assert started(unbounded) == {"j3", "j6"}
    assert unbounded.counters["dpsa_budget_hits"] == 0
    cut = Dpsa(budget=1).decide(snap)
    assert cut.counters == {"dpsa_budget_hits": 1, "dpsa_searches": 1, "dpsa_expansions": 1}
    assert cut.starts == []
    assert [r.job.id for r in cut.reservations] == ["head"]


def test_a_small_budget_keeps_the_best_subset_found_so_far() -> None:
    cut = Dpsa(budget=2).decide(wide_search())
    assert cut.counters["dpsa_budget_hits"] == 1
    assert started(cut) == {"j3"}  # the first subset of the search, valid but not the best


class FakeClock:
    """Seconds that advance by ``step`` at every reading."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step
        self.readings = 0

    def __call__(self) -> float:
        value = self.now
        self.now += self.step
        self.readings += 1
        return value


def test_an_injected_clock_that_runs_past_the_time_budget_stops_the_search() -> None:
    clock = FakeClock(step=1.0)
    # Read at the start (0), then before each expansion: 1, 2 are in time, 3 is not.
    policy = Dpsa(clock=clock, time_budget=2.5, budget=1)
    cut = policy.decide(wide_search())
    assert cut.counters == {"dpsa_budget_hits": 1, "dpsa_searches": 1, "dpsa_expansions": 3}
    # With seconds as the bound the expansion budget (1 here) does not apply.
    assert clock.readings == 4


def test_a_clock_with_time_to_spare_lets_the_search_finish() -> None:
    policy = Dpsa(clock=FakeClock(step=0.0), time_budget=1.0)
    decisions = policy.decide(wide_search())
    assert decisions.counters["dpsa_budget_hits"] == 0
    assert decisions == Dpsa(budget=10**9).decide(wide_search())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"variant": "x"}, "variant"),
        ({"budget": 0}, "budget"),
        pytest.param(
            {"budget": True},
            "budget",
            marks=pytest.mark.skipif(COMPILED, reason="compiled, an int field stores True as 1"),
        ),
        ({"time_budget": 0.0}, "time_budget"),
        ({"time_budget": float("inf")}, "time_budget"),
        ({"clock": FakeClock(step=1.0)}, "clock"),
    ],
)
def test_bad_parameters_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Dpsa(**kwargs)  # type: ignore[arg-type]


def test_a_time_budget_without_a_clock_is_not_used() -> None:
    # The twin never injects a clock: the same configuration runs on expansions.
    decisions = Dpsa(time_budget=1e-9, budget=1).decide(wide_search())
    assert decisions.counters["dpsa_expansions"] == 1


# -- invariants over whole replays ------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    instance=instances(),
    variant=st.sampled_from(VARIANTS),
    rule=st.sampled_from([PlacementRule.FASTEST, PlacementRule.BEST_FIT]),
    budget=st.sampled_from([1, 3, DEFAULT_BUDGET]),
)
def test_no_double_booking_no_early_start_all_finish_reservation_kept(
    instance: tuple[list[Machine], list[Job]], variant: Variant, rule: PlacementRule, budget: int
) -> None:
    cluster, jobs = instance
    recorder = Recorder(Dpsa(variant=variant, placement=Placement(rule=rule), budget=budget))
    result = simulate(jobs, machines=cluster, policy=recorder)
    assert len(result.outcomes) == len(jobs)
    assert_within_the_machines(result.outcomes, cluster)
    # Estimates are exact, so the head's reservation is a promise DPSA must keep.
    assert_promises_kept(recorder.promises, {o.job.id: o.start for o in result.outcomes})
    searches = result.counters.get("dpsa_searches", 0)
    assert 0 <= result.counters.get("dpsa_budget_hits", 0) <= searches
