"""The live scheduler's state and the few moves every handler shares.

The actor (``scheduler.runtime.actor``) is a shell: it owns the mailbox, the bus and
the journal's transactions. Everything it decides happens here and in the
handler modules that take a :class:`Context` (``scheduler.live.requests`` for
clients, ``scheduler.live.agents`` for agents, ``scheduler.live.reconcile`` for a
restart, ``scheduler.live.dispatch`` for a policy's decisions). None of them does
I/O: journal writes go through the :class:`JournalWriter` interface inside
the transaction the actor opened, and messages go into the :class:`Outbox`,
which the actor publishes once the transaction has committed. So what anyone
is told is on disk first, and every handler is driven in tests without a
broker, a loop or a file.

Shared moves: a job's end (:meth:`Context.end_job`), a client's cancel
(:meth:`Context.cancel_job`, :meth:`Context.cancel_queued`), the lost-agent
rule's outcome for one job (:meth:`Context.after_loss`), and job events, which
are numbered per job (``seq`` from 1, no gaps) and in the stream each is
published on (``stream``: every job's on ``events``, one owner's on
``users/<owner>/events``, each from 1 without gaps), journalled and then
published at QoS 1.

*A journal that cannot be written* (``JournalWriter.failure``: its disk full,
read-only or failing) keeps what the handlers write in memory; they go on
with the running jobs and their reports, and refuse what would need a new
promise (a submission, a cancel, a drain), and the actor holds back what
depends on the writes until they reach the disk (``scheduler.runtime.actor``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from broker.messages import CancelPart, JobEvent, JobSpec, Message, PartSpec, in_stream
from broker.topics import TopicError, Topics
from broker.vocabulary import BadMessage, JobEventKind
from model.machine import Machine, Part
from scheduler.core.core import Left, SchedulerCore
from scheduler.core.job_lifecycle import JobState
from scheduler.live.agent_lifecycle import AgentLifecycle, AgentState
from scheduler.live.counters import HandlerMetrics
from scheduler.live.live_jobs import LiveJob, Placements
from scheduler.live.liveness import Deadlines
from scheduler.live.part_lifecycle import PartInput
from scheduler.live.settings import ActorSettings

if TYPE_CHECKING:  # scheduler.live.insight builds on this module
    from scheduler.live.insight import Forecast

log = logging.getLogger(__name__)


class JournalWriter(Protocol):
    """What the handlers write (``scheduler.runtime.journal.Journal`` is one)."""

    def record_submissions(self, jobs: Iterable[tuple[JobSpec, float]]) -> int: ...
    def record_start(self, job_id: str, start: float, parts: Sequence[Part]) -> None: ...
    def record_parts(
        self, job_id: str, at: float, parts: Sequence[Part], before: Sequence[Part] = ()
    ) -> None: ...
    def record_requeue(
        self,
        job_id: str,
        at: float,
        requeues: int,
        detail: str = "",
        *,
        uncharged: int = 0,
        cause: str | None = None,
        charged: bool | None = None,
    ) -> None: ...
    def record_hold(
        self, job_id: str, at: float, until: float, detail: str = "", *, cause: str = "lost"
    ) -> None: ...
    def record_end(
        self,
        job_id: str,
        end: float,
        state: JobState,
        detail: str = "",
        *,
        start: float | None = None,
    ) -> None: ...
    def record_cancels(self, job_ids: Sequence[str], at: float, detail: str) -> None: ...
    def record_event(
        self, event: JobEvent, *, owner: str | None = None, owner_stream: int | None = None
    ) -> None: ...
    def job_events(self, job_ids: Iterable[str]) -> list[JobEvent]: ...
    def stream_events(
        self, after: int, limit: int, *, owner: str | None = None
    ) -> tuple[list[JobEvent], bool]: ...
    def archived_spec(self, job_id: str) -> JobSpec | None: ...
    def record_drain(self, machine: str, at: float, by: str | None = None) -> None: ...
    def record_resume(self, machine: str) -> None: ...
    @property
    def failure(self) -> str | None:
        """Why the journal cannot be written now; None when it can."""


@dataclass(frozen=True, slots=True)
class Ended:
    """How a command job's command ended: its exit status or the signal (one of them)."""

    exit_status: int | None = None
    signal: int | None = None


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A message to publish; ``durable``: it tells of something journaled (an
    acceptance, an event, a command), so it waits for the journal's commit; a reply
    that only reads (a status, a refusal) does not."""

    topic: str
    message: Message
    qos: int = 1
    retain: bool = False
    durable: bool = True


@dataclass(slots=True)
class Outbox:
    """Messages decided during a batch, published by the actor after the commit."""

    items: list[Outgoing] = field(default_factory=list)

    def send(
        self,
        topic: str,
        message: Message,
        *,
        qos: int = 1,
        retain: bool = False,
        durable: bool = True,
    ) -> None:
        self.items.append(Outgoing(topic, message, qos, retain, durable))

    def take(self) -> list[Outgoing]:
        items, self.items = self.items, []
        return items


@dataclass(slots=True)
class Agent:
    """A machine as its agent described it, and the agent's lifecycle."""

    machine: Machine
    life: AgentLifecycle
    #: Cluster seconds (the actor's clock) of its last heartbeat.
    last_heartbeat: float
    #: Its incarnation said it drains as it stops (``AgentOnline.draining``).
    draining: bool = False


class Context:
    """Everything the handlers share (see the module docstring)."""

    def __init__(
        self,
        *,
        core: SchedulerCore,
        settings: ActorSettings,
        journal: JournalWriter,
        metrics: HandlerMetrics,
        topics: Topics,
        time_scale: float,
        wall: Callable[[], float],
        cordoned: set[str],
    ) -> None:
        self.core = core
        self.settings = settings
        self.journal = journal
        self.metrics = metrics
        self.topics = topics
        self.time_scale = time_scale
        #: Wall seconds since the epoch (stamps StartPart for the agents' fencing).
        self.wall = wall
        self.out = Outbox()
        self.specs: dict[str, JobSpec] = {}
        self.placements = Placements()
        self.agents: dict[str, Agent] = {}
        #: The last event seq of every job that had one.
        self.seqs: dict[str, int] = {}
        #: The last number of the scheduler-wide event stream, and of each owner's.
        self.stream = 0
        self.owner_streams: dict[str, int] = {}
        #: The machines an admin drained (cluster time of the drain): no new part goes
        #: there, whichever incarnation of its agent registers.
        self.drained: dict[str, float] = {}
        #: Something changed that a policy could act on.
        self.dirty = False
        #: SUSPECT and HELD agents: no new part is placed on them. The core was given
        #: the same set (``SchedulerCore``, "Cordoned machines") and hides their CPUs.
        self.cordoned = cordoned
        #: Cluster time since which the scheduler has been connected to the broker:
        #: agents' silence counts only from then (a broker outage is no one's silence).
        self.heard_since = -float("inf")
        #: When each agent next needs a look from the liveness check.
        self.deadlines = Deadlines()
        #: The last prediction pass (``scheduler.live.insight``), None before the first.
        self.forecast: Forecast | None = None
        #: Queued jobs a pass has predicted already (their first prediction was told).
        self.predicted: set[str] = set()

    # -- sending ----------------------------------------------------------------

    def command(self, machine: str, message: Message) -> None:
        self.out.send(self.topics.agent_commands(machine), message)

    def reply_topic(self, reply_to: str, user: str | None = None) -> str | None:
        """The reply topic, or None when nobody asked for an answer (``"-"``) or the
        name cannot be a topic level.

        ``user``: the request came on that user's (or admin's) own topic, so the
        answer goes under ``users/<user>/``, which only that user may read.
        """
        if reply_to == "-":
            return None
        try:
            if user is not None:
                return self.topics.user_replies(user, reply_to)
            return self.topics.replies(reply_to)
        except TopicError:
            return None

    def reply(
        self, reply_to: str, message: Message, user: str | None = None, *, durable: bool = True
    ) -> None:
        """Answer on the reply topic; ``durable=False`` for an answer that promises
        nothing journaled (a status, a refusal): it goes out even while the journal
        cannot be written."""
        topic = self.reply_topic(reply_to, user)
        if topic is not None:
            self.out.send(topic, message, durable=durable)

    def event(
        self,
        job_id: str,
        kind: JobEventKind,
        now: float,
        detail: str = "",
        *,
        cpus: tuple[int, int] | None = None,
        ended: Ended | None = None,
        parts: Sequence[Part] = (),
    ) -> None:
        """Journal and publish one JobEvent, numbered in the job's sequence.

        ``cpus`` is a resize's ``(before, after)``: the job's CPUs over all parts;
        ``ended`` a command job's exit status or signal, on its final event;
        ``parts`` a start's or a resize's parts from then on.
        """
        events = self.settings.job_events
        if events == "none" or (events == "lifecycle" and kind is JobEventKind.QUEUED):
            return
        seq = self.seqs.get(job_id, 0) + 1
        self.seqs[job_id] = seq
        self.stream += 1
        before, after = cpus if cpus is not None else (None, None)
        event = JobEvent(
            job_id=job_id,
            event=kind,
            at=now,
            detail=detail,
            seq=seq,
            cpus_before=before,
            cpus_after=after,
            exit_status=None if ended is None else ended.exit_status,
            signal=None if ended is None else ended.signal,
            parts=tuple(PartSpec(machine=p.machine, cpus=p.cpus) for p in parts),
            stream=self.stream,
        )
        spec = self.specs.get(job_id)
        owner = None if spec is None else spec.user
        numbered = None
        if owner is not None:
            numbered = self.owner_streams.get(owner, 0) + 1
            self.owner_streams[owner] = numbered
        self.journal.record_event(event, owner=owner, owner_stream=numbered)
        self.out.send(self.topics.events, event)
        if self.settings.owner_events and owner is not None and numbered is not None:
            try:
                topic = self.topics.user_events(owner)
            except TopicError:
                return  # an owner no login can have: nobody to tell
            self.out.send(topic, in_stream(event, numbered))

    def count_bad(self, reason: BadMessage, error: str) -> None:
        self.metrics.bad_messages.labels(reason=reason).inc()
        log.info("refused a message (%s): %s", reason, error)

    # -- shared moves -------------------------------------------------------------

    def watch(self, agent: str) -> None:
        """Look at ``agent`` again when its silence or its hold could next need a move
        (``scheduler.live.liveness``): after every move of the agent, and once it
        registers. A later deadline than the one pending changes nothing."""
        ag = self.agents[agent]
        life = ag.life
        if life.heard:
            s = self.settings
            limit = s.suspect_limit if life.state is AgentState.ONLINE else s.silence_limit
            base = max(ag.last_heartbeat, self.heard_since)
            self.deadlines.watch(agent, base + limit * self.time_scale)
        elif life.held and life.held_until is not None:
            self.deadlines.watch(agent, life.held_until)

    def attempt(self, job_id: str) -> int:
        """The attempt a start of ``job_id`` now is (fencing, ``part_lifecycle``)."""
        return self.core.requeues(job_id) + 1

    def configured_cpus(self) -> int:
        """CPUs of the cluster as configured: every machine whose agent registered and
        has not retired (said goodbye). A lost or suspect machine still counts, so a
        transient loss queues a wide job rather than rejecting it; a scaled-down agent
        says goodbye and no longer counts."""
        return sum(
            ag.machine.cpus for ag in self.agents.values() if ag.life.state is not AgentState.GONE
        )

    def online(self) -> set[str]:
        return {a for a, ag in self.agents.items() if ag.life.available}

    def cancel_parts(self, live: LiveJob, *, also: str | None = None) -> None:
        """Tell the agents of ``live``'s unfinished parts to end them (this attempt).

        Parts on machines that are not available are not told (their processes
        went with their agent), except on ``also``: a silent agent may still run it.
        """
        online = self.online()
        for part in live.unfinished():
            if part.machine in online or part.machine == also:
                self.command(part.machine, CancelPart(job_id=live.job_id, attempt=live.attempt))

    def end_job(
        self, job_id: str, now: float, state: JobState, detail: str, ended: Ended | None = None
    ) -> None:
        """A running job ended (all parts done, or one failed); ``ended``: how its
        command ended, for a command job whose agent could tell."""
        left = self.core.finished(job_id, now, failed=state is JobState.FAILED)
        live = self.placements.untrack(job_id)
        # The run as the agents measured it (``scheduler.live.agents``, "Run dating").
        measured = live.measured_run(now) if state is JobState.FINISHED else None
        start, end = (left.start, now) if measured is None else measured
        if state is JobState.FINISHED:
            job = left.job
            self.metrics.job_finished(procs=job.procs, submit=job.submit, start=start, end=end)
        self.journal.record_end(
            job_id, end, state, detail, start=None if measured is None else start
        )
        self.cancel_parts(live)
        live.end_all(PartInput.CANCELLED)
        self.metrics.jobs_finished.labels(state=state.value).inc()
        self.event(job_id, ended_event(state), now, detail, ended=ended)
        self.dirty = True

    def cancel_job(self, job_id: str, now: float, detail: str) -> None:
        """Cancel a queued or running job a client named (its state checked by the caller)."""
        left = self.core.cancel(job_id, now)
        self.journal.record_end(job_id, now, JobState.CANCELLED, detail)
        if isinstance(left, Left):
            live = self.placements.untrack(job_id)
            self.cancel_parts(live)
            live.end_all(PartInput.CANCELLED)
        self.metrics.jobs_finished.labels(state=JobState.CANCELLED.value).inc()
        self.event(job_id, JobEventKind.CANCELLED, now, detail)
        self.dirty = True

    def cancel_queued(self, job_ids: Sequence[str], now: float, detail: str) -> int:
        """Cancel many queued jobs at once (a bulk cancel: one pass over the queue, one
        journal statement); returns how many were queued and are now cancelled."""
        jobs = self.core.cancel_queued(job_ids)
        if not jobs:
            return 0
        self.journal.record_cancels([j.id for j in jobs], now, detail)
        self.metrics.jobs_finished.labels(state=JobState.CANCELLED.value).inc(len(jobs))
        for job in jobs:
            self.event(job.id, JobEventKind.CANCELLED, now, detail)
        self.dirty = True
        return len(jobs)

    def after_loss(
        self,
        left: Left,
        now: float,
        why: str,
        *,
        also_cancel: str | None,
        cause: str = "agent_lost",
        charged: bool = True,
    ) -> None:
        """Tell everyone what the lost-agent rule decided for one job; ``cause`` is
        why (``scheduler.live.coupling.Cause``), journaled with the requeue."""
        job_id = left.job.id
        live = self.placements.untrack(job_id)
        self.cancel_parts(live, also=also_cancel)
        live.end_all(PartInput.LOST)
        if left.state is JobState.QUEUED:
            n = self.core.requeues(job_id)
            # The uncharged ones too, or a restart would count them against the budget.
            uncharged = n - self.core.charged_requeues(job_id)
            self.journal.record_requeue(
                job_id, now, n, why, uncharged=uncharged, cause=cause, charged=charged
            )
            self.metrics.requeues.inc()
            if not charged:
                self.metrics.requeues_uncharged.labels(cause=cause).inc()
            budget = (
                f"requeue {n} of {self.settings.max_requeues}"
                if charged
                else f"requeue {n}, not counted against the {self.settings.max_requeues} allowed"
            )
            self.event(job_id, JobEventKind.REQUEUED, now, f"{why}; {budget}")
        else:
            detail = f"{why}; already requeued {self.core.requeues(job_id)} times"
            self.journal.record_end(job_id, now, JobState.FAILED, detail)
            self.metrics.jobs_finished.labels(state=JobState.FAILED.value).inc()
            self.event(job_id, JobEventKind.FAILED, now, detail)
        self.dirty = True

    def job_lost(
        self,
        job_id: str,
        now: float,
        why: str,
        *,
        cause: str = "part_lost",
        charged: bool = True,
    ) -> None:
        """The lost-agent rule for one job (a part vanished, or was never re-announced);
        ``charged=False`` for a part that never ran, or an operator's stop
        (``SchedulerCore.job_lost``); ``cause`` as :meth:`after_loss`'s."""
        left = self.core.job_lost(job_id, now, charged=charged)
        self.after_loss(left, now, why, also_cancel=None, cause=cause, charged=charged)


def ended_event(state: JobState) -> JobEventKind:
    """The event that tells watchers a job ended in ``state`` (a final state)."""
    return _ENDED[state]


_ENDED = {
    JobState.FINISHED: JobEventKind.FINISHED,
    JobState.FAILED: JobEventKind.FAILED,
    JobState.CANCELLED: JobEventKind.CANCELLED,
}
