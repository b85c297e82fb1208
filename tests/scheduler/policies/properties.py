"""What the policies' property tests share: random clusters, a recording wrapper, and
the invariants every whole replay must keep.

Used by ``test_backfill_properties.py``, ``test_dpsa.py``,
``test_fcfs_malleable.py`` and ``test_flexible.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hypothesis import strategies as st

from model.machine import Machine
from model.outcome import JobOutcome
from scheduler.core.snapshot import Decisions, Policy, Snapshot


@st.composite
def clusters(
    draw: st.DrawFn, *, cpus: int = 8, speeds: Sequence[float] = (0.5, 1.0, 2.0)
) -> list[Machine]:
    """One to three machines ``m0``.. of 1 to ``cpus`` CPUs at one of ``speeds``."""
    return [
        Machine(id=f"m{i}", cpus=draw(st.integers(1, cpus)), speed=draw(st.sampled_from(speeds)))
        for i in range(draw(st.integers(1, 3)))
    ]


@dataclass
class Recorder:
    """Wraps a policy; checks at every decision that no CPU is lost or double-booked,
    and records every reservation it gives, by job: ``(now, start)``."""

    inner: Policy
    promises: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    name: str = "recorder"

    def decide(self, snapshot: Snapshot) -> Decisions:
        assert_books_balance(snapshot)
        decisions = self.inner.decide(snapshot)
        for r in decisions.reservations:
            self.promises.setdefault(r.job.id, []).append((snapshot.now, r.start))
        return decisions


def assert_books_balance(snapshot: Snapshot) -> None:
    """No free count below zero, and on every machine the CPUs the running jobs hold
    plus the free ones are its CPUs: none lost, none double-booked."""
    assert all(f >= 0 for f in snapshot.free.values())
    for m in snapshot.machines:
        held = sum(p.cpus for r in snapshot.running for p in r.parts if p.machine == m.id)
        assert held + snapshot.free[m.id] == m.cpus, "CPUs lost or double-booked"


def assert_within_the_machines(outcomes: Iterable[JobOutcome], machines: Sequence[Machine]) -> None:
    """No job starts before its submission, and at every start the CPUs in use on
    each machine fit it."""
    done = list(outcomes)
    for o in done:
        assert o.start >= o.job.submit
    points = sorted({o.start for o in done})
    for m in machines:
        for t in points:
            used = sum(
                p.cpus for o in done if o.start <= t < o.end for p in o.parts if p.machine == m.id
            )
            assert used <= m.cpus


def assert_promises_kept(
    promises: Mapping[str, list[tuple[float, float]]], started: Mapping[str, float]
) -> None:
    """With exact estimates a reservation is a promise: each job starts no later than
    its first one, and no later promise is later than an earlier one."""
    for job_id, given in promises.items():
        assert started[job_id] <= given[0][1] + 1e-9, (job_id, given, started[job_id])
        for (_, earlier), (_, later) in itertools.pairwise(given):
            assert later <= earlier + 1e-9, (job_id, given)
