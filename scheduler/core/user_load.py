"""What each user has in the scheduler now: jobs queued, jobs running, CPUs they hold.

Theory of operation. A job's state changes only through the core's job book
(``scheduler.core.job_book``), so the book tells a :class:`UserLoad` of every
change, and the tallies are exact at every event without a walk over the
queue: how many jobs a user has queued (the live scheduler's
``max_queued_per_user``, Slurm's ``MaxSubmitJobs``; the totals of a status)
and how many running, with the CPUs those asked for (the core's
``max_user_cpus``, Slurm's ``GrpTRES=cpu`` per user).

A running job counts its *processes*, the CPUs it asked for, whether a
malleable policy has shrunk it or not: a resize never takes a user over the
limit nor under it, and the rule reads the same under every policy. A
restored running job not yet confirmed by its agents counts as running: it
holds its CPUs as soon as they report. A user with nothing left is dropped,
so the tallies hold only users with jobs.

Kept only where something reads it (the live scheduler, or a core with a
per-user limit): a trace replay without one pays nothing.
"""

from __future__ import annotations

from model.job import Job
from scheduler.core.job_lifecycle import JobState


class UserLoad:
    """Per-user tallies of queued and running jobs (see the module docstring)."""

    __slots__ = ("cpus", "queued", "running")

    def __init__(self) -> None:
        #: Jobs queued, by user (users with none are absent).
        self.queued: dict[str, int] = {}
        #: Jobs running (or restored and pending their agents), by user.
        self.running: dict[str, int] = {}
        #: Processes of the running jobs, by user: the CPUs ``max_user_cpus`` counts.
        self.cpus: dict[str, int] = {}

    def moved(self, job: Job, old: JobState | None, new: JobState) -> None:
        """``job`` went from ``old`` (None: it was not known) to ``new``."""
        user = job.user
        if old is JobState.QUEUED:
            _less(self.queued, user, 1)
        elif old is JobState.RUNNING:
            _less(self.running, user, 1)
            _less(self.cpus, user, job.procs)
        if new is JobState.QUEUED:
            self.queued[user] = self.queued.get(user, 0) + 1
        elif new is JobState.RUNNING:
            self.running[user] = self.running.get(user, 0) + 1
            self.cpus[user] = self.cpus.get(user, 0) + job.procs

    def users(self) -> set[str]:
        """Every user with a job queued or running."""
        return self.queued.keys() | self.running.keys()


def _less(tally: dict[str, int], user: str, n: int) -> None:
    left = tally[user] - n
    if left:
        tally[user] = left
    else:
        del tally[user]
