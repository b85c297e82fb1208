"""A part's lifecycle (one job's CPUs on one machine, in one attempt) as one table.

::

    STARTING --started | listed--> RUNNING     its agent confirmed the process
    PENDING  --started | listed--> RUNNING     restored after a scheduler restart
    STARTING | PENDING | RUNNING --done-->      DONE       exit 0, work done
                                 --failed-->    FAILED     any other end it reported
                                 --cancelled--> CANCELLED  we ended it
                                 --lost-->      LOST       its machine or process vanished

DONE, FAILED, CANCELLED and LOST are final; a report that arrives for a final
part is a repeat (QoS 1 delivers at least once) or in flight, and is ignored.

Fencing. Every start of a job is an *attempt*, numbered from 1 and raised by
each requeue (``attempt = requeues + 1``); ``StartPart`` carries it and every
report of a part names it. The scheduler holds one attempt per job: a report
of any other attempt is *stale* (a part of a job that was requeued meanwhile,
on an agent that was cut off or frozen), is not applied, and the agent is told
to kill that attempt (``CancelPart(attempt=n)``). Attempt 0 in a report means
"not said" (an agent from before fencing) and counts as the current one.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from scheduler.core.job_lifecycle import IllegalTransitionError


class PartState(StrEnum):
    STARTING = "starting"
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"


class PartInput(StrEnum):
    STARTED = "started"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"


_S, _I = PartState, PartInput
_ENDS: Final = {
    _I.DONE: _S.DONE,
    _I.FAILED: _S.FAILED,
    _I.CANCELLED: _S.CANCELLED,
    _I.LOST: _S.LOST,
}
_TABLE: Final[dict[tuple[PartState, PartInput], PartState]] = {
    (_S.STARTING, _I.STARTED): _S.RUNNING,
    (_S.PENDING, _I.STARTED): _S.RUNNING,
    (_S.RUNNING, _I.STARTED): _S.RUNNING,
    **{
        (live, what): end
        for live in (_S.STARTING, _S.PENDING, _S.RUNNING)
        for what, end in _ENDS.items()
    },
}
FINAL: Final = frozenset({_S.DONE, _S.FAILED, _S.CANCELLED, _S.LOST})


class PartLifecycle:
    """One part: where, how many CPUs, which attempt, and its state."""

    __slots__ = ("attempt", "cpus", "machine", "misses", "state")

    def __init__(self, machine: str, cpus: int, attempt: int, *, pending: bool = False) -> None:
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt}")
        self.machine = machine
        self.cpus = cpus
        self.attempt = attempt
        self.state = PartState.PENDING if pending else PartState.STARTING
        #: Heartbeats in a row that did not list this part although it was running.
        self.misses = 0

    def apply(self, what: PartInput) -> bool:
        """Move by the table. False (and no move) when the part is already final;
        raises on any other move the table does not hold."""
        if self.state in FINAL:
            return False
        after = _TABLE.get((self.state, what))
        if after is None:
            raise IllegalTransitionError(f"a part cannot take {what} while {self.state}")
        self.state = after
        return True

    @property
    def final(self) -> bool:
        return self.state in FINAL

    @property
    def confirmed(self) -> bool:
        """Its agent has said it runs it, or it ended well."""
        return self.state is PartState.RUNNING or self.state is PartState.DONE

    def is_stale(self, attempt: int) -> bool:
        """Whether a report naming ``attempt`` is of another start of the job."""
        return attempt not in (0, self.attempt)
