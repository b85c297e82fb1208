"""The one execution model (DESIGN.md point 4, FCFS-malleable formula (3)/(4))."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from model.execution import AllocationError, ExecutionModel, mpl


def test_expanded_rate_is_the_speed_ratio() -> None:
    m = ExecutionModel()
    assert m.rate(procs=8, cpus=8, speed=2.0, ref_speed=1.0, cpu_util=0.3) == 2.0


def test_mpl_two_with_full_utilisation_halves_progress() -> None:
    # The FCFS-malleable paper's footnote 1: two processes on one CPU run twice slower.
    assert ExecutionModel().rate(procs=8, cpus=4, speed=1.0, ref_speed=1.0, cpu_util=1.0) == 0.5


def test_overhead_adds_formula_4_term() -> None:
    # At MPL 2 and u = 1 a job of expanded time T takes 2T + OV*T (formula (4)).
    rate = ExecutionModel(overhead=0.5).rate(
        procs=2, cpus=1, speed=1.0, ref_speed=1.0, cpu_util=1.0
    )
    assert 100 / rate == pytest.approx(250.0)


@pytest.mark.parametrize(("procs", "cpus"), [(8, 3), (8, 9), (1, 0), (5, 2)])
def test_mpl_outside_one_to_two_is_refused(procs: int, cpus: int) -> None:
    with pytest.raises(AllocationError):
        mpl(procs, cpus)


@given(
    procs=st.integers(1, 512),
    data=st.data(),
    u=st.floats(0.01, 1.0),
    speed=st.floats(0.1, 10.0),
)
def test_rate_is_between_half_and_full_speed(
    procs: int, data: st.DataObject, u: float, speed: float
) -> None:
    cpus = data.draw(st.integers((procs + 1) // 2, procs))
    r = ExecutionModel().rate(procs=procs, cpus=cpus, speed=speed, ref_speed=1.0, cpu_util=u)
    assert 1.0 <= mpl(procs, cpus) <= 2.0
    assert speed / 2 - 1e-12 <= r <= speed + 1e-12
