"""Trace windows (``accordion.experiments.twin_options``) and their effect on a loaded workload."""

from __future__ import annotations

from pathlib import Path

import pytest

from accordion.experiments.runs import load_workload
from accordion.experiments.twin_options import Window
from workload.swf import write_swf
from workload.synthetic import SyntheticSpec, generate, header


@pytest.mark.parametrize(
    ("text", "window"),
    [("0:20000", Window(0, 20000)), ("20000:", Window(20000, None)), (":5", Window(0, 5))],
)
def test_window_parses(text: str, window: Window) -> None:
    assert Window.parse(text) == window


@pytest.mark.parametrize("text", ["5", "a:b", "10:5", "3:3", "-1:4"])
def test_bad_window_is_one_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match="window"):
        Window.parse(text)


def test_jobs_is_the_window_from_zero_and_not_both() -> None:
    assert Window.of(None, 7) == Window(0, 7)
    with pytest.raises(ValueError, match="not both"):
        Window.of("0:5", 5)


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    spec = SyntheticSpec(jobs=120, cpus=32, seed=3)
    path = tmp_path / "t.swf"
    write_swf(path, generate(spec), header=header(spec))
    return path


def test_window_keeps_those_positions_and_their_submit_times(trace: Path) -> None:
    whole = load_workload(trace, cluster=None)
    part = load_workload(trace, cluster=None, window=Window(40, 70))
    assert [j.id for j in part.jobs] == [j.id for j in whole.jobs[40:70]]
    assert part.jobs[0].submit == whole.jobs[40].submit
    assert part.describe()["window"] == "40:70"


def test_cpus_overrides_the_header_and_skips_wider_jobs(trace: Path) -> None:
    small = load_workload(trace, cluster=None, cpus=8)
    assert sum(m.cpus for m in small.machines) == 8
    assert all(j.procs <= 8 for j in small.jobs)
    assert small.skipped["too_big"] > 0
