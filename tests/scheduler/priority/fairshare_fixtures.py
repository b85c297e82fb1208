"""Shared by the fair-share tests: a head-first policy and the scheduling-algorithms
text's jack/jill cluster driven through the real core (jobs and snapshots come from
``tests.builders``)."""

from __future__ import annotations

from dataclasses import dataclass

from model.machine import Machine
from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Decisions, Snapshot, Start
from scheduler.planning.placement import Placement
from scheduler.priority.fairshare import FairShare
from tests.builders import job

DAY = 86400.0
HOUR = 3600.0


# -- helpers ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HeadFirst:
    """Minimal FCFS-like policy: start the first job of the priority order if it fits."""

    priority: FairShare
    name: str = "head-first"

    def decide(self, snapshot: Snapshot) -> Decisions:
        order = self.priority.order(snapshot)
        if not order:
            return Decisions()
        head = order[0]
        parts = Placement().place(head.procs, snapshot.free, snapshot.machines)
        return Decisions(starts=[Start(head, parts)] if parts is not None else [])


JACK_JILL = FairShare(shares=(("jack", 0.25), ("jill", 0.75)), decay=0.7)


def jack_jill_core() -> SchedulerCore:
    """Four one-CPU nodes; jack then jill each submit six whole-cluster six-hour jobs at 0.

    Jack submits first, so arrival order alone would start jack: fair-share must
    override it.
    """
    core = SchedulerCore(
        policy=HeadFirst(priority=JACK_JILL),
        machines=[Machine(id=f"node{i}", cpus=1) for i in range(1, 5)],
    )
    for user in ("jack", "jill"):
        for n in range(6):
            core.submit(job(f"{user}-{n}", 4, user=user, walltime=6 * HOUR))
    return core
