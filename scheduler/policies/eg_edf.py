"""EG-EDF: the Earliest Gap, Earliest Deadline First dispatching rule.

Klusáček, Rudová, Baraglia, Pasquali and Capannini, the EG-EDF paper,
sec. 3.2, on the machine model of its sec. 2. It is *schedule-based*: every
waiting job has a planned machine and start, and a new job is put into the
existing plan, which is not rebuilt from scratch at each arrival (sec. 1:
"the schedule is not rebuilt from scratch").

Machine model (sec. 2). A job runs on one machine, never across machines
(sec. 4: "parallel jobs are always executed on only one machine"). Inside a
machine CPUs are space-shared: jobs run side by side while the CPUs in use
stay within the machine's ``R_m``. A job's duration on machine m is
``job.estimate_on(BM_m)``, the paper's ``Estimated * BM_ref / BM_m`` with the
user's estimate (the wall time): schedulers never see the real run time.

The plan. One :class:`MachinePlan` per machine: its planned jobs in start
order, each a :class:`Slot` ``[start, end)`` of ``procs`` CPUs, and a
:class:`~scheduler.step_function.Timeline` of its free CPUs with the running jobs and the slots
booked. A pure policy keeps no state between calls, so the plan travels in
the decisions: every slot is returned as a
:class:`~scheduler.snapshot.Reservation` with one part (the job's ``procs`` on
its machine), and the core hands them back in ``snapshot.reservations``. At
the next event :meth:`Plan.from_snapshot`

1. books every slot again on its machine, in its previous order, beside the
   running jobs' estimated ends (an overdue end counts as now, a slot whose
   start has passed starts now);
2. *compacts* the plan against reality, since jobs end before (or after)
   their estimates: machine by machine, in plan order, each slot moves to the
   earliest start that fits, never before now and, with ``keep_order`` (the
   default), never before the slot planned before it on its machine. That is
   conservative backfilling's compression (Mu'alem and Feitelson), with the
   order kept. Only when a job that outlived its estimate still holds CPUs a
   slot counted on is the machine list-scheduled again in the same order,
   which is how a slot moves later;
3. returns the plan and the queued jobs it lacks (new arrivals), which
   :meth:`Plan.insert` then places one by one in arrival order.

EG-EDF, for a new job J (sec. 3.2). For each machine that can hold J
(``procs <= R_m``), its *earliest gap* is the earliest start where J's CPUs
stay idle for J's whole duration there, moving no planned job, and that
lies before the end of the machine's plan (the latest end of its running and
planned jobs): idle CPU time inside the schedule. CPUs idle right now count
as a gap even on an idle machine; otherwise a gap hours ahead on one machine
would win over a machine that can start J at once. ``S`` is the number of
machines with a gap:

* ``S >= 2``: the gap of highest weight, equation (1);
* ``S = 1``: that gap;
* ``S = 0``: J goes into each machine's schedule by EDF (after the last job
  whose EDF key is not later than J's; the jobs after it are re-planned in
  order and may move later), and the machine whose schedule then has the
  highest weight is kept.

Equation (1)::

    weight = weight_makespan + weight_deadline
    weight_makespan = (makespan_old - makespan_new) / makespan_old
    weight_deadline = (nondelayed_new - nondelayed_old) / nondelayed_old

Choices the paper leaves open:

* makespan (footnote 1, "the completion time of the last job in the
  schedule", running jobs included) is measured from now, not from the
  trace's epoch: otherwise, a year into a trace, the makespan term would
  shrink to nothing beside the deadline term;
* ``nondelayed`` counts the planned (not yet started) jobs with a deadline
  that end by it. Jobs without a deadline are never delayed, and running
  jobs' ends no decision can change: counting either would only inflate the
  denominator;
* zero denominators: a ``makespan_old`` below :data:`MIN_MAKESPAN` (one
  second) counts as one second and ``nondelayed_old = 0`` as one job, so the
  term is the plain difference: same sign, finite;
* ties in weight go to the candidate where J ends first, then to the
  canonical machine order (fastest first, then id). Among gaps, where nothing
  else moves, equation (1) only grows as J ends earlier, so the choice is
  J's earliest end;
* EDF order: by deadline; jobs without a deadline after every job with one,
  in arrival order (key ``(deadline or +inf, submit, id)``).

A job that fits no machine (``procs`` above every machine's CPUs) is skipped:
it stays queued with no reservation and holds nothing back. The twin reports
it stuck at the end of a replay, so EG-EDF needs a cluster where every job
fits one machine. A slot whose start is now starts if its machine really has
the CPUs (an overdue job's CPUs are only planned free); otherwise it waits as
a reservation at now.

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
from collections.abc import Sequence
from dataclasses import dataclass, field

from model.job import Job
from model.machine import Machine, Part
from scheduler.snapshot import Decisions, Reservation, Snapshot, Start
from scheduler.step_function import Timeline

MIN_MAKESPAN = 1.0
"""Seconds: the least ``makespan_old`` equation (1) divides by (the zero guard)."""

_INF = math.inf


def weight(
    *,
    makespan_old: float,
    makespan_new: float,
    nondelayed_old: int,
    nondelayed_new: int,
) -> float:
    """Equation (1), with the zero-denominator guard of the module docstring."""
    w_makespan = (makespan_old - makespan_new) / max(makespan_old, MIN_MAKESPAN)
    w_deadline = (nondelayed_new - nondelayed_old) / max(nondelayed_old, 1)
    return w_makespan + w_deadline


def edf_key(job: Job) -> tuple[float, float, str]:
    """EDF order: deadline first; jobs without one last, in arrival order."""
    return (job.deadline if job.deadline is not None else _INF, job.submit, job.id)


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


def _start_of(slot: Slot) -> float:
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
        """Whether the job fits this machine at all."""
        return job.procs <= self.machine.cpus

    def gap(self, job: Job) -> float | None:
        """The earliest gap for ``job`` (module docstring), or None."""
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
        self.slots.insert(bisect_right(self.slots, slot.start, key=_start_of), slot)

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
        self.slots.insert(bisect_right(self.slots, t, key=_start_of), new)
        return new


@dataclass(slots=True, eq=False)
class _EdfTrial:
    """An EDF insertion, applied, with what undoing it needs."""

    mp: MachinePlan
    at: int
    new: Slot
    tail: list[Slot]
    old: list[tuple[float, float]]
    delta: int


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
        cls, snapshot: Snapshot, *, keep_order: bool = True
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
        releases: dict[str, list[tuple[float, int]]] = {}
        if len(machines) == 1:
            # One machine, the usual trace cluster: every running job is on it.
            releases[machines[0].id] = [
                (r.est_end if r.est_end > now else now, r.cpus) for r in snapshot.running
            ]
        else:
            for run in snapshot.running:
                t = run.est_end if run.est_end > now else now
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
            slots.sort(key=_start_of)
            mp = MachinePlan(
                m,
                now,
                speeds[mid],
                slots,
                Timeline(now, free[mid], released, [(x.start, x.end, x.job.procs) for x in slots]),
            )
            add_plan(mp)
            by_id[mid] = mp
            if mp.timeline.feasible():
                plan._compact(mp, keep_order=keep_order)
            else:
                mp.timeline = Timeline(now, free[mid], released)
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
            mp.slots.sort(key=_start_of)

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
            mp.slots.sort(key=_start_of)

    # -- EG-EDF (sec. 3.2) ----------------------------------------------------

    def insert(self, job: Job) -> MachinePlan | None:
        """Place a new job by EG-EDF; None if no machine can ever hold it."""
        procs = job.procs
        # ``MachinePlan.holds`` written out: this runs for every machine per new job.
        candidates = [mp for mp in self.machines if procs <= mp.machine.cpus]
        if not candidates:
            return None
        gaps: list[tuple[MachinePlan, float]] = []
        for mp in candidates:
            t = mp.gap(job)
            if t is not None:
                gaps.append((mp, t))
        if gaps:
            self.gap_insertions += 1
            # S = 1: that gap; S >= 2: the gap of highest weight.
            mp, start = gaps[0] if len(gaps) == 1 else self._best_gap(job, gaps)
            slot = Slot(job, start, start + mp.duration(job), mp.parts(job))
            mp.book(slot)
            self.nondelayed += slot.on_time
            return mp
        # S = 0: EDF into each machine's schedule, keep the one of highest weight.
        self.edf_insertions += 1
        if len(candidates) == 1:
            self._edf(candidates[0], job)
            return candidates[0]
        makespan_old = self.makespan()
        nondelayed_old = self.nondelayed
        best: tuple[float, float, MachinePlan] | None = None
        for mp in candidates:
            trial = self._edf(mp, job)
            w = weight(
                makespan_old=makespan_old,
                makespan_new=self.makespan(),
                nondelayed_old=nondelayed_old,
                nondelayed_new=self.nondelayed,
            )
            end = trial.new.end
            if best is None or w > best[0] or (w == best[0] and end < best[1]):
                best = (w, end, mp)
            self._undo_edf(trial)
        assert best is not None
        self._edf(best[2], job)
        return best[2]

    def _best_gap(
        self, job: Job, gaps: Sequence[tuple[MachinePlan, float]]
    ) -> tuple[MachinePlan, float]:
        """The gap of highest weight (eq. (1)); ties to the earliest end, then machine order."""
        makespan_old = self.makespan()
        nondelayed_old = self.nondelayed
        now = self.now
        deadline = job.deadline
        best: tuple[float, float, MachinePlan, float] | None = None
        # :func:`weight` written out with its denominators taken once (the same
        # arithmetic, so the same floats): a grid has a gap on every idle machine.
        makespan_den = max(makespan_old, MIN_MAKESPAN)
        nondelayed_den = max(nondelayed_old, 1)
        for mp, start in gaps:
            end = start + mp.duration(job)
            # A gap moves no planned job: only J's own end and deadline count.
            makespan_new = max(makespan_old, end - now)
            nondelayed_new = nondelayed_old + (deadline is not None and end <= deadline)
            w = (makespan_old - makespan_new) / makespan_den + (
                nondelayed_new - nondelayed_old
            ) / nondelayed_den
            if best is None or w > best[0] or (w == best[0] and end < best[1]):
                best = (w, end, mp, start)
        assert best is not None
        return best[2], best[3]

    def _edf(self, mp: MachinePlan, job: Job) -> _EdfTrial:
        """Insert ``job`` into ``mp``'s order by EDF and re-plan the slots after it."""
        slots = mp.slots
        key = edf_key(job)
        at = len(slots)
        # After the last job whose key is not later: J never overtakes a job with an
        # earlier deadline, even one placed late (a job put in a gap may have a
        # later deadline than the jobs after it).
        while at > 0 and edf_key(slots[at - 1].job) > key:
            at -= 1
        tail = slots[at:]
        old = [(s.start, s.end) for s in tail]
        delta = -sum(s.on_time for s in tail)
        tl = mp.timeline
        for s in tail:
            tl.release(s.start, s.end, s.job.procs)
        prev = slots[at - 1].start if at else self.now
        d = mp.duration(job)
        start = tl.earliest(job.procs, d, prev)
        assert start is not None, "every CPU of a machine is free after its last booking"
        new = Slot(job, start, start + d, mp.parts(job))
        tl.reserve(new.start, new.end, job.procs)
        prev = start
        for s in tail:
            d = mp.duration(s.job)
            t = tl.earliest(s.job.procs, d, prev)
            assert t is not None, "every CPU of a machine is free after its last booking"
            s.start, s.end = t, t + d
            tl.reserve(t, t + d, s.job.procs)
            prev = t
        slots.insert(at, new)
        delta += sum(s.on_time for s in tail) + new.on_time
        self.nondelayed += delta
        return _EdfTrial(mp, at, new, tail, old, delta)

    def _undo_edf(self, trial: _EdfTrial) -> None:
        tl = trial.mp.timeline
        new = trial.new
        tl.release(new.start, new.end, new.job.procs)
        for s in trial.tail:
            tl.release(s.start, s.end, s.job.procs)
        for s, (start, end) in zip(trial.tail, trial.old, strict=True):
            s.start, s.end = start, end
            tl.reserve(start, end, s.job.procs)
        del trial.mp.slots[trial.at]
        self.nondelayed -= trial.delta

    # -- output ---------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """How this decision's new jobs were placed: into a gap, or by EDF (S = 0)."""
        return {
            "eg_edf_gap_insertions": self.gap_insertions,
            "eg_edf_edf_insertions": self.edf_insertions,
        }

    def decisions(self, snapshot: Snapshot) -> Decisions:
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


def plan_for(snapshot: Snapshot, *, keep_order: bool = True) -> Plan:
    """The previous plan, compacted, with every new queued job inserted by EG-EDF."""
    plan, fresh = Plan.from_snapshot(snapshot, keep_order=keep_order)
    for job in fresh:
        plan.insert(job)  # None: fits no machine, stays queued with no reservation
    return plan


@dataclass(frozen=True, slots=True, kw_only=True)
class EgEdf:
    """EG-EDF (sec. 3.2) on a plan kept across events in the reservations.

    ``keep_order``: compaction never moves a slot before the one planned before
    it on its machine (the default); False lets it take any earlier hole, as
    conservative backfilling does.
    """

    keep_order: bool = True
    name: str = "eg-edf"

    def decide(self, snapshot: Snapshot) -> Decisions:
        if not snapshot.queue:
            return Decisions()
        plan = plan_for(snapshot, keep_order=self.keep_order)
        decisions = plan.decisions(snapshot)
        decisions.counters = plan.counters()
        return decisions
