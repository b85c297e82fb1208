"""Tabu search over the EG-EDF plan.

Klusáček et al., the EG-EDF paper, sec. 3.3. EG-EDF (``scheduler.policies.
eg_edf``, sec. 3.2) only ever places the newly arrived job; the Tabu search
then moves already planned jobs into earliest gaps to raise the number of
jobs that meet their deadline and the machine usage. Running jobs are never
moved (no preemption).

One iteration:

1. pick the machine with the most delayed jobs (planned end after the
   deadline) that still has a delayed job not in the tabu list; machines with
   equal counts are taken in canonical order (fastest first, then id);
2. take its last such job (last in the machine's start order) and put it in
   the tabu list, which is bounded: the oldest entry goes when it is full;
3. try to move the job to the earliest gap of each machine in canonical
   order, its own machine included (module ``eg_edf`` defines the gap: idle
   CPUs for the job's whole duration, starting before that machine's plan
   ends, moving no planned job). On its own machine only an earlier start is
   a move: a gap before jobs planned ahead of it, which compaction never
   uses when it keeps each machine's order (``keep_order``, the default);
4. the first move whose weight (equation (1)) is positive is kept, and
   ``makespan_old`` and ``nondelayed_old`` become the new values; a move that
   does not improve is undone and the next machine is tried.

The search ends when no delayed job outside the tabu list is left or after
``max_iterations`` iterations.

Why "delayed" in step 2: the paper stops "when there are no delayed non-tabu
jobs", so the jobs it works on are the delayed ones; taking the machine's last
job whatever its state would spend iterations on jobs that meet their
deadline while delayed ones wait. A consequence, checked by a property test:
a move changes no other job's end (a gap moves nobody), and the moved job was
delayed, so ``nondelayed`` never drops, and when it stays the same a kept move
has shortened the makespan.

Defaults (the paper gives none): a tabu list of :data:`DEFAULT_TABU_SIZE`
jobs and :data:`DEFAULT_MAX_ITERATIONS` iterations per decision. A policy is
pure, so the tabu list lives for one decision; twice as many iterations as
the list holds let a job leave it and be tried again after other moves have
changed the plan, and the bound keeps a decision cheap on a long plan (a
trace replay makes one at every arrival and end).
The search runs after every decision that inserted a job, as the paper runs
it on the schedule EG-EDF has just extended ("Such schedule is then
optimized using the Tabu search algorithm", abstract).

Counters: ``tabu_iterations`` and ``tabu_moves`` (kept moves), summed by the core.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field

from scheduler.core.snapshot import Decisions, SnapshotView
from scheduler.planning.prediction import PlanRule
from scheduler.policies.eg_edf import plan_for, weight
from scheduler.policies.eg_edf_plan import MachinePlan, Plan, Slot, start_of

DEFAULT_TABU_SIZE = 8
"""Jobs kept in the tabu list (the oldest leaves when a ninth comes in)."""

DEFAULT_MAX_ITERATIONS = 16
"""Iterations per decision: each is one gap search per machine."""


@dataclass(frozen=True, slots=True)
class TabuResult:
    """What one search did: iterations run and the weight of every kept move."""

    iterations: int
    weights: tuple[float, ...]

    @property
    def moves(self) -> int:
        return len(self.weights)


@dataclass(frozen=True, slots=True, kw_only=True)
class TabuSearch:
    """Sec. 3.3's search; see the module docstring."""

    tabu_size: int = DEFAULT_TABU_SIZE
    max_iterations: int = DEFAULT_MAX_ITERATIONS

    def __post_init__(self) -> None:
        _check_sizes(self.tabu_size, self.max_iterations)

    def optimise(self, plan: Plan) -> TabuResult:
        """Improve ``plan`` in place; returns what was done."""
        delayed: dict[str, list[Slot]] = {
            mp.machine.id: [s for s in mp.slots if s.delayed] for mp in plan.machines
        }
        if not any(delayed.values()):
            return TabuResult(0, ())
        tabu: deque[str] = deque(maxlen=self.tabu_size)
        makespan_old = plan.makespan()
        nondelayed_old = plan.nondelayed
        iterations = 0
        weights: list[float] = []
        # Job id -> (kept moves, trace left) when all its moves were last turned down.
        # While no move has been kept since, every timeline is the same and so is the
        # answer: the job is picked (an iteration, a tabu entry) but not searched
        # again; only the trace its undone moves left (``_Trial``) is left again,
        # since other jobs' traces may have moved it in the order meanwhile.
        exhausted: dict[str, tuple[int, bool]] = {}
        while iterations < self.max_iterations:
            picked = _pick(plan, delayed, tabu)
            if picked is None:
                break
            src, slot = picked
            iterations += 1
            tabu.append(slot.job.id)
            known = exhausted.get(slot.job.id)
            if known is not None and known[0] == len(weights):
                if known[1]:
                    _put_back(src, slot)
                continue
            # A move changes the ends of two plans only, src's and dst's: the rest's
            # latest end is read from the two highest, not from every machine per move.
            top = _two_latest(plan.machines, src)
            trial = _Trial.of(plan, slot, src, top)
            for dst in plan.machines:
                if not dst.holds(slot.job):
                    continue
                if dst is src:
                    moved = _move(plan, slot, src, dst)
                    if moved is None:
                        continue
                    w = weight(
                        makespan_old=makespan_old,
                        makespan_new=_makespan_after(plan.now, top, src, dst),
                        nondelayed_old=nondelayed_old,
                        nondelayed_new=plan.nondelayed,
                    )
                else:
                    # Weighed before it is made: a move to another machine that does not
                    # improve is never booked (the same floats as booking and reading).
                    found = trial.weigh(dst, makespan_old, nondelayed_old)
                    if found is None:
                        continue
                    w, start = found
                    if w > 0:
                        moved = _move_to(plan, slot, src, dst, start)
                    else:
                        trial.turned_down()
                        continue
                if w > 0:
                    makespan_old = plan.makespan()
                    nondelayed_old = plan.nondelayed
                    weights.append(w)
                    delayed[src.machine.id].remove(moved[0])
                    if moved[1].delayed:
                        _insert_by_start(delayed[dst.machine.id], moved[1])
                    break
                _move_back(plan, moved[1], dst, moved[0], src)
                trial.traced = True
            else:
                if not trial.passed_over:
                    exhausted[slot.job.id] = (len(weights), trial.traced)
        return TabuResult(iterations, tuple(weights))


def _pick(
    plan: Plan, delayed: dict[str, list[Slot]], tabu: deque[str]
) -> tuple[MachinePlan, Slot] | None:
    """The last delayed non-tabu job of the machine with the most delayed jobs."""
    # A stable sort keeps the canonical machine order among equal counts; machines
    # with no delayed job have nothing to pick and are left out of it.
    holding = [mp for mp in plan.machines if delayed[mp.machine.id]]
    for mp in sorted(holding, key=lambda mp: -len(delayed[mp.machine.id])):
        for s in reversed(delayed[mp.machine.id]):
            if s.job.id not in tabu:
                return mp, s
    return None


@dataclass(slots=True, eq=False)
class _Trial:
    """One iteration's candidate moves of ``slot`` off ``src``, weighed without booking.

    A move to another machine puts the job in that machine's earliest gap, which
    moves no planned job: the plan after it differs from the plan before in the
    job's slot alone, so equation (1) follows from three numbers known in advance
    (``src``'s plan end without the job, the latest end elsewhere, the deadline
    count) and the gap's end. Only an improving move is booked; the others used
    to be booked and undone, most of the search's time.

    Undoing left one trace, which is kept: the job's slot went back into
    ``src``'s start order after any slot with the same start (``MachinePlan.book``),
    and that order is the plan the next event reads back. :meth:`turned_down`
    does the same. A machine is passed over without a gap search when no gap
    there can improve: the job cannot meet its deadline there even starting
    now, and taking it off ``src`` cannot lower the makespan (the plan ends as
    late elsewhere or on ``src`` without it); then the move's deadline term is
    0 and its makespan term at most 0. That shortcut is taken only when the
    slot already sits last among equal starts, so that skipping a search can
    not skip the trace of an undone move either.
    """

    plan: Plan
    slot: Slot
    src: MachinePlan
    top: _Latest
    src_end_without: float
    hopeless_makespan: bool
    settled: bool
    #: Some tried move was turned down (and so left its trace).
    traced: bool = False
    #: Some machine was passed over without a search: whether a move there would
    #: have been turned down (and left a trace) is not known.
    passed_over: bool = False

    @classmethod
    def of(cls, plan: Plan, slot: Slot, src: MachinePlan, top: _Latest) -> _Trial:
        tl = src.timeline
        src_end = tl.times[-1]
        procs = slot.job.procs
        tl.release(slot.start, slot.end, procs)
        src_end_without = tl.times[-1]
        tl.reserve(slot.start, slot.end, procs)
        end1 = top[0][0]
        hopeless = max(end1, src_end_without) >= max(end1, src_end)
        # Where book() would put the slot back: the same place, or not.
        slots = src.slots
        at = slots.index(slot)  # slots compare by identity
        rest = slots[:at] + slots[at + 1 :]
        settled = bisect_right(rest, slot.start, key=start_of) == at
        return cls(plan, slot, src, top, src_end_without, hopeless, settled)

    def weigh(
        self, dst: MachinePlan, makespan_old: float, nondelayed_old: int
    ) -> tuple[float, float] | None:
        """Equation (1) of moving the job to ``dst``'s earliest gap, and the gap's
        start; None if ``dst`` has no gap (or none that can improve, docstring)."""
        job = self.slot.job
        now = self.plan.now
        deadline = job.deadline
        duration = dst.duration(job)
        if (
            self.settled
            and self.hopeless_makespan
            and deadline is not None
            and now + duration > deadline
        ):
            self.passed_over = True
            return None
        start = dst.gap(job)
        if start is None:
            return None
        end = start + duration
        (end1, mp1), (end2, _) = self.top
        rest = end2 if mp1 is dst else end1
        makespan_new = max(rest, self.src_end_without, dst.timeline.times[-1], end) - now
        on_time = deadline is not None and end <= deadline
        nondelayed_new = nondelayed_old + on_time - self.slot.on_time
        w = weight(
            makespan_old=makespan_old,
            makespan_new=makespan_new,
            nondelayed_old=nondelayed_old,
            nondelayed_new=nondelayed_new,
        )
        return w, start

    def turned_down(self) -> None:
        """A weighed move that does not improve: leave the trace booking and undoing
        it would have left (the class docstring)."""
        self.traced = True
        if not self.settled:
            _put_back(self.src, self.slot)
            self.settled = True


def _put_back(mp: MachinePlan, slot: Slot) -> None:
    """Take ``slot`` out of ``mp``'s start order and put it back where ``book`` would:
    after every slot with the same start."""
    slots = mp.slots
    slots.remove(slot)  # slots compare by identity
    slots.insert(bisect_right(slots, slot.start, key=start_of), slot)


def _move_to(
    plan: Plan, slot: Slot, src: MachinePlan, dst: MachinePlan, start: float
) -> tuple[Slot, Slot]:
    """Move ``slot`` to ``dst`` at ``start`` (its earliest gap there)."""
    job = slot.job
    src.unbook(slot)
    new = Slot(job, start, start + dst.duration(job), dst.parts(job))
    dst.book(new)
    plan.nondelayed += new.on_time - slot.on_time
    return slot, new


def _move(plan: Plan, slot: Slot, src: MachinePlan, dst: MachinePlan) -> tuple[Slot, Slot] | None:
    """Move ``slot`` to ``dst``'s earliest gap; returns ``(old, new)`` slots, or None."""
    job = slot.job
    if dst is src:
        # On its own machine the earliest gap is only a move if it is earlier.
        new = src.shift_earlier(slot, not_before=plan.now)
        if new is None:
            return None
    else:
        # Another machine's timeline does not hold the job: search before releasing it.
        start = dst.gap(job)
        if start is None:
            return None
        src.unbook(slot)
        new = Slot(job, start, start + dst.duration(job), dst.parts(job))
        dst.book(new)
    plan.nondelayed += new.on_time - slot.on_time
    return slot, new


_Latest = tuple[tuple[float, MachinePlan | None], tuple[float, MachinePlan | None]]


def _two_latest(machines: list[MachinePlan], src: MachinePlan) -> _Latest:
    """The two latest plan ends among ``machines`` other than ``src``, with their plans
    (``-inf`` and None where there are fewer)."""
    first: tuple[float, MachinePlan | None] = (-math.inf, None)
    second = first
    for mp in machines:
        if mp is src:
            continue
        end = mp.timeline.times[-1]
        if end > first[0]:
            # Two statements, not ``first, second = (end, mp), first``: mypyc (1.x)
            # mistypes that swap's tuple and refuses the None of an empty slot.
            second = first
            first = (end, mp)
        elif end > second[0]:
            second = (end, mp)
    return first, second


def _makespan_after(now: float, top: _Latest, src: MachinePlan, dst: MachinePlan) -> float:
    """``Plan.makespan`` after a move from ``src`` to ``dst``: the same maximum over the
    same ends (so the same number), with every other machine's end taken from ``top``."""
    (end1, mp1), (end2, _) = top
    rest = end2 if mp1 is dst else end1
    return max(rest, src.timeline.times[-1], dst.timeline.times[-1]) - now


def _move_back(plan: Plan, new: Slot, dst: MachinePlan, old: Slot, src: MachinePlan) -> None:
    dst.unbook(new)
    src.book(old)
    plan.nondelayed += old.on_time - new.on_time


def _insert_by_start(slots: list[Slot], slot: Slot) -> None:
    i = len(slots)
    while i > 0 and slots[i - 1].start > slot.start:
        i -= 1
    slots.insert(i, slot)


@dataclass(frozen=True, slots=True, kw_only=True)
class EgEdfTabu:
    """EG-EDF (sec. 3.2) followed by the Tabu search (sec. 3.3) at every decision
    that inserted a job."""

    #: Jobs kept in the tabu list, and iterations per decision (sec. 3.3; our defaults).
    tabu_size: int = DEFAULT_TABU_SIZE
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    keep_order: bool = True
    name: str = "eg-edf-tabu"
    tabu: TabuSearch = field(init=False, repr=False, compare=False)

    @property
    def plan_rule(self) -> PlanRule:
        """What its predicted starts are (``scheduler.planning.prediction``)."""
        return PlanRule.RESERVATIONS

    def __post_init__(self) -> None:
        # Fields of the policy itself, so a caller sets them as policy options.
        search = TabuSearch(tabu_size=self.tabu_size, max_iterations=self.max_iterations)
        object.__setattr__(self, "tabu", search)

    def decide(self, snapshot: SnapshotView) -> Decisions:
        if not snapshot.queue:
            return Decisions(counters={"tabu_iterations": 0, "tabu_moves": 0})
        plan = plan_for(snapshot, keep_order=self.keep_order)
        result = (
            self.tabu.optimise(plan)
            if plan.gap_insertions or plan.edf_insertions
            else TabuResult(0, ())
        )
        decisions = plan.decisions(snapshot)
        decisions.counters = plan.counters()
        decisions.counters["tabu_iterations"] = result.iterations
        decisions.counters["tabu_moves"] = result.moves
        return decisions


def _check_sizes(tabu_size: int, max_iterations: int) -> None:
    for label, value, least in (
        ("tabu_size", tabu_size, 1),
        ("max_iterations", max_iterations, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"tabu: {label} must be a whole number >= {least}, got {value!r}")
