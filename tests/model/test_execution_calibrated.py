"""The calibrated execution model: u and OV measured per application
(``docs/design/execution-models.md``), and the memo that must key its rates by application."""

from __future__ import annotations

import pytest

from model.allocation import Allocation, AllocationMemo
from model.execution import AppParams, Calibration, ExecutionModel, ModelKind, UnknownAppError
from model.job import Job, JobError
from model.machine import Part

CAL = Calibration.of("test", {"cg": AppParams(u=0.99, ov=0.01), "halo": AppParams(0.32, 1.78)})
MODEL = ExecutionModel(kind=ModelKind.CALIBRATED, calibration=CAL)


def seconds(model: ExecutionModel, *, app: str | None, u: float = 1.0, cpus: int = 1) -> float:
    """Wall seconds of 100 s of work, 2 processes on ``cpus`` CPUs."""
    return 100 / model.rate(procs=2, cpus=cpus, speed=1.0, ref_speed=1.0, cpu_util=u, app=app)


def test_each_application_folds_at_its_measured_cost() -> None:
    assert seconds(MODEL, app="cg") == pytest.approx(200.0)
    assert seconds(MODEL, app="halo") == pytest.approx(310.0)


def test_expanded_jobs_take_their_own_time_whatever_the_application() -> None:
    assert seconds(MODEL, app="halo", cpus=2) == 100.0


def test_a_job_without_application_falls_back_to_linear_with_its_own_u() -> None:
    linear = ExecutionModel()
    for u in (0.2, 1.0):
        assert seconds(MODEL, app=None, u=u) == seconds(linear, app=None, u=u)


def test_an_application_the_calibration_lacks_is_refused() -> None:
    with pytest.raises(UnknownAppError, match="'lu' is not in calibration 'test'"):
        seconds(MODEL, app="lu")


def test_the_calibrated_kind_needs_a_calibration_and_only_it_takes_one() -> None:
    with pytest.raises(ValueError, match="needs a calibration"):
        ExecutionModel(kind=ModelKind.CALIBRATED)
    with pytest.raises(ValueError, match="needs a calibration"):
        ExecutionModel(kind=ModelKind.LINEAR, calibration=CAL)
    with pytest.raises(ValueError, match="each application's own"):
        ExecutionModel(kind=ModelKind.CALIBRATED, calibration=CAL, overhead=0.5)


@pytest.mark.parametrize(
    ("apps", "match"),
    [
        ({}, "no application"),
        ({"": AppParams(0.5)}, "empty"),
    ],
)
def test_a_bad_calibration_is_refused(apps: dict[str, AppParams], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Calibration.of("bad", apps)


@pytest.mark.parametrize(("u", "ov"), [(0.0, 0.0), (1.5, 0.0), (0.5, -0.1), (0.5, float("inf"))])
def test_parameters_outside_the_model_are_refused(u: float, ov: float) -> None:
    with pytest.raises(ValueError, match="must be"):
        AppParams(u, ov)


def test_a_summary_records_the_calibration() -> None:
    assert MODEL.describe() == {
        "kind": "calibrated",
        "calibration": "test",
        "apps": {"cg": {"u": 0.99, "ov": 0.01}, "halo": {"u": 0.32, "ov": 1.78}},
    }


def test_equal_tables_are_equal_calibrations_in_any_order() -> None:
    again = Calibration.of("test", {"halo": AppParams(0.32, 1.78), "cg": AppParams(0.99, 0.01)})
    assert again == CAL


def test_the_memo_keys_folded_rates_by_application() -> None:
    memo = AllocationMemo({"m": 1.0}, MODEL)
    alloc = memo.of((Part("m", 1),))
    cg = Job(id="a", submit=0, procs=2, walltime=10, runtime=10, app="cg")
    halo = Job(id="b", submit=0, procs=2, walltime=10, runtime=10, app="halo")
    plain = Job(id="c", submit=0, procs=2, walltime=10, runtime=10, cpu_util=0.5)
    for job in (cg, halo, plain, cg, halo, plain):
        assert memo.rate(alloc, job) == Allocation.of((Part("m", 1),), {"m": 1.0}).rate(job, MODEL)
    assert memo.rate(alloc, cg) != memo.rate(alloc, halo)


def test_a_job_application_is_a_name() -> None:
    with pytest.raises(JobError, match="app"):
        Job(id="a", submit=0, procs=1, walltime=1, app=" cg")
