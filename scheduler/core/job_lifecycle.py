"""A job's lifecycle as one transition table; an illegal move raises.

QUEUED -> RUNNING -> FINISHED | FAILED | CANCELLED
QUEUED -> CANCELLED
RUNNING -> QUEUED            (requeued after its machine was lost)
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


class IllegalTransitionError(Exception):
    """A lifecycle move the table does not allow (a bug in the caller)."""


_ALLOWED: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.CANCELLED}),
    JobState.RUNNING: frozenset(
        {JobState.FINISHED, JobState.FAILED, JobState.CANCELLED, JobState.QUEUED}
    ),
    JobState.FINISHED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


def transition(current: JobState, target: JobState) -> JobState:
    """Return ``target`` if the table allows ``current -> target``, else raise."""
    if target not in _ALLOWED[current]:
        raise IllegalTransitionError(f"a job cannot go from {current} to {target}")
    return target


def is_final(state: JobState) -> bool:
    return not _ALLOWED[state]
