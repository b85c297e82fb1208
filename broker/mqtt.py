"""The bus over a real MQTT broker (aiomqtt); the only module that imports it.

Theory of operation. A :class:`MqttBus` is one logical client: opened by
``async with``, it keeps a connection to the broker for as long as it is open,
reconnecting by itself. It speaks MQTT 3.1.1 by default: the protocol keeps
its correlation ids and reply topics in the payloads, so it needs no MQTT 5
feature and runs on brokers that speak only 3.1.1 (amqtt, the embedded
broker).

Reconnection. The first connection is made in ``__aenter__`` and its failure
raises :class:`~broker.bus.BusError` (the user's mistake, said at once). After
that a lost connection is an ordinary event: a named background task
reconnects with capped exponential backoff and jitter (``reconnect_min``
doubling up to ``reconnect_max`` seconds, each wait drawn in [0.5, 1] of it; a
connection that lived less than ``reconnect_max`` does not reset the step, so
two clients fighting over one client id slow down), subscribes again to every
filter, and ``deliveries()`` goes on across the gap. ``publish`` and
``subscribe`` wait for a connection for at most ``publish_timeout`` seconds,
then raise ``BusError``. The owner can watch the link (``connected``,
``disconnected_since``, ``wait_connected``, ``wait_disconnected``,
``reconnects``: an agent's lease reads them). Why the broker dropped a
connection is read and discarded (:func:`_settle`), never left for asyncio to
log as "Future exception was never retrieved".

What a reconnection guarantees. ``publish`` returns once the broker has the
message (QoS 1: its PUBACK). A publish whose connection drops before the
PUBACK is sent again on the next connection, so it may arrive twice (handlers
are idempotent, by job id and sequence). With ``clean_session=False`` the
broker keeps the subscriptions and queues QoS 1 messages for the client while
it is away; they arrive after the reconnection, in the order the broker
received them, possibly after a duplicate of a message delivered just before
the drop. With ``clean_session=True`` what was published while the client was
away is not delivered to it (except retained messages, replayed when it
subscribes again). Messages the client library had acknowledged before the
drop are delivered, never dropped.

Foreign topics. On a clean session, a delivery on a topic that matches none
of the subscribed filters is dropped and counted (:attr:`MqttBus.foreign`):
amqtt 0.12 delivers other topics' retained messages to a new subscription,
and an actor must see only what it asked for. A persistent session keeps
every delivery: the broker sends what it queued for the session before the
new connection has subscribed again, and dropping that would lose it.

Four settings matter more than they look:

- ``TCP_NODELAY`` on the client socket: without it Nagle's algorithm and
  Linux's delayed ACK make a QoS 1 request/response cost tens of milliseconds
  instead of about one (Mosquitto's ``set_tcp_nodelay true`` is the broker's).
- The incoming queue is unbounded: aiomqtt discards a message when a bounded
  queue is full, after paho acknowledged it, so a bound would lose QoS 1
  messages silently. The consumer (one actor's drain loop) must keep up.
- A subscription whose SUBACK times out is sent again (up to
  ``subscribe_attempts`` times): the embedded broker sometimes misses one
  under load.
- Credentials and TLS (``mqtts://``), from :class:`broker.settings.MqttSettings`.
  The password is never part of a repr, a URL this module prints, or an
  error message.

A payload past the wire's limit (``broker.limits``) is refused by ``publish``
before it leaves (:class:`~broker.bus.MessageTooLargeError`, a ``BusError``):
the broker would drop it unseen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Self

import aiomqtt
import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from broker.bus import BusError, Delivery, Will, check_size
from broker.settings import MqttSettings
from broker.topics import matches

__all__ = ["MqttBus", "MqttSettings", "tls_parameters"]  # MqttSettings: broker.settings's
_PROTOCOLS: dict[str, aiomqtt.ProtocolVersion] = {
    "3.1.1": aiomqtt.ProtocolVersion.V311,
    "5": aiomqtt.ProtocolVersion.V5,
}
_NODELAY = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
_MAX_PENDING = 1000  # publishes and subscribes awaiting their ack, per connection
_SESSION_NEVER_EXPIRES = 0xFFFFFFFF  # MQTT 5's Session Expiry Interval "never"

log = logging.getLogger("broker.mqtt")


def tls_parameters(settings: MqttSettings) -> aiomqtt.TLSParameters | None:
    """aiomqtt's TLS parameters of ``settings`` (None without TLS); the broker is verified."""
    if not settings.tls:
        return None
    return aiomqtt.TLSParameters(
        ca_certs=None if settings.ca_file is None else str(settings.ca_file),
        certfile=None if settings.cert_file is None else str(settings.cert_file),
        keyfile=None if settings.key_file is None else str(settings.key_file),
        cert_reqs=ssl.CERT_REQUIRED,
    )


class MqttBus:
    """One logical client of an MQTT broker, implementing :class:`broker.bus.Bus`.

    See the module's docstring for reconnection and what it guarantees. ``rng``
    draws the backoff's jitter (a seeded one makes the delays reproducible).
    ``on_reconnect`` is awaited after each reconnection, once subscribed again,
    before anything else is read (it may publish); an error it raises ends the
    link, which is the owner's bug to see.
    """

    def __init__(
        self,
        settings: MqttSettings,
        client_id: str,
        *,
        will: Will | None = None,
        clean_session: bool = True,
        rng: random.Random | None = None,
        on_reconnect: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        if not client_id:
            raise ValueError("an MQTT client id is required (sessions and takeover use it)")
        self._settings = settings
        self._client_id = client_id
        self._will = will
        self._clean_session = clean_session
        self._rng = rng or random.Random()  # jitter, not a secret
        self._on_reconnect = on_reconnect
        self._client: aiomqtt.Client | None = None  # the live connection, if any
        self._up = asyncio.Event()
        self._down = asyncio.Event()
        self._open = False
        self._link: asyncio.Task[None] | None = None
        self._filters: dict[str, int] = {}
        self._inbox: asyncio.Queue[Delivery | Exception | None] = asyncio.Queue()
        self._disconnected_since: float | None = None
        self._attached_at = 0.0
        self._delay = settings.reconnect_min  # the backoff's current step
        #: Connections made again after a loss.
        self.reconnects = 0
        #: Deliveries dropped because no subscribed filter matches their topic.
        self.foreign = 0

    @property
    def client_id(self) -> str:
        return self._client_id

    @property
    def settings(self) -> MqttSettings:
        return self._settings

    @property
    def connected(self) -> bool:
        return self._client is not None

    @property
    def disconnected_since(self) -> float | None:
        """``time.monotonic()`` when the connection was lost; None while connected."""
        return self._disconnected_since

    async def wait_connected(self) -> None:
        await self._up.wait()

    async def wait_disconnected(self) -> None:
        await self._down.wait()

    def _where(self) -> str:
        return f"MQTT broker {self._settings.host}:{self._settings.port}"

    def _new_client(self) -> aiomqtt.Client:
        s = self._settings
        will = None
        if self._will is not None:
            w = self._will
            will = aiomqtt.Will(w.topic, w.payload, qos=1, retain=w.retain)
        clean_session: bool | None = self._clean_session
        clean_start: paho.CleanStartOption = paho.MQTT_CLEAN_START_FIRST_ONLY  # paho's default
        properties = None
        if s.protocol == "5":
            # MQTT 5 replaced clean session by clean start plus a session expiry.
            clean_session, clean_start = None, self._clean_session
            if not self._clean_session:
                properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
                properties.SessionExpiryInterval = _SESSION_NEVER_EXPIRES
        client = aiomqtt.Client(
            s.host,
            s.port,
            identifier=self._client_id,
            protocol=_PROTOCOLS[s.protocol],
            username=s.username,
            password=s.password,
            tls_params=tls_parameters(s),
            will=will,
            clean_session=clean_session,
            clean_start=clean_start,
            properties=properties,
            keepalive=s.keepalive,
            timeout=s.connect_timeout,
            max_queued_incoming_messages=0,  # 0 is unbounded: see the module's docstring
            max_concurrent_outgoing_calls=_MAX_PENDING,  # backpressure on publishers
            socket_options=[_NODELAY],
        )
        # aiomqtt warns per call past this many awaiting their ack (default 10); calls
        # are bounded to _MAX_PENDING by a semaphore, so this never fires.
        client.pending_calls_threshold = _MAX_PENDING
        return client

    async def _connect(self) -> aiomqtt.Client:
        client = self._new_client()
        try:
            await client.__aenter__()
        except aiomqtt.MqttError as exc:
            # A refused TLS handshake can leave paho's socket open (TLS 1.3 reports a
            # missing client certificate after the handshake): close it.
            client._client._sock_close()
            raise BusError(
                f"cannot connect to {self._where()} as {self._client_id!r}: {exc}"
            ) from exc
        return client

    async def __aenter__(self) -> Self:
        if self._open:
            raise BusError(f"MQTT client {self._client_id!r} is already connected")
        client = await self._connect()
        self._open = True
        self._filters.clear()
        self._inbox = asyncio.Queue()
        self._attach(client)
        self._link = asyncio.get_running_loop().create_task(
            self._keep_linked(client), name=f"mqtt-link-{self._client_id}"
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._open:
            return
        self._open = False
        link, self._link = self._link, None
        client = self._client
        self._detach()
        if link is not None:
            link.cancel()
            # Its own error, if it died of one, went to deliveries() already.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await link
        self._inbox.put_nowait(None)  # ends deliveries()
        if client is None:
            return
        try:
            await client.__aexit__(exc_type, exc, tb)
        except aiomqtt.MqttError as err:
            raise BusError(f"unclean disconnect from {self._where()}: {err}") from err
        finally:
            _settle(client)

    def _attach(self, client: aiomqtt.Client) -> None:
        self._client = client
        self._attached_at = time.monotonic()
        self._disconnected_since = None
        self._down.clear()
        self._up.set()

    def _detach(self) -> None:
        if self._client is not None:
            self._client = None
            self._disconnected_since = time.monotonic()
        self._up.clear()
        self._down.set()

    # -- the link: read, notice the loss, reconnect ------------------------------------

    async def _keep_linked(self, client: aiomqtt.Client) -> None:
        try:
            await self._link_loop(client)
        except Exception as exc:
            # A bug (e.g. in on_reconnect): the owner's deliveries() raises it.
            self._detach()
            self._inbox.put_nowait(exc)
            raise

    async def _link_loop(self, client: aiomqtt.Client) -> None:
        while True:
            await self._read(client)
            log.warning(
                "MQTT client %r lost its connection to %s; reconnecting",
                self._client_id,
                self._where(),
            )
            self._detach()
            _fail_pending(client)
            with contextlib.suppress(aiomqtt.MqttError):
                await client.__aexit__(None, None, None)
            _settle(client)
            client = await self._reconnect()

    async def _read(self, client: aiomqtt.Client) -> None:
        """Pass deliveries on until the connection is lost."""
        with contextlib.suppress(aiomqtt.MqttError):
            async for message in client.messages:
                self._take(message)
        # What is still queued was acknowledged to the broker already: deliver it.
        queue = client._queue  # aiomqtt's iterator refuses once disconnected
        while not queue.empty():
            self._take(queue.get_nowait())

    def _take(self, message: aiomqtt.Message) -> None:
        topic = str(message.topic)
        # A persistent session's queued messages arrive before this connection has
        # subscribed to anything, so only a clean session can tell what is foreign.
        if self._clean_session and not any(matches(f, topic) for f in self._filters):
            self.foreign += 1
            return
        self._inbox.put_nowait(Delivery(topic, bytes(message.payload), message.retain))

    async def _reconnect(self) -> aiomqtt.Client:
        s = self._settings
        # A connection that lived less than the cap is flapping (a takeover fight, a
        # denied publish that costs the connection): go on from the last delay
        # instead of starting again at the minimum.
        lived = (self._disconnected_since or 0.0) - self._attached_at
        delay = s.reconnect_min if lived >= s.reconnect_max else self._delay
        while True:
            await asyncio.sleep(delay * (0.5 + 0.5 * self._rng.random()))
            delay = min(2 * delay, s.reconnect_max)
            self._delay = delay
            try:
                client = await self._connect()
            except BusError as exc:
                log.info("%s; retrying", exc)
                continue
            try:
                for pattern, qos in list(self._filters.items()):
                    await self._subscribe_on(client, pattern, qos)
            except BusError as exc:
                log.info("%s; reconnecting", exc)
                _fail_pending(client)
                with contextlib.suppress(aiomqtt.MqttError):
                    await client.__aexit__(None, None, None)
                _settle(client)
                continue
            self.reconnects += 1
            self._attach(client)
            log.warning("MQTT client %r is connected again to %s", self._client_id, self._where())
            if self._on_reconnect is not None:
                # E.g. an agent publishing its state again: a restarted broker without
                # persistence has forgotten every retained message.
                await self._on_reconnect()
            return client

    # -- the Bus interface ---------------------------------------------------------------

    async def _linked(self, deadline: float, what: str) -> aiomqtt.Client:
        """The live connection, waiting for one until ``deadline`` (loop time)."""
        while True:
            if not self._open:
                raise BusError(f"MQTT client {self._client_id!r} is not connected")
            client = self._client
            if client is not None:
                return client
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise BusError(
                    f"{what} on {self._where()} failed: no connection for "
                    f"{self._settings.publish_timeout:g} s"
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._up.wait()

    async def publish(
        self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False
    ) -> None:
        # Past the broker's limit the broker drops it: say so now, not after a timeout.
        check_size(topic, payload)
        what = f"publish to {topic!r}"
        deadline = asyncio.get_running_loop().time() + self._settings.publish_timeout
        while True:
            client = await self._linked(deadline, what)
            try:
                await client.publish(
                    topic, payload, qos=qos, retain=retain, timeout=self._settings.ack_timeout
                )
            except aiomqtt.MqttError as exc:
                if client is self._client:
                    if _dropped(exc):
                        # paho knows before the link task does: wait for it to notice.
                        await self._until_down(deadline)
                    elif "timed out" not in str(exc) or self._past(deadline):
                        raise BusError(f"{what} on {self._where()} failed: {exc}") from exc
                continue  # the connection dropped, or the ack is late: publish again
            if client is self._client:
                return
            # The connection dropped while the publish waited: _fail_pending woke it,
            # so whether the broker has it is unknown. Publish again (QoS 1 may repeat).
            if qos == 0:
                return

    def _past(self, deadline: float) -> bool:
        return asyncio.get_running_loop().time() >= deadline

    async def _until_down(self, deadline: float) -> None:
        remaining = deadline - asyncio.get_running_loop().time()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(remaining, 0.0)):
                await self._down.wait()

    async def subscribe(self, pattern: str, *, qos: int = 1) -> None:
        what = f"subscribe to {pattern!r}"
        deadline = asyncio.get_running_loop().time() + self._settings.publish_timeout
        # Known before the SUBSCRIBE leaves, so retained messages it replays are kept.
        before = self._filters.get(pattern)
        self._filters[pattern] = max(qos, before or 0)
        while True:
            client = await self._linked(deadline, what)
            try:
                await self._subscribe_on(client, pattern, qos)
            except BusError as exc:
                if client is not self._client:
                    continue  # the connection dropped meanwhile; the next one subscribes
                cause = exc.__cause__
                if isinstance(cause, aiomqtt.MqttError) and _dropped(cause):
                    await self._until_down(deadline)
                    continue
                if before is None:  # refused (e.g. by an ACL): not ours to receive
                    self._filters.pop(pattern, None)
                raise
            return

    async def _subscribe_on(self, client: aiomqtt.Client, pattern: str, qos: int) -> None:
        attempts = self._settings.subscribe_attempts
        for attempt in range(1, attempts + 1):
            try:
                granted = await client.subscribe(
                    pattern, qos=qos, timeout=self._settings.ack_timeout
                )
            except aiomqtt.MqttError as exc:
                if attempt < attempts and "timed out" in str(exc):
                    log.info("subscribe to %r timed out; sending it again", pattern)
                    continue
                raise BusError(
                    f"subscribe to {pattern!r} on {self._where()} failed: {exc}"
                ) from exc
            break
        for code in granted:
            value = code if isinstance(code, int) else code.value
            if value >= 0x80:
                raise BusError(f"{self._where()} refused the subscription to {pattern!r}: {code}")

    async def deliveries(self) -> AsyncIterator[Delivery]:
        """Every message on the subscribed filters, in arrival order, across reconnections.

        Ends when this bus is closed. Raises :class:`BusError` if it was never opened.
        """
        if not self._open:
            raise BusError(f"MQTT client {self._client_id!r} is not connected")
        inbox = self._inbox
        while True:
            delivery = await inbox.get()
            if delivery is None:
                return
            if isinstance(delivery, Exception):
                raise delivery
            yield delivery


def _dropped(exc: aiomqtt.MqttError) -> bool:
    """Whether paho refused a call because the connection is gone."""
    rc = getattr(exc, "rc", None)
    return rc in (paho.MQTT_ERR_NO_CONN, paho.MQTT_ERR_CONN_LOST)


def _fail_pending(client: aiomqtt.Client) -> None:
    """Wake every call still waiting for an ack on a dead connection.

    aiomqtt leaves them waiting until their timeout; the publishers then see
    that the connection they used is gone and publish again on the next one.
    """
    for event in client._pending_publishes.values():
        event.set()
    for future in client._pending_subscribes.values():
        if not future.done():
            future.set_exception(aiomqtt.MqttError("connection lost"))


def _settle(client: aiomqtt.Client) -> None:
    """Read why a closed connection ended (aiomqtt keeps it in a future only its message
    iterator reads): a client closed before the iterator saw the drop (Mosquitto closes a
    client whose publish its ACL denied) left it unread, and asyncio logged it."""
    disconnected = client._disconnected
    if disconnected.done() and not disconnected.cancelled():
        disconnected.exception()
