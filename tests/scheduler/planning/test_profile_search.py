"""The profile's laying (``scheduler.planning.profile_search``, ``fit_bounds``) finds
what a plain reference profile finds, job after job.

The reference keeps its bookings in a list and answers every question from
scratch: free CPUs at an instant are summed over the running jobs and the
bookings, the breakpoints are the instants where that vector changes, and the
earliest fit walks every candidate from ``not_before`` asking the placement rule
as :meth:`~scheduler.planning.profile.Profile.earliest_fit` states it. No bounds,
no totals, no necessary condition, no memo. A job that must run on one machine
is placed by the ``single`` rule, named here, not asked of ``Placement.for_job``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Capability, Machine, Part
from scheduler.planning.fit_bounds import FitBounds
from scheduler.planning.placement import Placement, PlacementRule, machines_for, sort_machines
from scheduler.planning.profile import Profile
from tests.builders import job

Parts = tuple[Part, ...]
CMD = frozenset({Capability.COMMANDS})
Booking = tuple[float, float, Parts]


@dataclass
class Reference:
    """Free CPUs per machine from ``now`` on, recomputed from scratch at every question."""

    now: float
    machines: list[Machine]
    free: dict[str, int]
    ends: list[tuple[float, Parts]]
    bookings: list[Booking] = field(default_factory=list)

    def free_at(self, t: float) -> dict[str, int]:
        out = dict(self.free)
        for end, parts in self.ends:
            if end <= t:
                for p in parts:
                    out[p.machine] += p.cpus
        for start, end, parts in self.bookings:
            if start <= t < end:
                for p in parts:
                    out[p.machine] -= p.cpus
        return out

    def breakpoints(self) -> list[tuple[float, dict[str, int]]]:
        instants = {self.now}
        instants.update(t for t, _ in self.ends)
        for start, end, _ in self.bookings:
            instants.update((start, end))
        out: list[tuple[float, dict[str, int]]] = []
        for t in sorted(instants):
            here = self.free_at(t)
            if not out or out[-1][1] != here:
                out.append((t, here))
        return out

    def earliest(
        self, j: Job, cpus: int, placement: Placement, not_before: float
    ) -> Booking | None:
        speeds = {m.id: m.speed for m in self.machines}
        able = machines_for(j, self.machines)
        if j.one_machine:
            placement = Placement(rule=PlacementRule.SINGLE)
        steps = self.breakpoints()
        nb = max(not_before, self.now)
        candidates = [nb] + [t for t, _ in steps if t > nb]
        for t in candidates:
            here = self.free_at(t)
            parts = placement.place(cpus, here, able) if able else None
            while parts is not None:
                end = t + j.estimate_on(min(speeds[p.machine] for p in parts))
                window = [t] + [u for u, _ in steps if t < u < end]
                if all(self.free_at(u)[p.machine] >= p.cpus for u in window for p in parts):
                    return t, end, parts
                for u in window:
                    later = self.free_at(u)
                    here = {m: min(v, later[m]) for m, v in here.items()}
                parts = placement.place(cpus, here, able)
        return None


#: Machines: CPUs, speed, and whether they run commands.
MACHINES = st.lists(
    st.tuples(st.sampled_from([2, 4, 6]), st.sampled_from([0.5, 1.0, 2.0]), st.booleans()),
    min_size=2,
    max_size=4,
)
#: A laying, step by step: give a booking back (one step in ten: which one, by
#: index), or lay a job (width, wall time, reference speed, how far ``not_before``
#: moves, whether it needs machines that run commands: searched on a subset, with a
#: memo of the rule's answers that must not be the whole profile's; whether it must
#: run on one machine: placed by another rule, whose memo must not be the profile's
#: rule's either).
STEPS = st.lists(
    st.tuples(
        st.integers(0, 9),
        st.integers(0, 50),
        st.sampled_from([1, 2, 2, 3, 4, 6]),
        st.sampled_from([1, 2, 3, 5, 8, 13]),
        st.sampled_from([1.0, 1.0, 1.0, 2.0]),
        st.sampled_from([0] * 20 + [2, 5, 10, -3, -20]),
        st.sampled_from([False, False, False, True]),
        st.sampled_from([False, False, False, True]),
    ),
    min_size=10,
    max_size=50,
)


@settings(max_examples=300, deadline=None)
@given(
    shape=MACHINES,
    running=st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 20), st.integers(1, 4)), max_size=6
    ),
    steps=STEPS,
    rule=st.sampled_from(list(PlacementRule)),
)
def test_laying_a_queue_matches_the_reference(
    shape: list[tuple[int, float, bool]],
    running: list[tuple[int, int, int]],
    steps: list[tuple[int, int, int, int, float, int, bool, bool]],
    rule: PlacementRule,
) -> None:
    machines = sort_machines(
        [
            Machine(id=f"m{k}", cpus=c, speed=s, capabilities=CMD if able else frozenset())
            for k, (c, s, able) in enumerate(shape)
        ]
    )
    by_id = {m.id: m for m in machines}
    speeds = {m.id: m.speed for m in machines}
    free = {m.id: m.cpus for m in machines}
    ends: list[tuple[float, Parts]] = []
    for k, t, want in running:
        mid = f"m{k % len(machines)}"
        c = min(want, free[mid])
        if c:
            free[mid] -= c
            ends.append((float(t), (Part(mid, c),)))
    assert all(by_id[m].cpus >= f for m, f in free.items())
    profile = Profile(now=0.0, machines=machines, free=free, ends=ends)
    reference = Reference(now=0.0, machines=machines, free=dict(free), ends=ends)
    placement = Placement(rule=rule)
    not_before = 0.0
    for n, (kind, index, procs, walltime, ref_speed, move, needs, one) in enumerate(steps):
        if kind == 0:
            if reference.bookings:
                booking = reference.bookings.pop(index % len(reference.bookings))
                profile.release(*booking)
        else:
            not_before = max(0.0, not_before + move)
            j = job(f"j{n}", procs, walltime=float(walltime), ref_speed=ref_speed)
            if needs:
                j = replace(j, needs=CMD)
            if one:
                j = replace(j, one_machine=True)
            expected = reference.earliest(j, procs, placement, not_before)
            got = profile.book_earliest(
                j,
                procs,
                placement=placement,
                machines=machines,
                speeds=speeds,
                not_before=not_before,
            )
            assert got == expected
            if expected is not None:
                reference.bookings.append(expected)
        assert profile.breakpoints() == reference.breakpoints()


def test_a_bound_holds_for_wider_and_longer_jobs_only_from_its_floor() -> None:
    bounds = FitBounds()
    assert bounds.start("c", 5.0, 0.0) == 0.0
    bounds.record("c", 5.0, 10.0)
    # As long or longer: from the bound; shorter: nothing is known.
    assert bounds.start("c", 5.0, 0.0) == 10.0
    assert bounds.start("c", 7.0, 0.0) == 10.0
    assert bounds.start("c", 4.0, 0.0) == 0.0
    # A later floor keeps the bound; past it, the search starts where it is told.
    assert bounds.start("c", 5.0, 3.0) == 10.0
    assert bounds.start("c", 5.0, 12.0) == 12.0
    # An earlier floor than the searches that found the bounds: they say nothing there.
    assert bounds.start("c", 5.0, 1.0) == 1.0


def test_a_longer_job_keeps_only_a_later_bound() -> None:
    bounds = FitBounds()
    bounds.record("c", 5.0, 10.0)
    bounds.record("c", 8.0, 9.0)  # no news: a shorter job's bound is later already
    assert bounds.start("c", 8.0, 0.0) == 10.0
    bounds.record("c", 8.0, 20.0)
    bounds.record("c", 3.0, 25.0)  # beats both longer ones, which go
    assert bounds.start("c", 100.0, 0.0) == 25.0
    assert math.isclose(bounds.start("c", 2.0, 0.0), 0.0)
