"""The one allocation value: CPUs, pace, MPL, rate and expanded run time."""

from __future__ import annotations

import pytest

from model.allocation import Allocation, EmptyAllocationError, pace
from model.execution import AllocationError, ExecutionModel
from model.machine import Part
from tests.builders import job

SPEEDS = {"fast": 2.0, "slow": 0.5, "mid": 1.0}


def test_a_job_spanning_machines_goes_at_its_slowest_parts_pace() -> None:
    parts = (Part("fast", 4), Part("slow", 2), Part("mid", 2))
    alloc = Allocation.of(parts, SPEEDS)
    assert (alloc.cpus, alloc.pace) == (8, 0.5)
    assert pace(parts, SPEEDS) == 0.5
    assert pace((Part("fast", 3),), SPEEDS) == 2.0


def test_rate_is_the_execution_models_at_the_pace_and_mpl() -> None:
    alloc = Allocation.of((Part("fast", 2), Part("mid", 2)), SPEEDS)
    assert alloc.mpl(8) == 2.0
    # MPL 2 at u = 1 halves the speed ratio (pace 1.0 / reference 1.0).
    assert alloc.rate(job("j", 8), ExecutionModel()) == 0.5
    assert alloc.rate(job("j", 4), ExecutionModel()) == 1.0
    assert alloc.rate(job("j", 4, ref_speed=2.0), ExecutionModel()) == 0.5
    with pytest.raises(AllocationError):
        alloc.rate(job("j", 9), ExecutionModel())


def test_expanded_runtime_is_the_work_at_mpl_one_on_the_pace() -> None:
    alloc = Allocation.of((Part("fast", 4),), SPEEDS)
    assert alloc.expanded_runtime(100.0, 1.0) == 50.0
    assert alloc.expanded_runtime(100.0, 2.0) == 100.0


def test_an_allocation_is_checked_when_built() -> None:
    with pytest.raises(EmptyAllocationError):
        Allocation.of((), SPEEDS)
    with pytest.raises(ValueError, match="not their sum"):
        Allocation((Part("fast", 4),), 5, 2.0)
    with pytest.raises(ValueError, match="pace"):
        Allocation((Part("fast", 4),), 4, 0.0)
