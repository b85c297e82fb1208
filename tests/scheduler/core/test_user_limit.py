"""The per-user CPU limit in the core: offered, applied, deferred, and the same in the twin."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Machine, Part
from model.outcome import JobOutcome
from scheduler.core.answers import RejectCode, Rejected
from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Decisions, Reservation, Resize, Start
from scheduler.core.user_limit import merged
from scheduler.policies.registry import build_policy
from twin.simulate import simulate


def job(job_id: str, user: str, procs: int, *, submit: float = 0.0, run: float = 10.0) -> Job:
    return Job(id=job_id, submit=submit, procs=procs, walltime=run, runtime=run, user=user)


def core(limit: int | None, cpus: int = 16, policy: str = "easy") -> SchedulerCore:
    return SchedulerCore(
        policy=build_policy(policy), machines=[Machine(id="m", cpus=cpus)], max_user_cpus=limit
    )


def test_a_job_past_its_users_limit_waits_and_others_start_meanwhile() -> None:
    c = core(8)
    for j in (job("a1", "ann", 4), job("a2", "ann", 4), job("a3", "ann", 4), job("b1", "bob", 4)):
        c.submit(j)
    started = [s.job.id for s in c.schedule(0.0).starts]
    # ann's third job would take her to 12 CPUs: it waits, and bob's starts in its place.
    assert started == ["a1", "a2", "b1"]
    assert c.held_by_limit(next(j for j in c.queue if j.id == "a3"))
    assert c.load is not None
    assert c.load.cpus == {"ann": 8, "bob": 4}
    c.finished("a1", 10.0)
    assert [s.job.id for s in c.schedule(10.0).starts] == ["a3"]


def test_the_waiting_job_gets_no_reservation_and_blocks_nobody() -> None:
    c = core(4, cpus=8)
    c.submit(job("a1", "ann", 4, run=100.0))
    c.schedule(0.0)
    # ann's next job waits for her limit, not for CPUs: EASY's head is bob's.
    c.submit(job("a2", "ann", 4, submit=1.0))
    c.submit(job("b1", "bob", 4, submit=1.0))
    decisions = c.schedule(1.0)
    assert [s.job.id for s in decisions.starts] == ["b1"]
    assert all(r.job.id != "a2" for r in decisions.reservations)


def test_a_job_wider_than_the_limit_is_rejected_with_the_limit_named() -> None:
    answer = core(8).submit(job("wide", "ann", 9))
    assert isinstance(answer, Rejected)
    assert answer.code is RejectCode.CPU_LIMIT
    assert "max_user_cpus is 8" in answer.reason


def test_without_a_limit_nothing_is_tallied_or_held() -> None:
    c = core(None)
    assert c.load is None
    assert c.max_user_cpus is None
    for i in range(5):
        c.submit(job(f"a{i}", "ann", 4))
    assert len(c.schedule(0.0).starts) == 4


def test_tallies_follow_every_move() -> None:
    c = SchedulerCore(
        policy=build_policy("fcfs"), machines=[Machine(id="m", cpus=4)], track_users=True
    )
    c.submit(job("a", "ann", 2))
    c.submit(job("b", "ann", 4))
    assert c.load is not None
    assert (c.load.queued, c.load.running) == ({"ann": 2}, {})
    c.schedule(0.0)
    assert (c.load.queued, c.load.running, c.load.cpus) == ({"ann": 1}, {"ann": 1}, {"ann": 2})
    c.cancel_queued(["b"])
    c.finished("a", 5.0)
    assert (c.load.queued, c.load.running, c.load.cpus) == ({}, {}, {})


def test_rounds_of_one_instant_merge_each_job_once() -> None:
    a, b, x = job("a", "ann", 4), job("b", "bob", 4), job("x", "cid", 4)
    first = Decisions(
        starts=[Start(a, (Part("m", 4),))],
        resizes=[Resize(x, (Part("m", 3),))],
        counters={"shrinks": 1},
    )
    later = Decisions(
        starts=[Start(b, (Part("m", 4),))],
        resizes=[Resize(a, (Part("m", 2),)), Resize(x, (Part("m", 2),))],
        reservations=[Reservation(b, 5.0, (Part("m", 4),))],
        counters={"shrinks": 2},
    )
    both = merged(first, later)
    # a was started then shrunk in the same instant: it starts at its shrunk parts.
    assert [(s.job.id, s.parts) for s in both.starts] == [
        ("a", (Part("m", 2),)),
        ("b", (Part("m", 4),)),
    ]
    assert [(r.job.id, r.parts) for r in both.resizes] == [("x", (Part("m", 2),))]
    assert both.reservations == later.reservations
    assert both.counters == {"shrinks": 3}


def _peak_per_user(outcomes: list[JobOutcome]) -> dict[str, int]:
    """Each user's most processes running at once, from the twin's outcomes."""
    points: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for o in outcomes:
        points[o.job.user] += [(o.start, o.job.procs), (o.end, -o.job.procs)]
    peaks = {}
    for user, changes in points.items():
        level = peak = 0
        for _, delta in sorted(changes, key=lambda p: (p[0], p[1])):  # ends first at a tie
            level += delta
            peak = max(peak, level)
        peaks[user] = peak
    return peaks


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["ann", "bob", "cid"]),
            st.integers(1, 6),
            st.integers(0, 50),
            st.integers(1, 40),
        ),
        min_size=1,
        max_size=40,
    ),
    st.integers(6, 12),
    st.sampled_from(["fcfs", "easy", "conservative", "fcfs-malleable", "easy:fairshare"]),
)
def test_the_twin_never_lets_a_user_past_the_limit_and_runs_every_job(
    specs: list[tuple[str, int, int, int]], limit: int, policy: str
) -> None:
    jobs = sorted(
        (job(f"j{i}", u, p, submit=float(t), run=float(r)) for i, (u, p, t, r) in enumerate(specs)),
        key=lambda j: (j.submit, j.id),
    )
    result = simulate(
        jobs,
        machines=[Machine(id="m1", cpus=8), Machine(id="m2", cpus=8, speed=2.0)],
        policy=build_policy(policy),
        max_user_cpus=limit,
    )
    assert len(result.outcomes) == len(jobs)
    assert all(peak <= limit for peak in _peak_per_user(result.outcomes).values())


def test_the_twin_holds_jobs_it_would_have_started_without_the_limit() -> None:
    jobs = [job(f"a{i}", "ann", 4) for i in range(4)] + [job("b", "bob", 4, submit=1.0)]
    machines = [Machine(id="m", cpus=16)]
    free = simulate(jobs, machines=machines, policy=build_policy("fcfs"))
    held = simulate(jobs, machines=machines, policy=build_policy("fcfs"), max_user_cpus=8)
    start = {o.job.id: o.start for o in held.outcomes}
    assert {o.job.id: o.start for o in free.outcomes}["a3"] == 0.0
    assert (start["a2"], start["a3"], start["b"]) == (10.0, 10.0, 1.0)
