"""The bus over a real MQTT broker (aiomqtt); the only module that imports it.

Theory of operation. A :class:`MqttBus` is one aiomqtt client connection,
opened by ``async with``. It speaks MQTT 3.1.1 by default: the protocol keeps
its correlation ids and reply topics in the payloads, so it needs no MQTT 5
feature and runs on brokers that speak only 3.1.1 (amqtt, the embedded
broker). ``publish`` returns once the broker has the message: at QoS 1 that is
its PUBACK, so a publish that raised :class:`~broker.bus.BusError` may or may
not have been delivered, and the caller retries it (handlers are idempotent).

Three settings matter more than they look:

- ``TCP_NODELAY`` on the client socket. Without it Nagle's algorithm holds a
  small publish back until the previous segment is acknowledged, and Linux
  delays that acknowledgement by up to 40 ms: a QoS 1 request/response costs
  tens of milliseconds instead of about one. (The broker's side needs the same:
  Mosquitto's ``set_tcp_nodelay true``.)
- The incoming queue is unbounded. aiomqtt discards a message when a bounded
  queue is full, and by then paho has already acknowledged it to the broker,
  so a bound would lose QoS 1 messages silently. MQTT gives no way to push
  back on the broker short of not reading the socket, so the queue absorbs
  bursts and the consumer (one actor's drain loop) is what must keep up.
- No automatic reconnection. A lost connection ends ``deliveries()`` and every
  pending call with :class:`~broker.bus.BusError`; the actor's supervisor
  opens the bus again (a ``MqttBus`` is reusable, not reentrant). With
  ``clean_session=False`` and the same client id, the broker keeps the
  subscriptions and queues QoS 1 messages while the client is away.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, Self
from urllib.parse import urlsplit

import aiomqtt
import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from broker.bus import BusError, Delivery, Will

MqttProtocol = Literal["3.1.1", "5"]
_PROTOCOLS: dict[str, aiomqtt.ProtocolVersion] = {
    "3.1.1": aiomqtt.ProtocolVersion.V311,
    "5": aiomqtt.ProtocolVersion.V5,
}
_NODELAY = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
_MAX_PENDING = 1000  # publishes and subscribes awaiting their ack, per connection
_SESSION_NEVER_EXPIRES = 0xFFFFFFFF  # MQTT 5's Session Expiry Interval "never"


@dataclass(frozen=True, slots=True)
class MqttSettings:
    """Where the broker is and how to talk to it.

    ``keepalive`` (seconds) bounds how long a silent, half-open connection
    goes unnoticed: the broker publishes the will after 1.5 times it (a killed
    process is noticed at once, its socket closes). ``connect_timeout`` bounds
    the wait for the broker's CONNACK, ``ack_timeout`` the wait for a PUBACK or
    SUBACK.
    """

    host: str = "127.0.0.1"
    port: int = 1883
    protocol: MqttProtocol = "3.1.1"
    keepalive: int = 15
    connect_timeout: float = 10.0
    ack_timeout: float = 10.0

    def __post_init__(self) -> None:
        if not self.host:
            raise ValueError("MQTT host is empty")
        if not 0 < self.port < 65536:
            raise ValueError(f"MQTT port {self.port} is not in 1..65535")
        if self.protocol not in _PROTOCOLS:
            raise ValueError(f"MQTT protocol {self.protocol!r} is not one of 3.1.1, 5")
        if not 1 <= self.keepalive <= 65535:
            raise ValueError(f"MQTT keepalive {self.keepalive} s is not in 1..65535")
        if self.connect_timeout <= 0 or self.ack_timeout <= 0:
            raise ValueError("MQTT timeouts must be positive")

    @classmethod
    def from_url(cls, url: str, *, protocol: MqttProtocol = "3.1.1") -> MqttSettings:
        """``mqtt://host[:port]`` (port 1883 by default); nothing else is accepted."""
        parts = urlsplit(url)
        if parts.scheme != "mqtt":
            raise ValueError(f"{url!r}: expected mqtt://host[:port]")
        if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
            raise ValueError(f"{url!r}: expected mqtt://host[:port], nothing more")
        try:
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"{url!r}: bad port") from exc
        if not parts.hostname:
            raise ValueError(f"{url!r}: no host")
        return cls(host=parts.hostname, port=1883 if port is None else port, protocol=protocol)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"mqtt://{host}:{self.port}"


class MqttBus:
    """One connection to an MQTT broker, implementing :class:`broker.bus.Bus`."""

    def __init__(
        self,
        settings: MqttSettings,
        client_id: str,
        *,
        will: Will | None = None,
        clean_session: bool = True,
    ) -> None:
        if not client_id:
            raise ValueError("an MQTT client id is required (sessions and takeover use it)")
        self._settings = settings
        self._client_id = client_id
        self._will = will
        self._clean_session = clean_session
        self._client: aiomqtt.Client | None = None

    @property
    def client_id(self) -> str:
        return self._client_id

    @property
    def settings(self) -> MqttSettings:
        return self._settings

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
        return aiomqtt.Client(
            s.host,
            s.port,
            identifier=self._client_id,
            protocol=_PROTOCOLS[s.protocol],
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

    async def __aenter__(self) -> Self:
        if self._client is not None:
            raise BusError(f"MQTT client {self._client_id!r} is already connected")
        client = self._new_client()
        # aiomqtt logs a warning per call past this many awaiting their ack (10 by
        # default; an actor fanning commands out has more). Calls are bounded to
        # _MAX_PENDING by a semaphore, so this never fires.
        client.pending_calls_threshold = _MAX_PENDING
        try:
            await client.__aenter__()
        except aiomqtt.MqttError as exc:
            raise BusError(
                f"cannot connect to {self._where()} as {self._client_id!r}: {exc}"
            ) from exc
        self._client = client
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        try:
            await client.__aexit__(exc_type, exc, tb)
        except aiomqtt.MqttError as err:
            raise BusError(f"unclean disconnect from {self._where()}: {err}") from err

    def _connected(self) -> aiomqtt.Client:
        if self._client is None:
            raise BusError(f"MQTT client {self._client_id!r} is not connected")
        return self._client

    async def publish(
        self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False
    ) -> None:
        client = self._connected()
        try:
            await client.publish(
                topic, payload, qos=qos, retain=retain, timeout=self._settings.ack_timeout
            )
        except aiomqtt.MqttError as exc:
            raise BusError(f"publish to {topic!r} on {self._where()} failed: {exc}") from exc

    async def subscribe(self, pattern: str, *, qos: int = 1) -> None:
        client = self._connected()
        try:
            granted = await client.subscribe(pattern, qos=qos, timeout=self._settings.ack_timeout)
        except aiomqtt.MqttError as exc:
            raise BusError(f"subscribe to {pattern!r} on {self._where()} failed: {exc}") from exc
        for code in granted:
            value = code if isinstance(code, int) else code.value
            if value >= 0x80:
                raise BusError(f"{self._where()} refused the subscription to {pattern!r}: {code}")

    async def deliveries(self) -> AsyncIterator[Delivery]:
        """Every message on the subscribed filters, in arrival order.

        Ends when this bus is closed; raises :class:`BusError` when the
        connection is lost.
        """
        client = self._connected()
        try:
            async for message in client.messages:
                yield Delivery(str(message.topic), bytes(message.payload), message.retain)
        except aiomqtt.MqttError as exc:
            if self._client is not client:
                return  # closed by __aexit__, not lost
            raise BusError(f"connection to {self._where()} lost: {exc}") from exc
