"""EG-EDF's schedule: one plan per machine, kept across events in the reservations.

The schedule-based policies of the EG-EDF paper (Klusáček, Rudová, Baraglia,
Pasquali and Capannini; EG-EDF, ``scheduler.policies.eg_edf``, and the Tabu
search over it, ``scheduler.policies.tabu``) keep a plan for every waiting
job. This module holds that plan: how it is read back from the previous
decision, compacted against what really happened, and handed back; the rule
that puts a new job into it lives with the policy.

Machine model (sec. 2). A job runs on one machine, never across machines
(sec. 4: "parallel jobs are always executed on only one machine"). Inside a
machine CPUs are space-shared: jobs run side by side while the CPUs in use
stay within the machine's ``R_m``. A job's duration on machine m is
``job.estimate_on(BM_m)``, the paper's ``Estimated * BM_ref / BM_m`` with the
user's estimate (the wall time): schedulers never see the real run time.

The plan. One :class:`MachinePlan` per machine: its planned jobs in start
order, each a :class:`Slot` ``[start, end)`` of ``procs`` CPUs, and a
:class:`~scheduler.planning.step_function.Timeline` of its free CPUs with the
running jobs and the slots booked. A pure policy keeps no state between calls,
so the plan travels in the decisions: every slot is returned as a
:class:`~scheduler.core.snapshot.Reservation` with one part (the job's ``procs`` on
its machine), and the core hands them back in ``snapshot.reservations``. At
the next event :meth:`Plan.from_snapshot`

1. books every slot again on its machine, in its previous order, beside the
   running jobs' planned ends (their estimated ends; a job that outlived its
   estimate is planned by ``scheduler.planning.overdue``, the rule every
   planner shares); a slot whose start has passed starts now;
2. *compacts* the plan against reality, since jobs end before (or after)
   their estimates: machine by machine, in plan order, each slot moves to the
   earliest start that fits, never before now and, with ``keep_order`` (the
   default), never before the slot planned before it on its machine. That is
   conservative backfilling's compression (Mu'alem and Feitelson), with the
   order kept. Only when a job that outlived its estimate still holds CPUs a
   slot counted on is the machine list-scheduled again in the same order,
   which is how a slot moves later;
3. returns the plan and the queued jobs it lacks (new arrivals), which
   EG-EDF (``scheduler.policies.eg_edf.insert``) then places one by one in
   arrival order.

Cost per event, with ``R`` running and ``K`` planned jobs and ``B``
breakpoints per machine: building ``O((R + K) log(R + K))``; compaction two
bisections and one C-level ``max`` over a slice per slot, a search only for a
slot that can move; a gap search ``O(B)`` per new job and machine; an EDF
insertion re-plans only the slots after it. A trace replay decides at every
event, often with hundreds of jobs planned (CTC-SP2: 77,000 jobs on one
338-CPU machine), so the per-slot work is kept to a few attribute reads and
C-level list operations.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from model.job import Job
from model.machine import Machine, Part
from scheduler.core.snapshot import Decisions, Reservation, SnapshotView, Start
from scheduler.planning.overdue import in_planned_order, planned_end
from scheduler.planning.step_function import Timeline

_INF = math.inf


@dataclass(slots=True, eq=False)
class Slot:
    """``job`` planned on ``parts`` (one machine) over ``[start, end)``.

    ``res`` is the reservation it was read back from, handed back unchanged
    when the slot has not moved (no new object per job per event).
    """

    job: Job
    start: float
    end: float
    parts: tuple[Part, ...]
    res: Reservation | None = None

    @property
    def on_time(self) -> bool:
        """Has a deadline and is planned to end by it (counted in ``nondelayed``)."""
        d = self.job.deadline
        return d is not None and self.end <= d

    @property
    def delayed(self) -> bool:
        """Has a deadline and is planned to end after it."""
        d = self.job.deadline
        return d is not None and self.end > d


def start_of(slot: Slot) -> float:
    """A slot's start: the key of every plan's start order."""
    return slot.start


class MachinePlan:
    """One machine's schedule: its slots in start order and its timeline."""

    __slots__ = ("machine", "now", "slots", "speed", "timeline")

    def __init__(
        self, machine: Machine, now: float, speed: float, slots: list[Slot], timeline: Timeline
    ) -> None:
        self.machine = machine
        self.now = now
        #: The machine's speed as the snapshot gives it (``speeds``), for durations.
        self.speed = speed
        self.slots = slots
        self.timeline = timeline

    @property
    def end(self) -> float:
        """The end of this machine's plan: its running and planned jobs."""
        return self.timeline.times[-1]

    def duration(self, job: Job) -> float:
        """The job's estimated run time on this machine (sec. 2)."""
        return job.estimate_on(self.speed)

    def parts(self, job: Job) -> tuple[Part, ...]:
        return (Part(self.machine.id, job.procs),)

    def holds(self, job: Job) -> bool:
        """Whether the job fits this machine at all (wide enough, able to run it)."""
        return job.procs <= self.machine.cpus and job.needs <= self.machine.capabilities

    def gap(self, job: Job) -> float | None:
        """The earliest gap for ``job`` (``scheduler.policies.eg_edf``), or None."""
        now = self.now
        times = self.timeline.times
        if len(times) == 1:
            # Nothing running or booked (most of a grid's machines): the same CPUs are
            # free for ever, so the gap is now or nowhere, without a search.
            return now if self.timeline.free[0] >= job.procs else None
        end = times[-1]
        # Idle CPUs right now are a gap even when nothing runs here (docstring).
        limit = end if end > now else math.nextafter(now, _INF)
        return self.timeline.earliest(job.procs, self.duration(job), now, before=limit)

    def book(self, slot: Slot) -> None:
        """Reserve ``slot`` and add it at its place in start order."""
        self.timeline.reserve(slot.start, slot.end, slot.job.procs)
        self.slots.insert(bisect_right(self.slots, slot.start, key=start_of), slot)

    def unbook(self, slot: Slot) -> None:
        """Release ``slot`` and take it out of the plan."""
        self.timeline.release(slot.start, slot.end, slot.job.procs)
        self.slots.remove(slot)  # slots compare by identity

    def shift_earlier(self, slot: Slot, *, not_before: float) -> Slot | None:
        """Move ``slot`` to its earliest start in ``[not_before, slot.start)``: the new
        slot, or None (nothing changed)."""
        job = slot.job
        d = self.duration(job)
        t = self.timeline.move_earlier(slot.start, slot.end, job.procs, d, not_before)
        if t is None:
            return None
        new = Slot(job, t, t + d, slot.parts)
        self.slots.remove(slot)
        self.slots.insert(bisect_right(self.slots, t, key=start_of), new)
        return new


@dataclass(slots=True, eq=False)
class Plan:
    """The whole schedule: one :class:`MachinePlan` per machine, in canonical order."""

    now: float
    machines: list[MachinePlan]
    #: Planned jobs with a deadline that end by it (the ``nondelayed`` of eq. (1)).
    nondelayed: int = 0
    gap_insertions: int = 0
    edf_insertions: int = 0
    by_id: dict[str, MachinePlan] = field(default_factory=dict)

    def makespan(self) -> float:
        """Footnote 1's makespan, measured from now (module docstring)."""
        return max(mp.timeline.times[-1] for mp in self.machines) - self.now

    # -- building -------------------------------------------------------------

    @classmethod
    def from_snapshot(
        cls, snapshot: SnapshotView, *, keep_order: bool = True
    ) -> tuple[Plan, list[Job]]:
        """The previous plan, compacted against reality, and the queued jobs not in it."""
        now = snapshot.now
        speeds = snapshot.speeds
        machines = snapshot.machines
        slots_of: dict[str, list[Slot]] = {m.id: [] for m in machines}
        cpus_of = {m.id: m.cpus for m in machines}

        queued = {j.id: j for j in snapshot.queue}
        pop = queued.pop
        # The previous reservations come back in the order they were returned,
        # machine by machine in plan order; the stable sort below keeps it at ties.
        for r in snapshot.reservations.values():
            job = pop(r.job.id, None)
            if job is None:
                continue  # started or cancelled since
            parts = r.parts
            mine = slots_of.get(parts[0].machine) if len(parts) == 1 else None
            if mine is None or parts[0].cpus != job.procs or job.procs > cpus_of[parts[0].machine]:
                queued[job.id] = job  # its machine left, or not a reservation of ours
                continue
            start = r.start if r.start > now else now
            end = start + job.estimate_on(speeds[parts[0].machine])
            mine.append(Slot(job, start, end, parts, r))
        # Arrival order for the newcomers, and for any job whose reservation was unusable.
        fresh = [j for j in snapshot.queue if j.id in queued] if queued else []

        # Releases of the machines that run something; most of a grid's are idle.
        # In planned-end order (``Timeline.of_releases`` wants them sorted); an overdue
        # job's planned end is ``planned_end``'s, ``est_end`` otherwise.
        releases: dict[str, list[tuple[float, int]]] = {}
        running = in_planned_order(now, snapshot.running)
        if len(machines) == 1:
            # One machine, the usual trace cluster: every running job is on it.
            releases[machines[0].id] = [
                (r.est_end if r.est_end >= now else planned_end(r.est_end, now), r.cpus)
                for r in running
            ]
        else:
            for run in running:
                t = run.est_end if run.est_end >= now else planned_end(run.est_end, now)
                for p in run.parts:
                    releases.setdefault(p.machine, []).append((t, p.cpus))

        free = snapshot.free
        plan = cls(now=now, machines=[])
        nondelayed = 0
        # Bound once: this loop runs for every machine at every event.
        add_plan = plan.machines.append
        by_id = plan.by_id
        constant = Timeline.constant
        of_releases = Timeline.of_releases
        for m in machines:
            mid = m.id
            slots = slots_of[mid]
            released = releases.get(mid, ())
            if not slots:
                # Nothing booked here: the timeline is the releases alone (an idle
                # machine's is one step, built without the general pass).
                timeline = (
                    of_releases(now, free[mid], released) if released else constant(now, free[mid])
                )
                mp = MachinePlan(m, now, speeds[mid], slots, timeline)
                add_plan(mp)
                by_id[mid] = mp
                continue
            slots.sort(key=start_of)
            mp = MachinePlan(
                m,
                now,
                speeds[mid],
                slots,
                Timeline.of(
                    now, free[mid], released, [(x.start, x.end, x.job.procs) for x in slots]
                ),
            )
            add_plan(mp)
            by_id[mid] = mp
            if mp.timeline.feasible():
                plan._compact(mp, keep_order=keep_order)
            else:
                mp.timeline = Timeline.of(now, free[mid], released)
                plan._replan(mp, keep_order=keep_order)
            for s in slots:
                d = s.job.deadline
                if d is not None and s.end <= d:
                    nondelayed += 1
        plan.nondelayed = nondelayed
        return plan, fresh

    def _compact(self, mp: MachinePlan, *, keep_order: bool) -> None:
        """Move each booked slot, in plan order, to its earliest start that fits.

        With the other slots booked where they are, a slot fits at an earlier
        instant exactly when list-scheduling the machine in this order would put
        it there: a slot that moves earlier only frees CPUs in later slots'
        windows. Without ``keep_order`` a slot may take a hole before the slot
        planned before it (conservative compression); the list is re-sorted.
        """
        now = self.now
        tl = mp.timeline
        # Reserving and releasing change these lists in place, never replace them.
        times = tl.times
        free = tl.free
        speed = mp.speed
        prev = now
        for s in mp.slots:
            start = s.start
            if start > prev:
                # ``Timeline.move_earlier``'s first test, inlined: this loop runs for
                # every planned job at every event, and most cannot move.
                i0 = bisect_right(times, prev) - 1
                if max(free[i0 : bisect_left(times, start, i0 + 1)]) >= s.job.procs:
                    job = s.job
                    d = job.estimate_on(speed)
                    t = tl.move_earlier(start, s.end, job.procs, d, prev)
                    if t is not None:
                        s.start, s.end = t, t + d
            if keep_order:
                prev = s.start
        if not keep_order:
            mp.slots.sort(key=start_of)

    def _replan(self, mp: MachinePlan, *, keep_order: bool) -> None:
        """List-schedule the machine's slots again in plan order on a timeline without them.

        Needed when the slots no longer fit together: a job outlived its
        estimate and holds CPUs a slot counted on, or a slot whose start had
        passed was moved to now and now runs into the next one.
        """
        now = self.now
        tl = mp.timeline
        prev = now
        for s in mp.slots:
            d = mp.duration(s.job)
            t = tl.earliest(s.job.procs, d, prev)
            assert t is not None, "every CPU of a machine is free after its last booking"
            s.start, s.end = t, t + d
            tl.reserve(t, t + d, s.job.procs)
            if keep_order:
                prev = t
        if not keep_order:
            mp.slots.sort(key=start_of)

    # -- output ---------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """How this decision's new jobs were placed: into a gap, or by EDF (S = 0)."""
        return {
            "eg_edf_gap_insertions": self.gap_insertions,
            "eg_edf_edf_insertions": self.edf_insertions,
        }

    def decisions(self, snapshot: SnapshotView) -> Decisions:
        """Start what is planned now and really fits; every other slot is a reservation."""
        now = self.now
        free = snapshot.free
        starts: list[Start] = []
        reservations: list[Reservation] = []
        add = reservations.append
        # Machine by machine in plan order: the order the next event reads back.
        for mp in self.machines:
            avail = free[mp.machine.id]
            for s in mp.slots:
                if s.start <= now and avail >= s.job.procs:
                    avail -= s.job.procs
                    starts.append(Start(s.job, s.parts))
                    continue
                res = s.res
                if res is not None and res.start == s.start and res.parts is s.parts:
                    add(res)  # unchanged: no new object per job per event
                else:
                    add(Reservation(s.job, s.start, s.parts))
        return Decisions(starts=starts, reservations=reservations)
