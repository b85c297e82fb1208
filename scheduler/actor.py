"""The scheduler actor: the sans-I/O core on the bus, with a journal.

Theory of operation
-------------------
One actor, one bounded mailbox, one task draining it. A reader task moves the
bus's deliveries into the mailbox (it waits when the mailbox is full, so a
flood of requests pushes back on the bus instead of growing memory) and a
timer task wakes the actor every ``tick_interval`` wall seconds. Both are
named tasks of one TaskGroup; nothing else runs concurrently with the state.

The drain loop takes everything queued (up to ``max_batch``) as one *batch*
and handles it in four steps, the way the twin drives the core (events of an
instant first, then one decision):

1. Decode and apply every message of the batch to the core (``submit``,
   ``finished``, ``cancel``, ``machine_joined``, ``machine_left``...), all
   journal writes going into one SQLite transaction; replies and commands
   are only buffered.
2. Commit, then publish what was buffered: a ``SubmitReply`` goes out only
   once its accepted jobs are durable. Messages keep their order per topic
   (what MQTT promises a subscriber); different topics go out concurrently,
   so a batch waits for about one QoS 1 acknowledgement per message of its
   busiest topic, not one per message.
3. If anything changed that a policy could act on, call ``core.schedule(now)``
   once for the whole batch, journal its starts and resizes in a second
   transaction, commit, then publish the ``StartPart`` and ``ResizePart``
   commands. Coalescing is what lets thousands of submissions a second share
   a handful of commits and decisions.
4. Publish the retained ``ClusterSummary`` if it changed (at most every
   ``summary_interval`` wall seconds) and refresh the metrics' gauge state.

Watchers get a ``JobEvent`` on ``topics.events`` per transition (running,
resized, requeued, finished, failed, cancelled; "queued" too with
``job_events="all"``, off by default because it costs one message per
submitted job).

``now`` is read once per batch from the injected :class:`~scheduler.clock.Clock`
(cluster seconds = wall seconds x K).

Faults (DESIGN.md, "Nothing is lost")
--------------------------------------
*Bad input.* Every payload is decoded by ``broker.codec.decode``. A payload
that fails, or a valid message on a topic where it makes no sense, is counted
in ``accordion_scheduler_bad_messages_total{reason}`` and answered with an
``ErrorReply`` when it names a ``reply_to``; the messages around it are
handled as usual. A job that the core refuses (wider than the cluster, an
id reused for another spec) or that cannot be a ``model.job.Job`` is
rejected in its own ``SubmitResult``; the rest of the batch goes on. A
``reply_to`` that cannot be a topic level refuses the whole request (nobody
could be told what was done).

*Idempotency.* Jobs are keyed by the client's id. Submitting the same spec
again (a QoS 1 redelivery, a client retry) is answered ``accepted,
duplicate`` and changes nothing; the same id with another spec is rejected.
Cancelling a cancelled job answers ``cancelled`` again.

*The lost-agent rule.* An agent is lost when its Last Will
(``AgentOffline(reason="lost")``) arrives, when it is silent (no message from
it for ``silence_factor`` x ``heartbeat_interval`` wall seconds, checked on
every tick), when it re-registers with a new incarnation (the old process's
parts are gone), or when it says goodbye with parts still running. Then every
job with a part on it is **requeued** (same id, submit time and place in the
queue by arrival order; ``CancelPart`` goes to its other parts) unless it was
already requeued ``max_requeues`` times (default 2), in which case it
**fails** and its other parts are cancelled. The rule itself lives in
``SchedulerCore.machine_left``. The same rule applies to one job when a part
vanishes: an agent whose heartbeats have listed a job stops listing it for
``vanish_misses`` heartbeats in a row without having reported its end. An
agent silent and then heard again (same incarnation) rejoins; it is told to
cancel the parts it still runs for jobs that were requeued meanwhile. Any
agent reporting a part the scheduler does not hold there gets ``CancelPart``.

*Part ends.* A job finishes when every part has reported ``PartFinished``
with exit code 0 and reason ``done``. The first part that reports anything
else fails the job at once: it leaves its CPUs, its other parts are
cancelled. Except ``lost``: an agent gives parts up only when it stops, so
that is the agent leaving, and the lost-agent rule applies to all its jobs at
once (none is started there again). Duplicate and stale reports are ignored.
A part's end counts even from an agent not registered (yet): the broker may
hand a restarted scheduler the events it queued meanwhile.

*Restart.* On start the actor rebuilds the core from the journal: queued jobs
in submission order, finished ones (so their ids stay taken), and running
ones as *pending*: they hold no CPUs and no decision is taken while any is
pending. A pending job is restored on its journalled parts once the agents of
all its parts have re-announced it (``AgentOnline.running`` or a heartbeat's
``running``); if an agent's heartbeat shows it does not run the job, or the
``reconcile_grace`` (wall seconds) passes first, the lost-agent rule applies.
An agent that re-announces a part with other CPUs than the journal says is
told to resize to the journal's. Starts are journalled before ``StartPart``
is sent, so a scheduler killed between the two finds the job pending on
restart, and the rule requeues it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from prometheus_client import CollectorRegistry

from broker.bus import Bus, Delivery
from broker.codec import WireError, decode, encode, peek_reply_to
from broker.messages import (
    AgentOffline,
    AgentOnline,
    AnyMessage,
    CancelJob,
    CancelPart,
    CancelReply,
    ClusterSummary,
    ErrorReply,
    Heartbeat,
    JobEvent,
    JobSpec,
    JobStatus,
    MachineStatus,
    Message,
    PartFinished,
    PartProgress,
    PartSpec,
    PartStarted,
    ResizePart,
    StartPart,
    StatusReply,
    StatusRequest,
    SubmitJobs,
    SubmitReply,
    SubmitResult,
)
from broker.topics import PROTOCOL_VERSION, TopicError, Topics
from model.execution import DEFAULT_MODEL, ExecutionModel
from model.job import Job, JobError
from model.machine import Machine, Part
from scheduler.clock import Clock
from scheduler.core import Left, PolicyError, Rejected, SchedulerCore
from scheduler.exporter import GaugeState, SchedulerMetrics
from scheduler.journal import Journal
from scheduler.lifecycle import JobState, is_final
from scheduler.snapshot import Policy

log = logging.getLogger(__name__)

JobEvents = Literal["all", "lifecycle", "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorSettings:
    """Knobs of the live scheduler. Durations are wall seconds unless named otherwise."""

    mailbox_size: int = 10_000
    #: Most mailbox items handled as one batch (one commit, one decision).
    max_batch: int = 20_000
    #: The agents' heartbeat period.
    heartbeat_interval: float = 2.0
    #: An agent silent for this many heartbeat periods is lost.
    silence_factor: float = 3.0
    tick_interval: float = 0.5
    #: Least time between two ClusterSummary publications.
    summary_interval: float = 0.5
    #: How long a restarted scheduler waits for agents to re-announce running jobs.
    reconcile_grace: float = 10.0
    max_requeues: int = 2
    #: Heartbeats in a row that may omit a listed part before it counts as vanished
    #: (0: never judge parts by heartbeats).
    vanish_misses: int = 2
    #: Which JobEvents watchers get: ``all`` transitions; ``lifecycle`` (default) all
    #: but "queued", so a submission of thousands of jobs costs one message, its
    #: reply, instead of one more per job (about 160 us of paho time each: with
    #: ``all`` a batched submission runs at ~3,700 jobs/s on MQTT, ~30,000 without).
    job_events: JobEvents = "lifecycle"

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "silence_factor", "tick_interval", "reconcile_grace"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if self.mailbox_size < 1 or self.max_batch < 1:
            raise ValueError("mailbox_size and max_batch must be >= 1")
        if self.summary_interval < 0 or self.max_requeues < 0 or self.vanish_misses < 0:
            raise ValueError("summary_interval, max_requeues and vanish_misses must be >= 0")
        if self.job_events not in ("all", "lifecycle", "none"):
            raise ValueError(f"job_events must be all, lifecycle or none, not {self.job_events!r}")


def job_from_spec(spec: JobSpec, submit: float) -> Job:
    """The core's job for a client's spec submitted at ``submit`` (cluster seconds).

    ``work`` becomes the job's run time at its reference speed; the relative
    deadline becomes absolute. Raises :class:`~model.job.JobError` for values a
    job cannot have (the wire bounds them all today; a struct built in code is
    not validated, so the actor still checks).
    """
    return Job(
        id=spec.id,
        submit=submit,
        procs=spec.procs,
        walltime=spec.walltime,
        runtime=spec.work,
        user=spec.user,
        group=spec.group,
        qos=spec.qos,
        deadline=None if spec.deadline is None else submit + spec.deadline,
        malleable=spec.malleable,
        cpu_util=spec.cpu_util,
        ref_speed=spec.ref_speed,
    )


class _Wake:
    """A mailbox item that only wakes the drain loop (timer tick, stop)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


_TICK: Final = _Wake("tick")
_STOP: Final = _Wake("stop")

_Item = Delivery | _Wake


@dataclass(slots=True)
class _Agent:
    spec: Machine
    incarnation: str
    online: bool
    #: Cluster seconds of the last message from it.
    last_seen: float
    offline_reason: str = ""


@dataclass(slots=True)
class _Live:
    """The actor's view of a job on CPUs (or pending after a restart)."""

    parts: tuple[Part, ...]
    #: Machines whose part reported a clean end.
    done: set[str] = field(default_factory=set)
    #: Machines whose agent confirmed the part (PartStarted, re-announced).
    confirmed: set[str] = field(default_factory=set)
    #: CPUs an agent re-announced for a pending job's part, by machine.
    announced: dict[str, int] = field(default_factory=dict)
    #: Machines whose heartbeats listed the job, and how many since omitted it.
    listed: set[str] = field(default_factory=set)
    misses: dict[str, int] = field(default_factory=dict)

    def machines(self) -> Iterable[str]:
        return (p.machine for p in self.parts)

    def on(self, machine: str) -> bool:
        return any(p.machine == machine for p in self.parts)


def _bad_reason(exc: WireError) -> str:
    """The bounded label of a decoding failure (see ``exporter.BAD_MESSAGE_REASONS``)."""
    # too_large is not a label of its own: an oversized payload is not msgpack we read.
    return "not_msgpack" if exc.reason == "too_large" else exc.reason


def _kind(message: Message) -> str:
    return str(message.__struct_config__.tag)


class SchedulerActor:
    """The live scheduler (see the module docstring)."""

    def __init__(
        self,
        bus: Bus,
        topics: Topics,
        *,
        policy: Policy,
        journal: Journal,
        clock: Clock,
        settings: ActorSettings | None = None,
        metrics: SchedulerMetrics | None = None,
        execution: ExecutionModel = DEFAULT_MODEL,
    ) -> None:
        self.settings = settings if settings is not None else ActorSettings()
        self.core = SchedulerCore(
            policy=policy,
            machines=(),
            execution=execution,
            max_requeues=self.settings.max_requeues,
        )
        self.metrics = metrics if metrics is not None else SchedulerMetrics(CollectorRegistry())
        self._bus = bus
        self._topics = topics
        self._journal = journal
        self._clock = clock
        self._mailbox: asyncio.Queue[_Item] = asyncio.Queue(self.settings.mailbox_size)
        self._specs: dict[str, JobSpec] = {}
        self._live: dict[str, _Live] = {}
        # Job ids with a part on each machine: heartbeats are checked against it.
        self._on_machine: dict[str, set[str]] = {}
        self._agents: dict[str, _Agent] = {}
        self._out: list[tuple[str, bytes, int, bool]] = []
        self._dirty = False
        self._tick_due = False
        self._stopping = False
        self._reconciling = False
        self._reconcile_until = 0.0
        self._summary: ClusterSummary | None = None
        self._summary_at = -float("inf")
        self.batches = 0
        self.decisions = 0

    # -- life ---------------------------------------------------------------

    async def run(self) -> None:
        """Restore from the journal, subscribe, and serve until :meth:`stop`."""
        self._restore()
        async with asyncio.TaskGroup() as tg:
            drain = tg.create_task(self._drain(), name="scheduler-mailbox")
            # The reader runs before we subscribe: a subscription replays retained
            # messages (every agent's state), which must have somewhere to go.
            reader = tg.create_task(self._read(), name="scheduler-bus-reader")
            for pattern in (
                self._topics.requests,
                self._topics.all_agent_states,
                self._topics.all_agent_events,
            ):
                await self._bus.subscribe(pattern, qos=1)
            timer = tg.create_task(self._timer(), name="scheduler-timer")
            await drain
            reader.cancel()
            timer.cancel()

    def stop(self) -> None:
        """Ask the actor to finish its current batch and return from :meth:`run`."""
        self._stopping = True
        # A full mailbox is fine: the drain loop checks ``_stopping`` after every batch.
        with contextlib.suppress(asyncio.QueueFull):
            self._mailbox.put_nowait(_STOP)

    def tick(self) -> None:
        """Ask for the periodic checks now (tests; the timer does it on its own)."""
        self._tick_due = True
        # A full mailbox is fine: the next batch runs the checks anyway.
        with contextlib.suppress(asyncio.QueueFull):
            self._mailbox.put_nowait(_TICK)

    @property
    def reconciling(self) -> bool:
        return self._reconciling

    async def _read(self) -> None:
        async for delivery in self._bus.deliveries():
            await self._mailbox.put(delivery)

    async def _timer(self) -> None:
        while True:
            await asyncio.sleep(self.settings.tick_interval)
            self.tick()

    async def _drain(self) -> None:
        mailbox = self._mailbox
        limit = self.settings.max_batch
        while not self._stopping:
            batch = [await mailbox.get()]
            while len(batch) < limit:
                try:
                    batch.append(mailbox.get_nowait())
                except asyncio.QueueEmpty:
                    break
            await self._process(batch)
        await self._flush_summary(force=True)

    # -- one batch ------------------------------------------------------------

    async def _process(self, batch: list[_Item]) -> None:
        now = self._clock.now()
        self.batches += 1
        with self._journal.transaction():
            for item in batch:
                if isinstance(item, Delivery):
                    self._on_delivery(item, now)
            if self._reconciling:
                self._settle_pending(now)
            if self._tick_due:
                self._tick_due = False
                self._on_tick(now)
            if self._reconciling and not self.core.pending:
                self._reconciled()
        await self._flush()
        if self._dirty and not self._reconciling:
            self._dirty = False
            with self._journal.transaction():
                self._schedule(now)
            await self._flush()
        await self._flush_summary()
        self.metrics.publish_state(self._gauges(now))

    async def _flush(self) -> None:
        """Publish what the batch buffered: in order per topic (all MQTT promises a
        subscriber), topics concurrently, so a batch waits about one QoS 1 round
        trip per message of its busiest topic rather than one per message."""
        out, self._out = self._out, []
        chains: dict[str, list[tuple[str, bytes, int, bool]]] = {}
        for item in out:
            chains.setdefault(item[0], []).append(item)
        if len(chains) <= 1:
            await self._publish_chain(out)
            return
        async with asyncio.TaskGroup() as tg:
            for chain in chains.values():
                tg.create_task(self._publish_chain(chain), name="scheduler-publish")

    async def _publish_chain(self, chain: list[tuple[str, bytes, int, bool]]) -> None:
        for topic, payload, qos, retain in chain:
            await self._bus.publish(topic, payload, qos=qos, retain=retain)

    def _send(self, topic: str, message: Message, *, qos: int = 1, retain: bool = False) -> None:
        self._out.append((topic, encode(message), qos, retain))

    def _command(self, machine: str, message: Message) -> None:
        self._send(self._topics.agent_commands(machine), message)

    def _event(self, job_id: str, state: str, now: float, detail: str = "") -> None:
        events = self.settings.job_events
        if events == "all" or (events == "lifecycle" and state != JobState.QUEUED.value):
            self._send(
                self._topics.events,
                JobEvent(job_id=job_id, state=state, at=now, detail=detail),
                qos=0,
            )

    # -- decoding and routing -------------------------------------------------

    def _on_delivery(self, delivery: Delivery, now: float) -> None:
        topics = self._topics
        topic = delivery.topic
        agent, channel = self._agent_channel(topic)
        if channel == "state" and not delivery.payload:
            return  # a retained state being cleared: MQTT's delete, not a message
        try:
            message = decode(delivery.payload)
        except WireError as exc:
            self._bad_payload(delivery.payload, _bad_reason(exc), str(exc))
            return
        if message.v != PROTOCOL_VERSION:
            self._refuse(
                message,
                "version",
                f"protocol v{message.v}; this scheduler speaks v{PROTOCOL_VERSION}",
            )
            return
        if topic == topics.requests:
            self._on_request(message, now)
        elif channel == "state":
            self._on_agent_state(agent, message, now)
        elif channel == "events":
            self._on_agent_event(agent, message, now)
        else:
            self._refuse(message, "unexpected", f"nothing is accepted on {topic!r}")

    def _agent_channel(self, topic: str) -> tuple[str, str]:
        """``(agent, "state" | "events")`` for an agent's topic, else ``("", "")``."""
        agent = self._topics.agent_of(topic)
        if agent is None:
            return "", ""
        channel = topic.rpartition("/")[2]
        if topic != f"{self._topics.root}/agents/{agent}/{channel}":
            return "", ""  # deeper than R/agents/<agent>/<channel>
        return agent, channel

    def _count_bad(self, reason: str, error: str) -> None:
        self.metrics.bad_messages.labels(reason=reason).inc()
        log.info("refused a message (%s): %s", reason, error)

    def _bad_payload(self, payload: bytes, reason: str, error: str) -> None:
        self._count_bad(reason, error)
        request_id, reply_to = peek_reply_to(payload)
        if reply_to is not None:
            self._error_reply(reply_to, request_id, error)

    def _refuse(self, message: AnyMessage, reason: str, error: str) -> None:
        """A valid message the scheduler will not act on: count, answer if possible."""
        self._count_bad(reason, f"{_kind(message)}: {error}")
        reply_to = getattr(message, "reply_to", None)
        if isinstance(reply_to, str):
            self._error_reply(reply_to, getattr(message, "request_id", None), error)

    def _error_reply(self, reply_to: str, request_id: str | None, error: str) -> None:
        topic = self._reply_topic(reply_to)
        if topic is not None:
            self._send(topic, ErrorReply(request_id=request_id, error=error))

    def _reply_topic(self, reply_to: str) -> str | None:
        """The reply topic, or None when nobody asked for an answer (``"-"``) or the
        name cannot be a topic level."""
        if reply_to == "-":
            return None
        try:
            return self._topics.replies(reply_to)
        except TopicError:
            return None

    # -- clients --------------------------------------------------------------

    def _on_request(self, message: AnyMessage, now: float) -> None:
        reply_to = getattr(message, "reply_to", "-")
        if reply_to != "-" and self._reply_topic(reply_to) is None:
            # Acting without being able to answer would leave the client guessing.
            self._count_bad("invalid", f"reply_to {reply_to!r} cannot be a topic level")
            return
        match message:
            case SubmitJobs():
                self._on_submit(message, now)
            case CancelJob():
                self._on_cancel(message, now)
            case StatusRequest():
                self._on_status(message, now)
            case _:
                self._refuse(message, "unexpected", f"{_kind(message)} is not a request")

    def _on_submit(self, request: SubmitJobs, now: float) -> None:
        results: list[SubmitResult] = []
        durable: list[tuple[JobSpec, float]] = []
        counts = {"accepted": 0, "rejected": 0, "duplicate": 0}
        for spec in request.jobs:
            result = self._submit_one(spec, now)
            results.append(result)
            if not result.accepted:
                counts["rejected"] += 1
            elif result.duplicate:
                counts["duplicate"] += 1
            else:
                counts["accepted"] += 1
                durable.append((spec, now))
        if durable:
            # Inside the batch's transaction: committed before the reply is published.
            self._journal.record_submissions(durable)
            self._dirty = True
        for result_name, n in counts.items():
            if n:
                self.metrics.submissions.labels(result=result_name).inc(n)
        topic = self._reply_topic(request.reply_to)
        if topic is not None:
            self._send(topic, SubmitReply(request_id=request.request_id, results=tuple(results)))

    def _submit_one(self, spec: JobSpec, now: float) -> SubmitResult:
        known = self.core.job(spec.id)
        if known is not None:
            # The Job carries its submit time, so equal specs are compared here and
            # the core is handed the job it knows: it answers "duplicate".
            if self._specs[spec.id] != spec:
                return SubmitResult(
                    spec.id, False, f"job id {spec.id!r} is already used by a different job"
                )
            answer = self.core.submit(known)
        else:
            try:
                job = job_from_spec(spec, now)
            except JobError as exc:
                return SubmitResult(spec.id, False, str(exc))
            answer = self.core.submit(job)
        if isinstance(answer, Rejected):
            return SubmitResult(spec.id, False, answer.reason)
        if not answer.duplicate:
            self._specs[spec.id] = spec
            self._event(spec.id, JobState.QUEUED.value, now)
        return SubmitResult(spec.id, True, duplicate=answer.duplicate)

    def _on_cancel(self, request: CancelJob, now: float) -> None:
        job_id = request.job_id
        state = self.core.state_of(job_id)
        reason: str | None = None
        cancelled = False
        if state is None:
            reason = f"no job {job_id!r}"
        elif state is JobState.CANCELLED:
            cancelled, reason = True, "already cancelled"
        elif is_final(state):
            reason = f"job {job_id!r} is already {state}"
        else:
            left = self.core.cancel(job_id, now)
            cancelled = True
            self._journal.record_end(job_id, now, JobState.CANCELLED, "cancelled by a client")
            if isinstance(left, Left):
                live = self._untrack(job_id)
                for machine in live.machines():
                    if machine not in live.done:
                        self._command(machine, CancelPart(job_id=job_id))
            self.metrics.jobs_finished.labels(state=JobState.CANCELLED.value).inc()
            self._event(job_id, JobState.CANCELLED.value, now, "cancelled by a client")
            self._dirty = True
        topic = self._reply_topic(request.reply_to)
        if topic is not None:
            self._send(
                topic,
                CancelReply(
                    request_id=request.request_id, job_id=job_id, cancelled=cancelled, reason=reason
                ),
            )

    def _on_status(self, request: StatusRequest, now: float) -> None:
        topic = self._reply_topic(request.reply_to)
        if topic is None:
            return
        self._send(topic, self.status(now, request.request_id))

    def status(self, now: float, request_id: str = "-") -> StatusReply:
        """The cluster, the queue and the running jobs as a ``StatusReply``."""
        core = self.core
        machines = tuple(
            MachineStatus(
                id=agent_id,
                cpus=ag.spec.cpus,
                speed=ag.spec.speed,
                free=core.free(agent_id) if ag.online else 0,
                online=ag.online,
            )
            for agent_id, ag in sorted(self._agents.items())
        )
        queue = tuple(
            JobStatus(
                id=j.id, state=JobState.QUEUED.value, procs=j.procs, user=j.user, submit=j.submit
            )
            for j in core.queue
        )
        running = [
            JobStatus(
                id=r.job.id,
                state=JobState.RUNNING.value,
                procs=r.job.procs,
                user=r.job.user,
                submit=r.job.submit,
                start=r.start,
                parts=tuple(PartSpec(machine=p.machine, cpus=p.cpus) for p in r.parts),
            )
            for r in core.running
        ]
        running += [
            JobStatus(
                id=p.job.id,
                state="reconciling",
                procs=p.job.procs,
                user=p.job.user,
                submit=p.job.submit,
                start=p.start,
                parts=tuple(PartSpec(machine=q.machine, cpus=q.cpus) for q in p.parts),
            )
            for p in core.pending.values()
        ]
        return StatusReply(
            request_id=request_id, now=now, machines=machines, queue=queue, running=tuple(running)
        )

    # -- agents ---------------------------------------------------------------

    def _on_agent_state(self, agent: str, message: AnyMessage, now: float) -> None:
        match message:
            case AgentOnline():
                self._on_online(agent, message, now)
            case AgentOffline():
                self._on_offline(agent, message, now)
            case _:
                self._refuse(message, "unexpected", f"{_kind(message)} is not an agent state")

    def _on_online(self, agent: str, message: AgentOnline, now: float) -> None:
        spec = message.machine
        if spec is None or spec.id != agent:
            self._refuse(
                message, "unexpected", f"agent {agent!r} must describe its own machine {agent!r}"
            )
            return
        running = {p.job_id: p.cpus for p in message.running}
        ag = self._agents.get(agent)
        if ag is not None and ag.online:
            if ag.incarnation == message.incarnation:
                # A retained replay or a refreshed announcement: nothing new but news.
                ag.last_seen = now
                self._reported(agent, running, now, complete=False)
                return
            log.warning("agent %s re-registered (incarnation %s)", agent, message.incarnation)
            self._agent_gone(agent, now, "incarnation")
        machine = Machine(id=spec.id, cpus=spec.cpus, speed=spec.speed, labels=spec.labels)
        self.core.machine_joined(machine)
        self._agents[agent] = _Agent(machine, message.incarnation, True, now)
        log.info("agent %s online: %d CPUs at speed %g", agent, spec.cpus, spec.speed)
        self._reported(agent, running, now, complete=False)
        self._dirty = True

    def _on_offline(self, agent: str, message: AgentOffline, now: float) -> None:
        ag = self._agents.get(agent)
        if ag is None or not ag.online:
            return  # a retained will from before, or a repeat
        if message.incarnation not in ("-", ag.incarnation):
            return  # the will of an older incarnation, arriving after the new one registered
        self._agent_gone(agent, now, "will" if message.reason == "lost" else "goodbye")

    def _agent_gone(self, agent: str, now: float, reason: str) -> None:
        """Apply the lost-agent rule (module docstring) to everything on ``agent``."""
        ag = self._agents[agent]
        lefts = self.core.machine_left(agent, now)
        ag.online = False
        ag.offline_reason = reason
        self._dirty = True
        if reason != "goodbye" or lefts:
            self.metrics.agents_lost.labels(reason=reason).inc()
        log.warning("agent %s offline (%s): %d job(s) affected", agent, reason, len(lefts))
        # Only a silent agent may still be running its parts; the others' processes
        # are gone with the agent.
        for left in lefts:
            self._after_loss(
                left,
                now,
                f"machine {agent} lost ({reason})",
                also_cancel=agent if reason == "silence" else None,
            )

    def _after_loss(self, left: Left, now: float, why: str, *, also_cancel: str | None) -> None:
        """Tell everyone what the lost-agent rule decided for one job."""
        job_id = left.job.id
        live = self._untrack(job_id)
        online = self._online_ids()
        for machine in live.machines():
            if machine not in live.done and (machine in online or machine == also_cancel):
                self._command(machine, CancelPart(job_id=job_id))
        if left.state is JobState.QUEUED:
            n = self.core.requeues(job_id)
            self._journal.record_requeue(job_id, now, n, why)
            self.metrics.requeues.inc()
            self._event(
                job_id, "requeued", now, f"{why}; requeue {n} of {self.settings.max_requeues}"
            )
        else:
            detail = f"{why}; already requeued {self.core.requeues(job_id)} times"
            self._journal.record_end(job_id, now, JobState.FAILED, detail)
            self.metrics.jobs_finished.labels(state=JobState.FAILED.value).inc()
            self._event(job_id, JobState.FAILED.value, now, detail)
        self._dirty = True

    def _online_ids(self) -> set[str]:
        return {a for a, ag in self._agents.items() if ag.online}

    def _track(self, job_id: str, live: _Live) -> None:
        self._live[job_id] = live
        for machine in live.machines():
            self._on_machine.setdefault(machine, set()).add(job_id)

    def _untrack(self, job_id: str) -> _Live:
        live = self._live.pop(job_id)
        for machine in live.machines():
            jobs = self._on_machine[machine]
            jobs.discard(job_id)
            if not jobs:
                del self._on_machine[machine]
        return live

    def _on_agent_event(self, agent: str, message: AnyMessage, now: float) -> None:
        if not isinstance(message, Heartbeat | PartStarted | PartProgress | PartFinished):
            self._refuse(message, "unexpected", f"{_kind(message)} is not an agent event")
            return
        if message.agent_id not in ("-", agent):
            self._refuse(message, "unexpected", f"agent {message.agent_id!r} on {agent!r}'s topic")
            return
        if isinstance(message, PartFinished):
            # Judged by the job alone: a part's end counts even from an agent not (yet)
            # registered, e.g. queued for us by the broker while we were restarting.
            self._on_part_finished(agent, message, now)
        ag = self._agents.get(agent)
        if ag is None:
            # No registration seen yet (its AgentOnline may be on its way): nothing to act on.
            return
        if not ag.online:
            if isinstance(message, Heartbeat) and ag.offline_reason == "silence":
                self._rejoin(agent, ag, now)
            else:
                return
        ag.last_seen = now
        match message:
            case Heartbeat():
                self._reported(agent, dict.fromkeys(message.running), now, complete=True)
            case PartStarted():
                self._on_part_started(agent, message)
            case PartProgress() | PartFinished():
                pass  # liveness only (progress: estimates come from the wall time, as in the twin)

    def _rejoin(self, agent: str, ag: _Agent, now: float) -> None:
        log.warning("agent %s heard again after silence: rejoins", agent)
        self.core.machine_joined(ag.spec)
        ag.online = True
        ag.offline_reason = ""
        self._dirty = True

    def _on_part_started(self, agent: str, message: PartStarted) -> None:
        live = self._live.get(message.job_id)
        if live is None or not live.on(agent):
            # Started after the job was cancelled or requeued (a late StartPart).
            self._command(agent, CancelPart(job_id=message.job_id))
            return
        live.confirmed.add(agent)

    def _on_part_finished(self, agent: str, message: PartFinished, now: float) -> None:
        job_id = message.job_id
        live = self._live.get(job_id)
        if live is None or not live.on(agent) or agent in live.done:
            return  # stale (the job left already) or a QoS 1 repeat
        live.done.add(agent)  # its process is over: no CancelPart for it
        if message.exit_code == 0 and message.reason == "done":
            if all(m in live.done for m in live.machines()):
                self._end(job_id, now, JobState.FINISHED, "")
            return
        detail = f"part on {agent}: {message.reason} (exit code {message.exit_code})"
        if message.reason == "lost":
            # Agents give parts up only when they stop: the lost-agent rule, not a failure,
            # and for all of the agent's jobs at once, so none is started there again.
            ag = self._agents.get(agent)
            if ag is not None and ag.online:
                self._agent_gone(agent, now, "goodbye")
            else:
                self._after_loss(self.core.job_lost(job_id, now), now, detail, also_cancel=None)
            return
        self._end(job_id, now, JobState.FAILED, detail)

    def _end(self, job_id: str, now: float, state: JobState, detail: str) -> None:
        self.core.finished(job_id, now, failed=state is JobState.FAILED)
        live = self._untrack(job_id)
        self._journal.record_end(job_id, now, state, detail)
        for machine in live.machines():
            if machine not in live.done:
                self._command(machine, CancelPart(job_id=job_id))
        self.metrics.jobs_finished.labels(state=state.value).inc()
        self._event(job_id, state.value, now, detail)
        self._dirty = True

    def _reported(
        self, agent: str, running: Mapping[str, int | None], now: float, *, complete: bool
    ) -> None:
        """An agent said which parts it runs (``cpus`` when known).

        ``complete`` (a heartbeat, always current) also lets the absence of a
        part mean something; a state announcement may be an old retained one.
        """
        core = self.core
        for job_id, cpus in running.items():
            live = self._live.get(job_id)
            if live is None or not live.on(agent):
                self._command(agent, CancelPart(job_id=job_id))
                continue
            live.confirmed.add(agent)
            if cpus is not None and job_id in core.pending:
                live.announced[agent] = cpus
            if complete:
                live.listed.add(agent)
                live.misses[agent] = 0
        if complete:
            for job_id in sorted(self._on_machine.get(agent, ())):
                live = self._live[job_id]
                if job_id in running or agent in live.done:
                    continue
                if job_id in core.pending:
                    left = core.job_lost(job_id, now)
                    self._after_loss(
                        left, now, f"{agent} does not run it after the restart", also_cancel=None
                    )
                elif agent in live.listed and self.settings.vanish_misses:
                    live.misses[agent] = live.misses.get(agent, 0) + 1
                    if live.misses[agent] >= self.settings.vanish_misses:
                        left = core.job_lost(job_id, now)
                        self._after_loss(
                            left, now, f"its part on {agent} vanished", also_cancel=None
                        )

    def _settle_pending(self, now: float) -> None:
        """Restore every pending job whose parts have all been re-announced."""
        core = self.core
        for job_id, pending in list(core.pending.items()):
            live = self._live[job_id]
            if not all(
                p.machine in live.confirmed or p.machine in live.done for p in pending.parts
            ):
                continue
            try:
                core.restore_running(job_id, now)
            except ValueError as exc:
                # The agent came back smaller than the journal remembers.
                log.warning("%s", exc)
                left = core.job_lost(job_id, now)
                self._after_loss(
                    left, now, "its parts no longer fit its machines", also_cancel=None
                )
                continue
            log.info("job %s reconciled on %s", job_id, [p.machine for p in pending.parts])
            pace = min(core.speeds[p.machine] for p in pending.parts)
            total = sum(p.cpus for p in pending.parts)
            for p in pending.parts:
                if live.announced.get(p.machine, p.cpus) != p.cpus:
                    self._command(
                        p.machine,
                        ResizePart(job_id=job_id, cpus=p.cpus, pace=pace, job_cpus=total),
                    )
            self._event(job_id, JobState.RUNNING.value, now, "reconciled after a restart")

    def _reconciled(self) -> None:
        self._reconciling = False
        self._dirty = True
        log.info("reconciliation done")

    # -- the periodic checks ----------------------------------------------------

    def _on_tick(self, now: float) -> None:
        s = self.settings
        # Wall seconds of silence, in cluster seconds (the clock's base).
        limit = s.heartbeat_interval * s.silence_factor * self._clock.time_scale
        for agent, ag in list(self._agents.items()):
            if ag.online and now - ag.last_seen > limit:
                self._agent_gone(agent, now, "silence")
        if self._reconciling and now >= self._reconcile_until:
            for job_id in list(self.core.pending):
                left = self.core.job_lost(job_id, now)
                self._after_loss(
                    left, now, "not re-announced by its agents after the restart", also_cancel=None
                )
        if not self._dirty and self.core.queue:
            # A reservation falling due when no event happens (the twin's "wakes").
            self._dirty = any(r.start <= now for r in self.core.reservations)

    # -- decisions ----------------------------------------------------------------

    def _schedule(self, now: float) -> None:
        core = self.core
        t0 = time.perf_counter()
        decisions = core.schedule(now)
        self.metrics.decision_seconds.observe(time.perf_counter() - t0)
        self.decisions += 1
        speeds = core.speeds
        scale = self._clock.time_scale
        for resize in decisions.resizes:
            job_id = resize.job.id
            live = self._live[job_id]
            if {p.machine for p in resize.parts} != set(live.machines()):
                # Agents cannot move a job's processes: a local bug, crash loudly.
                raise PolicyError(f"policy moved job {job_id!r} to other machines")
            self._journal.record_parts(job_id, now, resize.parts)
            live.parts = resize.parts
            pace = min(speeds[p.machine] for p in resize.parts)
            total = sum(p.cpus for p in resize.parts)
            for p in resize.parts:
                self._command(
                    p.machine, ResizePart(job_id=job_id, cpus=p.cpus, pace=pace, job_cpus=total)
                )
            self._event(job_id, "resized", now, f"{sum(p.cpus for p in resize.parts)} CPUs")
        for start in decisions.starts:
            job_id = start.job.id
            spec = self._specs[job_id]
            self._journal.record_start(job_id, now, start.parts)
            self._track(job_id, _Live(start.parts))
            pace = min(speeds[p.machine] for p in start.parts)
            total = sum(p.cpus for p in start.parts)
            n = len(start.parts)
            for i, p in enumerate(start.parts):
                self._command(
                    p.machine,
                    StartPart(
                        job=spec,
                        cpus=p.cpus,
                        pace=pace,
                        part=i,
                        parts=n,
                        time_scale=scale,
                        job_cpus=total,
                    ),
                )
            self._event(
                job_id,
                JobState.RUNNING.value,
                now,
                ",".join(f"{p.machine}:{p.cpus}" for p in start.parts),
            )

    # -- restart --------------------------------------------------------------------

    def _restore(self) -> None:
        """Rebuild the core from the journal (see "Restart" in the module docstring)."""
        core = self.core
        state = self._journal.load()
        for row in state.jobs:
            spec = row.spec
            job = job_from_spec(spec, row.submit)
            self._specs[spec.id] = spec
            if row.state is JobState.QUEUED:
                core.restore_queued(job, requeues=row.requeues)
            elif row.state is JobState.RUNNING:
                if row.start is None:
                    raise ValueError(f"journal: running job {spec.id!r} has no start")
                core.restore_pending(job, row.parts, row.start, requeues=row.requeues)
                self._track(spec.id, _Live(row.parts))
            else:
                core.restore_final(job, row.state, start=row.start, end=row.end, parts=row.parts)
        if core.pending:
            self._reconciling = True
            grace = self.settings.reconcile_grace * self._clock.time_scale
            self._reconcile_until = self._clock.now() + grace
            log.info("restored %d running job(s); reconciling with the agents", len(core.pending))
        self._dirty = bool(core.queue)
        log.info(
            "restored %d job(s) from %s: %d queued, %d running",
            len(state.jobs),
            self._journal.path,
            len(core.queue),
            len(core.pending),
        )

    # -- summary and gauges ----------------------------------------------------------

    def _cluster(self, now: float) -> ClusterSummary:
        core = self.core
        online = [m.id for m in core.machines]
        return ClusterSummary(
            now=now,
            machines=len(online),
            cpus=core.total_cpus,
            free=sum(core.free(m) for m in online),
            queued=len(core.queue),
            running=len(core.running) + len(core.pending),
            policy=core.policy.name,
        )

    async def _flush_summary(self, *, force: bool = False) -> None:
        loop = asyncio.get_running_loop()
        if not force and loop.time() - self._summary_at < self.settings.summary_interval:
            return
        summary = self._cluster(self._clock.now())
        last = self._summary
        if not force and last is not None and _same_summary(last, summary):
            return
        self._summary = summary
        self._summary_at = loop.time()
        await self._bus.publish(self._topics.cluster, encode(summary), qos=0, retain=True)

    def _gauges(self, now: float) -> GaugeState:
        core = self.core
        online = sum(1 for ag in self._agents.values() if ag.online)
        return GaugeState(
            queued=len(core.queue),
            running=len(core.running) + len(core.pending),
            cpus=core.total_cpus,
            cpus_free=sum(core.free(m.id) for m in core.machines),
            machines_online=online,
            machines_offline=len(self._agents) - online,
            cluster_time=now,
            time_scale=self._clock.time_scale,
            reconciling=self._reconciling,
        )


def _same_summary(a: ClusterSummary, b: ClusterSummary) -> bool:
    """Equal but for the time stamp (an unchanged cluster is not news)."""
    return (a.machines, a.cpus, a.free, a.queued, a.running, a.policy) == (
        b.machines,
        b.cpus,
        b.free,
        b.queued,
        b.running,
        b.policy,
    )
