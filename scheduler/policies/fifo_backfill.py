"""FIFO with backfill, as the scheduling-algorithms text describes it.

"Jobs are run in the order that they're submitted, but when there's extra
capacity, the job queue is scanned for any job that will fit into the holes
created by unused nodes" (section "First-in, first-out with backfill"). No
reservation protects the job at the head, so unlike EASY a wide job can wait
indefinitely while narrow ones keep filling the holes: the text's trade-off,
kept here on purpose. Its worked example (jobs 123 to 126 on four nodes) runs
in seven hours at 89 % utilisation, a test.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.core.snapshot import Decisions, SnapshotView, Start
from scheduler.planning.placement import Placement, machines_for
from scheduler.planning.prediction import PlanRule
from scheduler.planning.scratch import take
from scheduler.priority import PrioritySource
from scheduler.priority.fifo import Fifo


@dataclass(frozen=True, slots=True, kw_only=True)
class FifoBackfill:
    priority: PrioritySource = field(default_factory=Fifo)
    placement: Placement = field(default_factory=Placement)
    name: str = "fifo-backfill"

    @property
    def plan_rule(self) -> PlanRule:
        """What its predicted starts are (``scheduler.planning.prediction``)."""
        return PlanRule.BACKFILL

    @property
    def idle_on_empty_queue(self) -> bool:
        """Nothing to decide on an empty queue (``scheduler.core.snapshot.Policy``)."""
        return True

    def decide(self, snapshot: SnapshotView) -> Decisions:
        free = dict(snapshot.free)
        total_free = sum(free.values())
        starts: list[Start] = []
        for job in self.priority.order(snapshot):
            if total_free == 0:
                break
            if job.procs > total_free:
                continue
            able = machines_for(job, snapshot.machines)
            parts = self.placement.for_job(job).place(job.procs, free, able)
            if parts is None:
                continue
            take(free, parts)
            total_free -= job.procs
            starts.append(Start(job, parts))
        return Decisions(starts=starts)
