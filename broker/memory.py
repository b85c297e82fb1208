"""An in-process broker: the bus for fast tests and single-process tools.

It keeps MQTT's semantics that the actors rely on: topic filters with ``+``
and ``#``, retained messages (an empty retained payload clears one) replayed
on subscribe, per-client order, Last Will on an unclean close. Each client
has a bounded inbox; a publisher waits when a subscriber's inbox is full
(backpressure instead of Mosquitto's silent drop past max_queued_messages).
A payload past the wire's limit is refused as our Mosquitto would (``broker.limits``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Self

from broker.bus import BusError, Delivery, Will, check_size
from broker.topics import matches


class MemoryBroker:
    """Routes messages between :class:`MemoryBus` clients of one event loop."""

    def __init__(self, *, inbox_size: int = 10_000) -> None:
        self._clients: dict[str, MemoryBus] = {}
        self._retained: dict[str, bytes] = {}
        self._inbox_size = inbox_size
        self.published = 0

    def client(self, client_id: str, *, will: Will | None = None) -> MemoryBus:
        return MemoryBus(self, client_id, will)

    def _attach(self, bus: MemoryBus) -> None:
        old = self._clients.get(bus.client_id)
        if old is not None:
            # MQTT: a second connection with the same id takes over the session.
            old._drop()
        self._clients[bus.client_id] = bus

    def _detach(self, bus: MemoryBus) -> None:
        if self._clients.get(bus.client_id) is bus:
            del self._clients[bus.client_id]

    async def _route(self, topic: str, payload: bytes, retain: bool) -> None:
        self.published += 1
        if retain:
            if payload:
                self._retained[topic] = payload
            else:
                self._retained.pop(topic, None)
        for bus in list(self._clients.values()):
            if any(matches(p, topic) for p in bus._patterns):
                await bus._inbox.put(Delivery(topic, payload, False))

    def _retained_for(self, pattern: str) -> list[Delivery]:
        return [Delivery(t, p, True) for t, p in self._retained.items() if matches(pattern, t)]


class MemoryBus:
    """One client of a :class:`MemoryBroker` (use as an async context manager)."""

    def __init__(self, broker: MemoryBroker, client_id: str, will: Will | None) -> None:
        self._broker = broker
        self._client_id = client_id
        self._will = will
        self._patterns: list[str] = []
        self._inbox: asyncio.Queue[Delivery] = asyncio.Queue(broker._inbox_size)
        self._connected = False

    @property
    def client_id(self) -> str:
        return self._client_id

    async def __aenter__(self) -> Self:
        self._broker._attach(self)
        self._connected = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._drop()

    def kill(self) -> asyncio.Task[None] | None:
        """Die without a clean close: the broker publishes the will (tests' SIGKILL)."""
        will = self._will
        self._drop()
        if will is None:
            return None
        return asyncio.get_running_loop().create_task(
            self._broker._route(will.topic, will.payload, will.retain), name="memory-will"
        )

    def _drop(self) -> None:
        self._connected = False
        self._broker._detach(self)

    def _check(self) -> None:
        if not self._connected:
            raise BusError(f"client {self._client_id!r} is not connected")

    async def publish(
        self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False
    ) -> None:
        self._check()
        check_size(topic, payload)  # as every broker we configure (broker.limits)
        await self._broker._route(topic, payload, retain)

    async def subscribe(self, pattern: str, *, qos: int = 1) -> None:
        self._check()
        self._patterns.append(pattern)
        for delivery in self._broker._retained_for(pattern):
            await self._inbox.put(delivery)

    async def deliveries(self) -> AsyncIterator[Delivery]:
        while True:
            yield await self._inbox.get()
