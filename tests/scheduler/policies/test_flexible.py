"""Flexible backfilling (EG-EDF paper, sec. 3.1): the priority's heuristics and the policy."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Machine
from model.metrics import compute_metrics
from scheduler.core.snapshot import Decisions, Policy, Snapshot
from scheduler.planning.placement import Placement, PlacementRule
from scheduler.policies.easy import EasyBackfill
from scheduler.policies.flexible import FlexibleBackfill
from scheduler.priority.flexible_score import (
    AGE_FACTOR,
    BOOST_VALUE,
    MAX_SCORE,
    MIN_SCORE,
    FlexiblePriority,
    FlexibleScore,
    K,
    deadline_score,
)
from tests.builders import job, reservation, snapshot
from tests.scheduler.policies.properties import (
    Recorder,
    assert_promises_kept,
    assert_within_the_machines,
    clusters,
)
from twin.simulate import simulate

FAST_SLOW = [Machine(id="fast", cpus=4, speed=2.0), Machine(id="slow", cpus=4, speed=1.0)]


def ids(jobs: Sequence[Job]) -> list[str]:
    return [j.id for j in jobs]


# -- the paper's constants ------------------------------------------------------------


def test_defaults_are_the_papers_hand_tuned_constants() -> None:
    src = FlexiblePriority()
    assert (AGE_FACTOR, K, MAX_SCORE, MIN_SCORE, BOOST_VALUE) == (0.01, 2.0, 20.0, 0.1, 2.0)
    assert (src.age_factor, src.k, src.max_score, src.min_score, src.boost_value) == (
        0.01,
        2.0,
        20.0,
        0.1,
        2.0,
    )
    assert src.name == "flexible"
    policy = FlexibleBackfill()
    assert policy.name == "flexible"
    assert policy.priority == FlexiblePriority()
    assert policy.placement == Placement(rule=PlacementRule.FASTEST)
    assert policy.keep_reservation


@pytest.mark.parametrize(
    ("field_name", "value"),
    [
        ("age_factor", -0.01),
        ("k", 0.0),
        ("k", float("inf")),
        ("max_score", 0.05),  # below min_score
        ("boost_value", -1.0),
        ("min_score", float("nan")),
    ],
)
def test_bad_constants_are_refused(field_name: str, value: float) -> None:
    with pytest.raises(ValueError, match=field_name):
        FlexiblePriority(**{field_name: value})  # type: ignore[arg-type]


# -- each heuristic on hand-computed values ---------------------------------------------


def test_aging_is_agefactor_times_time_in_queue() -> None:
    snap = snapshot(
        now=1100.0, queue=[job("a", submit=100.0), job("b", submit=1100.0)], machines=FAST_SLOW
    )
    scores = FlexiblePriority().scores(snap)
    assert scores["a"].aging == pytest.approx(10.0)  # 0.01 * 1000 s
    assert scores["b"].aging == 0.0


# Fastest machine speed 2, walltime 100 at ref speed 1: Nxtime = 50, Extime = now + 50,
# t_J = Deadline - 2 * 50 = Deadline - 100. Slope a = (20 - 0.1) / 100 = 0.199 per second.
@pytest.mark.parametrize(
    ("deadline", "expected", "case"),
    [
        (500.0, 0.1, "Extime 50 <= t_J 400: far from the deadline, Min"),
        (150.0, 0.1, "Extime 50 == t_J 50: window not yet open, Min"),
        (120.0, 0.199 * 30 + 0.1, "t_J 20 < Extime 50 <= 120: a * 30 + Min = 6.07"),
        (100.0, 0.199 * 50 + 0.1, "t_J 0 < Extime 50 <= 100: a * 50 + Min = 10.05"),
        (50.0, 20.0, "Extime == Deadline: the top of the line, Max"),
        (40.0, 0.1, "Extime 50 > Deadline 40: cannot make it, back to Min"),
    ],
)
def test_deadline_heuristic_three_cases(deadline: float, expected: float, case: str) -> None:
    snap = snapshot(
        now=0.0, queue=[job("j", walltime=100.0, deadline=deadline)], machines=FAST_SLOW
    )
    got = FlexiblePriority().scores(snap)["j"].deadline
    assert got == pytest.approx(expected), case
    assert deadline_score(now=0.0, nxtime=50.0, deadline=deadline) == pytest.approx(expected)


def test_deadline_slope_is_the_line_through_t_j_min_and_deadline_max() -> None:
    # Deadline 1000, Nxtime 50, k 2: t_J = 900; the window is Extime in (900, 1000],
    # i.e. now in (850, 950]. The score rises by a = 19.9 / 100 per second of now.
    src = FlexiblePriority()
    queue = [job("j", walltime=100.0, deadline=1000.0)]
    at = {
        now: src.scores(snapshot(now=now, queue=queue, machines=FAST_SLOW))["j"].deadline
        for now in (860, 900, 950)
    }
    assert at[900] - at[860] == pytest.approx(0.199 * 40)
    assert at[950] - at[900] == pytest.approx(0.199 * 50)
    assert at[950] == pytest.approx(20.0)
    assert at[860] == pytest.approx(0.1 + 0.199 * 10)


def test_nxtime_uses_the_fastest_machine_and_the_jobs_reference_speed() -> None:
    # Estimated 100 s on a machine of speed 2 (ref_speed), fastest machine speed 4:
    # Nxtime = 100 * 2 / 4 = 50, so the same deadlines as above give the same scores.
    machines = [Machine(id="quick", cpus=2, speed=4.0), Machine(id="slow", cpus=8, speed=1.0)]
    snap = snapshot(
        now=0.0, queue=[job("j", walltime=100.0, deadline=120.0, ref_speed=2.0)], machines=machines
    )
    assert FlexiblePriority().scores(snap)["j"].deadline == pytest.approx(6.07)


def test_a_job_without_deadline_scores_min() -> None:
    snap = snapshot(now=0.0, queue=[job("free")], machines=FAST_SLOW)
    assert FlexiblePriority().scores(snap)["free"].deadline == 0.1
    assert deadline_score(now=0.0, nxtime=50.0, deadline=None) == 0.1


def test_wait_minimisation_is_boost_times_minext_over_estimate() -> None:
    queue = [job("mid", walltime=100.0), job("long", walltime=400.0), job("short", walltime=50.0)]
    scores = FlexiblePriority().scores(snapshot(now=0.0, queue=queue, machines=FAST_SLOW))
    assert scores["short"].wait == pytest.approx(2.0)  # 2 * 50 / 50
    assert scores["mid"].wait == pytest.approx(1.0)  # 2 * 50 / 100
    assert scores["long"].wait == pytest.approx(0.25)  # 2 * 50 / 400


def test_priority_is_the_sum_of_the_three_heuristics() -> None:
    # now 100: aging 0.01 * 100 = 1; deadline: Nxtime 50, D 220, t_J 120 < Extime 150
    # -> 0.199 * 30 + 0.1 = 6.07; wait: minext 50 (the other job) -> 2 * 50 / 50 = 2.
    queue = [job("d", walltime=100.0, deadline=220.0), job("other", walltime=100.0, submit=50.0)]
    src = FlexiblePriority()
    scores = src.scores(snapshot(now=100.0, queue=queue, machines=FAST_SLOW))
    assert scores["d"] == pytest.approx(FlexibleScore(1.0, 6.07, 2.0, 9.07))
    assert scores["other"] == pytest.approx(FlexibleScore(0.5, 0.1, 2.0, 2.6))
    assert src.priorities(snapshot(now=100.0, queue=queue, machines=FAST_SLOW)) == {
        "d": pytest.approx(9.07),
        "other": pytest.approx(2.6),
    }


def test_other_constants_are_used() -> None:
    src = FlexiblePriority(age_factor=1.0, k=1.0, max_score=10.0, min_score=0.0, boost_value=0.0)
    # Nxtime 50, D 80, k 1: t_J = 30 < Extime 50 <= 80 -> 10 * 20 / 50 = 4.
    scores = src.scores(
        snapshot(now=0.0, queue=[job("j", walltime=100.0, deadline=80.0)], machines=FAST_SLOW)
    )
    assert scores["j"] == pytest.approx(FlexibleScore(0.0, 4.0, 0.0, 4.0))


# -- recomputed at every event ------------------------------------------------------------


def test_priority_grows_with_age_between_events() -> None:
    src = FlexiblePriority()
    queue = [job("j", submit=0.0)]
    early = src.scores(snapshot(now=10.0, queue=queue, machines=FAST_SLOW))["j"]
    late = src.scores(snapshot(now=610.0, queue=queue, machines=FAST_SLOW))["j"]
    assert late.aging - early.aging == pytest.approx(6.0)
    assert late.priority > early.priority


def test_order_changes_when_a_job_enters_then_leaves_its_deadline_window() -> None:
    # "old" waited 300 s longer (3 points of aging). "dl" has Nxtime 50 and
    # deadline 1000: window for now in (850, 950], Min again after 950.
    queue = [job("old", submit=0.0), job("dl", submit=300.0, deadline=1000.0)]
    src = FlexiblePriority()
    assert ids(src.order(snapshot(now=800.0, queue=queue, machines=FAST_SLOW))) == ["old", "dl"]
    assert ids(src.order(snapshot(now=940.0, queue=queue, machines=FAST_SLOW))) == ["dl", "old"]
    assert ids(src.order(snapshot(now=960.0, queue=queue, machines=FAST_SLOW))) == ["old", "dl"]


@dataclass
class ScoreRecorder:
    """Wraps a policy; records the flexible scores it was deciding on at every event."""

    inner: Policy
    seen: dict[str, list[tuple[float, FlexibleScore]]] = field(default_factory=dict)
    name: str = "score-recorder"

    def decide(self, snapshot: Snapshot) -> Decisions:
        for job_id, score in FlexiblePriority().scores(snapshot).items():
            self.seen.setdefault(job_id, []).append((snapshot.now, score))
        return self.inner.decide(snapshot)


def test_twin_recomputes_priorities_at_every_submission_and_completion() -> None:
    machines = [Machine(id="m", cpus=2)]
    jobs = [job(f"j{i}", 2, walltime=100.0, submit=float(10 * i)) for i in range(4)]
    recorder = ScoreRecorder(FlexibleBackfill())
    simulate(jobs, machines=machines, policy=recorder)
    # j3 waits from 30 until 300 through events at 30, 100 and 200.
    assert [now for now, _ in recorder.seen["j3"]] == [30.0, 100.0, 200.0, 300.0]
    for now, score in recorder.seen["j3"]:
        assert score.aging == pytest.approx(0.01 * (now - 30.0))
    agings = [s.aging for _, s in recorder.seen["j3"]]
    assert agings == sorted(agings)
    assert len(set(agings)) == len(agings)


# -- ordering -----------------------------------------------------------------------------


def test_order_is_by_decreasing_priority() -> None:
    queue = [
        job("long", walltime=400.0),  # 0.1 + 0.25
        job("short", walltime=50.0),  # 0.1 + 2
        job("urgent", walltime=100.0, deadline=120.0),  # 6.07 + 1
    ]
    assert ids(FlexiblePriority().order(snapshot(now=0.0, queue=queue, machines=FAST_SLOW))) == [
        "urgent",
        "short",
        "long",
    ]


def test_ties_go_to_the_earlier_submit_then_to_arrival_order() -> None:
    # At now 100: "early" = 1.0 aging + 0.1 + 2 * 100 / 200 = 2.1; "late" = 0 + 0.1 + 2 = 2.1.
    queue = [job("late", walltime=100.0, submit=100.0), job("early", walltime=200.0)]
    src = FlexiblePriority()
    snap = snapshot(now=100.0, queue=queue, machines=FAST_SLOW)
    pri = src.priorities(snap)
    assert pri["late"] == pytest.approx(pri["early"])
    assert ids(src.order(snap)) == ["early", "late"]
    twins = [job("x", submit=5.0), job("y", submit=5.0), job("w", submit=5.0)]
    assert ids(src.order(snapshot(now=9.0, queue=twins, machines=FAST_SLOW))) == ["x", "y", "w"]


# -- the policy --------------------------------------------------------------------------


def deadline_grid_jobs() -> list[Job]:
    """Two 4-CPU machines (speeds 2 and 1); a blocker holds both until 200.

    Two long jobs without deadlines arrive at 1, two short jobs with deadlines at 2.
    FIFO EASY serves them in arrival order and both deadline jobs miss; Flexible
    backfilling lifts "urgent1" (in its deadline window at 200: 9.65 points against
    the bulk jobs' 2.6) ahead of the bulk jobs.
    """
    return [
        job("block", 8, walltime=200.0),  # spans both: pace of the slow one
        job("bulk1", 4, walltime=400.0, submit=1.0),
        job("bulk2", 4, walltime=400.0, submit=1.0),
        job("urgent1", 4, walltime=100.0, submit=2.0, deadline=302.0),
        job("urgent2", 4, walltime=100.0, submit=2.0, deadline=402.0),
    ]


def test_flexible_meets_more_deadlines_than_easy_on_a_small_grid() -> None:
    jobs = deadline_grid_jobs()
    easy = simulate(jobs, machines=FAST_SLOW, policy=EasyBackfill())
    flex = simulate(jobs, machines=FAST_SLOW, policy=FlexibleBackfill())
    easy_m = compute_metrics(easy.outcomes, total_cpus=8, time_base="virtual")
    flex_m = compute_metrics(flex.outcomes, total_cpus=8, time_base="virtual")
    assert (easy_m.deadline_jobs, easy_m.deadline_missed) == (2, 2)
    assert (flex_m.deadline_jobs, flex_m.deadline_missed) == (2, 0)
    got = {o.job.id: (o.start, o.parts[0].machine) for o in flex.outcomes}
    # bulk1 held the reservation since t=1 and keeps it; urgent1 takes the slow machine,
    # urgent2 follows it there at 300, bulk2 gets the fast one when bulk1 ends.
    assert got == {
        "block": (0.0, "fast"),
        "bulk1": (200.0, "fast"),
        "urgent1": (200.0, "slow"),
        "urgent2": (300.0, "slow"),
        "bulk2": (400.0, "fast"),
    }


def test_the_reserved_job_keeps_its_reservation_through_events() -> None:
    # One 4-CPU machine busy until 100. "wide" arrives at 1 and is reserved at 100;
    # "urgent" arrives at 2 with a deadline only a start at 100 meets, and outranks
    # "wide" (22.68 against 2.09 at t=100).
    machines = [Machine(id="m", cpus=4)]
    jobs = [
        job("busy", 4, walltime=100.0),
        job("wide", 4, walltime=100.0, submit=1.0),
        job("urgent", 4, walltime=50.0, submit=2.0, deadline=152.0),
    ]

    def starts(policy: Policy) -> dict[str, float]:
        return {
            o.job.id: o.start for o in simulate(jobs, machines=machines, policy=policy).outcomes
        }

    # The paper's "maintained through events": the reservation stays with "wide".
    assert starts(FlexibleBackfill()) == {"busy": 0.0, "wide": 100.0, "urgent": 200.0}
    # The weaker reading: the reservation goes to whichever job is first now.
    assert starts(FlexibleBackfill(keep_reservation=False)) == {
        "busy": 0.0,
        "urgent": 100.0,
        "wide": 150.0,
    }


def test_reserved_job_is_put_first_in_the_order() -> None:
    queue = [job("wide", 6, walltime=400.0), job("short", 4, walltime=10.0)]
    snap = snapshot(
        now=0.0,
        queue=queue,
        reservations=[reservation(queue[0], start=50.0, parts=())],
        machines=FAST_SLOW,
    )
    # By priority alone the short job is first (wait minimisation: 2 against 0.05),
    # and the 8 CPUs hold only one of the two.
    assert ids(FlexiblePriority().order(snap)) == ["short", "wide"]
    pinned = FlexibleBackfill().decide(snap)
    assert ids([s.job for s in pinned.starts]) == ["wide"]
    unpinned = FlexibleBackfill(keep_reservation=False).decide(snap)
    assert ids([s.job for s in unpinned.starts]) == ["short"]


def test_single_placement_is_a_field_away() -> None:
    # The paper never spans machines; ``fastest`` spans the fastest level if it must.
    machines = [
        Machine(id="f1", cpus=2, speed=2.0),
        Machine(id="f2", cpus=2, speed=2.0),
        Machine(id="s", cpus=4, speed=1.0),
    ]
    jobs = [job("j", 4, walltime=100.0)]
    spans = simulate(jobs, machines=machines, policy=FlexibleBackfill()).outcomes[0]
    assert {p.machine for p in spans.parts} == {"f1", "f2"}
    single = FlexibleBackfill(placement=Placement(rule=PlacementRule.SINGLE))
    one = simulate(jobs, machines=machines, policy=single).outcomes[0]
    assert [p.machine for p in one.parts] == ["s"]


# -- properties ----------------------------------------------------------------------------


@st.composite
def queues(draw: st.DrawFn) -> Snapshot:
    n = draw(st.integers(0, 12))
    queue = []
    for i in range(n):
        submit = float(draw(st.integers(0, 1000)))
        walltime = float(draw(st.integers(1, 500)))
        deadline = draw(st.none() | st.integers(0, 3000).map(float))
        queue.append(
            job(
                f"j{i}",
                submit=submit,
                walltime=walltime,
                deadline=deadline,
                ref_speed=draw(st.sampled_from([0.5, 1.0, 2.0])),
            )
        )
    speeds = draw(st.lists(st.sampled_from([0.5, 1.0, 3.0]), min_size=1, max_size=3))
    machines = [Machine(id=f"m{i}", cpus=4, speed=s) for i, s in enumerate(speeds)]
    now = float(draw(st.integers(0, 2000)))
    return snapshot(now=now, queue=queue, machines=machines)


@settings(max_examples=300, deadline=None)
@given(snap=queues())
def test_order_is_a_permutation_of_the_queue_sorted_by_priority(snap: Snapshot) -> None:
    src = FlexiblePriority()
    ranked = src.order(snap)
    assert sorted(ids(ranked)) == sorted(ids(snap.queue))
    pri = src.priorities(snap)
    for a, b in itertools.pairwise(ranked):
        assert pri[a.id] >= pri[b.id] - 1e-9
    scores = src.scores(snap)
    best = max(m.speed for m in snap.machines)
    for j in snap.queue:
        s = scores[j.id]
        # order() sorts on the inlined hot path; scores() goes term by term.
        assert s.priority == pri[j.id]
        assert src.min_score <= s.deadline <= src.max_score
        assert 0 < s.wait <= src.boost_value
        assert s.deadline == pytest.approx(
            deadline_score(now=snap.now, nxtime=j.estimate_on(best), deadline=j.deadline)
        )


@st.composite
def instances(draw: st.DrawFn) -> tuple[list[Machine], list[Job]]:
    cluster = draw(clusters(cpus=6, speeds=(1.0, 2.0)))
    total = sum(m.cpus for m in cluster)
    n = draw(st.integers(1, 12))
    submits = sorted(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)))
    jobs = []
    for i, submit in enumerate(submits):
        run = float(draw(st.integers(1, 30)))
        slack = draw(st.none() | st.integers(1, 60))
        jobs.append(
            job(
                f"j{i}",
                submit=float(submit),
                procs=draw(st.integers(1, total)),
                walltime=run,
                deadline=None if slack is None else float(submit + slack),
            )
        )
    return cluster, jobs


@settings(max_examples=150, deadline=None)
@given(instance=instances())
def test_flexible_runs_every_job_and_never_delays_a_kept_reservation(
    instance: tuple[list[Machine], list[Job]],
) -> None:
    cluster, jobs = instance
    recorder = Recorder(FlexibleBackfill())
    result = simulate(jobs, machines=cluster, policy=recorder)
    assert len(result.outcomes) == len(jobs)
    assert_within_the_machines(result.outcomes, cluster)
    # Estimates are exact, so a reservation kept through events is a promise kept.
    assert_promises_kept(recorder.promises, {o.job.id: o.start for o in result.outcomes})
