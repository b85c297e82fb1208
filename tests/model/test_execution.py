"""The one execution model, shared by the twin and the live agents (FCFS-malleable
paper, formulas (3) and (4))."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from model.execution import AllocationError, ExecutionModel, ModelKind, mpl
from tests.compiled_build import COMPILED


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


# -- the named models (the readings of formulas (3)/(4)) ----------------------------


def _time(model: ExecutionModel, *, procs: int, cpus: int, u: float, job: str = "j") -> float:
    """Wall seconds for 100 s of work at reference speed on a reference machine."""
    return 100 / model.rate(
        procs=procs, cpus=cpus, speed=1.0, ref_speed=1.0, cpu_util=u, job_id=job
    )


def test_max_model_makes_sharing_free_until_a_cpu_is_saturated() -> None:
    model = ExecutionModel(kind=ModelKind.MAX)
    # Two processes busy 40 % of the time each fit one CPU: no slowdown.
    assert _time(model, procs=8, cpus=4, u=0.4) == pytest.approx(100.0)
    # At u = 0.75, MPL 2 asks 1.5 CPUs of work from one: 1.5 times slower.
    assert _time(model, procs=8, cpus=4, u=0.75) == pytest.approx(150.0)
    # The linear model charges the same job 1 + 0.4 = 1.4 times.
    assert _time(ExecutionModel(), procs=8, cpus=4, u=0.4) == pytest.approx(140.0)


def test_paper_model_is_formulas_3_and_4_literally_with_a_per_job_ov() -> None:
    model = ExecutionModel(kind=ModelKind.PAPER, seed=7)
    ov = model.job_overhead("42")
    assert 0.0 <= ov < 1.0
    # (3) + (4): T * MPL * u + T * OV, at every MPL, expanded included.
    assert _time(model, procs=8, cpus=4, u=0.5, job="42") == pytest.approx(100 * (2 * 0.5 + ov))
    assert _time(model, procs=8, cpus=8, u=0.5, job="42") == pytest.approx(100 * (0.5 + ov))


def test_paper_model_draws_depend_on_seed_and_job_only() -> None:
    a = ExecutionModel(kind=ModelKind.PAPER, seed=1)
    draws = [a.job_overhead(str(i)) for i in range(2000)]
    if not COMPILED:  # compiled, a str for the ModelKind field is a TypeError at the call
        same = ExecutionModel(kind="paper", seed=1)  # type: ignore[arg-type]
        assert draws == [same.job_overhead(str(i)) for i in range(2000)]
    assert draws != [
        ExecutionModel(kind=ModelKind.PAPER, seed=2).job_overhead(str(i)) for i in range(2000)
    ]
    # Uniform on [0, 1): the mean of 2,000 draws is within 0.05 of 0.5.
    assert abs(sum(draws) / len(draws) - 0.5) < 0.05


def test_paper_model_needs_the_job() -> None:
    with pytest.raises(ValueError, match="job_id"):
        ExecutionModel(kind=ModelKind.PAPER).rate(
            procs=2, cpus=1, speed=1.0, ref_speed=1.0, cpu_util=1.0
        )


def test_every_model_says_what_it_is() -> None:
    assert ExecutionModel().describe() == {"kind": "linear", "overhead": 0.0}
    assert ExecutionModel(kind=ModelKind.PAPER, seed=3).describe()["seed"] == 3
