"""EG-EDF: the Earliest Gap, Earliest Deadline First dispatching rule.

Klusáček, Rudová, Baraglia, Pasquali and Capannini, the EG-EDF paper,
sec. 3.2, on the machine model of its sec. 2. It is *schedule-based*: every
waiting job has a planned machine and start, and a new job is put into the
existing plan, which is not rebuilt from scratch at each arrival (sec. 1:
"the schedule is not rebuilt from scratch"). The plan, its machine model and
how it travels from one event to the next are ``scheduler.policies.eg_edf_plan``'s;
this module is the rule that places a new job in it.

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
the CPUs (a job planned to end exactly now may not have ended yet); otherwise
it waits as a reservation at now.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from model.job import Job
from scheduler.core.snapshot import Decisions, SnapshotView
from scheduler.planning.prediction import PlanRule
from scheduler.policies.eg_edf_plan import MachinePlan, Plan, Slot

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


def insert(plan: Plan, job: Job) -> MachinePlan | None:
    """Place a new job by EG-EDF; None if no machine can ever hold it."""
    procs = job.procs
    # ``MachinePlan.holds`` written out: this runs for every machine per new job.
    needs = job.needs
    candidates = [
        mp
        for mp in plan.machines
        if procs <= mp.machine.cpus and (not needs or needs <= mp.machine.capabilities)
    ]
    if not candidates:
        return None
    gaps: list[tuple[MachinePlan, float]] = []
    for mp in candidates:
        t = mp.gap(job)
        if t is not None:
            gaps.append((mp, t))
    if gaps:
        plan.gap_insertions += 1
        # S = 1: that gap; S >= 2: the gap of highest weight.
        mp, start = gaps[0] if len(gaps) == 1 else _best_gap(plan, job, gaps)
        slot = Slot(job, start, start + mp.duration(job), mp.parts(job))
        mp.book(slot)
        plan.nondelayed += slot.on_time
        return mp
    # S = 0: EDF into each machine's schedule, keep the one of highest weight.
    plan.edf_insertions += 1
    if len(candidates) == 1:
        _edf(plan, candidates[0], job)
        return candidates[0]
    makespan_old = plan.makespan()
    nondelayed_old = plan.nondelayed
    best: tuple[float, float, MachinePlan] | None = None
    for mp in candidates:
        trial = _edf(plan, mp, job)
        w = weight(
            makespan_old=makespan_old,
            makespan_new=plan.makespan(),
            nondelayed_old=nondelayed_old,
            nondelayed_new=plan.nondelayed,
        )
        end = trial.new.end
        if best is None or w > best[0] or (w == best[0] and end < best[1]):
            best = (w, end, mp)
        _undo_edf(plan, trial)
    assert best is not None
    _edf(plan, best[2], job)
    return best[2]


def _best_gap(
    plan: Plan, job: Job, gaps: Sequence[tuple[MachinePlan, float]]
) -> tuple[MachinePlan, float]:
    """The gap of highest weight (eq. (1)); ties to the earliest end, then machine order."""
    makespan_old = plan.makespan()
    nondelayed_old = plan.nondelayed
    now = plan.now
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


def _edf(plan: Plan, mp: MachinePlan, job: Job) -> _EdfTrial:
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
    prev = slots[at - 1].start if at else plan.now
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
    plan.nondelayed += delta
    return _EdfTrial(mp, at, new, tail, old, delta)


def _undo_edf(plan: Plan, trial: _EdfTrial) -> None:
    tl = trial.mp.timeline
    new = trial.new
    tl.release(new.start, new.end, new.job.procs)
    for s in trial.tail:
        tl.release(s.start, s.end, s.job.procs)
    for s, (start, end) in zip(trial.tail, trial.old, strict=True):
        s.start, s.end = start, end
        tl.reserve(start, end, s.job.procs)
    del trial.mp.slots[trial.at]
    plan.nondelayed -= trial.delta


@dataclass(slots=True, eq=False)
class _EdfTrial:
    """An EDF insertion, applied, with what undoing it needs."""

    mp: MachinePlan
    at: int
    new: Slot
    tail: list[Slot]
    old: list[tuple[float, float]]
    delta: int


def plan_for(snapshot: SnapshotView, *, keep_order: bool = True) -> Plan:
    """The previous plan, compacted, with every new queued job inserted by EG-EDF."""
    plan, fresh = Plan.from_snapshot(snapshot, keep_order=keep_order)
    for job in fresh:
        insert(plan, job)  # None: fits no machine, stays queued with no reservation
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

    @property
    def plan_rule(self) -> PlanRule:
        """What its predicted starts are (``scheduler.planning.prediction``)."""
        return PlanRule.RESERVATIONS

    def decide(self, snapshot: SnapshotView) -> Decisions:
        if not snapshot.queue:
            return Decisions()
        plan = plan_for(snapshot, keep_order=self.keep_order)
        decisions = plan.decisions(snapshot)
        decisions.counters = plan.counters()
        return decisions
