"""Priority sources: the order in which a queue policy considers waiting jobs.

A priority source is pure: given a snapshot it returns the queue sorted by
decreasing priority. Any queue policy (``fcfs``, ``fifo-backfill``, ``easy``,
``conservative``, and the papers' policies) takes one, so ``easy`` ordered by
``fairshare`` is ``EasyBackfill(priority=FairShare(...))``. Sorts are stable
with total keys, so equal priorities keep arrival order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from model.job import Job
from scheduler.core.snapshot import SnapshotView


class PrioritySource(Protocol):
    @property
    def name(self) -> str: ...

    def order(self, snapshot: SnapshotView) -> Sequence[Job]:
        """The queue, highest priority first."""
        ...
