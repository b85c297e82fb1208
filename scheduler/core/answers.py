"""What the scheduler core answers to events, and the error of a bad policy.

``SchedulerCore.submit`` answers :class:`Accepted` or :class:`Rejected`; a job
that leaves its CPUs (finished, failed, cancelled, requeued after a lost
machine) is reported as :class:`Left`; a restored running job waits as a
:class:`PendingJob` until its agents confirm it. ``scheduler.core.core`` re-exports
them all, so callers import them from there.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.job import Job
from model.machine import Part
from scheduler.core.job_lifecycle import JobState


class PolicyError(RuntimeError):
    """A policy returned a decision that cannot be applied (a bug in the policy)."""


@dataclass(frozen=True, slots=True)
class Accepted:
    job_id: str
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class Rejected:
    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Left:
    """A job that left the CPUs, with what the core knew of it.

    ``state`` is where it went: finished, failed, cancelled, or ``QUEUED`` when
    it was requeued after its machine was lost.
    """

    job: Job
    start: float
    end: float
    parts: tuple[Part, ...]
    state: JobState


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A restored running job awaiting its agents (see ``SchedulerCore.restore_pending``)."""

    job: Job
    parts: tuple[Part, ...]
    start: float
