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

0. Heartbeats that change nothing are taken out first (``scheduler.live.agents.renew``:
   an ONLINE agent listing exactly the parts the scheduler holds there): each
   only sets its agent's time stamp. A batch of nothing else ends there, with
   no transaction, decision, summary or gauge rebuild, so agents that change
   nothing cost O(1) each, whatever the size of the cluster; the liveness
   check on the tick looks only at agents whose deadline came
   (``scheduler.live.liveness``).
1. Decode every other delivery and hand it to its handler (``scheduler.live.requests``
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
4. If the cluster changed, rebuild the metrics' gauge state and publish the
   retained ``ClusterSummary`` if it differs, at most every
   ``summary_interval`` wall seconds (both walk every machine); otherwise only
   the gauges' cluster time moves on.
5. Run a prediction pass (``scheduler.live.insight``: every queued job's
   predicted start and reason, read by ``status``) if one is due: after a
   batch that handled a message other than a renewing heartbeat, or a
   decision (or every ``predict_refresh`` seconds while jobs wait), and no
   sooner after the last pass than ``predict_interval`` wall seconds or ten
   times that pass's own wall time, whichever is longer, so passes take at
   most a tenth of the actor's time however long the queue. In its own
   transaction; never inside a batch's handling: a submission is answered
   before any prediction of it is worked out.

6. After a timer tick, move a batch of ended jobs past ``archive_after`` to
   the journal's archive (``scheduler.runtime.journal_archive``), in its own
   two commits; a full batch asks for another tick, so a backlog moves batch
   by batch with the mailbox served in between.

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
from dataclasses import dataclass, replace
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
    StatusReply,
    StatusRequest,
    SubmitJobs,
)
from broker.topics import PROTOCOL_VERSION, Topics
from broker.vocabulary import BadMessage
from model.execution import DEFAULT_MODEL, ExecutionModel
from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Policy
from scheduler.live import agents, insight, reconcile, requests
from scheduler.live.context import Context, Outgoing
from scheduler.live.dispatch import dispatch
from scheduler.live.settings import ActorSettings, JobEvents
from scheduler.live.specs import job_from_spec
from scheduler.live.status import status
from scheduler.runtime.clock import Clock
from scheduler.runtime.cluster_state import gauge_state_of, same_summary, summary_of
from scheduler.runtime.exporter import GaugeState, SchedulerMetrics
from scheduler.runtime.journal import Journal
from scheduler.runtime.prediction_pace import PredictionPace

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
#: What :meth:`SchedulerActor._renewal` returns for a heartbeat it renewed.
_RENEWED: Final = _Wake("renewed")

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
            # The what-if snapshot carries each user's last run times (EASY++'s input).
            keep_history=True,
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
        #: When the gauges and summary were last rebuilt (the loop's clock).
        self._refreshed_at = -float("inf")
        self._gauge_state: GaugeState | None = None
        #: The cluster changed since the gauges and the summary were last rebuilt.
        self._stale = True
        #: Messages that tell of writes the journal has not taken yet, in order.
        self._unsent: list[Outgoing] = []
        self._failures_counted = 0
        self.batches = 0
        self.decisions = 0
        #: Heartbeats that changed nothing (``agents.renew``): no transaction, decision,
        #: summary or gauge rebuild was made for them.
        self.renewals = 0
        #: Times the gauges' state was rebuilt from the core (a batch that changed something).
        self.gauge_rebuilds = 0
        self.predictions = 0
        #: Ended jobs moved to the journal's archive by this actor.
        self.archived = 0
        self._pace = PredictionPace(self.settings.predict_interval, self.settings.predict_refresh)

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
            usage=journalled.usage.sums,
            usage_period=journalled.usage.period,
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
        ticked = False  # this batch ran the periodic checks (then it archives too)
        if self._tick_due and self._journal.failure is not None and self._journal.retry():
            ctx.dirty = True  # decisions waited for the journal
        work: list[tuple[Delivery, AnyMessage | None]] = []
        for item in batch:
            if isinstance(item, Delivery):
                message = self._renewal(item, now)
                if not isinstance(message, _Wake):  # else: renewed, nothing more to do
                    work.append((item, message))
        held = bool(self._held) and now >= self._hold_until
        reconciling = self._reconciliation.active
        if not (work or held or reconciling or ctx.dirty or self._tick_due):
            return  # heartbeats that changed nothing: renewed, and that is all
        if held or work:
            self._pace.stale = True
        changed = held or reconciling
        with self._journal.transaction():
            if held:
                held_back, self._held = self._held, []
                for h in held_back:
                    requests.handle(ctx, h.message, now, h.who)
            for delivery, decoded in work:
                changed = self._on_delivery(delivery, now, decoded) or changed
            reconcile.settle(ctx, self._reconciliation, now)
            if self._tick_due:
                self._tick_due, ticked = False, True
                changed = self._on_tick(now) or changed
            self._count_failures()
            # What the batch counted is durable with it (the exporter restores it).
            self._journal.record_totals(self.metrics.unsaved_totals())
        await self._flush()
        if ctx.dirty and not self._reconciliation.active and self._journal.failure is None:
            ctx.dirty = False
            changed = True
            with self._journal.transaction():
                self._schedule(now)
                self._journal.record_totals(self.metrics.unsaved_totals())
            await self._flush()
        if changed:
            self._stale = self._pace.stale = True
        await self._refresh(now)
        if self._prediction_due():
            self._predict(now)
        if ticked:
            self._archive(now)

    def _archive(self, now: float) -> None:
        """Move a batch of long-ended jobs to the journal's archive, outside any batch's
        transaction; a full one asks for the next at once, after what waits."""
        after = self.settings.archive_after
        if after is None:
            return
        limit = self.settings.archive_batch
        moved = self._journal.archive(
            now - after * self._clock.time_scale, limit, usage_period=self.core.usage.period
        )
        self.archived += moved.jobs
        if moved.jobs >= limit:
            self.tick()

    # -- predictions (``scheduler.live.insight``) ---------------------------------------

    def _prediction_due(self) -> bool:
        """Whether a pass runs now: the module docstring's step 5."""
        at = asyncio.get_running_loop().time()
        return self._pace.due(
            at, queued=bool(self.core.queue), predicted=self.ctx.forecast is not None
        )

    def _predict(self, now: float) -> None:
        at = asyncio.get_running_loop().time()
        held = insight.RECONCILING if self._reconciliation.active else None
        t0 = time.perf_counter()
        with self._journal.transaction():
            insight.forecast(self.ctx, now, held=held)
        seconds = time.perf_counter() - t0
        self._pace.ran(at, seconds)
        self.metrics.prediction_seconds.observe(seconds)
        self.predictions += 1

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

    def _renewal(self, delivery: Delivery, now: float) -> AnyMessage | _Wake | None:
        """:data:`_RENEWED` for a heartbeat that changed nothing (``agents.renew``
        has renewed it); else the agent event decoded (None: not one, or not
        readable) for :meth:`_on_delivery` to handle, which decodes the rest."""
        agent, channel = self._agent_channel(delivery.topic)
        if channel != "events":
            return None
        try:
            message = decode(delivery.payload)
        except WireError:
            return None  # counted and answered by _on_delivery
        if message.v != PROTOCOL_VERSION:
            return None
        if agents.renew(self.ctx, agent, message, now):
            self.renewals += 1
            return _RENEWED
        return message

    def _on_delivery(
        self, delivery: Delivery, now: float, decoded: AnyMessage | None = None
    ) -> bool:
        """Handle one delivery; False when it cannot have changed the cluster (a
        status or history request, a message refused or dropped)."""
        ctx = self.ctx
        topic = delivery.topic
        agent, channel = self._agent_channel(topic)
        if channel == "state" and not delivery.payload:
            return False  # a retained state being cleared: MQTT's delete, not a message
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
            return False
        if decoded is not None:
            message = decoded
        else:
            try:
                message = decode(delivery.payload)
            except WireError as exc:
                self._bad_payload(delivery.payload, _bad_reason(exc), str(exc), who)
                return False
        if message.v != PROTOCOL_VERSION:
            self._refuse(
                message,
                BadMessage.VERSION,
                f"protocol v{message.v}; this scheduler speaks v{PROTOCOL_VERSION}",
                who,
            )
            return False
        if request:
            return self._on_request(message, now, who)
        if channel == "state":
            agents.on_state(ctx, agent, message, now)
        elif channel == "events":
            agents.on_event(ctx, agent, message, now)
        else:
            self._refuse(message, BadMessage.UNEXPECTED, f"nothing is accepted on {topic!r}")
            return False
        return True

    def _on_request(self, message: AnyMessage, now: float, who: requests.Requester | None) -> bool:
        """Handle one request; True if it may have changed the cluster."""
        if not isinstance(message, requests.Request):
            why = f"{requests.kind(message)} is not a request"
            self._refuse(message, BadMessage.UNEXPECTED, why, who)
            return False
        if not requests.reply_to_ok(self.ctx, message, who):
            # Acting without being able to answer would leave the client guessing.
            why = f"reply_to {message.reply_to!r} cannot be a topic level"
            self.ctx.count_bad(BadMessage.INVALID, why)
            return False
        changes = isinstance(message, SubmitJobs | CancelJob | CancelJobs | DrainMachine)
        if changes and (self._held or now < self._hold_until):
            self._held.append(_Held(message, who))
            return False
        requests.handle(self.ctx, message, now, who)
        return changes

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

    def _on_tick(self, now: float) -> bool:
        """The periodic checks; True if an agent moved."""
        ctx = self.ctx
        moved = False
        if self._link is None or self._link.connected:
            # Cut off from the broker ourselves, we hear no one: that is no agent's
            # silence (and ``connected()`` restarts the count once we are back).
            moved = agents.check_liveness(ctx, now)
        if not ctx.dirty and ctx.core.queue:
            # A reservation falling due when no event happens (the twin's "wakes").
            ctx.dirty = any(r.start <= now for r in ctx.core.reservations)
        return moved

    def _schedule(self, now: float) -> None:
        t0 = time.perf_counter()
        decisions = self.ctx.core.schedule(now)
        self.metrics.decision_seconds.observe(time.perf_counter() - t0)
        self.decisions += 1
        dispatch(self.ctx, decisions, now)

    # -- summary and gauges ----------------------------------------------------------

    async def _refresh(self, now: float) -> None:
        """Rebuild the gauges and publish the summary if the cluster changed, at most
        every ``summary_interval`` (both walk every machine: under a storm of
        registrations, once per interval and not once per batch); otherwise only
        the gauges' clock moves on."""
        loop = asyncio.get_running_loop()
        due = loop.time() - self._refreshed_at >= self.settings.summary_interval
        if self._gauge_state is None or (self._stale and due):
            self._stale = False
            self._refreshed_at = loop.time()
            self.gauge_rebuilds += 1
            self._gauge_state = gauge_state_of(
                self.ctx,
                now,
                journal=self._journal,
                time_scale=self._clock.time_scale,
                reconciling=self._reconciliation.active,
            )
            self.metrics.publish_state(self._gauge_state)
            await self._flush_summary()
        else:
            self._gauge_state = replace(self._gauge_state, cluster_time=now)
            self.metrics.publish_state(self._gauge_state)

    async def _flush_summary(self, *, force: bool = False) -> None:
        summary = summary_of(self.ctx.core, self._clock.now())
        last = self._summary
        if not force and last is not None and same_summary(last, summary):
            return
        self._summary = summary
        await self._bus.publish(self._topics.cluster, encode(summary), qos=0, retain=True)
