"""The availability profile behind conservative backfilling (``scheduler.planning.profile``)."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Machine, Part
from scheduler.core.snapshot import RunningJob
from scheduler.planning.overdue import planned_releases
from scheduler.planning.placement import Placement, PlacementRule, sort_machines
from scheduler.planning.profile import Profile
from tests.builders import job

ONE = [Machine(id="m", cpus=10)]
FAST_SLOW = sort_machines([Machine(id="fast", cpus=4, speed=2.0), Machine(id="slow", cpus=4)])


def fit_of(
    p: Profile,
    j: Job,
    machines: list[Machine],
    speeds: dict[str, float],
    *,
    placement: Placement | None = None,
    not_before: float = 0.0,
    before: float = float("inf"),
) -> tuple[float, tuple[Part, ...]] | None:
    return p.earliest_fit(
        j,
        j.procs,
        placement=placement or Placement(),
        machines=machines,
        speeds=speeds,
        not_before=not_before,
        before=before,
    )


def one_machine_profile() -> Profile:
    # 10 CPUs; 4 free now; 3 come back at 10, 3 more at 20.
    return Profile(
        now=0.0,
        machines=ONE,
        free={"m": 4},
        ends=[(20.0, (Part("m", 3),)), (10.0, (Part("m", 3),))],
    )


def steps(profile: Profile) -> list[tuple[float, int]]:
    return [(t, free["m"]) for t, free in profile.breakpoints()]


def test_built_from_running_ends_in_time_order() -> None:
    assert steps(one_machine_profile()) == [(0.0, 4), (10.0, 7), (20.0, 10)]


def test_equal_ends_merge_and_an_end_at_now_lands_on_now() -> None:
    p = Profile(
        now=50.0,
        machines=ONE,
        free={"m": 2},
        ends=[(50.0, (Part("m", 3),)), (60.0, (Part("m", 2),)), (60.0, (Part("m", 3),))],
    )
    assert steps(p) == [(50.0, 5), (60.0, 10)]


def test_an_overdue_end_is_planned_by_the_overdue_rule_not_by_the_profile() -> None:
    ends = [(40.0, (Part("m", 3),)), (60.0, (Part("m", 5),))]
    with pytest.raises(ValueError, match=r"before the profile's start"):
        Profile(now=50.0, machines=ONE, free={"m": 2}, ends=ends)
    # 10 s over at 50: planned at 40 + 16 = 56 (scheduler.planning.overdue).
    runs = [
        RunningJob(job=job(f"j{c}", c, walltime=10.0), parts=parts, start=0.0, est_end=t, cpus=c)
        for c, (t, parts) in zip((3, 5), ends, strict=True)
    ]
    p = Profile(now=50.0, machines=ONE, free={"m": 2}, ends=planned_releases(50.0, runs))
    assert steps(p) == [(50.0, 2), (56.0, 5), (60.0, 10)]


def test_reserve_release_round_trip_merges_breakpoints() -> None:
    p = one_machine_profile()
    p.reserve(5.0, 15.0, (Part("m", 4),))
    assert steps(p) == [(0.0, 4), (5.0, 0), (10.0, 3), (15.0, 7), (20.0, 10)]
    assert p.fits(15.0, 30.0, (Part("m", 7),))
    assert not p.fits(0.0, 6.0, (Part("m", 1),))
    with pytest.raises(ValueError, match="not free"):
        p.reserve(4.0, 6.0, (Part("m", 1),))
    assert steps(p) == [(0.0, 4), (5.0, 0), (10.0, 3), (15.0, 7), (20.0, 10)]
    p.release(5.0, 15.0, (Part("m", 4),))
    assert steps(p) == [(0.0, 4), (10.0, 7), (20.0, 10)]


@pytest.mark.parametrize(
    ("procs", "walltime", "not_before", "before", "expected"),
    [
        (4, 100.0, 0.0, float("inf"), 0.0),  # fits now for ever
        (5, 5.0, 0.0, float("inf"), 10.0),  # waits for the first end
        (8, 1.0, 0.0, float("inf"), 20.0),  # waits for the second
        (4, 5.0, 3.0, float("inf"), 3.0),  # not_before inside a step
        (8, 1.0, 0.0, 20.0, None),  # nothing before 20
        (11, 1.0, 0.0, float("inf"), None),  # wider than the machine
    ],
)
def test_earliest_fit_one_machine(
    procs: int, walltime: float, not_before: float, before: float, expected: float | None
) -> None:
    p = one_machine_profile()
    fit = fit_of(
        p, job("j", procs, walltime=walltime), ONE, {"m": 1.0}, not_before=not_before, before=before
    )
    if expected is None:
        assert fit is None
    else:
        assert fit == (expected, (Part("m", procs),))


def test_earliest_fit_skips_a_hole_too_short_for_the_job() -> None:
    p = one_machine_profile()
    p.reserve(10.0, 20.0, (Part("m", 7),))  # a hole of 4 CPUs on [0, 10) only
    assert fit_of(p, job("j", 4, walltime=10.0), ONE, {"m": 1.0}) == (
        0.0,
        (Part("m", 4),),
    )
    assert fit_of(p, job("j", 4, walltime=11.0), ONE, {"m": 1.0}) == (
        20.0,
        (Part("m", 4),),
    )


def test_earliest_fit_heterogeneous_uses_the_pace_of_the_parts() -> None:
    speeds = {"fast": 2.0, "slow": 1.0}
    # Fast is busy on [0, 5); slow is booked from 8 on.
    p = Profile(
        now=0.0, machines=FAST_SLOW, free={"fast": 0, "slow": 4}, ends=[(5.0, (Part("fast", 4),))]
    )
    p.reserve(8.0, 100.0, (Part("slow", 4),))
    # 4 CPUs for wall 10: slow now would need [0, 10) and collides with the booking
    # at 8; at 5 the fast machine runs it in 5 s.
    assert fit_of(p, job("j", 4, walltime=10.0), FAST_SLOW, speeds) == (
        5.0,
        (Part("fast", 4),),
    )
    # Wall 6 fits on slow now, [0, 6) ends before the booking.
    assert fit_of(p, job("j", 4, walltime=6.0), FAST_SLOW, speeds) == (
        0.0,
        (Part("slow", 4),),
    )
    single = Placement(rule=PlacementRule.SINGLE)
    assert fit_of(p, job("j", 6, walltime=1.0), FAST_SLOW, speeds, placement=single) is None
    # Spanning goes at the slow pace: [5, 6) fits before the booking, [5, 9) does not.
    assert fit_of(p, job("j", 6, walltime=1.0), FAST_SLOW, speeds) == (
        5.0,
        (Part("fast", 4), Part("slow", 2)),
    )
    assert fit_of(p, job("j", 6, walltime=4.0), FAST_SLOW, speeds) == (
        100.0,
        (Part("fast", 4), Part("slow", 2)),
    )


def test_may_fit_before_is_a_necessary_condition() -> None:
    p = one_machine_profile()
    assert not p.may_fit_before(5, 10.0)
    assert p.may_fit_before(5, 10.5)
    assert not p.may_fit_before(1, 0.0)


@settings(max_examples=100, deadline=None)
@given(
    bookings=st.lists(
        st.tuples(st.integers(0, 30), st.integers(1, 15), st.integers(1, 10)), max_size=12
    ),
    procs=st.integers(1, 10),
    walltime=st.integers(1, 20),
)
def test_earliest_fit_is_the_earliest_feasible_breakpoint(
    bookings: list[tuple[int, int, int]], procs: int, walltime: int
) -> None:
    """Against brute force: book what fits, then compare with every candidate instant."""
    p = one_machine_profile()
    for start, length, cpus in bookings:
        if p.fits(float(start), float(start + length), (Part("m", cpus),)):
            p.reserve(float(start), float(start + length), (Part("m", cpus),))
    parts = (Part("m", procs),)
    times = [t for t, _ in p.breakpoints()]
    feasible = [t for t in times if p.fits(t, t + walltime, parts)]
    fit = fit_of(p, job("j", procs, walltime=float(walltime)), ONE, {"m": 1.0})
    assert fit == (feasible[0], parts)
    # Breakpoints stay sorted, distinct and merged.
    values = [free["m"] for _, free in p.breakpoints()]
    assert times == sorted(set(times))
    assert all(a != b for a, b in pairwise(values))
    assert all(0 <= v <= 10 for v in values)


@settings(max_examples=100, deadline=None)
@given(
    bookings=st.lists(
        st.tuples(st.integers(0, 30), st.integers(1, 15), st.integers(1, 10)), max_size=10
    ),
)
def test_reserve_all_equals_booking_one_by_one(bookings: list[tuple[int, int, int]]) -> None:
    together = one_machine_profile()
    alone = one_machine_profile()
    wanted = [(float(s), float(s + n), (Part("m", c),)) for s, n, c in bookings]
    fits_alone = True
    for b in wanted:
        if not alone.fits(*b):
            fits_alone = False
            break
        alone.reserve(*b)
    before = together.breakpoints()
    assert together.reserve_all(wanted) == fits_alone
    if fits_alone:
        assert together.breakpoints() == alone.breakpoints()
    else:
        assert together.breakpoints() == before  # refused: unchanged


def test_reserve_all_on_several_machines() -> None:
    p = Profile(now=0.0, machines=FAST_SLOW, free={"fast": 4, "slow": 1}, ends=[])
    q = Profile(now=0.0, machines=FAST_SLOW, free={"fast": 4, "slow": 1}, ends=[])
    wanted = [
        (0.0, 5.0, (Part("fast", 3), Part("slow", 1))),
        (5.0, 9.0, (Part("fast", 4),)),
        (2.0, 4.0, (Part("fast", 1),)),
    ]
    assert p.reserve_all(wanted)
    for b in wanted:
        q.reserve(*b)
    assert p.breakpoints() == q.breakpoints()
    assert not p.reserve_all([(3.0, 4.0, (Part("slow", 1),))])
    assert not p.reserve_all([(3.0, 4.0, (Part("gone", 1),))])
    assert p.breakpoints() == q.breakpoints()


@settings(max_examples=100, deadline=None)
@given(
    bookings=st.lists(
        st.tuples(st.integers(0, 30), st.integers(1, 15), st.integers(1, 10)), max_size=10
    ),
    procs=st.integers(1, 10),
    walltime=st.integers(1, 20),
    start=st.integers(0, 60),
)
def test_move_earlier_one_machine_matches_release_and_search(
    bookings: list[tuple[int, int, int]], procs: int, walltime: int, start: int
) -> None:
    """The no-release shortcut on one machine finds what release + search finds."""
    p = one_machine_profile()
    for s, n, c in bookings:
        b = (float(s), float(s + n), (Part("m", c),))
        if p.fits(*b):
            p.reserve(*b)
    j = job("j", procs, walltime=float(walltime))
    own = (float(start), float(start + walltime), (Part("m", procs),))
    if not p.fits(*own):
        return
    p.reserve(*own)
    steps_before = p.breakpoints()

    p.release(*own)
    expected = fit_of(p, j, ONE, {"m": 1.0}, before=own[0])
    p.reserve(*own)
    assert p.breakpoints() == steps_before

    moved = p.move_earlier(
        j, own, placement=Placement(), machines=ONE, speeds={"m": 1.0}, not_before=0.0
    )
    if expected is None:
        assert moved is None
        assert p.breakpoints() == steps_before
    else:
        assert moved == (expected[0], expected[0] + walltime, expected[1])
        # Booked in place of the old slot: the same profile as booking it afresh.
        check = one_machine_profile()
        for s, n, c in bookings:
            b = (float(s), float(s + n), (Part("m", c),))
            if check.fits(*b):
                check.reserve(*b)
        check.reserve(*moved)
        assert p.breakpoints() == check.breakpoints()


SPEEDS = st.lists(st.sampled_from([1.0, 1.5, 2.0]), min_size=2, max_size=3)
#: ``(machine index, start, length, cpus)`` bookings.
BOOKINGS = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 30), st.integers(1, 15), st.integers(1, 4)),
    max_size=10,
)


def booked_machines(
    speeds: list[float], bookings: list[tuple[int, int, int, int]]
) -> tuple[list[Machine], dict[str, float], Profile]:
    """Machines ``m0``.. of 4 CPUs at ``speeds`` (sorted as the core sorts them), their
    speeds by id, and a profile holding every booking that fits (the rest dropped)."""
    machines = sort_machines([Machine(id=f"m{k}", cpus=4, speed=s) for k, s in enumerate(speeds)])
    p = Profile(now=0.0, machines=machines, free={m.id: 4 for m in machines}, ends=[])
    for k, start, length, cpus in bookings:
        b = (float(start), float(start + length), (Part(f"m{k % len(speeds)}", cpus),))
        if p.fits(*b):
            p.reserve(*b)
    return machines, {m.id: m.speed for m in machines}, p


def reference_fit(
    p: Profile, j: Job, machines: list[Machine], speeds: dict[str, float], placement: Placement
) -> tuple[float, tuple[Part, ...]] | None:
    """The search as the docstring states it, without the totals shortcut."""
    for t, free in p.breakpoints():
        here = dict(free)
        parts = placement.place(j.procs, here, machines)
        while parts is not None:
            end = t + j.estimate_on(min(speeds[x.machine] for x in parts))
            if p.fits(t, end, parts):
                return t, parts
            for u, later in p.breakpoints():
                if t <= u < end:
                    here = {m: min(v, later[m]) for m, v in here.items()}
            parts = placement.place(j.procs, here, machines)
    return None


@settings(max_examples=100, deadline=None)
@given(
    speeds=SPEEDS,
    bookings=BOOKINGS,
    procs=st.integers(1, 12),
    walltime=st.integers(1, 20),
    rule=st.sampled_from(list(PlacementRule)),
)
def test_earliest_fit_several_machines_matches_the_plain_search(
    speeds: list[float],
    bookings: list[tuple[int, int, int, int]],
    procs: int,
    walltime: int,
    rule: PlacementRule,
) -> None:
    machines, by_id, p = booked_machines(speeds, bookings)
    j = job("j", procs, walltime=float(walltime))
    placement = Placement(rule=rule)
    fit = fit_of(p, j, machines, by_id, placement=placement)
    assert fit == reference_fit(p, j, machines, by_id, placement)
    if fit is not None:
        t, parts = fit
        assert p.fits(t, t + j.estimate_on(min(by_id[x.machine] for x in parts)), parts)


@settings(max_examples=100, deadline=None)
@given(
    speeds=SPEEDS,
    bookings=BOOKINGS,
    procs=st.integers(1, 8),
    walltime=st.integers(1, 20),
    rule=st.sampled_from(list(PlacementRule)),
)
def test_move_earlier_several_machines_matches_release_and_search(
    speeds: list[float],
    bookings: list[tuple[int, int, int, int]],
    procs: int,
    walltime: int,
    rule: PlacementRule,
) -> None:
    """The totals shortcut only skips what the full search would reject."""
    machines, by_id, p = booked_machines(speeds, bookings)
    placement = Placement(rule=rule)
    j = job("j", procs, walltime=float(walltime))
    # The job's own booking: its latest possible slot, after everything else.
    last = max([0.0, *(float(s + n) for _, s, n, _ in bookings)])
    parts = placement.place(procs, {m.id: 4 for m in machines}, machines)
    assert parts is not None or rule is PlacementRule.SINGLE
    if parts is None:
        return
    own = (last, last + j.estimate_on(min(by_id[x.machine] for x in parts)), parts)
    p.reserve(*own)
    steps_with_own = p.breakpoints()

    p.release(*own)
    expected = fit_of(p, j, machines, by_id, placement=placement, before=own[0])
    p.reserve(*own)

    moved = p.move_earlier(
        j, own, placement=placement, machines=machines, speeds=by_id, not_before=0.0
    )
    if expected is None:
        assert moved is None
        assert p.breakpoints() == steps_with_own
    else:
        t, new_parts = expected
        assert moved == (t, t + j.estimate_on(min(by_id[x.machine] for x in new_parts)), new_parts)
