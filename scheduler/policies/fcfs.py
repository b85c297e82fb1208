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

from scheduler.alloc import take
from scheduler.placement import Placement
from scheduler.priority import PrioritySource
from scheduler.priority.fifo import Fifo
from scheduler.snapshot import Decisions, Snapshot, Start


@dataclass(frozen=True, slots=True, kw_only=True)
class Fcfs:
    priority: PrioritySource = field(default_factory=Fifo)
    placement: Placement = field(default_factory=Placement)
    name: str = "fcfs"

    def decide(self, snapshot: Snapshot) -> Decisions:
        free = dict(snapshot.free)
        total_free = sum(free.values())
        starts: list[Start] = []
        for job in self.priority.order(snapshot):
            if job.procs > total_free:
                break
            parts = self.placement.place(job.procs, free, snapshot.machines)
            if parts is None:
                break
            take(free, parts)
            total_free -= job.procs
            starts.append(Start(job, parts))
        return Decisions(starts=starts)
