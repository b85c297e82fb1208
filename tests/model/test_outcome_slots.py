"""Records built through their slots (model.outcome) equal the ones the classes build."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from model.machine import Part
from model.outcome import JobOutcome, Segment, make_outcome, make_segment
from tests.builders import job

TIMES = st.floats(0, 1e7, allow_nan=False)


@given(TIMES, TIMES, st.integers(1, 512), TIMES)
def test_built_through_the_slots_equals_built_by_the_class(
    start: float, length: float, cpus: int, expanded: float
) -> None:
    j = job("j", cpus, walltime=10.0, runtime=5.0)
    seg = make_segment(start, start + length, cpus)
    assert seg == Segment(start, start + length, cpus)
    out = make_outcome(j, start, start + length, (Part("m", cpus),), (seg,), expanded)
    assert out == JobOutcome(
        job=j,
        start=start,
        end=start + length,
        parts=(Part("m", cpus),),
        segments=(Segment(start, start + length, cpus),),
        expanded_runtime=expanded,
    )
    assert out.failed is False
    assert hash(out) == hash(
        JobOutcome(
            job=j,
            start=start,
            end=start + length,
            parts=(Part("m", cpus),),
            segments=(seg,),
            expanded_runtime=expanded,
        )
    )
