"""EG-EDF's rule (``scheduler.policies.eg_edf``; EG-EDF paper, sec. 3.2 and eq. (1)).

Hand-made grids of two or three machines of different CPUs and speeds
(``tests.scheduler.policies.grid_plans``): equation (1), the EDF key, a new job into
the earliest gap, and by EDF when there is none.
"""

from __future__ import annotations

import pytest

from model.machine import Machine, Part
from scheduler.policies.eg_edf import MIN_MAKESPAN, EgEdf, edf_key, weight
from tests.builders import job, reservation, running, snapshot
from tests.scheduler.policies.grid_plans import GRID, order_on, plan_of

# -- equation (1) and the EDF key ------------------------------------------------


@pytest.mark.parametrize(
    ("makespan_old", "makespan_new", "nondelayed_old", "nondelayed_new", "expected"),
    [
        # Both terms as printed in the paper.
        (100.0, 120.0, 4, 5, -0.2 + 0.25),
        (100.0, 100.0, 4, 4, 0.0),
        (200.0, 150.0, 2, 2, 0.25),
        # Zero denominators: makespan_old below one second counts as one second,
        # nondelayed_old = 0 as one job; the term is the plain difference.
        (0.0, 30.0, 0, 1, -30.0 + 1.0),
        (0.5, 0.5, 0, 0, 0.0),
    ],
)
def test_weight_is_equation_1(
    makespan_old: float,
    makespan_new: float,
    nondelayed_old: int,
    nondelayed_new: int,
    expected: float,
) -> None:
    w = weight(
        makespan_old=makespan_old,
        makespan_new=makespan_new,
        nondelayed_old=nondelayed_old,
        nondelayed_new=nondelayed_new,
    )
    assert w == pytest.approx(expected)
    assert MIN_MAKESPAN == 1.0


def test_edf_key_puts_jobs_without_deadline_last_in_arrival_order() -> None:
    jobs = [
        job("late-no-deadline", walltime=1.0, submit=5.0),
        job("d300", walltime=1.0, deadline=300.0),
        job("early-no-deadline", walltime=1.0, submit=1.0),
        job("d100", walltime=1.0, submit=9.0, deadline=100.0),
    ]
    assert [j.id for j in sorted(jobs, key=edf_key)] == [
        "d100",
        "d300",
        "early-no-deadline",
        "late-no-deadline",
    ]


# -- the earliest gap -------------------------------------------------------------


# fast: 4 CPUs at speed 2; big: 8 CPUs; small: 2 CPUs (both speed 1).
def test_a_new_job_fills_the_earliest_gap_instead_of_being_appended() -> None:
    """big's plan: r (6 CPUs) until 10, P1 (8 CPUs) on [10, 20), P2 (6 CPUs) on [20, 60).

    That leaves 2 idle CPUs of big over [20, 60), inside its plan. J (2 CPUs,
    30 s) fits there at 20. fast and small are busy until 100 and 200 with
    nothing planned: their first fit is their plan's end, which is not a gap.
    So S = 1 and J goes to big at 20, not at the end of any plan (60 on big,
    100 on fast, 200 on small), and nothing planned moves.
    """
    p1, p2 = job("P1", 8, walltime=10.0), job("P2", 6, walltime=40.0)
    j = job("J", 2, walltime=30.0, submit=1.0)
    snap = snapshot(
        now=1.0,
        machines=GRID,
        queue=[p1, p2, j],
        running=[
            running(job("r-fast", 4, walltime=100.0), machine="fast", est_end=100.0),
            running(job("r-big", 6, walltime=10.0), machine="big", est_end=10.0),
            running(job("r-small", 2, walltime=200.0), machine="small", est_end=200.0),
        ],
        reservations=[
            reservation(p1, start=10.0, machine="big"),
            reservation(p2, start=20.0, machine="big"),
        ],
    )
    d = EgEdf().decide(snap)
    assert d.starts == []
    assert order_on(d, "big") == [("P1", 10.0), ("P2", 20.0), ("J", 20.0)]
    assert plan_of(d) == {"P1": ("big", 10.0), "P2": ("big", 20.0), "J": ("big", 20.0)}
    assert d.counters == {"eg_edf_gap_insertions": 1, "eg_edf_edf_insertions": 0}


def test_idle_cpus_now_are_a_gap_and_the_job_starts() -> None:
    """An idle machine counts as a gap at now (S = 2 here: small now, big at 20)."""
    p1, p2 = job("P1", 8, walltime=10.0), job("P2", 6, walltime=40.0)
    j = job("J", 2, walltime=30.0)
    snap = snapshot(
        machines=GRID,
        queue=[p1, p2, j],
        running=[
            running(job("r-fast", 4, walltime=100.0), machine="fast", est_end=100.0),
            running(job("r-big", 6, walltime=10.0), machine="big", est_end=10.0),
        ],
        reservations=[
            reservation(p1, start=10.0, machine="big"),
            reservation(p2, start=20.0, machine="big"),
        ],
    )
    d = EgEdf().decide(snap)
    # Equation (1): both gaps leave the makespan (60) alone; small ends J first.
    assert [(s.job.id, s.parts) for s in d.starts] == [("J", (Part("small", 2),))]


def test_equation_1_picks_the_gap_where_the_deadline_is_met() -> None:
    """Two gaps (S = 2): slow has 2 idle CPUs from now, fast 2 CPUs over [10, 30).

    fast is busy until 10, then Q (2 CPUs) runs on [10, 30) and P (4 CPUs) from
    30. J (2 CPUs, 40 s at speed 1) would start first on slow, at 0, but end at
    40, after its deadline 30; on fast it runs 20 s, [10, 30), and meets it.
    Neither moves the makespan (slow's plan ends at 100), so equation (1) is
    decided by its deadline term: 1 on fast against 0 on slow.
    """
    machines = [Machine(id="slow", cpus=4), Machine(id="fast", cpus=4, speed=2.0)]
    q, p = job("Q", 2, walltime=40.0), job("P", 4, walltime=100.0)
    j = job("J", 2, walltime=40.0, deadline=30.0)
    snap = snapshot(
        machines=machines,
        queue=[q, p, j],
        running=[
            running(job("r-slow", 2, walltime=100.0), machine="slow", est_end=100.0),
            running(job("r-fast", 4, walltime=10.0), machine="fast", est_end=10.0),
        ],
        reservations=[
            reservation(q, start=10.0, machine="fast"),
            reservation(p, start=30.0, machine="fast"),
        ],
    )
    d = EgEdf().decide(snap)
    assert plan_of(d) == {"Q": ("fast", 10.0), "J": ("fast", 10.0), "P": ("fast", 30.0)}
    # Without a deadline both weights are 0 and the tie goes to the earlier end:
    # fast again (30 against 40).
    free_j = job("J", 2, walltime=40.0)
    d = EgEdf().decide(
        snapshot(
            machines=machines,
            queue=[q, p, free_j],
            running=snap.running,
            reservations=list(snap.reservations.values()),
        )
    )
    assert plan_of(d)["J"] == ("fast", 10.0)


# -- S = 0: EDF insertion -----------------------------------------------------------


def test_no_gap_inserts_by_edf_in_deadline_order() -> None:
    """One machine, packed: every new job is put into the order by deadline.

    X (deadline 200) goes between A (100) and B (300); Y (no deadline) after C
    (no deadline, arrived earlier); Z (deadline 50) before everything. Each
    insertion re-plans the jobs after it, which move later.
    """
    m = [Machine(id="m", cpus=4)]
    a = job("A", 4, walltime=10.0, deadline=100.0)
    b = job("B", 4, walltime=10.0, deadline=300.0)
    c = job("C", 4, walltime=10.0)
    x = job("X", 4, walltime=10.0, submit=1.0, deadline=200.0)
    y = job("Y", 4, walltime=10.0, submit=2.0)
    z = job("Z", 4, walltime=10.0, submit=3.0, deadline=50.0)
    snap = snapshot(
        now=3.0,
        machines=m,
        queue=[a, b, c, x, y, z],
        running=[running(job("r", 4, walltime=10.0), est_end=10.0)],
        reservations=[
            reservation(a, start=10.0),
            reservation(b, start=20.0),
            reservation(c, start=30.0),
        ],
    )
    d = EgEdf().decide(snap)
    assert order_on(d, "m") == [
        ("Z", 10.0),
        ("A", 20.0),
        ("X", 30.0),
        ("B", 40.0),
        ("C", 50.0),
        ("Y", 60.0),
    ]
    assert d.counters == {"eg_edf_gap_insertions": 0, "eg_edf_edf_insertions": 3}


def test_no_gap_keeps_the_machine_of_highest_weight() -> None:
    """S = 0 on two machines; equation (1) prefers the slow machine.

    Both machines are busy until 10 and then run one planned job on [10, 20).
    On fast, D's deadline (20) is earlier than J's (21), so EDF puts J after
    D, at 20, and J ends at 25: late. On slow, E has no deadline, so J goes
    first, on [10, 20), meets its deadline, and E moves to [20, 30). Weights,
    with makespan_old 20 and nondelayed_old 1 (D): fast -0.25 + 0 = -0.25;
    slow -0.5 + 1 = 0.5.
    """
    machines = [Machine(id="fast", cpus=4, speed=2.0), Machine(id="slow", cpus=4)]
    dj = job("D", 4, walltime=20.0, deadline=20.0)
    e = job("E", 4, walltime=10.0)
    j = job("J", 4, walltime=10.0, submit=1.0, deadline=21.0)
    snap = snapshot(
        now=1.0,
        machines=machines,
        queue=[dj, e, j],
        running=[
            running(job("r-fast", 4, walltime=10.0), machine="fast", est_end=10.0),
            running(job("r-slow", 4, walltime=10.0), machine="slow", est_end=10.0),
        ],
        reservations=[
            reservation(dj, start=10.0, machine="fast"),
            reservation(e, start=10.0, machine="slow"),
        ],
    )
    d = EgEdf().decide(snap)
    assert plan_of(d) == {"D": ("fast", 10.0), "J": ("slow", 10.0), "E": ("slow", 20.0)}


def test_a_job_wider_than_every_machine_is_skipped() -> None:
    machines = [Machine(id="a", cpus=4), Machine(id="b", cpus=4)]
    huge, small = job("huge", 6, walltime=10.0), job("small", 2, walltime=10.0)
    d = EgEdf().decide(snapshot(machines=machines, queue=[huge, small]))
    # It gets no reservation and holds nothing back; it simply stays queued.
    assert [s.job.id for s in d.starts] == ["small"]
    assert d.reservations == []


# -- the plan across events: compaction -------------------------------------------
