"""EASY backfilling: one reservation, for the job at the head.

Lifka's ANL/IBM SP scheduler as the DPSA paper (sec. III.A, Fig. 1) and the
FCFS-malleable paper (Fig. 2(b)) use it as their baseline: jobs start in
priority order while they fit; the first that does not fit gets a reservation
at the earliest time the running jobs' estimated ends free enough CPUs (the
*shadow time*, ``scheduler.planning.easy_shadow``); every later job in priority order
may start now ("backfill") if it fits now and either ends, by its estimate,
before the shadow time, or only uses CPUs that the reservation leaves over.
With exact estimates the head job therefore never starts later than its
reservation (a property test). On heterogeneous machines a job's estimate is
its wall time scaled to the pace of the allocation the placement rule picks.

Two paths, one rule. :meth:`EasyBackfill.decide_general` works on any cluster
(per-machine free CPUs, the placement rule, ``head_shadow``). On a cluster of
one machine every placement rule fits a job exactly when enough CPUs are free,
so :meth:`EasyBackfill.decide_one_machine` applies the same rule on integers
(``one_machine_shadow``: the reservation's walk in integers, an unchanged
promise handed back as the same object). It is kept because it pays:
``bench/replay/easy_paths.py`` replays each homogeneous trace under both in one
run and finds the same schedule job by job, with the general path taking
1.46x the CPU seconds of this one on KTH-SP2 (1.01 s against 0.69 s), 1.48x
on SDSC-SP2 (1.72 s against 1.16 s) and 1.46x on CTC-SP2 (3.15 s against
2.16 s), best of 3 interleaved runs on a loaded 2-core machine; in
instructions (``bench.replay.instructions``, CTC-SP2's first 20,000 jobs),
5,331 M against 3,720 M (1.43x). Every replay of a Parallel Workloads Archive
trace without a cluster file is on one machine, so this is the twin's hot path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import islice

from model.allocation import pace
from model.machine import Part
from scheduler.core.run_history import Predictor
from scheduler.core.snapshot import Decisions, Reservation, SnapshotView, Start
from scheduler.planning.easy_shadow import head_shadow, one_machine_shadow
from scheduler.planning.placement import Placement, PlacementRule, machines_for
from scheduler.planning.prediction import PlanRule
from scheduler.planning.scratch import start_while_fit, take
from scheduler.priority import PrioritySource
from scheduler.priority.fifo import Fifo


@dataclass(frozen=True, slots=True, kw_only=True)
class EasyBackfill:
    priority: PrioritySource = field(default_factory=Fifo)
    placement: Placement = field(default_factory=Placement)
    #: The run time it plans with: the user's estimate, or EASY++'s prediction
    #: (``last-two``; the core applies it, ``scheduler.core.run_history``).
    predictor: Predictor = Predictor.ESTIMATE
    name: str = "easy"
    #: One machine's single-part allocations by machine and width, built once and
    #: shared by every start of that width (``decide_one_machine``): values, so
    #: sharing them changes nothing, and a replay keeps one tuple and one ``Part``
    #: per width instead of per job (fewer objects for the garbage collector to walk).
    _one_parts: dict[str, dict[int, tuple[Part, ...]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def plan_rule(self) -> PlanRule:
        """What its predicted starts are (``scheduler.planning.prediction``)."""
        return PlanRule.BACKFILL

    @property
    def idle_on_empty_queue(self) -> bool:
        """Nothing to decide on an empty queue (``scheduler.core.snapshot.Policy``)."""
        return True

    def decide(self, snapshot: SnapshotView) -> Decisions:
        if len(snapshot.machines) == 1:
            return self.decide_one_machine(snapshot)
        return self.decide_general(snapshot)

    def decide_general(self, snapshot: SnapshotView) -> Decisions:
        """EASY on any cluster: per-machine free CPUs and the placement rule."""
        now = snapshot.now
        machines = snapshot.machines
        speeds = snapshot.speeds
        free = dict(snapshot.free)
        order = self.priority.order(snapshot)
        starts, i = start_while_fit(order, free, machines, self.placement)
        if i == len(order):
            return Decisions(starts=starts)
        total_free = sum(free.values())
        # The widest job a placement can still fit now: under ``single`` one machine's
        # free CPUs, otherwise all of them (the placement rules span machines). A job
        # wider is skipped without a placement search over every machine (the EG-EDF
        # grid has 150 machines and a long queue of jobs that fit none of them).
        single = self.placement.rule is PlacementRule.SINGLE
        room = max(free.values(), default=0) if single else total_free
        head = order[i]
        # The reservation is only worked out once some job could backfill at all: at
        # most events of a busy trace no waiting job fits the free CPUs.
        shadow_time = float("inf")
        extra: dict[str, int] = {}
        extra_cap = 0
        reservations: list[Reservation] = []
        computed = False
        fastest = machines[0].speed
        for job in order[i + 1 :]:
            if total_free == 0:
                break
            procs = job.procs
            if procs > room:
                continue
            if not computed:
                computed = True
                shadow = head_shadow(
                    snapshot, head, free=free, starts=starts, placement=self.placement
                )
                if shadow is None:
                    # The head can never run on these machines (e.g. a rule that never
                    # spans): it holds nothing back, and the rest backfills freely.
                    extra = dict(free)
                else:
                    shadow_time = shadow.reservation.start
                    extra = shadow.extra
                    reservations.append(shadow.reservation)
                extra_cap = _cap(free, extra, single=single)
            # Cheap test first: a job that cannot end by the shadow time even on the
            # fastest machine, and is wider than the left-over CPUs, cannot backfill.
            # (``Job.estimate_on`` written out: this line runs for most of a long queue.)
            if procs > extra_cap and now + job.walltime / (fastest / job.ref_speed) > shadow_time:
                continue
            able = machines_for(job, machines)
            rule = self.placement.for_job(job)
            parts = rule.place(procs, free, able)
            if parts is None:
                continue
            if now + job.estimate_on(pace(parts, speeds)) > shadow_time:
                # Runs past the shadow time: only the CPUs the reservation leaves over.
                if procs > extra_cap:
                    continue
                caps = {m: min(f, extra[m]) for m, f in free.items()}
                parts = rule.place(procs, caps, able)
                if parts is None:
                    continue
                take(extra, parts)
            take(free, parts)
            total_free -= procs
            room = max(free.values()) if single else total_free
            extra_cap = _cap(free, extra, single=single)
            starts.append(Start(job, parts))
        if not computed:
            shadow = head_shadow(snapshot, head, free=free, starts=starts, placement=self.placement)
            if shadow is not None:
                reservations.append(shadow.reservation)
        return Decisions(starts=starts, reservations=reservations)

    def decide_one_machine(self, snapshot: SnapshotView) -> Decisions:
        """:meth:`decide_general` on one machine, where every placement rule fits a
        job exactly when enough CPUs are free: the same rule on integers instead of
        per-machine maps (a homogeneous trace replays through here, at every event)."""
        now = snapshot.now
        (machine,) = snapshot.machines
        only = machine.id
        free = snapshot.free[only]
        order = self.priority.order(snapshot)
        starts: list[Start] = []
        n = len(order)
        i = 0
        by_width = self._one_parts.get(only)
        if by_width is None:
            by_width = self._one_parts[only] = {}
        while i < n:
            procs = order[i].procs
            if procs > free:
                break
            free -= procs
            parts = by_width.get(procs)
            if parts is None:
                parts = by_width[procs] = (Part(only, procs),)
            starts.append(Start(order[i], parts))
            i += 1
        if i == n:
            return Decisions(starts=starts)
        head = order[i]
        reservation: Reservation | None = None
        computed = False
        if free > 0:
            shadow_time = math.inf
            extra = 0
            speed = machine.speed
            # islice, not a slice: no copy of the rest of a long queue at every event.
            for job in islice(order, i + 1, None):
                procs = job.procs
                if procs > free:
                    continue
                if not computed:
                    computed = True
                    reservation, extra = one_machine_shadow(
                        snapshot, head, free=free, starts=starts
                    )
                    if reservation is None:
                        extra = free  # the head never runs (see decide_general): no reservation
                    else:
                        shadow_time = reservation.start
                # (``Job.estimate_on`` written out, as in ``decide_general``.)
                if now + job.walltime / (speed / job.ref_speed) > shadow_time:
                    if procs > extra:
                        continue
                    extra -= procs
                free -= procs
                parts = by_width.get(procs)
                if parts is None:
                    parts = by_width[procs] = (Part(only, procs),)
                starts.append(Start(job, parts))
                if free == 0:
                    break
        if not computed:
            reservation, _ = one_machine_shadow(snapshot, head, free=free, starts=starts)
        # Positional: Decisions(starts, resizes, reservations, counters), once per event.
        return Decisions(starts, [], [] if reservation is None else [reservation], {})


def _cap(free: dict[str, int], extra: dict[str, int], *, single: bool) -> int:
    """CPUs a job running past the shadow time may take: free now and left over then,
    on one machine under the ``single`` rule, over all of them otherwise."""
    if single:
        return max((min(f, extra[m]) for m, f in free.items()), default=0)
    return sum(min(f, extra[m]) for m, f in free.items())
