"""Replaying a trace on the live cluster, and following its jobs to their end.

A replay sends the jobs due at the same instant as one ``SubmitJobs``,
``(submit - first submit) / K`` wall seconds after it starts, with up to
``max_in_flight`` requests awaiting their reply, and :func:`follow` counts the
jobs that ended from their ``JobEvent`` s, asking now and then which of its
own jobs are still queued or running, for the events it may have missed.
``accordion replay`` and ``accordion up --demo`` run this same code. What it
asks the scheduler is about its own jobs (``LiveClient.live_ids``), so a queue
of other users' jobs, however long, costs it nothing.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from accordion.client.live_client import LiveClient
from accordion.client.specs import spec_of
from accordion.errors import LiveError, NoReplyError
from broker.bus import BusError
from broker.messages import JobEvent, JobSpec, MpiSpec, SubmitReply
from broker.vocabulary import JobEventKind
from model.job import Job

#: Jobs per SubmitJobs at most: a bigger instant is split (a message stays below ~1 MB).
MAX_JOBS_PER_REQUEST = 5000


@dataclass(frozen=True, slots=True)
class Arrival:
    """Jobs submitted together, ``at`` cluster seconds after the first arrival."""

    at: float
    jobs: tuple[JobSpec, ...]


def arrivals(jobs: Sequence[Job], *, prefix: str = "", mpi: MpiSpec | None = None) -> list[Arrival]:
    """Trace jobs (in submit order) grouped by submit instant, one request each.

    ``mpi``: every job runs the MPI-like workload so parameterised (``spec_of``).

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
        group.append(spec_of(job, prefix=prefix, mpi=mpi))
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
    #: Job id -> final state; "left" when a StatusReply showed it gone and the
    #: journal had no final event for it (which a correct scheduler never gives).
    ended: dict[str, str] = field(default_factory=dict)
    replay_done: bool = False
    #: Most wall seconds a request went out after its due time (the client lagging).
    late_max: float = 0.0
    wall_seconds: float = 0.0
    #: Accepted jobs that have ended, kept as a count: progress displays read it
    #: at every event, and a replay may have hundreds of thousands of jobs.
    finished: int = 0
    #: Resizes of the replay's jobs seen on the watch (FCFS-malleable), by direction,
    #: and the latest one, for a display to show as it happens.
    shrinks: int = 0
    expands: int = 0
    last_resize: JobEvent | None = None

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

    def resized(self, event: JobEvent) -> bool:
        """A ``resized`` event of one of the replay's jobs; False for anyone else's."""
        if event.job_id not in self.expected or event.cpus_before is None:
            return False
        if event.cpus_after is None or event.cpus_after == event.cpus_before:
            return False
        if event.cpus_after < event.cpus_before:
            self.shrinks += 1
        else:
            self.expands += 1
        self.last_resize = event
        return True

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
            reply = await _submit_again_if_unanswered(client, arrival)
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

    Ends are taken from ``JobEvent`` s (QoS 1, but a watcher's queue may overflow
    or the connection drop). So when no job has ended for ``poll`` seconds the
    scheduler is asked which of the accepted jobs not yet ended are neither
    queued nor running (``LiveClient.live_ids``: their totals first, their rows
    only when some left), and a ``HistoryRequest`` fetches the journalled events
    of those: each gets its true final state. Only then: a long replay's jobs
    are many to ask after every second while events flow.
    """
    loop = asyncio.get_running_loop()
    next_poll = loop.time() + poll
    while not state.all_ended:
        item = await client.next_watched(timeout=max(0.0, next_poll - loop.time()))
        changed = False
        resized = (
            isinstance(item, JobEvent)
            and item.event is JobEventKind.RESIZED
            and state.resized(item)
        )
        if resized and on_change is not None:
            on_change(state)
        if isinstance(item, JobEvent) and item.state.final:
            changed = state.end(item.job_id, item.state.value)
        if changed:
            next_poll = loop.time() + poll
        elif loop.time() >= next_poll:
            try:
                waiting = sorted(state.accepted - state.ended.keys())
                present = await client.live_ids(waiting)
                gone = [j for j in waiting if j not in present]
                if gone:
                    finals = final_states(await client.history(gone))
                    for job_id in gone:
                        changed = state.end(job_id, finals.get(job_id, "left")) or changed
            except NoReplyError:
                # A request sent while the broker or the scheduler restarted can go
                # unanswered; the jobs go on, so ask again at the next poll.
                pass
            next_poll = loop.time() + poll
        if changed and on_change is not None:
            on_change(state)
    return state


#: Times a submission that got no answer is sent again.
SUBMIT_ATTEMPTS = 3


async def _submit_again_if_unanswered(client: LiveClient, arrival: Arrival) -> SubmitReply:
    """Submit ``arrival``; on no reply, send the same request again (a request sent
    while the broker restarted can be lost). Safe: submissions are idempotent by job
    id, so one that did arrive is answered "duplicate" and changes nothing."""
    for attempt in range(1, SUBMIT_ATTEMPTS + 1):
        try:
            return await client.submit(arrival.jobs)
        except NoReplyError:
            if attempt == SUBMIT_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


class EventGaps:
    """Each job's last event ``seq`` a watcher saw, to notice the ones it missed.

    The scheduler numbers a job's events from 1 without gaps; a watcher that
    joined late, overflowed or reconnected sees a jump, asks the scheduler for
    the job's history, and :meth:`fill` gives the events it did not see.
    """

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def missed(self, event: JobEvent) -> bool:
        """Whether events of ``event``'s job came before it unseen (``seq`` 0: unnumbered)."""
        return event.seq > self._last.get(event.job_id, 0) + 1

    def fill(self, event: JobEvent, history: Sequence[JobEvent]) -> list[JobEvent]:
        """The events of ``history`` between the last one seen and ``event``, in order;
        ``event`` is then the last one seen."""
        last = self._last.get(event.job_id, 0)
        found = [e for e in history if e.job_id == event.job_id and last < e.seq < event.seq]
        self._last[event.job_id] = max(last, event.seq)
        return sorted(found, key=lambda e: e.seq)

    def seen(self, event: JobEvent) -> None:
        self._last[event.job_id] = max(self._last.get(event.job_id, 0), event.seq)


def final_states(events: Sequence[JobEvent]) -> dict[str, str]:
    """Each job's final state among ``events`` (its last final event)."""
    finals: dict[str, str] = {}
    for event in events:
        if event.state.final:
            finals[event.job_id] = event.state.value
    return finals


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
