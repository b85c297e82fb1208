"""FCFS: first come, first served.

The baseline of every paper here (FCFS-malleable paper, Fig. 2(a); EG-EDF
paper, sec. 4): jobs start in priority order (arrival order by default)
while the job at the head fits; the first job that does not fit blocks all
behind it. Several jobs may run at once, which is how the FCFS-malleable paper
draws it; the scheduling-algorithms text's "first-in, first-out" chart, which
runs one job at a time, is not this policy (our ``fcfs`` runs 123 and 124 of
its job mix side by side).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.core.snapshot import Decisions, SnapshotView
from scheduler.planning.placement import Placement
from scheduler.planning.prediction import PlanRule
from scheduler.planning.scratch import start_while_fit
from scheduler.priority import PrioritySource
from scheduler.priority.fifo import Fifo


@dataclass(frozen=True, slots=True, kw_only=True)
class Fcfs:
    priority: PrioritySource = field(default_factory=Fifo)
    placement: Placement = field(default_factory=Placement)
    name: str = "fcfs"

    @property
    def plan_rule(self) -> PlanRule:
        """What its predicted starts are (``scheduler.planning.prediction``)."""
        return PlanRule.IN_ORDER

    @property
    def idle_on_empty_queue(self) -> bool:
        """Nothing to decide on an empty queue (``scheduler.core.snapshot.Policy``)."""
        return True

    def decide(self, snapshot: SnapshotView) -> Decisions:
        starts, _ = start_while_fit(
            self.priority.order(snapshot), dict(snapshot.free), snapshot.machines, self.placement
        )
        return Decisions(starts=starts)
