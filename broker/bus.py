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
