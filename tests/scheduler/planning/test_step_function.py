"""The step function both planners share (``scheduler.planning.step_function``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scheduler.planning.step_function import Timeline

releases = st.lists(
    st.tuples(st.sampled_from([0.0, 1.0, 2.5, 2.5, 7.0, 30.0]), st.integers(1, 4)), max_size=8
)


@given(releases, st.integers(0, 8))
def test_of_releases_builds_what_the_general_pass_builds(
    ends: list[tuple[float, int]], free_now: int
) -> None:
    """In time order (what a snapshot's running jobs give) or not (the fallback)."""
    for given_order in (sorted(ends), ends):
        fast = Timeline.of_releases(0.0, free_now, given_order)
        general = Timeline.of(0.0, free_now, given_order)
        assert (fast.times, fast.free) == (general.times, general.free)


def test_releases_at_now_add_to_the_first_step() -> None:
    timeline = Timeline.of_releases(5.0, 1, [(5.0, 2), (9.0, 1), (9.0, 3)])
    assert timeline.times == [5.0, 9.0]
    assert timeline.free == [3, 7]
