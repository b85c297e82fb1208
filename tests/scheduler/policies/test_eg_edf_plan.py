"""EG-EDF's plan across events (``scheduler.policies.eg_edf_plan``): read back from the
previous decision's reservations, compacted against what really happened, handed back.
"""

from __future__ import annotations

from model.machine import Machine, Part
from scheduler.policies.eg_edf import EgEdf
from scheduler.policies.eg_edf_plan import Plan
from tests.builders import job, reservation, running, snapshot
from tests.scheduler.policies.grid_plans import GRID, order_on, plan_of


def test_the_plan_is_compacted_when_a_job_ends_early_keeping_its_order() -> None:
    """r was to hold all 4 CPUs until 10 but ended at 2: the plan shifts to now.

    A (2 CPUs, 20 s) and B (4 CPUs) start as soon as possible in plan order;
    C (1 CPU) could run now beside A, but it is planned after B and keeps its
    place (compaction keeps each machine's order).
    """
    m = [Machine(id="m", cpus=4)]
    a, b, c = job("A", 2, walltime=20.0), job("B", 4, walltime=10.0), job("C", walltime=5.0)
    previous = [reservation(a, start=10.0), reservation(b, start=30.0), reservation(c, start=40.0)]
    d = EgEdf().decide(snapshot(now=2.0, machines=m, queue=[a, b, c], reservations=previous))
    assert [s.job.id for s in d.starts] == ["A"]
    assert order_on(d, "m") == [("B", 22.0), ("C", 32.0)]


def test_without_keep_order_compaction_lets_a_job_use_an_earlier_hole() -> None:
    m = [Machine(id="m", cpus=4)]
    a, b, c = job("A", 2, walltime=20.0), job("B", 4, walltime=10.0), job("C", walltime=5.0)
    previous = [reservation(a, start=10.0), reservation(b, start=30.0), reservation(c, start=40.0)]
    d = EgEdf(keep_order=False).decide(
        snapshot(now=2.0, machines=m, queue=[a, b, c], reservations=previous)
    )
    assert [s.job.id for s in d.starts] == ["A", "C"]
    assert order_on(d, "m") == [("B", 22.0)]


def test_unchanged_reservations_are_handed_back_as_the_same_objects() -> None:
    p1, p2 = job("P1", 8, walltime=10.0), job("P2", 6, walltime=40.0)
    previous = [
        reservation(p1, start=10.0, machine="big"),
        reservation(p2, start=20.0, machine="big"),
    ]
    d = EgEdf().decide(
        snapshot(
            machines=GRID,
            queue=[p1, p2],
            running=[running(job("r-big", 6, walltime=10.0), machine="big", est_end=10.0)],
            reservations=previous,
        )
    )
    assert d.reservations[0] is previous[0]
    assert d.reservations[1] is previous[1]


def test_an_overdue_job_keeps_a_planned_job_waiting_until_its_planned_end() -> None:
    """r outlived its estimate (10) and still holds its CPUs at 12: 2 s over, it is
    planned to end at 10 + 4 (``scheduler.planning.overdue``)."""
    m = [Machine(id="m", cpus=4)]
    a = job("A", 4, walltime=10.0)
    d = EgEdf().decide(
        snapshot(
            now=12.0,
            machines=m,
            queue=[a],
            running=[running(job("r", 2, walltime=10.0), est_end=10.0)],
            reservations=[reservation(a, start=10.0)],
        )
    )
    assert d.starts == []
    assert plan_of(d) == {"A": ("m", 14.0)}


def test_slots_that_no_longer_fit_together_are_replanned_in_order() -> None:
    """A was planned on [10, 20) and B on [20, 30); r overran and holds the CPUs at 15.

    r, 5 s over, is planned to end at 10 + 8 (``scheduler.planning.overdue``). A,
    whose start has passed, is planned from then and would run into B: the
    machine is list-scheduled again in the same order, which moves B later.
    """
    m = [Machine(id="m", cpus=4)]
    a, b = job("A", 4, walltime=10.0), job("B", 4, walltime=10.0)
    d = EgEdf().decide(
        snapshot(
            now=15.0,
            machines=m,
            queue=[a, b],
            running=[running(job("r", 4, walltime=10.0), est_end=10.0)],
            reservations=[reservation(a, start=10.0), reservation(b, start=20.0)],
        )
    )
    assert d.starts == []
    assert order_on(d, "m") == [("A", 18.0), ("B", 28.0)]


def test_a_reservation_on_a_machine_that_left_is_placed_again() -> None:
    machines = [Machine(id="a", cpus=4)]
    j = job("J", 2, walltime=10.0)
    d = EgEdf().decide(
        snapshot(
            machines=machines, queue=[j], reservations=[reservation(j, start=5.0, machine="gone")]
        )
    )
    assert [(s.job.id, s.parts) for s in d.starts] == [("J", (Part("a", 2),))]


def test_plan_counts_nondelayed_planned_jobs_only() -> None:
    m = [Machine(id="m", cpus=2)]
    on_time = job("on-time", 2, walltime=10.0, deadline=100.0)
    late = job("late", 2, walltime=10.0, deadline=15.0)
    free_job = job("no-deadline", 2, walltime=10.0)
    snap = snapshot(
        machines=m,
        queue=[on_time, late, free_job],
        running=[running(job("r", 2, walltime=10.0), est_end=10.0)],
        reservations=[
            reservation(on_time, start=10.0),
            reservation(late, start=20.0),
            reservation(free_job, start=30.0),
        ],
    )
    plan, fresh = Plan.from_snapshot(snap)
    assert fresh == []
    assert plan.nondelayed == 1
    assert plan.makespan() == 40.0
