"""``scheduler.live.dispatch.rank_shares``: a job's processes split over its parts.

Every share sums to the job's ``procs`` (the MPI-like ranks' allreduce checks
that sum), the shares tile ``0 .. procs - 1`` in part order, and a part of
``c`` CPUs holds between ``c`` and ``2c`` ranks when the job's MPL is within
1..2 (what the agent's packing allows).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.live.dispatch import rank_shares


@pytest.mark.parametrize(
    ("procs", "cpus", "shares"),
    [
        (4, [4], [(4, 0)]),
        (4, [2, 2], [(2, 0), (2, 2)]),
        (3, [1, 1], [(1, 0), (2, 1)]),
        (5, [2, 1], [(3, 0), (2, 3)]),
        (4, [1, 1, 1], [(1, 0), (1, 1), (2, 2)]),
        (64, [40, 24], [(40, 0), (24, 40)]),
    ],
)
def test_worked_splits(procs: int, cpus: list[int], shares: list[tuple[int, int]]) -> None:
    assert rank_shares(procs, cpus) == shares


@given(
    cpus=st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=8),
    mpl=st.floats(min_value=1.0, max_value=2.0),
)
def test_shares_tile_the_job_and_respect_the_mpl(cpus: list[int], mpl: float) -> None:
    total = sum(cpus)
    procs = min(2 * total, max(total, int(total * mpl)))
    shares = rank_shares(procs, cpus)
    assert sum(r for r, _ in shares) == procs
    first = 0
    for (ranks, offset), c in zip(shares, cpus, strict=True):
        assert offset == first
        assert c <= ranks <= 2 * c
        first += ranks
