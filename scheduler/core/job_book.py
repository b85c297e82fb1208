"""The core's record of every job it knows: the job, its state, its requeues.

Every job the core was ever given stays known (its id stays taken, so a
resubmission is recognised) with its lifecycle state
(``scheduler.core.job_lifecycle``: every move goes through its table, and an
illegal one raises). A job requeued after losing a machine keeps a count of
its requeues, which numbers its next attempt (fencing), and of those not
charged to its requeue budget (a start fenced before it ran). A restored
running job waits here as *pending* until its agents confirm it
(``scheduler.core.recovery``). Every state change passes here, so a book given
a :class:`~scheduler.core.user_load.UserLoad` keeps its per-user tallies.
"""

from __future__ import annotations

from model.job import Job
from scheduler.core.answers import PendingJob
from scheduler.core.job_lifecycle import JobState, transition
from scheduler.core.user_load import UserLoad


class JobBook:
    """Known jobs, their states and requeues (see the module docstring)."""

    __slots__ = ("_requeues", "_uncharged", "known", "load", "pending", "states")

    def __init__(self, load: UserLoad | None = None) -> None:
        #: Told of every state change, when given (``scheduler.core.user_load``).
        self.load = load
        self.known: dict[str, Job] = {}
        self.states: dict[str, JobState] = {}
        self._requeues: dict[str, int] = {}
        self._uncharged: dict[str, int] = {}
        #: Restored running jobs not yet confirmed by their agents.
        self.pending: dict[str, PendingJob] = {}

    def enter(self, job: Job, state: JobState, *, requeues: int = 0, uncharged: int = 0) -> None:
        """A job the core did not know, in ``state`` (new: QUEUED; restored: any)."""
        if job.id in self.known:
            raise ValueError(f"job {job.id!r} is already known")
        self.known[job.id] = job
        self.states[job.id] = state
        if self.load is not None:
            self.load.moved(job, None, state)
        if requeues:
            self._requeues[job.id] = requeues
        if uncharged:
            self._uncharged[job.id] = uncharged

    def move(self, job_id: str, to: JobState) -> None:
        """Move the job's state by the lifecycle table (an illegal move raises)."""
        states = self.states
        old = states[job_id]
        states[job_id] = transition(old, to)
        if self.load is not None:
            self.load.moved(self.known[job_id], old, to)

    def requeues(self, job_id: str) -> int:
        """How many times the job was requeued after losing a machine."""
        return self._requeues.get(job_id, 0)

    def charged_requeues(self, job_id: str) -> int:
        """Requeues of ``job_id`` that count against the requeue budget."""
        return self._requeues.get(job_id, 0) - self._uncharged.get(job_id, 0)

    def requeued(self, job_id: str, *, charged: bool) -> None:
        """Count one more requeue; every one numbers the next attempt (fencing),
        charged or not."""
        self._requeues[job_id] = self._requeues.get(job_id, 0) + 1
        if not charged:
            self._uncharged[job_id] = self._uncharged.get(job_id, 0) + 1
