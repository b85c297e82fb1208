"""FCFS-malleable: FCFS that makes room by virtual malleability.

Utrera et al., "A Job Scheduling Approach for Multi-core Clusters Based on
Virtual Malleability", sec. 3.1, Algorithm 1 and Fig. 2(c). A malleable job
keeps its ``p`` processes and runs on ``c`` CPUs with ``ceil(p/2) <= c <= p``
(MPL ``p/c`` at most 2, the paper's maximum); expanded means ``c = p``. How
fast it progresses at an MPL is not this module's business: the core and the
twin both take it from the shared execution model (``model.execution``, the
paper's formula (3), with formula (4)'s ``OV`` as its ``overhead``). The paper's metrics are
``model.metrics``: slowdown (1) is ``malleable_slowdown_mean`` (no tau),
fragmentation (2) is ``fragmentation``.

The rule, run at every scheduling event (the twin calls the policy after each
batch of arrivals and ends, which is when the paper runs Algorithm 1):

1. Take the queue head (arrival order by default; any priority source may
   order the queue). It starts **expanded** on ``p`` CPUs if the free CPUs,
   plus what the running malleable jobs can give, oldest first, reaches ``p``.
2. Otherwise, if it is malleable, it starts **shrunk** on exactly
   ``ceil(p/2)`` CPUs if the free CPUs plus what the running jobs can give
   reaches that.
3. Otherwise it waits, and so does everything behind it (FCFS: no
   backfilling). While jobs start, go on with the next one.
4. If the queue is empty after that, give the free CPUs to the shrunk jobs,
   oldest first, each up to its ``p``. While a job waits, nothing expands.

"What a running job can give" is its CPUs above its floor, ``ceil(p/2)``,
taken from the oldest job (earliest submit; ties by start, then id) first,
and only as many as the new job's placement needs. Jobs started earlier in
the same call count as running: their start simply carries their final CPUs.
Every job is malleable unless it is marked rigid, as in the paper ("all the
jobs are candidate to be shrunk", sec. 2): ``Job.malleable`` defaults to True,
and ``accordion submit --rigid`` or a trace's ``--rigid-fraction`` clear it.
Rigid jobs (``malleable=False``) are never shrunk or expanded and only start
expanded; a rigid head may still shrink running malleable jobs to fit.

Each decision counts its resizes in ``Decisions.counters`` (``shrinks`` and
``expands``, one per job resized), which the core sums over a run: the twin's
figures that the live scheduler's ``accordion_job_resizes_total`` compares to.

Readings of Algorithm 1 that the worked example fixes
------------------------------------------------------
Taken literally, lines 9-15 halve every candidate *and* the new job, and run
the new job only if some running job can shrink. Fig. 2(c) contradicts both:

* J2 and J3 run expanded (4x1, 2x1) beside J1 shrunk to 4 CPUs, so the
  candidates shrink only as far as needed and the new job stays expanded when
  that suffices (line 2's test is read as "free plus what shrinking yields");
* J4 and J5 start shrunk at t = 1 although J1, the only running job, is
  already at its floor, so a job starts shrunk even when nothing can shrink.

When it does start shrunk the new job gets exactly ``ceil(p/2)`` (line 10's
halving, rounded up to respect MPL 2), not all the free CPUs: that is why J5
still fits beside J4 at t = 1. The paper expands shrunk jobs "when a job
finishes [and] the wait queue is empty"; we expand whenever the queue is empty
after the start loop, which is the same thing (an arrival that starts cannot
leave free CPUs beside a shrunk job: they would have been given at the last
end) and also covers a queue that empties inside one call.

The worked example (Fig. 2(c), 10 CPUs)
---------------------------------------
Six jobs arrive at 0 in order with 8, 4, 2, 8, 4, 10 processes and expanded
run times 2, 1, 1, 2, 2, 1 (CPU utilisation 1, so MPL 2 halves the pace).

* t = 0: J1 starts expanded on 8. J2 (4) finds 2 free: J1 gives 2 (to 6) and
  J2 starts expanded. J3 (2) finds 0: J1 gives 2 more (to 4, its floor) and
  J3 starts expanded. In one call this is J1 starting on 4. J4 (8) needs 8,
  or 4 shrunk, but only 3 could be freed (J2: 2, J3: 1): it waits, and J2 and
  J3 keep their CPUs.
* t = 1: J2 and J3 end, 6 free. J4 cannot start expanded (J1 is at its
  floor), so it starts shrunk on 4; J5 (4) then starts shrunk on 2. J6 (10)
  waits.
* t = 4: J1 (2 units of work at half pace) ends. J6 still waits, so nothing
  expands: 4 CPUs stay idle until 5.
* t = 5: J4 and J5 end; J6 runs expanded, 5 to 6.

Responses 4, 1, 1, 5, 5, 6 give the paper's 3.66; slowdowns by formula (1)
(response over expanded run time) 2, 1, 1, 2.5, 2.5, 6 give its 2.5. The
paper reports 0 % fragmentation for this schedule, but its own formula (2)
counts the 4 idle CPUs from 4 to 5 while J6 waits: 4 / (6 * 10) = 6.7 %.
The figure leaves J4 and J5 shrunk there, and the rule "expand only when the
queue is empty" says so too; we follow the rule and the figure, not the 0 %.

Several machines
----------------
A job keeps the machines it started on for its whole life, so its pace (the
speed of its slowest part) never changes after it starts. Shrinking removes
CPUs from its parts, each part keeping at least one CPU (so a job's floor is
``max(ceil(p/2), number of parts)``); expanding adds CPUs only on machines it
already holds, never a new one. To make room for a new job the running jobs,
oldest first, are shrunk on a scratch copy of the free CPUs (each from its
parts in the canonical machine order) until the placement rule finds the new
job a place; then each machine of that place is given exactly what it lacks,
taken from the oldest of those jobs first. The policy only bounds a job's
total MPL, as the execution model and the core do; it does not know how the
processes are spread over the parts. On one machine all of this reduces to
"take what is missing from the oldest jobs".
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from model.job import Job
from model.machine import Machine, Part
from scheduler.core.snapshot import Decisions, Resize, RunningJob, SnapshotView, Start
from scheduler.planning.placement import Placement, machines_for
from scheduler.planning.prediction import PlanRule
from scheduler.planning.scratch import take
from scheduler.priority import PrioritySource
from scheduler.priority.fifo import Fifo

Age = tuple[float, float, int]
"""``(submit, start, rank)``: smaller is older. ``rank`` makes the key total."""


@dataclass(slots=True)
class _Held:
    """A job's CPUs in the plan being built: a running malleable job, or one started now."""

    job: Job
    age: Age
    #: Machine id -> CPUs, in the order of the job's parts.
    parts: dict[str, int]
    cpus: int
    #: The parts the core knows; None for a job this call starts.
    before: tuple[Part, ...] | None
    #: Shrunk or expanded by this call (only those can need a resize).
    touched: bool = False

    @property
    def floor(self) -> int:
        # MPL 2 at most, and at least one CPU on every machine the job holds.
        return max(self.job.min_cpus, len(self.parts))

    def as_parts(self) -> tuple[Part, ...]:
        return tuple(Part(m, c) for m, c in self.parts.items())


_Take = tuple[_Held, str, int]
"""Shrink this job by this many CPUs on this machine."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FcfsMalleable:
    """FCFS with virtual malleability (see the module docstring for the rule)."""

    priority: PrioritySource = field(default_factory=Fifo)
    placement: Placement = field(default_factory=Placement)
    name: str = "fcfs-malleable"

    @property
    def plan_rule(self) -> PlanRule:
        """What its predicted starts are (``scheduler.planning.prediction``)."""
        return PlanRule.IN_ORDER

    @property
    def folds(self) -> bool:
        """Tells the core that jobs may run on fewer CPUs than processes under this policy."""
        return True

    def decide(self, snapshot: SnapshotView) -> Decisions:
        plan = _Plan(snapshot, self.placement)
        blocked = False
        for job in self.priority.order(snapshot):
            fit = plan.fit(job, job.procs)
            if fit is None and job.min_cpus < job.procs:
                fit = plan.fit(job, job.min_cpus)
            if fit is None:
                # FCFS: the head waits, and nothing behind it may overtake it.
                blocked = True
                break
            parts, takes = fit
            plan.start(job, parts, takes)
        if not blocked:
            plan.expand()
        return plan.decisions()


class _Plan:
    """Scratch state of one ``decide`` call: free CPUs and the malleable jobs' CPUs.

    The list of malleable jobs is only built when a job has to shrink or expand:
    at most events of a trace replay the head either fits in the free CPUs or
    cannot start at all, and a sum over the running jobs is enough to tell.
    """

    def __init__(self, snapshot: SnapshotView, placement: Placement) -> None:
        self._now = snapshot.now
        self._machines: Sequence[Machine] = snapshot.machines
        self._placement = placement
        self._running = snapshot.running
        self.free = dict(snapshot.free)
        self.total_free = sum(self.free.values())
        self._started: list[_Held] = []
        self._held: list[_Held] | None = None
        self._slack: int | None = None
        self._rank: dict[str, int] | None = None

    # -- what the running jobs can give ------------------------------------

    def slack(self) -> int:
        """CPUs all malleable jobs together could give up now."""
        if self._slack is None:
            slack = 0
            for run in self._running:
                job = run.job
                if job.malleable:
                    # _Held.floor without building a _Held: this sum runs at most events.
                    floor = job.min_cpus
                    n = len(run.parts)
                    slack += run.cpus - (n if n > floor else floor)
            for h in self._started:
                if h.job.malleable:
                    slack += h.cpus - h.floor
            self._slack = slack
        return self._slack

    def oldest_first(self) -> list[_Held]:
        """The malleable jobs (running or started by this call), oldest first."""
        if self._held is None:
            mall = sorted(
                (r for r in self._running if r.job.malleable),
                key=lambda r: (r.job.submit, r.start, r.job.id),
            )
            held = [_held_from(r, rank) for rank, r in enumerate(mall)]
            for h in self._started:
                if h.job.malleable:
                    bisect.insort_right(held, h, key=_age)
            self._held = held
        return self._held

    def _machine_order(self, parts: dict[str, int]) -> list[str]:
        if len(parts) == 1:
            return list(parts)
        if self._rank is None:
            self._rank = {m.id: i for i, m in enumerate(self._machines)}
        rank = self._rank
        return sorted(parts, key=lambda m: rank[m])

    # -- starting ------------------------------------------------------------

    def fit(self, job: Job, want: int) -> tuple[tuple[Part, ...], list[_Take]] | None:
        """A place for ``want`` CPUs of ``job`` and the shrinks that free it, or None."""
        free = self.free
        machines = machines_for(job, self._machines)
        placement = self._placement.for_job(job)
        if want <= self.total_free:
            parts = placement.place(want, free, machines)
            if parts is not None:
                return parts, []
        if want > self.total_free + self.slack():
            return None
        # Shrink the oldest jobs fully on a scratch copy until the placement rule
        # finds a place; the exact shrinks are worked out from that place below.
        scratch = dict(free)
        total = self.total_free
        shed: list[tuple[_Held, dict[str, int]]] = []
        parts = None
        for h in self.oldest_first():
            give = h.cpus - h.floor
            if give <= 0:
                continue
            gave: dict[str, int] = {}
            for m in self._machine_order(h.parts):
                k = min(give, h.parts[m] - 1)
                if k > 0:
                    gave[m] = k
                    scratch[m] += k
                    give -= k
                    if give == 0:
                        break
            shed.append((h, gave))
            total += h.cpus - h.floor - give
            if total >= want:
                parts = placement.place(want, scratch, machines)
                if parts is not None:
                    break
        if parts is None:
            return None
        # Only as far as needed: each machine of the place gets what its free
        # CPUs lack, from the oldest jobs first (J2 starts beside J1 on 6, Fig. 2(c)).
        need = {p.machine: p.cpus - free[p.machine] for p in parts if p.cpus > free[p.machine]}
        takes: list[_Take] = []
        for h, gave in shed:
            for m, k in gave.items():
                lack = need.get(m, 0)
                if lack > 0:
                    t = min(lack, k)
                    takes.append((h, m, t))
                    need[m] = lack - t
        return parts, takes

    def start(self, job: Job, parts: tuple[Part, ...], takes: list[_Take]) -> None:
        for h, m, k in takes:
            h.parts[m] -= k
            h.cpus -= k
            h.touched = True
            self.free[m] += k
            self.total_free += k
            if self._slack is not None:
                self._slack -= k
        take(self.free, parts)
        cpus = sum(p.cpus for p in parts)
        self.total_free -= cpus
        rank = len(self._running) + len(self._started)
        h = _Held(
            job=job,
            age=(job.submit, self._now, rank),
            parts={p.machine: p.cpus for p in parts},
            cpus=cpus,
            before=None,
        )
        self._started.append(h)
        if job.malleable:
            if self._slack is not None:
                self._slack += h.cpus - h.floor
            if self._held is not None:
                bisect.insort_right(self._held, h, key=_age)

    # -- expanding -----------------------------------------------------------

    def expand(self) -> None:
        """Give the free CPUs to shrunk jobs, oldest first, on machines they hold."""
        if self.total_free == 0:
            return
        # Skip building the job list when no job is shrunk: rigid jobs always hold p
        # CPUs, so "fewer than p" means a shrunk malleable job. Once the list is
        # built, this call may have shrunk a job the snapshot shows expanded.
        if (
            self._held is None
            and not any(r.cpus < r.job.procs for r in self._running)
            and not any(h.cpus < h.job.procs for h in self._started)
        ):
            return
        free = self.free
        for h in self.oldest_first():
            room = h.job.procs - h.cpus
            if room == 0:
                continue
            for m in self._machine_order(h.parts):
                k = min(room, free[m])
                if k > 0:
                    h.parts[m] += k
                    h.cpus += k
                    h.touched = True
                    free[m] -= k
                    self.total_free -= k
                    room -= k
                    if room == 0:
                        break
            if self.total_free == 0:
                break

    # -- the answer ----------------------------------------------------------

    def decisions(self) -> Decisions:
        starts = [Start(h.job, h.as_parts()) for h in self._started]
        if self._held is None:
            return Decisions(starts=starts)
        shrinks: list[Resize] = []
        grows: list[Resize] = []
        for h in self._held:
            if h.before is None or not h.touched:
                continue
            parts = h.as_parts()
            if parts != h.before:
                # Shrinks before expansions, so each resize finds its CPUs free when
                # the core applies them in turn. (On any one machine a call only
                # shrinks or only expands: a shrink's CPUs all go to the job that
                # needed them, and expansion only uses CPUs nobody took.)
                (grows if h.cpus > sum(p.cpus for p in h.before) else shrinks).append(
                    Resize(h.job, parts)
                )
        counters = {k: n for k, n in (("shrinks", len(shrinks)), ("expands", len(grows))) if n}
        return Decisions(starts=starts, resizes=shrinks + grows, counters=counters)


def _held_from(run: RunningJob, rank: int) -> _Held:
    return _Held(
        job=run.job,
        age=(run.job.submit, run.start, rank),
        parts={p.machine: p.cpus for p in run.parts},
        cpus=run.cpus,
        before=run.parts,
    )


def _age(h: _Held) -> Age:
    return h.age
