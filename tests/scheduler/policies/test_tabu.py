"""Tabu search over the EG-EDF plan (``scheduler.policies.tabu``; EG-EDF paper, sec. 3.3).

Hand-made plans where a delayed job is moved (to another machine's gap, or to
an earlier gap of its own machine), the tabu list's bound, and the property
"Tabu never worsens its objective" on random plans built by EG-EDF itself.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.machine import Machine
from scheduler.core.snapshot import Snapshot
from scheduler.planning.placement import sort_machines
from scheduler.policies.eg_edf import plan_for, weight
from scheduler.policies.eg_edf_plan import Plan, Slot
from scheduler.policies.tabu import EgEdfTabu, TabuResult, TabuSearch
from tests.builders import job, reservation, running, snapshot


def placed(plan: Plan) -> dict[str, tuple[str, float]]:
    return {s.job.id: (mp.machine.id, s.start) for mp in plan.machines for s in mp.slots}


def test_a_delayed_job_moves_to_another_machines_gap() -> None:
    """L waits on a behind A1 and misses its deadline; b has 2 idle CPUs now.

    Moving L to b's gap leaves the makespan at 100 (b's running job) and adds
    one job on time: weight 0 + (1 - 0) / 1 = 1 > 0, so the move is kept.
    """
    machines = [Machine(id="a", cpus=4), Machine(id="b", cpus=4)]
    a1, late = job("A1", 4, walltime=50.0), job("L", 2, walltime=10.0, deadline=40.0)
    plan, fresh = Plan.from_snapshot(
        snapshot(
            machines=machines,
            queue=[a1, late],
            running=[
                running(job("ra", 4, walltime=10.0), machine="a", est_end=10.0),
                running(job("rb", 2, walltime=100.0), machine="b", est_end=100.0),
            ],
            reservations=[
                reservation(a1, start=10.0, machine="a"),
                reservation(late, start=60.0, machine="a"),
            ],
        )
    )
    assert fresh == []
    assert plan.nondelayed == 0
    result = TabuSearch().optimise(plan)
    assert placed(plan) == {"A1": ("a", 10.0), "L": ("b", 0.0)}
    assert (result.iterations, result.weights) == (1, (1.0,))
    assert plan.nondelayed == 1


def test_a_delayed_job_moves_to_an_earlier_gap_of_its_own_machine() -> None:
    """The one move compaction never makes: past a job planned before it.

    W (4 CPUs) waits for r's 2 CPUs until 100, and L is planned after W, so
    it ends at 120, past its deadline 50, though 2 CPUs are idle on [0, 100).
    """
    machines = [Machine(id="m", cpus=4)]
    w, late = job("W", 4, walltime=10.0), job("L", 2, walltime=10.0, deadline=50.0)
    snap = snapshot(
        machines=machines,
        queue=[w, late],
        running=[running(job("r", 2, walltime=100.0), est_end=100.0)],
        reservations=[reservation(w, start=100.0), reservation(late, start=110.0)],
    )
    plan, _ = Plan.from_snapshot(snap)
    assert placed(plan) == {"W": ("m", 100.0), "L": ("m", 110.0)}
    result = TabuSearch().optimise(plan)
    assert placed(plan) == {"L": ("m", 0.0), "W": ("m", 100.0)}
    # Makespan 120 -> 110 and one more job on time.
    assert result.weights == pytest.approx((10 / 120 + 1.0,))


def test_the_tabu_list_is_bounded_and_the_iterations_too() -> None:
    """Two delayed jobs that cannot move anywhere better.

    With a tabu list of 2 the search stops after both are tabu; with a list
    of 1 the oldest leaves, the two alternate, and the iteration bound ends it.
    """
    machines = [Machine(id="m", cpus=2)]
    x = job("X", 2, walltime=10.0, deadline=5.0)
    y = job("Y", 2, walltime=10.0, deadline=5.0)

    def fresh_plan() -> Plan:
        return Plan.from_snapshot(
            snapshot(
                machines=machines,
                queue=[x, y],
                running=[running(job("r", 2, walltime=10.0), est_end=10.0)],
                reservations=[reservation(x, start=10.0), reservation(y, start=20.0)],
            )
        )[0]

    assert TabuSearch(tabu_size=2, max_iterations=10).optimise(fresh_plan()).iterations == 2
    result = TabuSearch(tabu_size=1, max_iterations=5).optimise(fresh_plan())
    assert (result.iterations, result.moves) == (5, 0)


def test_parameters_are_validated() -> None:
    with pytest.raises(ValueError, match="tabu_size"):
        TabuSearch(tabu_size=0)
    with pytest.raises(ValueError, match="max_iterations"):
        TabuSearch(max_iterations=-1)


def test_the_policy_reports_its_counters() -> None:
    machines = [Machine(id="a", cpus=4), Machine(id="b", cpus=4)]
    d = EgEdfTabu().decide(snapshot(machines=machines, queue=[job("j", 2, walltime=5.0)]))
    assert d.counters == {
        "eg_edf_gap_insertions": 1,
        "eg_edf_edf_insertions": 0,
        "tabu_iterations": 0,
        "tabu_moves": 0,
    }
    assert [s.job.id for s in d.starts] == ["j"]


# -- "Tabu never worsens its objective" ---------------------------------------------


@st.composite
def plans(draw: st.DrawFn) -> tuple[Snapshot, bool]:
    """A snapshot whose queue EG-EDF plans from scratch, tight deadlines included."""
    n_machines = draw(st.integers(1, 3))
    machines = sort_machines(
        [
            Machine(
                id=f"m{i}",
                cpus=draw(st.integers(1, 6)),
                speed=draw(st.sampled_from([0.5, 1.0, 2.0])),
            )
            for i in range(n_machines)
        ]
    )
    runs = []
    for m in machines:
        used = draw(st.integers(0, m.cpus))
        if used:
            j = job(f"r-{m.id}", used, walltime=50.0)
            runs.append(running(j, machine=m.id, est_end=float(draw(st.integers(1, 50)))))
    widest = max(m.cpus for m in machines)
    queue = [
        job(
            f"j{i:02d}",
            draw(st.integers(1, widest)),
            walltime=float(draw(st.integers(1, 30))),
            deadline=draw(st.none() | st.floats(5.0, 150.0)),
        )
        for i in range(draw(st.integers(1, 14)))
    ]
    snap = snapshot(machines=machines, queue=queue, running=runs)
    return snap, draw(st.booleans())


def check_feasible(plan: Plan, snap: Snapshot) -> None:
    """Every machine: running jobs and slots never hold more CPUs than it has."""
    for mp in plan.machines:
        steps: list[tuple[float, int]] = []
        for r in snap.running:
            for p in r.parts:
                if p.machine == mp.machine.id:
                    steps += [(snap.now, p.cpus), (max(r.est_end, snap.now), -p.cpus)]
        for s in mp.slots:
            assert s.start >= snap.now
            assert s.end == pytest.approx(s.start + s.job.estimate_on(mp.machine.speed))
            steps += [(s.start, s.job.procs), (s.end, -s.job.procs)]
        used = 0
        for _, delta in sorted(steps):  # ends (negative) before starts at a tie
            used += delta
            assert used <= mp.machine.cpus


@settings(max_examples=200, deadline=None)
@given(plans(), st.integers(1, 4), st.integers(0, 30))
def test_property_tabu_never_worsens_its_objective(
    case: tuple[Snapshot, bool], tabu_size: int, max_iterations: int
) -> None:
    snap, keep_order = case
    plan = plan_for(snap, keep_order=keep_order)
    jobs_before = sorted(placed(plan))
    nondelayed, makespan = plan.nondelayed, plan.makespan()
    result = TabuSearch(tabu_size=tabu_size, max_iterations=max_iterations).optimise(plan)

    assert result.iterations <= max_iterations
    assert all(w > 0 for w in result.weights), "a move that did not improve was kept"
    # The objective: more jobs on time, or as many and a shorter makespan.
    assert plan.nondelayed >= nondelayed
    if plan.nondelayed == nondelayed:
        assert plan.makespan() <= makespan
        if result.moves:
            assert plan.makespan() < makespan
    # The plan's own bookkeeping is right and it is still a schedule.
    assert sorted(placed(plan)) == jobs_before
    assert plan.nondelayed == sum(s.on_time for mp in plan.machines for s in mp.slots)
    assert plan.makespan() == max(
        [0.0, *(max(r.est_end, snap.now) - snap.now for r in snap.running)]
        + [s.end - snap.now for mp in plan.machines for s in mp.slots]
    )
    check_feasible(plan, snap)
    for mp in plan.machines:
        assert [s.start for s in mp.slots] == sorted(s.start for s in mp.slots)


# -- the search weighs moves without booking them: same plan as booking and undoing ----


def textbook_search(plan: Plan, *, tabu_size: int, max_iterations: int) -> TabuResult:
    """Sec. 3.3 as the module docstring states it, every tried move booked, weighed on
    the whole plan's makespan and undone when it does not improve: the reference the
    faster search must match slot for slot (machine, start and order)."""
    delayed = {mp.machine.id: [s for s in mp.slots if s.delayed] for mp in plan.machines}
    if not any(delayed.values()):
        return TabuResult(0, ())
    tabu: deque[str] = deque(maxlen=tabu_size)
    makespan_old, nondelayed_old = plan.makespan(), plan.nondelayed
    iterations = 0
    weights: list[float] = []
    while iterations < max_iterations:
        holding = [mp for mp in plan.machines if delayed[mp.machine.id]]
        candidates = [
            (mp, s)
            for mp in sorted(holding, key=lambda mp: -len(delayed[mp.machine.id]))
            for s in reversed(delayed[mp.machine.id])
            if s.job.id not in tabu
        ]
        if not candidates:
            break
        src, slot = candidates[0]
        iterations += 1
        tabu.append(slot.job.id)
        for dst in plan.machines:
            if not dst.holds(slot.job):
                continue
            if dst is src:
                new = src.shift_earlier(slot, not_before=plan.now)
                if new is None:
                    continue
            else:
                start = dst.gap(slot.job)
                if start is None:
                    continue
                src.unbook(slot)
                new = Slot(slot.job, start, start + dst.duration(slot.job), dst.parts(slot.job))
                dst.book(new)
            plan.nondelayed += new.on_time - slot.on_time
            w = weight(
                makespan_old=makespan_old,
                makespan_new=plan.makespan(),
                nondelayed_old=nondelayed_old,
                nondelayed_new=plan.nondelayed,
            )
            if w > 0:
                makespan_old, nondelayed_old = plan.makespan(), plan.nondelayed
                weights.append(w)
                delayed[src.machine.id].remove(slot)
                if new.delayed:
                    mine = delayed[dst.machine.id]
                    mine.append(new)
                    mine.sort(key=lambda s: s.start)  # stable: equal starts keep their order
                break
            dst.unbook(new)
            src.book(slot)
            plan.nondelayed += slot.on_time - new.on_time
    return TabuResult(iterations, tuple(weights))


def slot_lists(plan: Plan) -> list[list[tuple[str, float]]]:
    return [[(s.job.id, s.start) for s in mp.slots] for mp in plan.machines]


@st.composite
def tied_plans(draw: st.DrawFn) -> tuple[Snapshot, bool]:
    """Like :func:`plans`, from few distinct numbers, so that many slots start at the
    same instant: where a turned-down move leaves its trace in the plan order."""
    machines = sort_machines(
        [
            Machine(
                id=f"m{i}", cpus=draw(st.integers(2, 6)), speed=draw(st.sampled_from([1.0, 2.0]))
            )
            for i in range(draw(st.integers(2, 3)))
        ]
    )
    runs = [
        running(
            job(f"r-{m.id}", m.cpus, walltime=50.0),
            machine=m.id,
            est_end=draw(st.sampled_from([10.0, 20.0])),
        )
        for m in machines
        if draw(st.booleans())
    ]
    queue = [
        job(
            f"j{i:02d}",
            draw(st.integers(1, 2)),
            walltime=draw(st.sampled_from([10.0, 20.0])),
            deadline=draw(st.none() | st.sampled_from([15.0, 25.0, 40.0])),
        )
        for i in range(draw(st.integers(2, 14)))
    ]
    return snapshot(machines=machines, queue=queue, running=runs), draw(st.booleans())


@settings(max_examples=300, deadline=None)
@given(plans() | tied_plans(), st.integers(1, 4), st.integers(0, 30))
def test_property_search_matches_the_textbook_search_slot_for_slot(
    case: tuple[Snapshot, bool], tabu_size: int, max_iterations: int
) -> None:
    snap, keep_order = case
    fast, reference = plan_for(snap, keep_order=keep_order), plan_for(snap, keep_order=keep_order)
    result = TabuSearch(tabu_size=tabu_size, max_iterations=max_iterations).optimise(fast)
    expected = textbook_search(reference, tabu_size=tabu_size, max_iterations=max_iterations)
    assert result == expected
    # Order included: the next event reads the plan back in this order.
    assert slot_lists(fast) == slot_lists(reference)
    assert fast.nondelayed == reference.nondelayed
    assert fast.makespan() == reference.makespan()
