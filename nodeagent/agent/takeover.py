"""The parts a killed predecessor left running, taken over by this incarnation at start.

Theory of operation. Before the agent registers, ``nodeagent.survival.adoption``
has surveyed its state directory: parts *adopted* (alive, verifiably the
process that was forked, re-opened by pidfd) and parts *lost*. The agent
then accounts for the adopted ones as running (:meth:`TakeOver.account`:
their CPUs and slots as recorded, their wall-time account as the record left
it), so its first ``AgentOnline`` lists them; a part that does not fit (its
CPUs or slots taken, a slot this agent does not have) is killed and counted
lost. Once the agent's tasks run (:meth:`TakeOver.supervise`), each adopted
part gets a supervisor like a part it forked (``nodeagent.agent.runs``), and
each lost one is reported ``fenced`` so the scheduler requeues it, or
``stopped`` (not charged) when the predecessor stopped because its operator
asked (``Survey.after_stop``).
"""

from __future__ import annotations

import contextlib
import logging
import time

from nodeagent.agent.cpuset import CpusetError, SlotPool, pin_part
from nodeagent.agent.parts import Counters, Part, PartTable, wall_deadline
from nodeagent.agent.reports import Reports
from nodeagent.agent.runs import PartRuns
from nodeagent.survival.adoption import Adopted, Lost, Survey
from nodeagent.survival.state import StateError

log = logging.getLogger(__name__)


class TakeOver:
    """Adoption at start of what ``survey`` found (None: nothing to take over)."""

    def __init__(
        self,
        *,
        survey: Survey | None,
        parts: PartTable,
        pool: SlotPool,
        runs: PartRuns,
        reports: Reports,
        counters: Counters,
        walltime_grace: float,
    ) -> None:
        self._survey = survey
        self._parts = parts
        self._pool = pool
        self._runs = runs
        self._reports = reports
        self._counters = counters
        self._grace = walltime_grace
        self._adopted: list[Part] = []

    def account(self) -> None:
        """Account for the adopted parts as running (before registering)."""
        survey = self._survey
        if survey is None:
            return
        self._counters.bad_records += survey.bad_records
        self._counters.not_adopted += len(survey.lost)
        for adopted in survey.adopted:
            try:
                self._adopt(adopted)
            except (CpusetError, StateError) as exc:
                log.error("part %s cannot be adopted: %s: killing it", adopted.launch.job_id, exc)
                with contextlib.suppress(ProcessLookupError):
                    adopted.process.kill()
                survey.lost.append(Lost(adopted.launch.job_id, adopted.record.attempt, str(exc)))
                self._counters.not_adopted += 1

    def _adopt(self, adopted: Adopted) -> None:
        record, launch, forked = adopted.record, adopted.launch, adopted.forked
        if record.cpus > self._parts.free:
            raise StateError(f"{record.cpus} CPUs recorded, {self._parts.free} free")
        slots = self._pool.claim(record.slots)
        changed = record.changed if record.resized else forked.mono
        part = Part(
            launch=launch,
            process=adopted.process,
            cpus=record.cpus,
            attempt=record.attempt,
            started=forked.at,
            received=forked.mono,
            rate=record.rate,
            budget=record.budget,
            changed=changed,
            deadline=wall_deadline(
                changed, record.budget, record.rate, launch.time_scale, self._grace
            ),
            resized=record.resized,
            slots=slots,
            failure_file=launch.failure_file,
            forked=forked.mono,
            adopted_after_stop=time.time() if self._survey and self._survey.after_stop else None,
        )
        self._parts.add(part)
        self._adopted.append(part)
        self._counters.adopted += 1
        if launch.mpi is not None:
            # Re-pinned to the same slots: the leader now, its ranks once found.
            pin_part(self._pool, slots, forked.pid, ())

    def supervise(self) -> None:
        """Once the agent's tasks run: supervise the adopted parts, report the lost ones."""
        if self._survey is None:
            return
        for lost in self._survey.lost:
            # Not remembered as finished here: a (job, attempt) a scheduler with a fresh
            # journal starts again is a new part, not a duplicate of an old process.
            self._reports.not_adopted(lost, stopped=self._survey.after_stop)
        for part in self._adopted:
            process, job_id = part.process, part.launch.job_id
            if process is None:
                continue
            self._runs.watch(job_id, part.attempt, process)
            if part.launch.mpi is not None:
                self._runs.find_ranks(job_id, part.attempt, process.pid, part.launch.ranks)
