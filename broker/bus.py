"""The small transport interface every actor talks through.

A bus is one client connection: it publishes payloads (QoS 0 or 1, retained
or not), subscribes to topic filters and yields what arrives, in order, from
one async iterator. Two implementations: ``broker.memory`` (in-process; tests
and single-process tools) and ``broker.mqtt`` (aiomqtt on a real broker). An
actor gets a bus, never a client library.

A connection may carry a *will*: published by the broker, not the client,
when the connection dies without a clean close (MQTT's Last Will). Agents use
it so the scheduler notices a killed agent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from broker.limits import MAX_MESSAGE_BYTES


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message as received."""

    topic: str
    payload: bytes
    retain: bool = False


@dataclass(frozen=True, slots=True)
class Will:
    """What the broker publishes if the connection is lost."""

    topic: str
    payload: bytes
    retain: bool = True


class BusError(ConnectionError):
    """The transport failed (broker unreachable, connection lost)."""


class MessageTooLargeError(BusError):
    """A message past the wire's limit (``broker.limits``), refused before it was sent."""


def check_size(topic: str, payload: bytes) -> None:
    """Refuse ``payload`` if no broker of ours would take it (one line, the limit named).

    Every bus calls it before sending: the broker would drop the message unseen,
    and the sender would wait for an answer that cannot come.
    """
    if len(payload) > MAX_MESSAGE_BYTES:
        raise MessageTooLargeError(
            f"a message of {len(payload):,} bytes to {topic!r} is over the broker's limit of "
            f"{MAX_MESSAGE_BYTES:,} bytes (message_size_limit); send less at a time"
        )


class Bus(Protocol):
    """One connected client."""

    @property
    def client_id(self) -> str: ...

    async def publish(
        self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False
    ) -> None: ...

    async def subscribe(self, pattern: str, *, qos: int = 1) -> None: ...

    def deliveries(self) -> AsyncIterator[Delivery]:
        """Every delivery on the subscribed filters, in arrival order; one consumer."""
        ...
