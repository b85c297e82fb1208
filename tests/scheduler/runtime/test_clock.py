"""Cluster time: the wall clock with a compression factor, and the manual clock of tests."""

from __future__ import annotations

import pytest

import scheduler.runtime.clock as clock_module
from scheduler.runtime.clock import ManualClock, WallClock


class FakeTime:
    def __init__(self, wall: float, mono: float) -> None:
        self.wall = wall
        self.mono = mono

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono


def test_wall_clock_counts_cluster_seconds_from_its_epoch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeTime(wall=1_000.0, mono=50.0)
    monkeypatch.setattr(clock_module, "time", fake)
    clock = WallClock(time_scale=10.0, epoch=990.0)
    assert clock.now() == 100.0  # 10 wall seconds since the epoch, x 10
    fake.mono += 2.0
    assert clock.now() == 120.0
    assert clock.wall_seconds(120.0) == 12.0
    # A step of the system clock does not move cluster time (monotonic after the anchor).
    fake.wall += 3600.0
    assert clock.now() == 120.0


def test_wall_clock_without_epoch_starts_at_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clock_module, "time", FakeTime(wall=5.0, mono=1.0))
    clock = WallClock()
    assert (clock.now(), clock.epoch, clock.time_scale) == (0.0, 5.0, 1.0)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf"), float("nan")])
def test_a_time_scale_must_be_positive_and_finite(scale: float) -> None:
    with pytest.raises(ValueError, match="time scale"):
        WallClock(time_scale=scale)
    with pytest.raises(ValueError, match="time scale"):
        ManualClock(time_scale=scale)


def test_manual_clock_moves_only_forward() -> None:
    clock = ManualClock(10.0, time_scale=4.0)
    assert (clock.now(), clock.time_scale) == (10.0, 4.0)
    assert clock.advance(2.5) == 12.5
    clock.set(20.0)
    assert clock.now() == 20.0
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance(-1.0)
    with pytest.raises(ValueError, match="cannot go back"):
        clock.set(19.0)
