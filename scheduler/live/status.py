"""The scheduler's status: filtered, paged, totalled, and never larger than the wire allows.

Theory of operation. A ``StatusRequest`` asks for a page; the answer is built
here without I/O from the core's state:

- *Filters*: ``user``, ``states`` (queued, running; a final state matches
  nothing) and ``ids``. With ``ids`` only those jobs are looked at (a replay
  asking after its own jobs costs what it names, not what the queue holds);
  otherwise the running jobs and the queue are walked from the cursor on.
- *Pages*: machines (by id, when asked), then running jobs, then queued jobs,
  each section in a stable order (machine id; a job's arrival number). The
  cursor is where the last page stopped (``m:<machine>``, ``r:<arrival>``,
  ``q:<arrival>``), so a job that moves between pages is not repeated in its
  new section before the cursor, and every job that stays put is seen once.
- *Bounds*: a page stops at ``limit`` jobs and before
  ``broker.limits.MAX_REPLY_BYTES``: each row's encoded size is added as it
  goes, over the size of the reply without rows. However long the queue, a
  status fits in one message, and asking for it costs a page, not the queue.
- *Totals* count what the ``user`` and ``ids`` filters select, on every page:
  from the core's per-user tallies (``scheduler.core.user_load``), so they
  cost no walk. An admin (or anyone on a broker without logins, where every
  client is trusted alike) also gets the users with most jobs; a user sees
  every job's row, as before, but no one else's totals.

The core's per-user CPU limit is in the reply (``max_user_cpus``): with the
totals, a client can tell that a user's queued jobs wait for it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

from broker.codec import encoded_size
from broker.limits import MAX_REPLY_BYTES
from broker.messages import (
    TOP_USERS,
    JobStatus,
    MachineStatus,
    PartSpec,
    StatusReply,
    StatusRequest,
    StatusTotals,
    UserTotals,
)
from broker.vocabulary import JobState as WireState
from broker.vocabulary import MachineState
from model.job import Job
from scheduler.core.job_lifecycle import JobState
from scheduler.core.user_load import UserLoad
from scheduler.live.context import Context

#: Bytes each array of a reply may grow its msgpack header by (1 byte up to 15
#: items, 5 bytes at most), and a margin for the cursor's digits.
_SLACK = 4 * 4 + 32
_SECTIONS = ("m", "r", "q")


class CursorError(ValueError):
    """A cursor this scheduler did not hand out."""


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a page starts: after ``key`` in ``section`` (``key`` None: at its start)."""

    section: str
    key: str | int | None = None

    @classmethod
    def parse(cls, text: str | None, machines: bool) -> Cursor:
        if text is None:
            return cls("m" if machines else "r")
        section, sep, key = text.partition(":")
        if not sep or section not in _SECTIONS:
            raise CursorError(f"cursor {text!r} was not handed out by this scheduler")
        if not key:
            return cls(section)
        if section == "m":
            return cls(section, key)
        try:
            return cls(section, int(key))
        except ValueError:
            raise CursorError(f"cursor {text!r} was not handed out by this scheduler") from None

    def __str__(self) -> str:
        return f"{self.section}:{'' if self.key is None else self.key}"


class _Page:
    """Rows being added under a byte budget and a row limit."""

    def __init__(self, budget: int, limit: int) -> None:
        self.left = budget
        self.limit = limit
        self.machines: list[MachineStatus] = []
        self.running: list[JobStatus] = []
        self.queue: list[JobStatus] = []
        self.next: Cursor | None = None

    @property
    def jobs(self) -> int:
        return len(self.running) + len(self.queue)

    def fits(self, row: MachineStatus | JobStatus) -> bool:
        size = encoded_size(row)
        if size > self.left:
            return False
        self.left -= size
        return True


def status(ctx: Context, request: StatusRequest, now: float, *, admin: bool) -> StatusReply:
    """One page of the status ``request`` asks for (module docstring); ``admin``: the
    totals list the users with most jobs. ``limit`` 0 asks for no jobs: the page is
    then machines only, and its cursor goes on with machines. Raises
    :class:`CursorError` for a cursor that cannot be read.
    """
    cursor = Cursor.parse(request.cursor, request.machines)
    totals = _totals(ctx, request, admin=admin)
    empty = StatusReply(
        request_id=request.request_id,
        now=now,
        machines=(),
        queue=(),
        running=(),
        totals=totals,
        next_cursor="q:" + "9" * 19,
        max_user_cpus=ctx.core.max_user_cpus,
    )
    page = _Page(MAX_REPLY_BYTES - encoded_size(empty) - _SLACK, request.limit)
    if cursor.section == "m":
        _machines(ctx, page, cursor)
    if page.next is None and request.limit and cursor.section in ("m", "r"):
        _jobs(ctx, request, page, "r", cursor if cursor.section == "r" else None)
    if page.next is None and request.limit:
        _jobs(ctx, request, page, "q", cursor if cursor.section == "q" else None)
    return StatusReply(
        request_id=request.request_id,
        now=now,
        machines=tuple(page.machines),
        queue=tuple(page.queue),
        running=tuple(page.running),
        totals=totals,
        next_cursor=None if page.next is None else str(page.next),
        max_user_cpus=ctx.core.max_user_cpus,
    )


def _machines(ctx: Context, page: _Page, cursor: Cursor) -> None:
    core = ctx.core
    names = sorted(ctx.agents)
    if cursor.key is not None:
        names = names[bisect.bisect_right(names, str(cursor.key)) :]
    for agent_id in names:
        ag = ctx.agents[agent_id]
        row = MachineStatus(
            id=agent_id,
            cpus=ag.machine.cpus,
            speed=ag.machine.speed,
            free=core.free(agent_id) if ag.life.available else 0,
            # A machine held for adoption (its agent dead, its parts running on) is not
            # online: nothing new starts there until an incarnation registers.
            online=ag.life.heard,
            state=MachineState(ag.life.state.value),
        )
        if not page.fits(row):
            page.next = Cursor("m", page.machines[-1].id) if page.machines else Cursor("m")
            return
        page.machines.append(row)


def _jobs(
    ctx: Context, request: StatusRequest, page: _Page, section: str, cursor: Cursor | None
) -> None:
    """Add the section's matching jobs after ``cursor`` until the page is full."""
    wanted = WireState.RUNNING if section == "r" else WireState.QUEUED
    if request.states and wanted not in request.states:
        return
    after = -1 if cursor is None or cursor.key is None else int(cursor.key)
    rows = page.running if section == "r" else page.queue
    for arrival, row in _rows(ctx, request, section, after):
        if page.jobs >= page.limit or not page.fits(row):
            # Something matches beyond this page: say where the next one starts.
            page.next = Cursor(section, after)
            return
        rows.append(row)
        after = arrival


def _rows(
    ctx: Context, request: StatusRequest, section: str, after: int
) -> Iterator[tuple[int, JobStatus]]:
    """``(arrival, row)`` of the section's matching jobs after arrival ``after``, in order."""
    core = ctx.core
    user = request.user
    if request.ids:
        state = JobState.RUNNING if section == "r" else JobState.QUEUED
        chosen = [j for j in set(request.ids) if core.state_of(j) is state]
        numbered = sorted((core.arrival(j), j) for j in chosen)
    elif section == "r":
        ids = [r.job.id for r in core.running] + list(core.pending)
        numbered = sorted((core.arrival(j), j) for j in ids)
    else:
        numbered = None
    if numbered is not None:
        at = bisect.bisect_right(numbered, (after, "\uffff"))
        for arrival, job_id in numbered[at:]:
            row = _job_row(ctx, job_id, section)
            if user is None or row.user == user:
                yield arrival, row
        return
    queue = core.queue
    # The queue is in arrival order (``scheduler.core.job_queue``): bisect to the cursor.
    at = bisect.bisect_right(queue, after, key=lambda j: core.arrival(j.id))
    for i in range(at, len(queue)):
        job = queue[i]
        if user is None or job.user == user:
            yield core.arrival(job.id), _queued_row(job)


def _queued_row(job: Job) -> JobStatus:
    return JobStatus(
        id=job.id,
        state=WireState.QUEUED,
        procs=job.procs,
        user=job.user,
        submit=job.submit,
        walltime=job.walltime,
        deadline=job.deadline,
    )


def _job_row(ctx: Context, job_id: str, section: str) -> JobStatus:
    core = ctx.core
    if section == "q":
        job = core.job(job_id)
        assert job is not None  # queued, so known
        return _queued_row(job)
    run = core.running_job(job_id)
    if run is not None:
        return JobStatus(
            id=job_id,
            state=WireState.RUNNING,
            procs=run.job.procs,
            user=run.job.user,
            submit=run.job.submit,
            start=run.start,
            parts=tuple(PartSpec(machine=p.machine, cpus=p.cpus) for p in run.parts),
            walltime=run.job.walltime,
            est_end=run.est_end,
            deadline=run.job.deadline,
        )
    pending = core.pending[job_id]
    return JobStatus(
        id=job_id,
        state=WireState.RUNNING,
        procs=pending.job.procs,
        user=pending.job.user,
        submit=pending.job.submit,
        start=pending.start,
        parts=tuple(PartSpec(machine=p.machine, cpus=p.cpus) for p in pending.parts),
        walltime=pending.job.walltime,
        deadline=pending.job.deadline,
        reconciling=True,
    )


def _totals(ctx: Context, request: StatusRequest, *, admin: bool) -> StatusTotals:
    core = ctx.core
    load = core.load
    assert load is not None  # the live core keeps per-user tallies
    user = request.user
    if request.ids:
        queued = running = cpus = 0
        for job_id in set(request.ids):
            state = core.state_of(job_id)
            job = core.job(job_id)
            if job is None or (user is not None and job.user != user):
                continue
            if state is JobState.QUEUED:
                queued += 1
            elif state is JobState.RUNNING:
                running += 1
                cpus += job.procs
    elif user is not None:
        queued = load.queued.get(user, 0)
        running = load.running.get(user, 0)
        cpus = load.cpus.get(user, 0)
    else:
        queued = len(core.queue)
        running = len(core.running) + len(core.pending)
        cpus = sum(load.cpus.values())
    if not admin:
        return StatusTotals(queued=queued, running=running, cpus=cpus)
    return StatusTotals(
        queued=queued,
        running=running,
        cpus=cpus,
        users=len(load.users()),
        by_user=_top_users(load),
    )


def _top_users(load: UserLoad) -> tuple[UserTotals, ...]:
    """The :data:`TOP_USERS` users with most jobs queued and running (ties by name)."""
    users = sorted(
        load.users(),
        key=lambda u: (-(load.queued.get(u, 0) + load.running.get(u, 0)), u),
    )[:TOP_USERS]
    return tuple(
        UserTotals(
            user=u,
            queued=load.queued.get(u, 0),
            running=load.running.get(u, 0),
            cpus=load.cpus.get(u, 0),
        )
        for u in users
    )
