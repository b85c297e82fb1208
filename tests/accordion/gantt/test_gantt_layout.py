"""The Gantt chart's rows (accordion.gantt.layout): no overlap, each bar's width, resizes
in place."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accordion.gantt.bars import (
    UNPLACED,
    Bar,
    BarKind,
    Gantt,
    GanttError,
    MachineRow,
    placement_bars,
)
from accordion.gantt.layout import Layout, lay_out
from model.machine import Part


def rows_of(layout: Layout, bar: int) -> set[int]:
    return {r for rect in layout.rects if rect.bar == bar for r in range(rect.bottom, rect.top)}


def test_a_shrink_keeps_the_lowest_of_its_rows_and_an_expand_adds_to_them() -> None:
    bars = placement_bars(
        "j",
        "u",
        [(0.0, (Part("m", 4),)), (10.0, (Part("m", 2),)), (20.0, (Part("m", 6),))],
        30.0,
    )
    other = Bar(job_id="k", user="v", machine="m", cpus=2, start=12.0, end=18.0)
    gantt = Gantt(title="t", machines=(MachineRow("m", 8),), bars=(*bars, other))
    layout = lay_out(gantt)
    first, shrunk, expanded = (rows_of(layout, i) for i in range(3))
    assert [len(first), len(shrunk), len(expanded)] == [4, 2, 6]
    assert shrunk < first  # in place: a subset of the rows it had
    assert shrunk < expanded
    # The rows the shrink gave back went to the job that started meanwhile.
    assert rows_of(layout, 3) <= first - shrunk
    assert layout.bands[0].height == 8


def test_a_running_job_and_its_planned_rest_share_rows() -> None:
    run = Bar(job_id="j", user="u", machine="m", cpus=3, start=0.0, end=5.0)
    rest = Bar(job_id="j", user="u", machine="m", cpus=3, start=5.0, end=9.0, kind=BarKind.PLANNED)
    before = Bar(job_id="k", user="u", machine="m", cpus=1, start=0.0, end=5.0)
    layout = lay_out(Gantt(title="t", machines=(MachineRow("m", 4),), bars=(before, run, rest)))
    assert rows_of(layout, 1) == rows_of(layout, 2)


def test_an_overcommitted_machine_grows_its_band_instead_of_drawing_on_the_next() -> None:
    bars = (
        Bar(job_id="a", user="u", machine="m", cpus=3, start=0.0, end=5.0),
        Bar(job_id="b", user="u", machine="m", cpus=3, start=1.0, end=4.0),
        Bar(job_id="c", user="u", machine="n", cpus=1, start=0.0, end=5.0),
    )
    layout = lay_out(Gantt(title="t", machines=(MachineRow("m", 4), MachineRow("n", 2)), bars=bars))
    m, n = layout.bands
    assert (m.height, m.cpus) == (6, 4)
    assert n.bottom == 6
    assert all(r.bottom >= n.bottom for r in layout.rects if r.bar == 2)


def test_planned_bars_without_machines_get_a_lane_of_their_own() -> None:
    bars = (
        Bar(job_id="a", user="u", machine=UNPLACED, cpus=5, start=0, end=5, kind=BarKind.PLANNED),
        Bar(job_id="b", user="u", machine="m", cpus=2, start=0, end=5),
    )
    layout = lay_out(Gantt(title="t", machines=(MachineRow("m", 2),), bars=bars))
    lane, m = layout.bands
    assert (lane.machine, lane.height, m.bottom) == (UNPLACED, 5, 5)


def test_bars_that_cannot_be_drawn_are_refused() -> None:
    with pytest.raises(GanttError, match="unknown machine"):
        Gantt(
            title="t",
            machines=(MachineRow("m", 2),),
            bars=(Bar(job_id="a", user="u", machine="x", cpus=1, start=0, end=1),),
        )
    with pytest.raises(GanttError, match="before it starts"):
        Bar(job_id="a", user="u", machine="m", cpus=1, start=2, end=1)
    with pytest.raises(GanttError, match="cpus"):
        Bar(job_id="a", user="u", machine="m", cpus=0, start=0, end=1)
    with pytest.raises(GanttError, match="unknown machine ''"):
        # Only a planned bar may lack a machine.
        Gantt(
            title="t",
            machines=(),
            bars=(Bar(job_id="a", user="u", machine=UNPLACED, cpus=1, start=0, end=1),),
        )


JOBS = st.lists(
    st.tuples(
        st.integers(0, 50),  # start
        st.integers(1, 30),  # length
        st.integers(1, 8),  # cpus
        st.sampled_from(["m", "n"]),
        st.integers(0, 2),  # resizes
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(JOBS)
def test_rows_never_overlap_and_each_bar_has_its_width(jobs: list[tuple[int, ...]]) -> None:
    bars: list[Bar] = []
    for k, (start, length, cpus, machine, resizes) in enumerate(jobs):
        steps = [
            (float(start + i * length), (Part(str(machine), cpus + i),)) for i in range(resizes + 1)
        ]
        bars += placement_bars(f"j{k}", "u", steps, float(start + (resizes + 1) * length))
    gantt = Gantt(title="t", machines=(MachineRow("m", 8), MachineRow("n", 4)), bars=tuple(bars))
    layout = lay_out(gantt)
    for i, bar in enumerate(gantt.bars):
        assert len(rows_of(layout, i)) == bar.cpus
    # At every instant, no row of a machine is held by two bars.
    held: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    for rect in layout.rects:
        bar = gantt.bars[rect.bar]
        for row in range(rect.bottom, rect.top):
            held[(bar.machine, row)].append((bar.start, bar.end))
    for spans in held.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end
    # Bands do not overlap either.
    for a, b in zip(layout.bands, layout.bands[1:], strict=False):
        assert b.bottom == a.bottom + a.height
