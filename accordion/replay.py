"""Replaying a trace on the live cluster, and following its jobs to their end.

A replay sends the jobs due at the same instant as one ``SubmitJobs``,
``(submit - first submit) / K`` wall seconds after it starts, with up to
``max_in_flight`` requests awaiting their reply, and :func:`follow` counts the
jobs that ended from their ``JobEvent`` s, polling ``StatusReply`` now and
then for the events it may have missed. ``accordion replay`` and ``accordion
up --demo`` run this same code.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from accordion.client import LiveClient
from accordion.errors import LiveError
from accordion.specs import spec_of
from broker.bus import BusError
from broker.messages import JobEvent, JobSpec, SubmitReply
from model.job import Job

#: Jobs per SubmitJobs at most: a bigger instant is split (a message stays below ~1 MB).
MAX_JOBS_PER_REQUEST = 5000
#: JobEvent states after which a job never changes again.
FINAL_STATES = frozenset({"finished", "failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class Arrival:
    """Jobs submitted together, ``at`` cluster seconds after the first arrival."""

    at: float
    jobs: tuple[JobSpec, ...]


def arrivals(jobs: Sequence[Job], *, prefix: str = "") -> list[Arrival]:
    """Trace jobs (in submit order) grouped by submit instant, one request each.

    An instant with more than :data:`MAX_JOBS_PER_REQUEST` jobs is split into
    several requests at the same time.
    """
    if not jobs:
        return []
    first = jobs[0].submit
    out: list[Arrival] = []
    group: list[JobSpec] = []
    at = 0.0
    for job in jobs:
        offset = job.submit - first
        if offset < at:
            raise ValueError(f"jobs must be in submit order: {job.id!r} comes too late")
        if group and (offset != at or len(group) == MAX_JOBS_PER_REQUEST):
            out.append(Arrival(at, tuple(group)))
            group = []
        at = offset
        group.append(spec_of(job, prefix=prefix))
    out.append(Arrival(at, tuple(group)))
    return out


@dataclass(slots=True)
class ReplayState:
    """What a replay has done so far; updated in place, read by progress displays."""

    expected: frozenset[str]
    sent: int = 0
    accepted: set[str] = field(default_factory=set)
    duplicate: int = 0
    rejected: dict[str, str] = field(default_factory=dict)
    #: Job id -> final state; "left" when only a StatusReply showed it gone.
    ended: dict[str, str] = field(default_factory=dict)
    replay_done: bool = False
    #: Most wall seconds a request went out after its due time (the client lagging).
    late_max: float = 0.0
    wall_seconds: float = 0.0
    #: Accepted jobs that have ended, kept as a count: progress displays read it
    #: at every event, and a replay may have hundreds of thousands of jobs.
    finished: int = 0

    @property
    def total(self) -> int:
        return len(self.expected)

    @property
    def all_ended(self) -> bool:
        return self.replay_done and self.finished == len(self.accepted)

    def record(self, reply: SubmitReply) -> None:
        """A submission's reply (its jobs' events may have come first)."""
        for result in reply.results:
            if not result.accepted:
                self.rejected[result.job_id] = result.reason or "no reason given"
                continue
            self.duplicate += result.duplicate
            if result.job_id not in self.accepted:
                self.accepted.add(result.job_id)
                self.finished += result.job_id in self.ended

    def end(self, job_id: str, state: str) -> bool:
        """Job ``job_id`` ended in ``state``; False if it was known to have ended."""
        if job_id in self.ended or job_id not in self.expected:
            return False
        self.ended[job_id] = state
        self.finished += job_id in self.accepted
        return True


Changed = Callable[[ReplayState], None]


async def replay(
    client: LiveClient,
    plan: Sequence[Arrival],
    *,
    time_scale: float,
    state: ReplayState | None = None,
    on_change: Changed | None = None,
    max_in_flight: int = 64,
) -> ReplayState:
    """Send ``plan`` at its compressed times (``at / time_scale`` wall seconds).

    Requests go out in order; their replies are awaited concurrently (at most
    ``max_in_flight`` at a time), so a slow reply never delays the next
    arrival. The first error (no reply, connection lost) stops the replay and
    is raised once the requests in flight have been answered.
    """
    if not (time_scale > 0 and math.isfinite(time_scale)):
        raise ValueError(f"time scale must be > 0, got {time_scale!r}")
    if state is None:
        state = ReplayState(frozenset(s.id for a in plan for s in a.jobs))
    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(max_in_flight)
    errors: list[LiveError | BusError] = []
    t0 = loop.time()

    async def one(arrival: Arrival) -> None:
        try:
            reply = await client.submit(arrival.jobs)
        except (LiveError, BusError) as exc:
            errors.append(exc)
            return
        finally:
            slots.release()
        state.record(reply)
        if on_change is not None:
            on_change(state)

    async with asyncio.TaskGroup() as tg:
        for i, arrival in enumerate(plan):
            due = t0 + arrival.at / time_scale
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await slots.acquire()
            if errors:
                slots.release()
                break
            state.late_max = max(state.late_max, loop.time() - due)
            state.sent += len(arrival.jobs)
            tg.create_task(one(arrival), name=f"replay-submit-{i}")
    state.wall_seconds = loop.time() - t0
    state.replay_done = True
    if on_change is not None:
        on_change(state)
    if errors:
        raise errors[0]
    return state


async def follow(
    client: LiveClient,
    state: ReplayState,
    *,
    on_change: Changed | None = None,
    poll: float = 1.0,
) -> ReplayState:
    """Wait until every accepted job of ``state`` has ended (the client must watch).

    Ends are taken from ``JobEvent`` s. Events are QoS 0 and may be missed, so
    when no job has ended for ``poll`` seconds a ``StatusReply`` marks the
    accepted jobs that are neither queued nor running as ended ("left"). Only
    then: a status lists the whole queue, too big to ask for every second of a
    long replay while events flow.
    """
    loop = asyncio.get_running_loop()
    next_poll = loop.time() + poll
    while not state.all_ended:
        item = await client.next_watched(timeout=max(0.0, next_poll - loop.time()))
        changed = False
        if isinstance(item, JobEvent) and item.state in FINAL_STATES:
            changed = state.end(item.job_id, item.state)
        if changed:
            next_poll = loop.time() + poll
        elif loop.time() >= next_poll:
            status = await client.status()
            present = {j.id for j in status.queue} | {j.id for j in status.running}
            for job_id in state.accepted - present - state.ended.keys():
                changed = state.end(job_id, "left") or changed
            next_poll = loop.time() + poll
        if changed and on_change is not None:
            on_change(state)
    return state


async def replay_and_follow(
    client: LiveClient,
    plan: Sequence[Arrival],
    *,
    time_scale: float,
    on_change: Changed | None = None,
    poll: float = 1.0,
) -> ReplayState:
    """:func:`replay` and :func:`follow` together: returns once every job has ended."""
    state = ReplayState(frozenset(s.id for a in plan for s in a.jobs))
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(
                replay(client, plan, time_scale=time_scale, state=state, on_change=on_change),
                name="replay-send",
            )
            tg.create_task(
                follow(client, state, on_change=on_change, poll=poll), name="replay-follow"
            )
    except* (LiveError, BusError) as group:
        # One clear error for the caller, not a group: the other task was only cancelled.
        raise group.exceptions[0] from None
    return state
