"""DPSA: EASY's reservation, then an exhaustive search for the best hole filling.

Grudenic and Bogunovic, "Computer Cluster Scheduling Algorithm Based on Time
Bounded Dynamic Programming", sec. III.B and its Fig. 2, line by line:

* lines 3-7: jobs start in priority order while the top one fits (as EASY);
* line 8: the first that does not fit, ``p0``, gets EASY's reservation: the
  shadow time and the CPUs left over at it (``scheduler.planning.easy_shadow.shadow_for``,
  shared with EASY, so a promise given once is kept);
* lines 9-10: the eligible jobs are the other waiting jobs that need no more
  than the CPUs free now;
* lines 15-29, *OptimizeUtilization*: a depth-first search over the eligible
  list, each call adding one job after the last one added, so every subset is
  built once. The best subset is the one using the most CPUs (lines 16-18:
  only a strictly better one replaces it); line 12 starts it.

"Delaying the reservation" (line 21: the *feasible resources* of a job are
"currently free resources that either have no future reservation or future
reservation do not conflict with immediate execution"). A job added to the
subset must fit the CPUs still free now and either

* end, by its estimate on the CPUs it gets, no later than the shadow time: it
  gives its CPUs back before ``p0`` needs them; or
* use only CPUs that are left over at the shadow time (EASY's *extra* CPUs):
  free now, still free then, and not part of ``p0``'s reservation.

Line 23 gives a job the feasible CPUs "with minimal availability": a short
job takes CPUs that ``p0`` will need later and saves the extra ones for long
jobs. On one machine that is pure integer arithmetic on ``(free, extra)``: a
short job takes ``procs`` from ``free``, a long one from ``free`` and
``extra``, and a set of jobs is feasible exactly when all of them fit ``free``
and the long ones fit ``extra``, in any order. On several machines each search
node places its job with the placement rule on a scratch copy of the free
(and extra) CPUs, as EASY does, and undoes it when the search backs up.

Variants (sec. III.C) differ only in how subsets of equal utilisation rank:

* ``p`` (DPSAp): the list is in priority order. The search visits subsets in
  lexicographic order of their list positions, so the first subset found
  with a given utilisation is the one whose highest-priority job ranks
  highest, then its second, and so on: the paper's rule ("DPSAp variant is
  inherently implemented");
* ``n`` (DPSAn) and ``w`` (DPSAw): the list is presorted by size, ascending
  and descending (ties in priority order), "instead of priority (line 10)",
  so the first subset found favours small, respectively wide, jobs.

The time bound (sec. III.B, last paragraph: "a time or iteration count
constriction on the top of the procedure"): by default a budget of node
expansions, one per call of *OptimizeUtilization* (the root included), so a
replay is deterministic; with an injected ``clock`` (the live runtime passes
``time.monotonic``), ``time_budget`` seconds instead. Out of budget the search
stops and the best subset so far starts. Every search reports
``dpsa_searches``, ``dpsa_expansions`` and ``dpsa_budget_hits`` in the
decision's counters (the core sums them over a run).

Prunings make the search visit fewer nodes without changing the subset an
unbounded search returns (the first one, in search order, of the highest
utilisation):

* a job that cannot fit the CPUs left is skipped (line 22);
* a branch is not entered when even all the jobs after it could not use more
  CPUs than the best subset so far (on one machine: short jobs plus long
  jobs up to the extra CPUs), and the search stops once a subset reaches that
  bound at the root: only a strictly better subset would replace the best
  (line 16);
* of interchangeable jobs (equal size, and on one machine a short job stands
  in for a long one; on several machines equal estimates) only the first is
  tried at a given depth: a later one would only build subsets of the same
  utilisation that come later in search order. Traces queue dozens of
  one-CPU jobs; without this a search that cannot fill every CPU tries every
  way of choosing among them;
* on one machine a branch is fixed by ``(next position, free, extra)``; a
  state reached again is not searched again (the dynamic programming of the
  paper's title, as a memo of states searched).

Default budget: ``DEFAULT_BUDGET`` node expansions (see its note for the
measurement on CTC-SP2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from model.allocation import pace
from model.job import Job
from model.machine import Capability, Machine, Part
from scheduler.core.snapshot import Decisions, Reservation, SnapshotView, Start
from scheduler.planning.easy_shadow import head_shadow
from scheduler.planning.placement import Placement, machines_for
from scheduler.planning.prediction import PlanRule
from scheduler.planning.scratch import give, start_while_fit, take
from scheduler.priority import PrioritySource
from scheduler.priority.fifo import Fifo

Variant = Literal["p", "n", "w"]

DEFAULT_BUDGET = 1000
"""Node expansions per search.

Measured on CTC-SP2 (338 CPUs, 77,222 jobs, FIFO priority), unbounded: every
DPSAp search needs at most 567 expansions and every DPSAw one fewer than
500; of 49,622 DPSAn searches all but 5 need under 1,000 (those 5: about
2,400 to 2,700, a 64-CPU job behind dozens of one-CPU ones). An expansion
costs 2 to 6 µs of CPU on those hard searches (it scans the eligible list),
so 1,000 caps the worst search near 5 ms, half the 10 ms we allow a decision,
while the budget binds in one search per replay or none: DPSAp and DPSAw give
the unbounded schedule, DPSAn a mean bounded slowdown of 34.28 against 34.10.
"""


@dataclass(frozen=True, slots=True)
class _Found:
    """What a search returns: list positions of the best subset and its cost."""

    chosen: tuple[int, ...]
    expansions: int
    hit: bool
    #: The chosen jobs' parts, in ``chosen`` order (the several-machine search only).
    parts: tuple[tuple[Part, ...], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Dpsa:
    """DPSA with one of its three variants (see the module docstring)."""

    variant: Variant = "p"
    priority: PrioritySource = field(default_factory=Fifo)
    placement: Placement = field(default_factory=Placement)
    #: Node expansions per search (the deterministic bound; ignored with a clock).
    budget: int = DEFAULT_BUDGET
    #: Reads seconds (``time.monotonic`` in a live run); the twin never injects one.
    clock: Callable[[], float] | None = None
    #: Seconds per search when ``clock`` is given; without a clock it is not used,
    #: so one configuration serves the twin and, with a clock added, a live run.
    time_budget: float | None = None
    name: str = "dpsa-p"

    @property
    def plan_rule(self) -> PlanRule:
        """What its predicted starts are (``scheduler.planning.prediction``)."""
        return PlanRule.BACKFILL

    def __post_init__(self) -> None:
        if self.variant not in ("p", "n", "w"):
            raise ValueError(f"dpsa variant must be 'p', 'n' or 'w', got {self.variant!r}")
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < 1:
            raise ValueError(f"dpsa budget must be >= 1 node expansion, got {self.budget!r}")
        if self.time_budget is not None and not (
            self.time_budget > 0 and math.isfinite(self.time_budget)
        ):
            raise ValueError(
                f"dpsa time_budget must be a finite number of seconds > 0, got {self.time_budget!r}"
            )
        if self.clock is not None and self.time_budget is None:
            raise ValueError("dpsa: a clock is only used with a time_budget (seconds); give one")

    def decide(self, snapshot: SnapshotView) -> Decisions:
        now = snapshot.now
        machines = snapshot.machines
        free = dict(snapshot.free)
        order = self.priority.order(snapshot)
        # Lines 3-7: top-priority jobs start while they fit.
        starts, i = start_while_fit(order, free, machines, self.placement)
        if i == len(order):
            return Decisions(starts=starts)
        total_free = sum(free.values())

        # Line 8: EASY's reservation for p0.
        head = order[i]
        shadow = head_shadow(snapshot, head, free=free, starts=starts, placement=self.placement)
        reservations: list[Reservation] = []
        if shadow is None:
            # p0 can never run on these machines (a rule that never spans): it holds
            # nothing back, as in EASY, and every free CPU is left over.
            shadow_time = math.inf
            extra = dict(free)
        else:
            shadow_time = shadow.reservation.start
            extra = shadow.extra
            reservations.append(shadow.reservation)

        # Lines 9-10: the eligible jobs, in the variant's search order.
        if total_free == 0:
            return Decisions(starts=starts, reservations=reservations)
        fastest = machines[0].speed  # canonical order: fastest first
        cap = sum(min(f, extra[m]) for m, f in free.items())
        # A job that runs past the shadow time even on the fastest machine must fit
        # the left-over CPUs; one wider than those can never join a subset, so it is
        # dropped here rather than skipped at every node of the search.
        eligible = [
            job
            for job in order[i + 1 :]
            if job.procs <= total_free
            and (job.procs <= cap or now + job.estimate_on(fastest) <= shadow_time)
        ]
        if not eligible:
            return Decisions(starts=starts, reservations=reservations)
        if self.variant == "n":
            eligible.sort(key=_procs)  # stable: equal sizes stay in priority order
        elif self.variant == "w":
            eligible.sort(key=_minus_procs)

        # Line 11: OptimizeUtilization.
        budget, out_of_time = self._bound()
        if len(machines) == 1:
            only = machines[0]
            procs = [job.procs for job in eligible]
            long = [now + job.estimate_on(only.speed) > shadow_time for job in eligible]
            found = _search_one(
                procs, long, free[only.id], extra[only.id], budget=budget, out_of_time=out_of_time
            )
            # Line 12: start the best subset.
            starts.extend(Start(eligible[k], (Part(only.id, procs[k]),)) for k in found.chosen)
        else:
            found = _search_many(
                eligible,
                free,
                extra,
                now=now,
                shadow_time=shadow_time,
                machines=machines,
                speeds=snapshot.speeds,
                placement=self.placement,
                budget=budget,
                out_of_time=out_of_time,
            )
            starts.extend(
                Start(eligible[k], parts)
                for k, parts in zip(found.chosen, found.parts, strict=True)
            )
        counters = {
            "dpsa_budget_hits": int(found.hit),
            "dpsa_searches": 1,
            "dpsa_expansions": found.expansions,
        }
        return Decisions(starts=starts, reservations=reservations, counters=counters)

    def _bound(self) -> tuple[int, Callable[[], bool] | None]:
        """The search's limit: expansions, or (with a clock) a deadline in seconds."""
        clock = self.clock
        time_budget = self.time_budget
        if clock is None or time_budget is None:
            return self.budget, None
        deadline = clock() + time_budget

        def out_of_time() -> bool:
            return clock() >= deadline

        # Seconds replace expansions: the count is then unbounded on its own.
        return 2**62, out_of_time


def _procs(job: Job) -> int:
    return job.procs


def _minus_procs(job: Job) -> int:
    return -job.procs


def _suffix_sums(procs: Sequence[int]) -> list[int]:
    """``out[k]`` = CPUs of all jobs from position ``k`` on: the most a branch can add."""
    out = [0] * (len(procs) + 1)
    for k in range(len(procs) - 1, -1, -1):
        out[k] = out[k + 1] + procs[k]
    return out


def _search_one(
    procs: Sequence[int],
    long: Sequence[bool],
    free: int,
    extra: int,
    *,
    budget: int,
    out_of_time: Callable[[], bool] | None,
) -> _Found:
    """OptimizeUtilization on one machine: feasibility is integer arithmetic.

    ``long[k]`` says job ``k`` runs past the shadow time and so must fit
    ``extra`` too. The recursion of Fig. 2 is unrolled onto an explicit stack
    (``nexts``: per depth, the next list position to try) because a subset can
    hold as many jobs as there are free CPUs, deeper than Python's recursion
    limit on a large machine.

    Prunings (none changes the subset returned, see the module docstring):

    * bound: from position ``k`` on a branch can add at most the short jobs'
      CPUs plus the long jobs' CPUs up to ``extra`` (and never more than
      ``free``, which cannot prune: ``util + free`` is the root's free CPUs);
    * twins: job ``k`` is not tried at a depth that started at or before
      ``covered[k]``, an earlier job of its size that is short or as long as
      it; whatever ``k`` would build, that job built (or could not);
    * states: util is the root's free CPUs minus ``free``, so a branch is
      fixed by ``(next position, free, extra)``; one reached before, by a
      subset that comes earlier in search order, is not searched again.
    """
    n = len(procs)
    short_left = _suffix_sums([0 if lg else p for p, lg in zip(procs, long, strict=True)])
    long_left = _suffix_sums([p if lg else 0 for p, lg in zip(procs, long, strict=True)])
    covered = _covered_by(procs, long)
    # The most any subset can use: once reached, nothing later can do strictly better.
    target = min(free, short_left[0] + min(extra, long_left[0]))
    # Branch states as one int each, ``(position * width + free) * height + extra``.
    width = free + 1
    height = extra + 1
    searched: set[int] = set()
    best_util = 0
    best: tuple[int, ...] = ()
    chosen: list[int] = []
    nexts = [0]
    util = 0
    expansions = 1  # the root call, with the empty subset (never better than nothing)
    hit = False
    while nexts and best_util < target:
        k = nexts[-1]
        depth_start = chosen[-1] + 1 if chosen else 0
        p = 0
        while k < n:
            lg = long_left[k]
            if util + short_left[k] + (lg if lg < extra else extra) <= best_util:
                k = n  # every job left together would not beat the best: back up
                break
            p = procs[k]
            if p <= free and covered[k] < depth_start and (p <= extra or not long[k]):
                break
            k += 1
        if k == n:
            nexts.pop()
            if chosen:
                j = chosen.pop()
                q = procs[j]
                util -= q
                free += q
                if long[j]:
                    extra += q
            continue
        nexts[-1] = k + 1
        after = extra - p if long[k] else extra
        state = ((k + 1) * width + free - p) * height + after
        if state in searched:
            continue
        searched.add(state)
        if expansions >= budget or (out_of_time is not None and out_of_time()):
            hit = True
            break
        expansions += 1
        chosen.append(k)
        util += p
        free -= p
        extra = after
        if util > best_util:
            best_util = util
            best = tuple(chosen)
        nexts.append(k + 1)
    return _Found(best, expansions, hit)


def _covered_by(procs: Sequence[int], long: Sequence[bool]) -> list[int]:
    """Per job, the last earlier job of its size that can stand in for it, else -1.

    A short job stands in for a short or a long one of its size (it needs only
    the free CPUs, a long one the extra ones too); a long job only for a long one.
    """
    last_short: dict[int, int] = {}
    last_any: dict[int, int] = {}
    out: list[int] = []
    for k, (p, lg) in enumerate(zip(procs, long, strict=True)):
        out.append(last_any.get(p, -1) if lg else last_short.get(p, -1))
        last_any[p] = k
        if not lg:
            last_short[p] = k
    return out


def _search_many(
    jobs: Sequence[Job],
    free: dict[str, int],
    extra: dict[str, int],
    *,
    now: float,
    shadow_time: float,
    machines: Sequence[Machine],
    speeds: Mapping[str, float],
    placement: Placement,
    budget: int,
    out_of_time: Callable[[], bool] | None,
) -> _Found:
    """OptimizeUtilization on several machines: the placement rule on scratch maps.

    ``free`` and ``extra`` are the caller's scratch copies; every change is
    undone when the search backs up (and they are not used afterwards). Of the
    prunings of :func:`_search_one` this keeps the plain bound (every job left,
    up to the free CPUs) and twins, here jobs of equal size and equal estimate,
    which the placement rule treats alike. Kept simple: traces are one machine.
    """
    n = len(jobs)
    procs = [job.procs for job in jobs]
    left = _suffix_sums(procs)
    covered: list[int] = []
    last: dict[tuple[int, float, frozenset[Capability], bool], int] = {}
    for k, job in enumerate(jobs):
        # Twins need the same machines too: a command job is no twin of a sleep job,
        # nor a job that must run on one machine of one that may span.
        key = (job.procs, job.walltime * job.ref_speed, job.needs, job.one_machine)
        covered.append(last.get(key, -1))
        last[key] = k
    total_free = sum(free.values())
    target = min(total_free, left[0])
    best_util = 0
    best: tuple[int, ...] = ()
    best_parts: tuple[tuple[Part, ...], ...] = ()
    chosen: list[int] = []
    holds: list[tuple[tuple[Part, ...], bool]] = []  # per chosen job: its parts, past shadow?
    nexts = [0]
    util = 0
    expansions = 1
    hit = False

    def fit(job: Job) -> tuple[tuple[Part, ...], bool] | None:
        """The job's parts now and whether they run past the shadow time (EASY's test)."""
        able = machines_for(job, machines)
        rule = placement.for_job(job)
        parts = rule.place(job.procs, free, able)
        if parts is None:
            return None
        if now + job.estimate_on(pace(parts, speeds)) <= shadow_time:
            return parts, False
        caps = {m: min(f, extra[m]) for m, f in free.items()}
        parts = rule.place(job.procs, caps, able)
        return None if parts is None else (parts, True)

    while nexts and best_util < target:
        k = nexts[-1]
        depth_start = chosen[-1] + 1 if chosen else 0
        got: tuple[tuple[Part, ...], bool] | None = None
        while k < n:
            if util + min(total_free, left[k]) <= best_util:
                k = n
                break
            if procs[k] <= total_free and covered[k] < depth_start:
                got = fit(jobs[k])
                if got is not None:
                    break
            k += 1
        if k == n or got is None:
            nexts.pop()
            if chosen:
                j = chosen.pop()
                parts, past = holds.pop()
                give(free, parts)
                if past:
                    give(extra, parts)
                util -= procs[j]
                total_free += procs[j]
            continue
        nexts[-1] = k + 1
        if expansions >= budget or (out_of_time is not None and out_of_time()):
            hit = True
            break
        expansions += 1
        parts, past = got
        take(free, parts)
        if past:
            take(extra, parts)
        chosen.append(k)
        holds.append(got)
        util += procs[k]
        total_free -= procs[k]
        if util > best_util:
            best_util = util
            best = tuple(chosen)
            best_parts = tuple(h[0] for h in holds)
        nexts.append(k + 1)
    return _Found(best, expansions, hit, best_parts)
