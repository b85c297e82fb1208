"""The client side of the live runtime: one connection that asks the scheduler and watches.

Theory of operation
-------------------
A :class:`LiveClient` is one bus connection with a client id of its own. On
entry it subscribes to ``topics.replies(client_id)`` (and, for a watcher, to
``topics.events`` and ``topics.cluster``) *before* any request goes out, so a
reply can never arrive before someone listens for it. One named reader task
owns the bus's deliveries: a reply is matched to its request by
``request_id`` and resolves that request's future; ``JobEvent`` and
``ClusterSummary`` messages go to a bounded queue that a watcher drains (when
the watcher lags, the oldest are dropped and counted: they are QoS 0 news, and
the scheduler's ``StatusReply`` is the authority).

Every request gets a fresh ``request_id`` and names this client in
``reply_to`` (the scheduler only ever answers on ``topics.replies(reply_to)``).
A status is one page (``broker.messages.StatusRequest``): :meth:`LiveClient.status`
asks for one, :meth:`LiveClient.machines` and :meth:`LiveClient.live_ids`
ask for what readiness checks and replays need, in pages that cost what they
name, not what the queue holds.
A watcher learns of its own gaps by the events' stream numbers
(``JobEvent.stream``) and of a reconnection by :attr:`LiveClient.reconnects`,
and asks for what it missed (:meth:`LiveClient.events_since`;
``accordion.client.catch_up``).

A request whose reply does not come within ``timeout`` seconds raises
:class:`~accordion.errors.NoReplyError`; an ``ErrorReply`` raises
:class:`~accordion.errors.RefusedError` with the scheduler's words.
Submissions are idempotent by job id, so a submission that timed out may be
sent again unchanged without making a second job. All of it works on MQTT
3.1.1 (the embedded broker) as well as 5: the correlation id and the reply
address travel in the payload.

*Logged in* (a broker with accounts and ACLs, ``broker.auth``): the client
speaks for ``identity``, the user its login stands for (``alice~2`` is
``alice``). It publishes on ``scheduler/requests/<identity>`` (an admin on
``scheduler/admin/<identity>``), hears its replies on
``users/<identity>/replies/<client id>`` and, watching, its jobs' events on
``users/<identity>/events`` (an admin: every job's, on ``events``): the only
topics the broker lets it use. Anonymous (no username), it uses the
identity-less topics as before.

The job specs it sends are built in :mod:`accordion.client.specs`; a trace is
replayed through it by :mod:`accordion.client.replay`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import AsyncIterator, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self, TypeVar

from accordion.errors import LiveError, NoReplyError, RefusedError, parsed
from broker.auth import identity_of
from broker.bus import Bus, BusError, Delivery
from broker.codec import WireError, decode, encode
from broker.messages import (
    MAX_IDS,
    AnyMessage,
    CancelJob,
    CancelJobs,
    CancelJobsReply,
    CancelReply,
    ClusterSummary,
    DrainMachine,
    DrainReply,
    ErrorReply,
    EventsReply,
    EventsRequest,
    HistoryReply,
    HistoryRequest,
    JobEvent,
    JobSpec,
    MachineStatus,
    StatusReply,
    StatusRequest,
    SubmitJobs,
    SubmitReply,
)
from broker.mqtt import MqttBus, MqttSettings
from broker.settings import read_secret
from broker.topics import DEFAULT_ROOT, Topics
from broker.vocabulary import BadMessage, JobState

log = logging.getLogger(__name__)

BROKER_ENV = "ACCORDION_BROKER"
ROOT_ENV = "ACCORDION_ROOT"
#: ``admin`` makes a logged-in client speak on the admin topic (cancel any job).
ROLE_ENV = "ACCORDION_ROLE"
DEFAULT_BROKER = "mqtt://127.0.0.1:1883"
DEFAULT_TIMEOUT = 10.0

T = TypeVar("T")
Watched = JobEvent | ClusterSummary


class _Reconnected:
    """What wakes a watcher when its connection was made again (not a message)."""


RECONNECTED: Final = _Reconnected()

__all__ = ["LiveError", "NoReplyError", "RefusedError"]


HISTORY_CHUNK = 10_000
"""Most jobs one ``HistoryRequest`` may name (the wire's bound)."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """A login whose password is in a file (read when connecting, never shown)."""

    username: str
    password_file: Path


def new_client_id(prefix: str = "accordion-cli") -> str:
    """A client id nobody else uses (MQTT drops the older of two equal ids)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def new_request_id() -> str:
    return uuid.uuid4().hex


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on uvloop when it is installed, as the actors do."""
    try:
        import uvloop  # noqa: PLC0415 (optional: plain asyncio without it)
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


# -- the client -------------------------------------------------------------------


class LiveClient:
    """Requests to the scheduler over a connected bus (see the module docstring).

    Use as ``async with LiveClient(bus, topics) as client``; ``watch=True``
    also subscribes to job events and the retained cluster summary.
    """

    def __init__(
        self,
        bus: Bus,
        topics: Topics,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        watch: bool = False,
        watch_queue: int = 10_000,
        where: str = "the broker",
        identity: str | None = None,
        admin: bool = False,
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        if admin and identity is None:
            raise ValueError("an admin client needs an identity (a login)")
        self._bus = bus
        self._topics = topics
        self.timeout = timeout
        self._watch = watch
        self._where = where
        self.identity = identity
        self.admin = admin
        if identity is None:
            self._requests = topics.requests
            self._replies = topics.replies(bus.client_id)
            self._events = topics.events
        else:
            self._requests = (
                topics.admin_requests(identity) if admin else topics.user_requests(identity)
            )
            self._replies = topics.user_replies(identity, bus.client_id)
            self._events = topics.events if admin else topics.user_events(identity)
        self._pending: dict[str, asyncio.Future[AnyMessage]] = {}
        self._watched: asyncio.Queue[Watched | _Reconnected | None] = asyncio.Queue(watch_queue)
        self._reader: asyncio.Task[None] | None = None
        self._lost: BusError | None = None
        #: Watched messages dropped because the watcher lagged behind.
        self.dropped = 0
        #: Replies nobody waited for (late, after a timeout) or that did not decode.
        self.unmatched = 0
        #: Times the connection was made again after a loss (a watcher then asks for
        #: what was published meanwhile: a clean session gets none of it).
        self.reconnects = 0

    @property
    def client_id(self) -> str:
        return self._bus.client_id

    @property
    def topics(self) -> Topics:
        return self._topics

    async def __aenter__(self) -> Self:
        if self._reader is not None:
            raise RuntimeError("a LiveClient is not reentrant")
        # The reader runs before the subscriptions: the cluster summary is retained
        # and arrives as soon as we subscribe to it.
        self._reader = asyncio.get_running_loop().create_task(
            self._read(), name=f"live-client-reader-{self.client_id}"
        )
        try:
            await self._bus.subscribe(self._replies, qos=1)
            if self._watch:
                await self._bus.subscribe(self._events, qos=1)
                await self._bus.subscribe(self._topics.cluster, qos=1)
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._close()

    async def _close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is None:
            return
        reader.cancel()
        # asyncio.wait, not ``await reader``: a cancellation of *this* task must still
        # propagate, and only the reader's own cancellation is expected here.
        await asyncio.wait([reader])
        if not reader.cancelled() and (error := reader.exception()) is not None:
            raise error

    async def _read(self) -> None:
        try:
            async for delivery in self._bus.deliveries():
                self._dispatch(delivery)
            self._lost = BusError(f"the connection to {self._where} was closed")
        except BusError as exc:
            self._lost = exc
        for future in self._pending.values():
            if not future.done():
                future.set_exception(BusError(str(self._lost)))
        self._offer(None)  # wakes a watcher: the stream has ended

    def _dispatch(self, delivery: Delivery) -> None:
        if not delivery.payload:
            return  # a retained message being cleared
        try:
            message = decode(delivery.payload)
        except WireError as exc:
            self.unmatched += 1
            log.warning("undecodable message on %s: %s", delivery.topic, exc)
            return
        if delivery.topic == self._replies:
            self._answer(message)
        elif isinstance(message, JobEvent | ClusterSummary):
            self._offer(message)
        else:
            self.unmatched += 1
            log.info("ignored %s on %s", type(message).__name__, delivery.topic)

    def _answer(self, message: AnyMessage) -> None:
        request_id = getattr(message, "request_id", None)
        future = self._pending.get(request_id) if isinstance(request_id, str) else None
        if future is None or future.done():
            # A reply after its request timed out, or an ErrorReply the scheduler
            # could not correlate (it could not read our request_id).
            self.unmatched += 1
            log.info("reply to no pending request: %s", _kind_of(message))
            return
        if isinstance(message, ErrorReply):
            future.set_exception(
                RefusedError(f"the scheduler refused it: {message.error}", message.code.value)
            )
        else:
            future.set_result(message)

    def _offer(self, item: Watched | _Reconnected | None) -> None:
        if not self._watch and item is not None:
            return
        while True:
            try:
                self._watched.put_nowait(item)
                return
            except asyncio.QueueFull:
                self._watched.get_nowait()
                self.dropped += 1

    # -- requests --------------------------------------------------------------

    def reconnected(self) -> None:
        """The bus's ``on_reconnect``: count it and wake a watcher."""
        self.reconnects += 1
        with contextlib.suppress(asyncio.QueueFull):
            self._watched.put_nowait(RECONNECTED)

    async def _ask(
        self,
        message: SubmitJobs
        | CancelJob
        | CancelJobs
        | StatusRequest
        | HistoryRequest
        | EventsRequest
        | DrainMachine,
        timeout: float | None,
    ) -> AnyMessage:
        if self._reader is None:
            raise RuntimeError("use `async with LiveClient(...)` before asking")
        if self._lost is not None:
            raise BusError(str(self._lost))
        wait = self.timeout if timeout is None else timeout
        future: asyncio.Future[AnyMessage] = asyncio.get_running_loop().create_future()
        self._pending[message.request_id] = future
        try:
            await self._bus.publish(self._requests, encode(message), qos=1)
            async with asyncio.timeout(wait):
                return await future
        except TimeoutError:
            raise NoReplyError(
                f"no reply from the scheduler in {wait:g} s on {self._where}, topic root "
                f"{self._topics.root!r}: is it running there?"
            ) from None
        finally:
            del self._pending[message.request_id]

    async def submit(self, jobs: Sequence[JobSpec], *, timeout: float | None = None) -> SubmitReply:
        """Submit ``jobs`` as one request; one ``SubmitResult`` per job comes back."""
        if not jobs:
            raise ValueError("submit needs at least one job")
        request = SubmitJobs(request_id=new_request_id(), reply_to=self.client_id, jobs=tuple(jobs))
        return _expect(await self._ask(request, timeout), SubmitReply)

    async def cancel(self, job_id: str, *, timeout: float | None = None) -> CancelReply:
        request = CancelJob(request_id=new_request_id(), reply_to=self.client_id, job_id=job_id)
        return _expect(await self._ask(request, timeout), CancelReply)

    async def cancel_jobs(
        self,
        job_ids: Sequence[str] = (),
        *,
        patterns: Sequence[str] = (),
        user: str | None = None,
        states: Sequence[JobState] = (),
        timeout: float | None = None,
    ) -> CancelJobsReply:
        """A bulk cancel (``broker.messages.CancelJobs``): one request, or one per
        :data:`~broker.messages.MAX_IDS` named ids, its counts summed."""
        chunks = [tuple(job_ids[i : i + MAX_IDS]) for i in range(0, len(job_ids), MAX_IDS)]
        replies = []
        for chunk in chunks or [()]:
            request = CancelJobs(
                request_id=new_request_id(),
                reply_to=self.client_id,
                job_ids=chunk,
                patterns=tuple(patterns),
                user=user,
                states=tuple(states),
            )
            replies.append(_expect(await self._ask(request, timeout), CancelJobsReply))
            patterns = ()  # matched once, with the first chunk
        first = replies[0]
        refused = next((r for r in replies if r.code is not None), None)
        return CancelJobsReply(
            request_id=first.request_id,
            cancelled=sum(r.cancelled for r in replies),
            not_found=sum(r.not_found for r in replies),
            not_allowed=sum(r.not_allowed for r in replies),
            already_final=sum(r.already_final for r in replies),
            skipped=sum(r.skipped for r in replies),
            code=None if refused is None else refused.code,
            reason=None if refused is None else refused.reason,
        )

    async def status(
        self,
        *,
        user: str | None = None,
        states: Sequence[JobState] = (),
        ids: Sequence[str] = (),
        limit: int = MAX_IDS,
        cursor: str | None = None,
        machines: bool = True,
        timeout: float | None = None,
    ) -> StatusReply:
        """One page of the status (``broker.messages.StatusRequest`` for the filters)."""
        request = StatusRequest(
            request_id=new_request_id(),
            reply_to=self.client_id,
            user=user,
            states=tuple(states),
            ids=tuple(ids),
            limit=limit,
            cursor=cursor,
            machines=machines,
        )
        return _expect(await self._ask(request, timeout), StatusReply)

    async def machines(self, *, timeout: float | None = None) -> list[MachineStatus]:
        """Every machine the scheduler knows, without a job: pages of machines only."""
        found: list[MachineStatus] = []
        cursor: str | None = None
        while True:
            page = await self.status(limit=0, cursor=cursor, timeout=timeout)
            found += page.machines
            if page.next_cursor is None:
                return found
            cursor = page.next_cursor

    async def live_ids(self, job_ids: Sequence[str], *, timeout: float | None = None) -> set[str]:
        """Which of ``job_ids`` are queued or running now.

        Per :data:`~broker.messages.MAX_IDS` ids, first their totals alone (one small
        reply): when every one of them is still live nothing more is asked; else
        their rows, page by page. What it costs is what it names.
        """
        live: set[str] = set()
        unique = list(dict.fromkeys(job_ids))
        for i in range(0, len(unique), MAX_IDS):
            chunk = unique[i : i + MAX_IDS]
            head = await self.status(ids=chunk, limit=0, machines=False, timeout=timeout)
            if head.totals.queued + head.totals.running == len(chunk):
                live.update(chunk)
                continue
            cursor: str | None = None
            while True:
                page = await self.status(ids=chunk, machines=False, cursor=cursor, timeout=timeout)
                live.update(j.id for j in (*page.running, *page.queue))
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
        return live

    async def history(
        self, job_ids: Sequence[str], *, timeout: float | None = None
    ) -> list[JobEvent]:
        """Every journalled event of ``job_ids`` (by job, then ``seq``), asked in
        requests of at most :data:`HISTORY_CHUNK` jobs, halved when the scheduler
        says an answer would not fit in one message; unknown ids have none."""
        events: list[JobEvent] = []
        for i in range(0, len(job_ids), HISTORY_CHUNK):
            events += await self._history(job_ids[i : i + HISTORY_CHUNK], timeout)
        return events

    async def _history(self, job_ids: Sequence[str], timeout: float | None) -> list[JobEvent]:
        request = HistoryRequest(
            request_id=new_request_id(), reply_to=self.client_id, job_ids=tuple(job_ids)
        )
        try:
            return list(_expect(await self._ask(request, timeout), HistoryReply).events)
        except RefusedError as exc:
            if exc.code != BadMessage.TOO_LARGE.value or len(job_ids) < 2:
                raise
        half = len(job_ids) // 2
        return [
            *(await self._history(job_ids[:half], timeout)),
            *(await self._history(job_ids[half:], timeout)),
        ]

    async def events_since(
        self, after: int, *, limit: int = 1000, timeout: float | None = None
    ) -> EventsReply:
        """This client's event stream after number ``after`` (its user's jobs, or every
        job's for an admin or on a broker without logins), at most ``limit`` events."""
        request = EventsRequest(
            request_id=new_request_id(), reply_to=self.client_id, after=after, limit=limit
        )
        return _expect(await self._ask(request, timeout), EventsReply)

    async def drain(
        self, machine: str, *, drain: bool = True, timeout: float | None = None
    ) -> DrainReply:
        """Drain ``machine`` (an admin's request), or resume it (``drain=False``)."""
        request = DrainMachine(
            request_id=new_request_id(), reply_to=self.client_id, machine=machine, drain=drain
        )
        return _expect(await self._ask(request, timeout), DrainReply)

    # -- watching --------------------------------------------------------------

    async def next_watched(self, timeout: float | None = None) -> Watched | None:
        """The next event or cluster summary; None after ``timeout`` seconds, or when
        the connection was made again (see :attr:`reconnects`).

        Raises :class:`~broker.bus.BusError` once the connection is gone.
        """
        if not self._watch:
            raise RuntimeError("this client was not opened with watch=True")
        try:
            async with asyncio.timeout(timeout):
                item = await self._watched.get()
        except TimeoutError:
            return None
        if item is None:
            self._offer(None)  # every later call must see the end too
            raise BusError(str(self._lost))
        if isinstance(item, _Reconnected):
            return None
        return item

    async def watched(self) -> AsyncIterator[Watched]:
        """Every event and cluster summary, until the connection ends (BusError)."""
        while True:
            item = await self.next_watched()
            if item is not None:
                yield item


M = TypeVar("M")


def _kind_of(message: AnyMessage) -> str:
    request_id = getattr(message, "request_id", None)
    return f"{type(message).__name__} (request {request_id})"


def _expect(reply: AnyMessage, kind: type[M]) -> M:
    if not isinstance(reply, kind):
        raise LiveError(f"expected a {kind.__name__}, the scheduler sent {reply!r}")
    return reply


@asynccontextmanager
async def connect(
    broker: str = DEFAULT_BROKER,
    root: str = DEFAULT_ROOT,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    watch: bool = False,
    client_id: str | None = None,
    admin: bool | None = None,
    credentials: Credentials | None = None,
) -> AsyncIterator[LiveClient]:
    """A :class:`LiveClient` on the MQTT broker at ``broker`` (``mqtt[s]://[user@]host[:port]``).

    The login (URL or ``ACCORDION_MQTT_USERNAME``/``_PASSWORD_FILE``) makes the
    client speak for its identity; ``admin`` (default: ``ACCORDION_ROLE=admin``)
    puts its requests on the admin topic. ``credentials`` override both.
    """
    settings = broker_settings(broker)
    if credentials is not None:
        secret = parsed(lambda: read_secret(credentials.password_file), "the password file")
        settings = replace(settings, username=credentials.username, password=secret)
    topics = Topics(root)
    identity = identity_of(settings.username) if settings.username else None
    if admin is None:
        admin = identity is not None and os.environ.get(ROLE_ENV, "") == "admin"
    clients: list[LiveClient] = []

    async def reconnected() -> None:
        for client in clients:
            client.reconnected()

    async with (
        MqttBus(settings, client_id or new_client_id(), on_reconnect=reconnected) as bus,
        LiveClient(
            bus,
            topics,
            timeout=timeout,
            watch=watch,
            where=settings.url,
            identity=identity,
            admin=admin,
        ) as client,
    ):
        clients.append(client)
        yield client


def broker_settings(url: str) -> MqttSettings:
    """The MQTT settings of a ``--broker`` URL; a malformed one is a user error."""
    return parsed(lambda: MqttSettings.from_url(url), "--broker")
