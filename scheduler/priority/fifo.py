"""First in, first out: arrival (submit) order, the default priority source."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from model.job import Job
from scheduler.core.snapshot import SnapshotView


@dataclass(frozen=True, slots=True, kw_only=True)
class Fifo:
    """The queue as it arrived (the core appends submissions in order)."""

    name: str = "fifo"

    def order(self, snapshot: SnapshotView) -> Sequence[Job]:
        return snapshot.queue
