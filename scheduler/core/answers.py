"""What the scheduler core answers to events, and the error of a bad policy.

``SchedulerCore.submit`` answers :class:`Accepted` or :class:`Rejected`; a job
that leaves its CPUs (finished, failed, cancelled, requeued after a lost
machine) is reported as :class:`Left`; a restored running job waits as a
:class:`PendingJob` until its agents confirm it. ``scheduler.core.core`` re-exports
them all, so callers import them from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from model.job import Job
from model.machine import Part
from scheduler.core.job_lifecycle import JobState


class PolicyError(Exception):
    """A policy returned a decision that cannot be applied (a bug in the policy)."""


@dataclass(frozen=True, slots=True)
class Accepted:
    job_id: str
    duplicate: bool = False


class RejectCode(StrEnum):
    """Why the core refused a job: a bounded label (the twin counts rejections by it,
    the live scheduler answers it as the wire's ``Rejection`` of the same value)."""

    #: More CPUs than the cluster has in all (:func:`too_wide`).
    TOO_WIDE = "too_wide"
    #: The id of another job.
    ID_REUSED = "id_reused"
    #: More CPUs than one user's running jobs may hold (``scheduler.core.user_limit``).
    CPU_LIMIT = "cpu_limit"


@dataclass(frozen=True, slots=True)
class Rejected:
    """A refused job: ``code`` to count and branch on, ``reason`` in words."""

    job_id: str
    code: RejectCode
    reason: str


def too_wide(job: Job, needed: int, capacity: int) -> Rejected | None:
    """The one rule for a job too wide to ever run: it needs ``needed`` CPUs (its
    processes, or half of them under a policy that folds jobs) and the cluster as
    configured has ``capacity`` (the twin's machines; the live scheduler's agents
    that registered and did not say goodbye, online or not). The twin and the
    live scheduler both ask it, through ``SchedulerCore.submit``."""
    if needed <= capacity:
        return None
    return Rejected(
        job.id,
        RejectCode.TOO_WIDE,
        f"job needs {needed} CPUs for its {job.procs} processes, the cluster as configured "
        f"has {capacity} (every machine registered and not retired)",
    )


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
