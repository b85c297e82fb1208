"""Flexible backfilling's priority: Aging + Deadline + Wait Minimisation.

Source: the EG-EDF paper (Klusacek, Rudova, Baraglia, Pasquali and Capannini),
section 3.1, "Flexible Backfilling" (after that paper's reference [20]).
The policy that backfills in this order is ``scheduler.policies.flexible``
(this module is named for what it holds, the score, so the two differ).

Theory of operation. At every scheduling event every queued job's priority
is reset and recomputed from scratch (sec. 3.1: "At each scheduling event the
value of P(J) for all queued jobs is reset to zero"):

    P(J) = Aging + Deadline + WaitMinimization

* Aging: ``agefactor * (now - Submit_J)``; a job is never younger than 0.
* Deadline: with ``Estimated_J`` the user's estimate (``Job.walltime``) made
  on a machine of speed ``BM_ref`` (``Job.ref_speed``) and ``BM_best`` the
  speed of the most powerful machine of the cluster (the paper's "optimistic
  prediction"), ::

      Nxtime_J = Estimated_J * BM_ref / BM_best
      Extime_J = now + Nxtime_J
      t_J      = Deadline_J - k * Nxtime_J

      Deadline = Min                           if Extime_J <= t_J
                 a * (Extime_J - t_J) + Min    if t_J < Extime_J <= Deadline_J
                 Min                           if Extime_J > Deadline_J

  where ``a = (Max - Min) / (Deadline_J - t_J)`` is the slope of the line
  through ``(t_J, Min)`` and ``(Deadline_J, Max)``. A job far from its
  deadline scores Min, a job closing in on it climbs linearly to Max, and a
  job that can no longer make it drops back to Min (the paper: "when a job
  goes over its deadline before it is scheduled, its updating priority value
  is set to Min").
* Wait minimisation: ``boostvalue * minext / Estimated_J`` with ``minext``
  the smallest estimate in the queue, so the shortest job gets
  ``boostvalue`` and the others less.

Defaults are the paper's hand-tuned constants (sec. 3.1, last paragraph):
agefactor = 0.01, k = 2.0, Max = 20.0, Min = 0.1, boostvalue = 2.0. Times
are seconds, so one hour of waiting is worth 36 points: on long traces aging
soon dominates the other two terms, as the paper's constants imply.

Choices, each stated because the paper leaves it open:

* Jobs without a deadline (30 % of the paper's jobs) score **Min** on the
  deadline heuristic, not 0. Min is what a deadline job scores whenever the
  heuristic has nothing to say about it (deadline far away, or already
  unreachable), so with Min the heuristic only reorders jobs inside their
  critical window and is neutral everywhere else. With 0, every deadline job,
  including one that has already missed its deadline, would keep a permanent
  ``Min`` head start over a job without one, which the paper's demotion of
  late jobs to Min rules out.
* Estimates of jobs with different reference speeds are compared in one
  unit: ``minext / Estimated_J`` is computed on ``Nxtime`` (every estimate
  rescaled to the fastest machine). The ratio is the paper's literal one
  whenever the jobs share a reference speed, as every trace job does.
* ``BM_best`` is the fastest machine of the cluster, busy or not (the paper:
  "the most powerful cluster machine"); with no machine registered yet the
  estimate is taken at the job's own reference speed.
* Ties: equal priority (compared rounded to 1e-9, so float noise cannot beat
  the tie-break) goes to the earlier submit time, then to arrival order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from model.job import Job
from scheduler.core.snapshot import SnapshotView

AGE_FACTOR = 0.01
"""The paper's ``agefactor`` (priority points per second of waiting)."""
K = 2.0
"""The paper's ``k``: the deadline window opens ``k * Nxtime`` before the deadline."""
MAX_SCORE = 20.0
"""The paper's ``Max``: the deadline score of a job whose estimated end meets its deadline."""
MIN_SCORE = 0.1
"""The paper's ``Min``: the deadline score outside the window (and without a deadline)."""
BOOST_VALUE = 2.0
"""The paper's ``boostvalue``: the wait-minimisation score of the queue's shortest job."""

_TIE_SCALE = 1e9
"""Priorities equal to within this many parts per unit are a tie (see the module docstring)."""


class FlexibleScore(NamedTuple):
    """One job's three heuristic values and their sum ``priority``.

    A named tuple rather than a frozen dataclass: one is built per queued job at
    every event, and a tuple is several times cheaper to build.
    """

    aging: float
    deadline: float
    wait: float
    priority: float


def deadline_score(
    *,
    now: float,
    nxtime: float,
    deadline: float | None,
    k: float = K,
    max_score: float = MAX_SCORE,
    min_score: float = MIN_SCORE,
) -> float:
    """The Deadline heuristic of sec. 3.1 for one job (see the module docstring)."""
    if deadline is None:
        return min_score
    extime = now + nxtime
    t_j = deadline - k * nxtime
    if t_j < extime <= deadline:
        # Divide by the float difference, not by k * nxtime: the ratio then stays in
        # [0, 1] even when rounding makes the two differ, so the score stays in [Min, Max].
        return min_score + (max_score - min_score) * (extime - t_j) / (deadline - t_j)
    return min_score


@dataclass(frozen=True, slots=True, kw_only=True)
class FlexiblePriority:
    """Aging + Deadline + Wait Minimisation with the paper's constants (module docstring)."""

    name: str = "flexible"
    age_factor: float = AGE_FACTOR
    k: float = K
    max_score: float = MAX_SCORE
    min_score: float = MIN_SCORE
    boost_value: float = BOOST_VALUE

    def __post_init__(self) -> None:
        for label, value in (
            ("age_factor", self.age_factor),
            ("k", self.k),
            ("max_score", self.max_score),
            ("min_score", self.min_score),
            ("boost_value", self.boost_value),
        ):
            if not math.isfinite(value):
                raise ValueError(f"flexible: {label} must be finite, got {value!r}")
        if self.age_factor < 0:
            raise ValueError(f"flexible: age_factor must be >= 0, got {self.age_factor!r}")
        if self.k <= 0:
            # k = 0 would put t_J on the deadline: the window, and the heuristic, vanish.
            raise ValueError(f"flexible: k must be > 0, got {self.k!r}")
        if self.max_score < self.min_score:
            raise ValueError(
                f"flexible: max_score ({self.max_score!r}) must be >= "
                f"min_score ({self.min_score!r})"
            )
        if self.boost_value < 0:
            raise ValueError(f"flexible: boost_value must be >= 0, got {self.boost_value!r}")

    def scores(self, snapshot: SnapshotView) -> dict[str, FlexibleScore]:
        """Every queued job's three heuristic values and ``P(J)`` at ``snapshot.now``, by id."""
        queue = snapshot.queue
        if not queue:
            return {}
        nxtimes = _nxtimes(snapshot)
        minext = min(nxtimes)
        now = snapshot.now
        out: dict[str, FlexibleScore] = {}
        for job, nx in zip(queue, nxtimes, strict=True):
            aging = self.age_factor * max(now - job.submit, 0.0)
            dl = deadline_score(
                now=now,
                nxtime=nx,
                deadline=job.deadline,
                k=self.k,
                max_score=self.max_score,
                min_score=self.min_score,
            )
            wait = self.boost_value * minext / nx
            out[job.id] = FlexibleScore(aging, dl, wait, aging + dl + wait)
        return out

    def priorities(self, snapshot: SnapshotView) -> dict[str, float]:
        """Every queued job's ``P(J)``, by job id (the values :meth:`order` sorts on)."""
        return {
            job.id: p for job, p in zip(snapshot.queue, self._priorities(snapshot), strict=True)
        }

    def order(self, snapshot: SnapshotView) -> Sequence[Job]:
        """The queue by decreasing ``P(J)``; ties: earlier submit, then arrival order."""
        queue = snapshot.queue
        n = len(queue)
        if n < 2:
            return queue
        # Rounded to 1e-9 as floor(P * 1e9 + 0.5): the other sources' round(P, 9) but
        # for halfway cases, at a quarter of its cost (round with digits goes through
        # a decimal conversion, ~0.8 us a job, and this runs on every queued job).
        floor, scale = math.floor, _TIE_SCALE
        negated = [-floor(p * scale + 0.5) for p in self._priorities(snapshot)]
        submits = [j.submit for j in queue]
        # Two stable sorts on plain float keys instead of one on (P, submit, index)
        # tuples: no tuple per job, and the first sort is linear on a queue that is
        # already in submit order, as an arrival-ordered queue nearly always is.
        ranked = sorted(range(n), key=submits.__getitem__)
        ranked.sort(key=negated.__getitem__)
        return [queue[i] for i in ranked]

    def _priorities(self, snapshot: SnapshotView) -> list[float]:
        """``P(J)`` of the queue's jobs, in queue order.

        The hot path of :meth:`order`, run over the whole queue at every event of
        a replay (thousands of jobs on a busy trace): the three heuristics are
        inlined into one loop; :meth:`scores` computes the same values term by
        term through :func:`deadline_score` (a property test holds them equal).
        """
        queue = snapshot.queue
        if not queue:
            return []
        nxtimes = _nxtimes(snapshot)
        now = snapshot.now
        age_factor, k = self.age_factor, self.k
        lo, span = self.min_score, self.max_score - self.min_score
        # boost * minext / nx evaluates left to right: the product is common to all jobs.
        boost_minext = self.boost_value * min(nxtimes)
        out: list[float] = []
        append = out.append
        for job, nx in zip(queue, nxtimes, strict=True):
            age = now - job.submit
            aging = age_factor * age if age > 0 else 0.0
            dl = lo
            deadline = job.deadline
            if deadline is not None:
                extime = now + nx
                t_j = deadline - k * nx
                if t_j < extime <= deadline:
                    dl = lo + span * (extime - t_j) / (deadline - t_j)
            # Summed in the order scores() sums, so both give the same float.
            append(aging + dl + boost_minext / nx)
        return out


def _nxtimes(snapshot: SnapshotView) -> list[float]:
    """``Nxtime_J = Estimated_J * BM_ref / BM_best`` of the queue's jobs, in queue order."""
    best = max((m.speed for m in snapshot.machines), default=0.0)
    if best > 0:
        return [j.walltime * j.ref_speed / best for j in snapshot.queue]
    return [j.walltime for j in snapshot.queue]
