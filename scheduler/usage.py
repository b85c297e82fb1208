"""The usage ledger behind fair-share: CPU-seconds per user and group per period.

Usage is charged when a job leaves the CPUs (finished, failed, cancelled),
split over the accounting periods its run overlapped, so a decayed sum over
periods (``scheduler.priority.fairshare``) can weigh recent use more than old
use. Running jobs are not in the ledger; the fair-share source adds their use
so far from the snapshot, so a long job counts before it ends.
"""

from __future__ import annotations

import math
from collections import defaultdict


class UsageLedger:
    """CPU-seconds charged per ``(kind, name, period)``; ``kind`` is ``"user"`` or ``"group"``."""

    def __init__(self, period: float = 86400.0) -> None:
        if not (period > 0 and math.isfinite(period)):
            raise ValueError(f"usage period must be > 0 seconds, got {period!r}")
        self._period = period
        self._charged: defaultdict[tuple[str, str, int], float] = defaultdict(float)
        self._names: dict[str, dict[str, None]] = {"user": {}, "group": {}}

    @property
    def period(self) -> float:
        return self._period

    def charge(self, *, user: str, group: str, start: float, end: float, cpus: int) -> None:
        """Charge ``cpus`` CPUs held from ``start`` to ``end``."""
        self._names["user"].setdefault(user, None)
        self._names["group"].setdefault(group, None)
        if end <= start or cpus <= 0:
            return
        for index, seconds in split_periods(start, end, self._period):
            amount = seconds * cpus
            self._charged["user", user, index] += amount
            self._charged["group", group, index] += amount

    def cpu_seconds(self, kind: str, name: str, period_index: int) -> float:
        """CPU-seconds charged to ``name`` (a user or group) in period ``period_index``."""
        return self._charged.get((kind, name, period_index), 0.0)

    def names(self, kind: str) -> list[str]:
        """Every user or group ever charged, in first-seen order."""
        return list(self._names[kind])


def split_periods(start: float, end: float, period: float) -> list[tuple[int, float]]:
    """``[(period index, seconds inside it)]`` for the interval ``[start, end)``."""
    out: list[tuple[int, float]] = []
    index = math.floor(start / period)
    t = start
    while t < end:
        boundary = (index + 1) * period
        upto = min(end, boundary)
        out.append((index, upto - t))
        t = upto
        index += 1
    return out
