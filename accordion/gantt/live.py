"""A Gantt chart of a live cluster: what ran, what runs, and what the plan says comes next.

Theory of operation. A :class:`LiveTimeline` is fed the two things a client
may read: job events (a watcher's, and the scheduler's history of a job,
``HistoryRequest``) and status replies. From the events it keeps each job's
*runs*: a ``running`` event opens one on its parts, a ``resized`` event
moves it to new parts from its instant (a change of width), a ``requeued``
or final event closes it. From the latest status it takes the machines,
"now", each job's user and deadline, and what lies ahead:

- a running job's bars go on to "now"; from there to the end the scheduler
  estimates for it (``JobStatus.est_end``, from the user's wall time) a
  planned bar continues it on the same rows. A job past its estimate has
  no planned rest: it is drawn running, and that is all anyone knows;
- a queued job with a predicted start (``predicted_start``, when the
  scheduler sends one) is a planned bar from then for its wall-time
  estimate, on the machines the status names for it (its ``parts``), or
  in the "no machine yet" lane when it names none. Without a predicted
  start a queued job has no bar: nothing says when it will run;
- a job whose end (real, estimated or planned) passes its deadline is late.

A job running at the last status that no event ever opened (the watcher
joined later; another user's job, whose events this login may not read)
starts at its status's ``start`` on its current parts. What the login may
see is what the status and its events give: a user sees other users' jobs
as the status shows them, never their history.

Events are applied once each, in each job's ``seq`` order
(:class:`~accordion.client.replay.EventGaps` says when some were missed, for
the caller to ask the history). At most ``keep`` ended jobs are kept, the
oldest ended dropped first, so a page that watches for days stays bounded.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from accordion.client.live_client import LiveClient
from accordion.gantt.bars import UNPLACED, Bar, BarKind, Gantt, MachineRow, placement_bars
from broker.messages import JobEvent, JobStatus, PartSpec, StatusReply
from broker.vocabulary import JobEventKind
from model.machine import Part

#: The events after which the job no longer runs where it ran (``held`` and
#: ``adopted`` leave it running on its parts).
ENDS_A_RUN = frozenset(
    (
        JobEventKind.REQUEUED,
        JobEventKind.FINISHED,
        JobEventKind.FAILED,
        JobEventKind.CANCELLED,
    )
)


def predicted_start(job: JobStatus) -> float | None:
    """The scheduler's predicted start of a queued job, where its status has one."""
    value: Any = getattr(job, "predicted_start", None)
    return None if value is None else float(value)


def wait_reason(job: JobStatus) -> str:
    """Why a queued job waits, in the scheduler's words, where its status says so."""
    reason: Any = getattr(job, "reason", None)
    detail: Any = getattr(job, "reason_detail", "")
    if reason is None:
        return ""
    return f"{reason}: {detail}" if detail else str(reason)


def _parts(specs: tuple[PartSpec, ...]) -> tuple[Part, ...]:
    return tuple(Part(p.machine, p.cpus) for p in specs)


@dataclass(slots=True)
class _Run:
    steps: list[tuple[float, tuple[Part, ...]]]
    end: float | None = None


@dataclass(slots=True)
class _Job:
    runs: list[_Run] = field(default_factory=list)
    last_seq: int = 0
    ended: bool = False


class LiveTimeline:
    """Each job's runs and the latest status (module docstring)."""

    def __init__(self, *, keep: int = 10_000) -> None:
        if keep < 0:
            raise ValueError(f"keep must be >= 0, got {keep}")
        self._keep = keep
        self._jobs: dict[str, _Job] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._users: dict[str, str] = {}
        self._deadlines: dict[str, float] = {}
        self.status_reply: StatusReply | None = None

    def knows(self, job_id: str) -> bool:
        """Whether a status or an event has shown ``job_id``."""
        return job_id in self._jobs or job_id in self._users

    def missed(self, event: JobEvent) -> bool:
        """Whether events of ``event``'s job came before it unseen."""
        job = self._jobs.get(event.job_id)
        return event.seq > (0 if job is None else job.last_seq) + 1

    def event(self, event: JobEvent) -> None:
        """Apply one job event (again: ignored)."""
        job = self._jobs.get(event.job_id)
        if job is None:
            job = self._jobs[event.job_id] = _Job()
        if event.seq and event.seq <= job.last_seq:
            return  # a QoS 1 redelivery, or history the watch had already shown
        job.last_seq = max(job.last_seq, event.seq)
        parts = _parts(event.parts)
        run = job.runs[-1] if job.runs and job.runs[-1].end is None else None
        kind = event.event
        if kind is JobEventKind.RUNNING:
            if run is None:
                job.runs.append(_Run([(event.at, parts)]))
            elif parts and parts != run.steps[-1][1]:
                run.steps.append((event.at, parts))  # reconciled elsewhere after a restart
        elif kind is JobEventKind.RESIZED and run is not None:
            run.steps.append((event.at, parts or _resized(run.steps[-1][1], event)))
        elif kind in ENDS_A_RUN:
            if run is not None:
                run.end = event.at
            if event.state.final:
                job.ended = True
                self._ended[event.job_id] = None
                self._forget()

    def status(self, reply: StatusReply) -> None:
        """Take the cluster's state now (the latest reply wins)."""
        self.status_reply = reply
        for job in (*reply.queue, *reply.running):
            self._users[job.id] = job.user
            if job.deadline is not None:
                self._deadlines[job.id] = job.deadline

    def _forget(self) -> None:
        while len(self._ended) > self._keep:
            old, _ = self._ended.popitem(last=False)
            self._jobs.pop(old, None)
            self._users.pop(old, None)
            self._deadlines.pop(old, None)

    @property
    def now(self) -> float | None:
        return None if self.status_reply is None else self.status_reply.now

    def gantt(self, title: str = "live cluster") -> Gantt:
        """The chart as of the latest status (module docstring)."""
        reply = self.status_reply
        now = reply.now if reply is not None else None
        running = {j.id: j for j in reply.running} if reply is not None else {}
        bars: list[Bar] = []
        for job_id, job in self._jobs.items():
            status = running.get(job_id)
            for run in job.runs:
                bars += self._run_bars(job_id, run, status, now)
        for job_id, status in running.items():
            known = self._jobs.get(job_id)
            if (known is None or not known.runs) and status.start is not None:
                run = _Run([(status.start, _parts(status.parts))])
                bars += self._run_bars(job_id, run, status, now)
        for status in reply.queue if reply is not None else ():
            bars += self._planned_bars(status)
        machines = [MachineRow(m.id, m.cpus) for m in reply.machines] if reply else []
        named = {m.id for m in machines}
        for bar in bars:
            if bar.machine != UNPLACED and bar.machine not in named:
                # A machine gone since (retired): its past bars still need a row.
                named.add(bar.machine)
                machines.append(MachineRow(bar.machine, 0))
        return Gantt(
            title=title,
            machines=tuple(machines),
            bars=tuple(bars),
            now=now,
            time_base="cluster seconds (wall seconds x the scheduler's time scale)",
        )

    def _run_bars(
        self, job_id: str, run: _Run, status: JobStatus | None, now: float | None
    ) -> list[Bar]:
        steps = run.steps
        if not steps[-1][1] and status is not None and status.parts:
            # An event journalled before events carried parts names none: the status does.
            steps = [*steps[:-1], (steps[-1][0], _parts(status.parts))]
        steps = [(at, parts) for at, parts in steps if parts]
        if not steps:
            return []
        user = self._users.get(job_id, "?")
        deadline = self._deadlines.get(job_id)
        end = run.end
        if end is None:
            if now is None:
                return []
            expected = status.est_end if status is not None else None
            late = deadline is not None and max(now, expected or now) > deadline
            bars = placement_bars(job_id, user, steps, now, late=late, deadline=deadline)
            if expected is not None and expected > now:
                bars += placement_bars(
                    job_id,
                    user,
                    [(now, steps[-1][1])],
                    expected,
                    kind=BarKind.PLANNED,
                    late=late,
                    deadline=deadline,
                )
            return bars
        late = deadline is not None and end > deadline
        return placement_bars(job_id, user, steps, end, late=late, deadline=deadline)

    def _planned_bars(self, status: JobStatus) -> list[Bar]:
        start = predicted_start(status)
        if start is None:
            return []
        end = start + status.walltime
        parts = _parts(status.parts) or (Part(UNPLACED, status.procs),)
        late = status.deadline is not None and end > status.deadline
        return placement_bars(
            status.id,
            status.user,
            [(start, parts)],
            end,
            kind=BarKind.PLANNED,
            late=late,
            deadline=status.deadline,
        )


def _resized(parts: tuple[Part, ...], event: JobEvent) -> tuple[Part, ...]:
    """A resize's parts from an event journalled before events carried them (only CPUs): certain
    only for a job on one machine; otherwise its parts are left as they were."""
    if len(parts) == 1 and event.cpus_after is not None:
        return (Part(parts[0].machine, event.cpus_after),)
    return parts


async def fetch_timeline(client: LiveClient, *, keep: int = 10_000) -> LiveTimeline:
    """The status now and the history of its running jobs (their resizes so far).

    The status is its first page: the machines, the running jobs, then as many
    queued ones as fit in a reply (``broker.limits.MAX_REPLY_BYTES``), so a long
    queue draws its head, not all of it."""
    timeline = LiveTimeline(keep=keep)
    reply = await client.status()
    ids = [j.id for j in reply.running]
    if ids:
        for event in await client.history(ids):
            timeline.event(event)
    timeline.status(reply)
    return timeline
