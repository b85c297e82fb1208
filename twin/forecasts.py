"""The twin's predicted starts: each job's prediction at its submission, kept beside its run.

At every instant with arrivals, once the policy has decided, each job that
arrived then is given the start the scheduler would have predicted for it
then (``scheduler.planning.prediction``, the same code the live scheduler
runs): the instant itself for a job the policy started at once, its planned
start for one left waiting, None for one the plan could not place. The
report (``twin.report``) writes them beside the real starts and sums up the
error. Off by default: a replay without predictions runs no line of this.
"""

from __future__ import annotations

from collections.abc import Sequence

from model.job import Job
from scheduler.core.core import SchedulerCore
from scheduler.core.job_lifecycle import JobState
from scheduler.planning.prediction import PlanRule, plan_rule, predict


class Forecasts:
    """Predicted starts at submission, by job id (see the module docstring)."""

    __slots__ = ("at_submit", "rule", "waited")

    def __init__(self, core: SchedulerCore) -> None:
        self.rule: PlanRule = plan_rule(core.policy)
        #: Job id -> its predicted start when it was submitted (None: no place in the plan).
        self.at_submit: dict[str, float | None] = {}
        #: The jobs still queued after the decision at their submission.
        self.waited: set[str] = set()

    def record(self, core: SchedulerCore, arrived: Sequence[Job], now: float) -> None:
        """Predict the jobs that ``arrived`` at ``now``, after the policy's decision."""
        waiting: set[str] = set()
        at_submit = self.at_submit
        states = core.state_of
        for job in arrived:
            state = states(job.id)
            if state is JobState.RUNNING:
                at_submit[job.id] = now
            elif state is JobState.QUEUED:
                waiting.add(job.id)
        if not waiting:
            return
        plan = predict(core.snapshot(now), core.policy, until=waiting)
        for job_id in waiting:
            at_submit[job_id] = plan.start_of(job_id)
        self.waited |= waiting
