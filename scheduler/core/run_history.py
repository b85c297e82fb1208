"""Run-time predictions from each user's history: EASY++'s predictor.

Tsafrir, Etsion and Feitelson, "Backfilling using system-generated
predictions rather than user runtime estimates" (IEEE TPDS 18(6), 2007):
users' wall-time estimates are poor, and a very simple predictor does
better: a job will run as long as *the average of its user's last two
jobs*, never longer than the user asked for (the request stays the kill
limit; the prediction only plans). Their EASY++ plans with it wherever EASY
plans with estimates: the reservation's shadow time (running jobs' predicted
ends) and the backfill test (a candidate's predicted end).

Here that is a policy's option, ``predictor`` (:class:`Predictor`):
``estimate`` (the default) plans with the user's wall time as before;
``last-two`` plans with the prediction. The core (``scheduler.core.core``)
applies it once, when a job enters the queue: the job the policy sees carries
the prediction as its ``walltime`` (:meth:`RunHistory.planned`), so every
policy, the running jobs' expected ends and the predicted starts
(``scheduler.planning.prediction``) plan with it and no policy changes; the
job as submitted stays in the core's book (its id, its idempotency, the
outcome a replay writes).

The rules, each stated because the paper leaves it open or we differ:

* "last two": the two jobs of the user that finished last (by end time,
  ties: the later reported), whatever their size; failed and cancelled runs
  do not count, as they say nothing of how long the work takes;
* a run time is the work the job did, in seconds at its reference speed (the
  unit of its wall time): its time on CPUs times its rate (``RunningJob.rate``,
  the execution model's), so a run on a machine twice as fast counts twice;
  for a job that was resized, the core's own estimate of its work, which is
  capped at its planned wall time;
* with one finished job, its run time; with none, the user's estimate;
* capped by the request, as the paper has it, and never under one second
  (a job's wall time must be positive, and a run of zero seconds in the
  trace would plan the next job for nothing);
* fixed when the job is queued (the paper predicts at submission); a running
  job that outlives its prediction has it corrected, as the paper does, to
  its user's estimate: it is expected to end when its request runs out
  (:func:`corrected_end`). Past that too it is overdue like any job past its
  estimate, planned by the rule every planner shares
  (``scheduler.planning.overdue``). The core applies the correction before
  each decision, so the policy and the predicted starts see the corrected
  end;
* a restarted live scheduler rebuilds the history from its journal's
  finished jobs (their end minus start, at the reference speed), so a queued
  job's prediction may differ from the one it had before the restart.

The paper's EASY++ also backfills shortest (predicted) job first; that order
is not this option.
"""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum

from model.job import Job
from scheduler.core.snapshot import RunningJob
from scheduler.planning.overdue import planned_end

MIN_PREDICTION = 1.0
"""Seconds: the shortest run a prediction plans for (module docstring)."""


class Predictor(StrEnum):
    """The run time a policy plans with (a policy's ``predictor`` option)."""

    #: The user's wall-time estimate.
    ESTIMATE = "estimate"
    #: EASY++'s: the average of the user's last two jobs' run times, capped by the request.
    LAST_TWO = "last-two"


class RunHistory:
    """The run times of each user's last two finished jobs (see the module docstring)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        # user -> ((end, run), ...) of at most two jobs, the latest end first.
        self._last: dict[str, tuple[tuple[float, float], ...]] = {}

    def record(self, user: str, end: float, run: float) -> None:
        """A job of ``user`` finished at ``end`` after ``run`` seconds of work."""
        seen = self._last.get(user)
        entry = (end, run)
        if seen is None:
            self._last[user] = (entry,)
        elif end >= seen[0][0]:
            self._last[user] = (entry, seen[0])
        elif len(seen) == 1 or end >= seen[1][0]:
            self._last[user] = (seen[0], entry)

    def last(self, user: str) -> tuple[float, ...]:
        """The run times of ``user``'s last finished jobs, the latest first (at most two)."""
        return tuple(run for _, run in self._last.get(user, ()))

    def users(self) -> list[str]:
        """Every user with a finished job, in the order first seen."""
        return list(self._last)

    def prediction(self, job: Job) -> float:
        """The run time ``job`` is predicted to take, in its wall time's seconds."""
        seen = self._last.get(job.user)
        if seen is None:
            return job.walltime
        average = seen[0][1] if len(seen) == 1 else (seen[0][1] + seen[1][1]) / 2
        average = max(average, MIN_PREDICTION)
        return min(average, job.walltime)

    def planned(self, job: Job) -> Job:
        """``job`` as a policy plans it: its :meth:`prediction` as its wall time (the
        very same job when that is its estimate)."""
        walltime = self.prediction(job)
        return job if walltime == job.walltime else replace(job, walltime=walltime)


def corrected_end(run: RunningJob, request: float, now: float) -> float:
    """When ``run``, past its predicted end, is now expected to end (module docstring):
    when its ``request`` (its wall time as submitted) runs out, if that is still
    ahead; otherwise the overdue rule's instant."""
    # Its work done by now, and the rest of its request at its current rate.
    done = run.est_done + (now - run.changed) * run.rate
    if done < request:
        end = now + (request - done) / run.rate
        if end > now:
            return end
    return planned_end(run.est_end, now)
