"""The twin's event engine: replay jobs through the scheduler core on a virtual clock.

Theory of operation. Two sources of events: arrivals (the jobs, sorted by
submit time) and ends (a heap of ``(time, seq, job id, version)``; a resize
bumps the job's version so its stale end event is skipped when popped, the
usual lazy deletion). At each distinct instant every end is applied first
(freeing CPUs), then every arrival, then the policy runs once through
``SchedulerCore.schedule``; its starts and resizes go to the modelled
agents, which push the resulting ends. The same input always gives the same
schedule: ties are broken by a sequence number, never by dict order or
wall-clock time.

The engine measures the wall time of every ``schedule`` call (the decision
time per event); that is the only clock it reads, and only for reporting.

``max_user_cpus`` applies the live scheduler's per-user CPU limit, in the same
core (``scheduler.core.user_limit``): a job that would take its user past it
waits for that user's jobs to end, one wider than it is rejected (``cpu_limit``).
"""

from __future__ import annotations

import heapq
import itertools
import time
from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from model.execution import DEFAULT_MODEL, ExecutionModel
from model.job import Job
from model.machine import Machine
from model.outcome import JobOutcome
from scheduler.core.core import Rejected, SchedulerCore
from scheduler.core.snapshot import Policy
from twin.agents import ModelledAgents

ProgressFn = Callable[[int, int], None]
"""Called with ``(jobs finished, jobs total)`` every few thousand events."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationResult:
    policy: str
    machines: tuple[Machine, ...]
    outcomes: list[JobOutcome]
    #: Jobs the core refused, by code (``scheduler.core.answers.RejectCode``).
    rejected: Counter[str]
    #: Wall time of each ``schedule`` call, nanoseconds (one per instant with events).
    decision_ns: array[int]
    #: Arrivals plus ends processed.
    events: int
    wall_seconds: float
    counters: dict[str, int]

    @property
    def total_cpus(self) -> int:
        return sum(m.cpus for m in self.machines)


def simulate(
    jobs: Sequence[Job],
    *,
    machines: Sequence[Machine],
    policy: Policy,
    execution: ExecutionModel = DEFAULT_MODEL,
    progress: ProgressFn | None = None,
    progress_every: int = 5000,
    max_user_cpus: int | None = None,
) -> SimulationResult:
    """Replay ``jobs`` (sorted by submit time) on ``machines`` under ``policy``."""
    for a, b in itertools.pairwise(jobs):
        if b.submit < a.submit:
            raise ValueError(
                f"jobs must be sorted by submit time: {b.id!r} at {b.submit} after "
                f"{a.id!r} at {a.submit}"
            )
    core = SchedulerCore(
        policy=policy, machines=machines, execution=execution, max_user_cpus=max_user_cpus
    )
    agents = ModelledAgents({m.id: m.speed for m in machines}, execution)
    # The core's allocation and rate of every start go to the agents (twin.agents).
    running_job = core.running_job
    ends: list[tuple[float, int, str, int]] = []
    seq = 0
    outcomes: list[JobOutcome] = []
    rejected: Counter[str] = Counter()
    decision_ns: array[int] = array("q")
    n = len(jobs)
    next_job = 0
    events = 0
    clock = time.perf_counter_ns
    started_wall = time.perf_counter()
    total = n
    next_report = progress_every
    inf = float("inf")

    # Instants at which a reservation falls due without any job ending then (possible
    # when a placement rule spans machines): the policy must look again at them.
    wakes: list[float] = []
    while next_job < n or ends:
        t_arrival = jobs[next_job].submit if next_job < n else inf
        t_end = ends[0][0] if ends else inf
        now = t_arrival if t_arrival < t_end else t_end
        if wakes and wakes[0] < now:
            now = wakes[0]
        while wakes and wakes[0] <= now:
            heapq.heappop(wakes)
        while ends and ends[0][0] <= now:
            _, _, job_id, version = heapq.heappop(ends)
            if not agents.is_current(job_id, version):
                continue
            core.ended(job_id, now)
            outcomes.append(agents.finish(job_id, now))
            events += 1
        while next_job < n and jobs[next_job].submit <= now:
            answer = core.submit(jobs[next_job])
            if isinstance(answer, Rejected):
                rejected[answer.code.value] += 1
                total -= 1
            next_job += 1
            events += 1
        t0 = clock()
        decisions = core.schedule(now)
        decision_ns.append(clock() - t0)
        for resize in decisions.resizes:
            run = running_job(resize.job.id)
            assert run is not None  # the core applied the resize
            end, version = agents.resize(
                resize.job, resize.parts, now, alloc=run.alloc, rate=run.rate
            )
            heapq.heappush(ends, (end, seq, resize.job.id, version))
            seq += 1
        for start in decisions.starts:
            run = running_job(start.job.id)
            assert run is not None  # the core applied the start
            end, version = agents.start(start.job, start.parts, now, alloc=run.alloc, rate=run.rate)
            heapq.heappush(ends, (end, seq, start.job.id, version))
            seq += 1
        reservations = decisions.reservations
        if reservations:
            due = reservations[0].start
            if len(reservations) > 1:
                due = min(r.start for r in reservations)
            if now < due < (ends[0][0] if ends else inf) and (not wakes or due < wakes[0]):
                heapq.heappush(wakes, due)
        if progress is not None and events >= next_report:
            progress(len(outcomes), total)
            next_report = events + progress_every
    if core.queue:
        # Nothing left to end and jobs still waiting: the policy can never start them.
        stuck = ", ".join(j.id for j in core.queue[:5])
        raise RuntimeError(
            f"policy {policy.name!r} left {len(core.queue)} job(s) waiting forever (first: {stuck})"
        )
    if progress is not None:
        progress(len(outcomes), total)
    return SimulationResult(
        policy=policy.name,
        machines=tuple(machines),
        outcomes=outcomes,
        rejected=rejected,
        decision_ns=decision_ns,
        events=events,
        wall_seconds=time.perf_counter() - started_wall,
        counters=dict(core.counters),
    )
