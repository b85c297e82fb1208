"""The scheduler actor: a thin shell of mailbox, journal and connection.

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

1. Decode every delivery and hand it to its handler (``scheduler.live.requests``
   for clients, ``scheduler.live.agents`` for agents), all journal writes going
   into one SQLite transaction; replies and commands only go into the
   context's outbox.
2. Commit, then publish the outbox: a ``SubmitReply`` goes out only once its
   accepted jobs are durable. Messages keep their order per topic (what MQTT
   promises a subscriber); different topics go out concurrently, so a batch
   waits for about one QoS 1 acknowledgement per message of its busiest
   topic, not one per message.
3. If anything changed that a policy could act on, call ``core.schedule(now)``
   once for the whole batch, journal its starts and resizes
   (``scheduler.live.dispatch``) in a second transaction, commit, then publish the
   ``StartPart`` and ``ResizePart`` commands. Coalescing is what lets
   thousands of submissions a second share a handful of commits and decisions.
4. Publish the retained ``ClusterSummary`` if it changed (at most every
   ``summary_interval`` wall seconds) and refresh the metrics' gauge state.

Everything the actor decides lives in those sans-I/O modules, over one
:class:`~scheduler.live.context.Context`; this module only moves bytes, opens
transactions and keeps time. ``now`` is read once per batch from the
injected :class:`~scheduler.runtime.clock.Clock` (cluster seconds = wall seconds x K).

*Bad input*: no input ends the process. A payload that fails to decode,
or a valid message on a topic where it makes no sense, is counted in
``accordion_scheduler_bad_messages_total{reason}``, answered with an
``ErrorReply`` when it names a ``reply_to``, and dropped; the messages around
it are handled as usual. A request larger than ``max_request_bytes``
(``scheduler.live.limits``) is refused so before it is decoded (``too_large``),
its envelope read for whom to answer.

*Who asks.* Requests come on ``scheduler/requests`` (an open broker) or on
``scheduler/requests/<user>`` and ``scheduler/admin/<admin>`` (a broker
with logins, whose ACL lets only that user or admin publish there): the
actor reads the requester from the topic and hands it to
``scheduler.live.requests``, which owns the checks and the reply topics.

*Restart order.* For ``startup_grace`` wall seconds after it starts, the
actor holds client requests back (in arrival order; status requests are
answered at once), while the broker replays the agents' retained
registrations: a submission queued at the broker while the scheduler was down
is then judged against the cluster, not against an empty one. The
reconciliation of running jobs is in ``scheduler.live.reconcile``.

*A journal that cannot be written* (its disk full, read-only or failing;
``scheduler.runtime.journal_writer``). The batch goes on: what it wrote is held
in memory, and so is every message that tells of it (``Outgoing.durable``:
acceptances, job events, commands), while answers that promise nothing (a
status, a refusal) go out at once. The handlers refuse new submissions,
cancels and drains with the reason, and no decision is taken (a start is a
promise too); the running jobs go on and their reports are handled. Every
tick the journal is tried again; once it takes the held writes, the held
messages go out in their order and decisions resume. No crash, so no
crash loop: the process is there throughout to say why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from prometheus_client import CollectorRegistry

from broker.bus import Bus, Delivery
from broker.codec import WireError, decode, encode, peek_reply_to
from broker.messages import (
    AnyMessage,
    CancelJob,
    CancelJobs,
    ClusterSummary,
    DrainMachine,
    ErrorReply,
    EventsRequest,
    HistoryRequest,
    StatusReply,
    StatusRequest,
    SubmitJobs,
)
from broker.topics import PROTOCOL_VERSION, Topics
from broker.vocabulary import BadMessage
from model.execution import DEFAULT_MODEL, ExecutionModel
from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Policy
from scheduler.live import agents, reconcile, requests
from scheduler.live.agent_lifecycle import AgentState
from scheduler.live.context import Context, Outgoing
from scheduler.live.dispatch import dispatch
from scheduler.live.settings import ActorSettings, JobEvents
from scheduler.live.specs import job_from_spec
from scheduler.live.status import status
from scheduler.runtime.clock import Clock
from scheduler.runtime.exporter import GaugeState, MachineGauge, SchedulerMetrics
from scheduler.runtime.journal import Journal

__all__ = ["ActorSettings", "JobEvents", "SchedulerActor", "job_from_spec"]

log = logging.getLogger(__name__)


class Link(Protocol):
    """The state of the actor's connection (``broker.mqtt.MqttBus`` has it)."""

    @property
    def connected(self) -> bool: ...


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


@dataclass(frozen=True, slots=True)
class _Held:
    """A client request held back during the start-up grace."""

    message: requests.Request
    who: requests.Requester | None


def _bad_reason(exc: WireError) -> BadMessage:
    """The code of a decoding failure (its metric label and its ``ErrorReply.code``)."""
    return BadMessage(exc.reason)


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
        wall: Callable[[], float] = time.time,
        link: Link | None = None,
    ) -> None:
        self.settings = settings if settings is not None else ActorSettings()
        # SUSPECT and HELD agents' machines: the handlers edit the set, the core's
        # snapshot hides their free CPUs from the policy.
        cordoned: set[str] = set()
        core = SchedulerCore(
            cordoned=cordoned,
            policy=policy,
            machines=(),
            execution=execution,
            max_requeues=self.settings.max_requeues,
            # The status's totals and the queued-jobs limit read the per-user tallies.
            track_users=True,
            max_user_cpus=self.settings.limits.max_user_cpus,
        )
        self.metrics = metrics if metrics is not None else SchedulerMetrics(CollectorRegistry())
        self.metrics.policy = policy.name
        self.ctx = Context(
            core=core,
            settings=self.settings,
            journal=journal,
            metrics=self.metrics,
            topics=topics,
            time_scale=clock.time_scale,
            wall=wall,
            cordoned=cordoned,
        )
        self._bus = bus
        self._link = link
        self._topics = topics
        self._journal = journal
        self._clock = clock
        self._mailbox: asyncio.Queue[_Item] = asyncio.Queue(self.settings.mailbox_size)
        self._held: list[_Held] = []
        self._hold_until = -float("inf")
        self._tick_due = False
        self._stopping = False
        self._reconciliation = reconcile.Reconciliation()
        self._summary: ClusterSummary | None = None
        self._summary_at = -float("inf")
        #: Messages that tell of writes the journal has not taken yet, in order.
        self._unsent: list[Outgoing] = []
        self._failures_counted = 0
        self.batches = 0
        self.decisions = 0

    @property
    def core(self) -> SchedulerCore:
        return self.ctx.core

    # -- life ---------------------------------------------------------------

    async def run(self) -> None:
        """Restore from the journal, subscribe, and serve until :meth:`stop`."""
        now = self._clock.now()
        journalled = self._journal.load()
        self.metrics.restore(journalled)
        self._reconciliation = reconcile.restore(
            self.ctx,
            journalled.jobs,
            self._journal.last_event_seqs(),
            now,
            streams=self._journal.last_streams(),
            drained=self._journal.drained(),
        )
        self._hold_until = now + self.settings.startup_grace * self._clock.time_scale
        self.ctx.heard_since = now
        async with asyncio.TaskGroup() as tg:
            drain = tg.create_task(self._drain(), name="scheduler-mailbox")
            # The reader runs before we subscribe: a subscription replays retained
            # messages (every agent's state), which must have somewhere to go.
            reader = tg.create_task(self._read(), name="scheduler-bus-reader")
            for pattern in (
                # The identity-less topic (a broker without logins) and the per-user
                # and per-admin ones, where the topic says who asks (broker ACLs).
                self._topics.requests,
                self._topics.all_user_requests,
                self._topics.all_admin_requests,
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

    async def connected(self) -> None:
        """The bus reconnected (its ``on_reconnect``): agents' silence counts from now."""
        self.ctx.heard_since = self._clock.now()

    @property
    def reconciling(self) -> bool:
        return self._reconciliation.active

    @property
    def holding(self) -> bool:
        """Whether client requests are still held back (the start-up grace)."""
        return self._clock.now() < self._hold_until

    def status(self, now: float, request_id: str = "-") -> StatusReply:
        """The first page of an admin's unfiltered status (tests and tools)."""
        return status(self.ctx, StatusRequest(request_id=request_id), now, admin=True)

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
        ctx = self.ctx
        now = self._clock.now()
        self.batches += 1
        if self._tick_due and self._journal.failure is not None and self._journal.retry():
            ctx.dirty = True  # decisions waited for the journal
        with self._journal.transaction():
            if self._held and now >= self._hold_until:
                held, self._held = self._held, []
                for h in held:
                    requests.handle(ctx, h.message, now, h.who)
            for item in batch:
                if isinstance(item, Delivery):
                    self._on_delivery(item, now)
            reconcile.settle(ctx, self._reconciliation, now)
            if self._tick_due:
                self._tick_due = False
                self._on_tick(now)
            self._count_failures()
            # What the batch counted is durable with it (the exporter restores it).
            self._journal.record_totals(self.metrics.unsaved_totals())
        await self._flush()
        if ctx.dirty and not self._reconciliation.active and self._journal.failure is None:
            ctx.dirty = False
            with self._journal.transaction():
                self._schedule(now)
                self._journal.record_totals(self.metrics.unsaved_totals())
            await self._flush()
        await self._flush_summary()
        self.metrics.publish_state(self._gauges(now))

    def _count_failures(self) -> None:
        failures = self._journal.failures
        if failures > self._failures_counted:
            self.metrics.journal_failures.inc(failures - self._failures_counted)
            self._failures_counted = failures

    async def _flush(self) -> None:
        """Publish the outbox: in order per topic (all MQTT promises a subscriber),
        topics concurrently, so a batch waits about one QoS 1 round trip per
        message of its busiest topic rather than one per message. While the journal
        cannot be written, what tells of its writes waits (the module docstring)."""
        out = self.ctx.out.take()
        if self._journal.failure is not None:
            self._unsent += [o for o in out if o.durable]
            out = [o for o in out if not o.durable]
        elif self._unsent:
            log.warning(
                "the journal took the held writes: %d held message(s) go out", len(self._unsent)
            )
            out, self._unsent = self._unsent + out, []
        chains: dict[str, list[Outgoing]] = {}
        for item in out:
            chains.setdefault(item.topic, []).append(item)
        if len(chains) <= 1:
            await self._publish_chain(out)
            return
        async with asyncio.TaskGroup() as tg:
            for chain in chains.values():
                tg.create_task(self._publish_chain(chain), name="scheduler-publish")

    async def _publish_chain(self, chain: list[Outgoing]) -> None:
        for item in chain:
            await self._bus.publish(
                item.topic, encode(item.message), qos=item.qos, retain=item.retain
            )

    # -- decoding and routing -------------------------------------------------

    def _on_delivery(self, delivery: Delivery, now: float) -> None:
        ctx = self.ctx
        topic = delivery.topic
        agent, channel = self._agent_channel(topic)
        if channel == "state" and not delivery.payload:
            return  # a retained state being cleared: MQTT's delete, not a message
        who = requests.requester(self._topics, topic)
        request = who is not None or topic == self._topics.requests
        bound = self.settings.limits.max_request_bytes
        if request and len(delivery.payload) > bound:
            size = len(delivery.payload)
            why = (
                f"a request of {size:,} bytes is over this scheduler's limit of {bound:,} "
                "bytes (max_request_bytes); send less at a time"
            )
            self._bad_payload(delivery.payload, BadMessage.TOO_LARGE, why, who)
            return
        try:
            message = decode(delivery.payload)
        except WireError as exc:
            self._bad_payload(delivery.payload, _bad_reason(exc), str(exc), who)
            return
        if message.v != PROTOCOL_VERSION:
            self._refuse(
                message,
                BadMessage.VERSION,
                f"protocol v{message.v}; this scheduler speaks v{PROTOCOL_VERSION}",
                who,
            )
            return
        if request:
            self._on_request(message, now, who)
        elif channel == "state":
            agents.on_state(ctx, agent, message, now)
        elif channel == "events":
            agents.on_event(ctx, agent, message, now)
        else:
            self._refuse(message, BadMessage.UNEXPECTED, f"nothing is accepted on {topic!r}")

    def _on_request(self, message: AnyMessage, now: float, who: requests.Requester | None) -> None:
        if not isinstance(
            message,
            SubmitJobs
            | CancelJob
            | CancelJobs
            | StatusRequest
            | HistoryRequest
            | EventsRequest
            | DrainMachine,
        ):
            why = f"{requests.kind(message)} is not a request"
            self._refuse(message, BadMessage.UNEXPECTED, why, who)
            return
        if not requests.reply_to_ok(self.ctx, message, who):
            # Acting without being able to answer would leave the client guessing.
            why = f"reply_to {message.reply_to!r} cannot be a topic level"
            self.ctx.count_bad(BadMessage.INVALID, why)
            return
        changes = isinstance(message, SubmitJobs | CancelJob | CancelJobs | DrainMachine)
        if changes and (self._held or now < self._hold_until):
            self._held.append(_Held(message, who))
            return
        requests.handle(self.ctx, message, now, who)

    def _agent_channel(self, topic: str) -> tuple[str, str]:
        """``(agent, "state" | "events")`` for an agent's topic, else ``("", "")``."""
        agent = self._topics.agent_of(topic)
        if agent is None:
            return "", ""
        channel = topic.rpartition("/")[2]
        if topic != f"{self._topics.root}/agents/{agent}/{channel}":
            return "", ""  # deeper than R/agents/<agent>/<channel>
        return agent, channel

    def _bad_payload(
        self, payload: bytes, code: BadMessage, error: str, who: requests.Requester | None = None
    ) -> None:
        self.ctx.count_bad(code, error)
        request_id, reply_to = peek_reply_to(payload)
        if reply_to is not None:
            reply = ErrorReply(request_id=request_id, code=code, error=error)
            self.ctx.reply(reply_to, reply, requests.reply_user(who), durable=False)

    def _refuse(
        self,
        message: AnyMessage,
        code: BadMessage,
        error: str,
        who: requests.Requester | None = None,
    ) -> None:
        """A valid message the scheduler will not act on: count, answer if possible."""
        requests.refuse(self.ctx, message, code, error, who)

    # -- the periodic checks and decisions --------------------------------------------

    def _on_tick(self, now: float) -> None:
        ctx = self.ctx
        if self._link is None or self._link.connected:
            # Cut off from the broker ourselves, we hear no one: that is no agent's
            # silence (and ``connected()`` restarts the count once we are back).
            agents.check_liveness(ctx, now)
        if not ctx.dirty and ctx.core.queue:
            # A reservation falling due when no event happens (the twin's "wakes").
            ctx.dirty = any(r.start <= now for r in ctx.core.reservations)

    def _schedule(self, now: float) -> None:
        t0 = time.perf_counter()
        decisions = self.ctx.core.schedule(now)
        self.metrics.decision_seconds.observe(time.perf_counter() - t0)
        self.decisions += 1
        dispatch(self.ctx, decisions, now)

    # -- summary and gauges ----------------------------------------------------------

    def _cluster(self, now: float) -> ClusterSummary:
        core = self.ctx.core
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
        ctx = self.ctx
        core = ctx.core
        online = sum(1 for ag in ctx.agents.values() if ag.life.available)
        machines = tuple(
            MachineGauge(
                agent_id,
                ag.machine.cpus,
                ag.machine.cpus - core.free(agent_id) if ag.life.available else 0,
                ag.life.available,
            )
            for agent_id, ag in sorted(ctx.agents.items())
        )
        states = dict.fromkeys((s.value for s in AgentState), 0)
        for ag in ctx.agents.values():
            states[ag.life.state.value] += 1
        return GaugeState(
            machine_states=states,
            journal_writable=self._journal.failure is None,
            journal_held_writes=self._journal.held_writes,
            queued=len(core.queue),
            running=len(core.running) + len(core.pending),
            cpus=core.total_cpus,
            cpus_free=sum(core.free(m.id) for m in core.machines),
            cpus_configured=ctx.configured_cpus(),
            machines=machines,
            job_cpus={r.job.id: r.cpus for r in core.running},
            job_procs={r.job.id: r.job.procs for r in core.running},
            machines_online=online,
            machines_offline=len(ctx.agents) - online,
            cluster_time=now,
            time_scale=self._clock.time_scale,
            reconciling=self._reconciliation.active,
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
