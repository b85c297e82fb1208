"""Cluster time: what ``now`` means for the live scheduler.

Theory of operation. Every time the scheduler core, the journal and the wire
carry is in *cluster seconds*. A live run may compress time by a factor ``K``
(``time_scale``): one wall second is ``K`` cluster seconds, so a job whose
wall time (or work) is ``w`` cluster seconds runs ``w / K`` wall seconds on the
agents. Every metric the scheduler reports says which base it uses: schedule
times are cluster seconds (= wall seconds x K); decision times and timeouts of
the runtime itself (heartbeats, summary rate) are wall seconds.

:class:`WallClock` counts from an *epoch* ``t0`` (a Unix time, stored in the
journal so a restarted scheduler keeps counting where it left off):
``now = (time.time() - t0) * K``. It reads the wall clock once, at
construction, and advances with ``time.monotonic`` after that, so a step of
the system clock (NTP) cannot make agents look silent or jobs look late.

:class:`ManualClock` is the clock tests and tools drive by hand. Real time is
a clock like any other, not an ``if`` in the code that reads it (SimPy's
``RealtimeEnvironment`` is a subclass with a factor, in the same spirit).
"""

from __future__ import annotations

import math
import time
from typing import Protocol


class Clock(Protocol):
    """A source of cluster time."""

    @property
    def time_scale(self) -> float:
        """``K``: cluster seconds per wall second."""
        ...

    def now(self) -> float:
        """Cluster seconds since the epoch."""
        ...


def _check_scale(time_scale: float) -> float:
    if not (time_scale > 0 and math.isfinite(time_scale)):
        raise ValueError(f"time scale must be a finite number > 0, got {time_scale!r}")
    return float(time_scale)


class WallClock:
    """Cluster time from the wall clock: ``(time.time() - epoch) * time_scale``."""

    __slots__ = ("_base", "_epoch", "_mono0", "_scale")

    def __init__(self, *, time_scale: float = 1.0, epoch: float | None = None) -> None:
        self._scale = _check_scale(time_scale)
        wall = time.time()
        self._epoch = wall if epoch is None else float(epoch)
        if not math.isfinite(self._epoch):
            raise ValueError(f"epoch must be a finite Unix time, got {epoch!r}")
        # Anchor once, then follow the monotonic clock (see the module docstring).
        self._base = (wall - self._epoch) * self._scale
        self._mono0 = time.monotonic()

    @property
    def time_scale(self) -> float:
        return self._scale

    @property
    def epoch(self) -> float:
        """The Unix time at which cluster time was 0."""
        return self._epoch

    def now(self) -> float:
        return self._base + (time.monotonic() - self._mono0) * self._scale

    def wall_seconds(self, cluster_seconds: float) -> float:
        """How long ``cluster_seconds`` take in wall seconds."""
        return cluster_seconds / self._scale


class ManualClock:
    """A clock that moves only when told to (tests, tools)."""

    __slots__ = ("_now", "_scale")

    def __init__(self, start: float = 0.0, *, time_scale: float = 1.0) -> None:
        self._now = float(start)
        self._scale = _check_scale(time_scale)

    @property
    def time_scale(self) -> float:
        return self._scale

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` cluster seconds; returns the new time."""
        if not seconds >= 0:
            raise ValueError(f"a clock cannot go back (advance by {seconds!r})")
        self._now += seconds
        return self._now

    def set(self, now: float) -> None:
        if not now >= self._now:
            raise ValueError(f"a clock cannot go back (from {self._now} to {now!r})")
        self._now = float(now)
