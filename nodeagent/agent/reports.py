"""What the agent tells the scheduler of its parts: ``PartStarted`` and ``PartFinished``.

Both go out on the agent's events topic through its outbox
(``nodeagent.agent.outbox``), so a part's start is always published before
its end. Every part this incarnation finished or refused is remembered (the
last ``remember`` of them) by job id and attempt: a ``StartPart`` that QoS 1
delivers again after its part ended is a duplicate, not a new part. A part a
previous incarnation left and this one could not adopt is reported but not
remembered: a scheduler with a fresh journal may start that (job, attempt)
again, and it is then a new part.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from broker.codec import encode
from broker.messages import PartFinished, PartStarted
from nodeagent.agent.outbox import Outbox
from nodeagent.agent.parts import Counters, Part
from nodeagent.agent.settings import Reason
from nodeagent.launch.contract import EXIT_LOST
from nodeagent.survival.adoption import Lost


class Reports:
    """A part's reports, in order per agent, counted by reason (see the module docstring)."""

    def __init__(
        self,
        *,
        outbox: Outbox,
        topic: str,
        agent_id: str,
        clock: Callable[[], float],
        counters: Counters,
        remember: int,
    ) -> None:
        self._outbox = outbox
        self._topic = topic
        self._agent_id = agent_id
        self._clock = clock
        self._counters = counters
        self._remember = remember
        # (job id, attempt) of parts this incarnation ended, for StartPart's idempotency.
        self._finished: OrderedDict[tuple[str, int], Reason] = OrderedDict()

    def ended(self, job_id: str, attempt: int) -> bool:
        """Whether this incarnation finished or refused that attempt of the job."""
        return (job_id, attempt) in self._finished

    def started(self, part: Part, pid: int) -> None:
        started = PartStarted(
            job_id=part.launch.job_id,
            agent_id=self._agent_id,
            pid=pid,
            at=part.started,
            attempt=part.attempt,
            launch_seconds=part.launch_seconds,
        )
        self._outbox.post(self._topic, encode(started))

    def finished(
        self,
        job_id: str,
        attempt: int,
        code: int,
        reason: Reason,
        detail: str | None = None,
        *,
        run_seconds: float | None = None,
    ) -> None:
        self._finished[(job_id, attempt)] = reason
        while len(self._finished) > self._remember:
            self._finished.popitem(last=False)
        self._counters.finished[reason] += 1
        finished = PartFinished(
            job_id=job_id,
            agent_id=self._agent_id,
            exit_code=code,
            at=self._clock(),
            reason=reason,
            attempt=attempt,
            detail=detail,
            run_seconds=run_seconds,
        )
        self._outbox.post(self._topic, encode(finished))

    def not_adopted(self, lost: Lost, *, stopped: bool = False) -> None:
        """A part a previous incarnation left that this one could not take over:
        ``fenced`` (the scheduler requeues it), or ``stopped`` when that incarnation
        stopped because its operator asked (not charged).

        A ``stopped`` one is remembered as ended: a scheduler restarted with the
        cluster (``accordion up`` stopped and started) sends that attempt's start
        again as one in flight, and this report, on its way, then requeues the job;
        starting it here too would hold CPUs the scheduler counts free, and its next
        placements here would be refused. A ``fenced`` one is not remembered (the
        older rule for a killed predecessor)."""
        reason: Reason = "stopped" if stopped else "fenced"
        if stopped:
            self._finished[(lost.job_id, lost.attempt)] = reason
            while len(self._finished) > self._remember:
                self._finished.popitem(last=False)
        self._counters.finished[reason] += 1
        finished = PartFinished(
            job_id=lost.job_id,
            agent_id=self._agent_id,
            exit_code=EXIT_LOST,
            at=self._clock(),
            reason=reason,
            attempt=lost.attempt,
            detail=f"not adopted: {lost.why}"[:500],
        )
        self._outbox.post(self._topic, encode(finished))
