"""Behaviours every bus must have, written once, run over each implementation.

Each scenario takes a ``connect(client_id, will=None)`` returning an unopened
bus (an async context manager) and a topic ``prefix`` unique to the test, so
tests can share one real broker and its retained messages. Waits go through an
:class:`Inbox`: a named task drains ``deliveries()`` into a queue, so a wait can
time out without closing the bus's async generator (cancelling ``__anext__``
would end it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Protocol, Self

import pytest

from broker.bus import Bus, BusError, Delivery, Will

LATENCIES = pytest.StashKey[list[str]]()
"""Round trips measured by test_mqtt_bus, shown at the end of the run (conftest.py).

Here, not in conftest.py: pytest imports conftest modules under a name of its own,
so a key defined there and imported by a test module would be a different key.
"""

WAIT = 10.0  # seconds: generous, a wait only times out when something is wrong


class OpenBus(Bus, Protocol):
    """A bus that is also its own async context manager (MemoryBus, MqttBus)."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class Connect(Protocol):
    def __call__(self, client_id: str, *, will: Will | None = None) -> OpenBus: ...


class Inbox:
    """What a bus receives, drained by a task named after the client."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._queue: asyncio.Queue[Delivery | BaseException] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.ended = asyncio.Event()

    async def _drain(self) -> None:
        try:
            async for delivery in self._bus.deliveries():
                await self._queue.put(delivery)
        except BusError as exc:
            await self._queue.put(exc)
        finally:
            self.ended.set()

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._drain(), name=f"inbox-{self._bus.client_id}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def next(self, timeout: float = WAIT) -> Delivery:
        async with asyncio.timeout(timeout):
            item = await self._queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    async def error(self, timeout: float = WAIT) -> BusError:
        """The BusError that ended the deliveries (skipping messages before it)."""
        async with asyncio.timeout(timeout):
            while True:
                item = await self._queue.get()
                if isinstance(item, BusError):
                    return item

    def pending(self) -> int:
        return self._queue.qsize()


async def next_on(inbox: Inbox, topic: str) -> Delivery:
    """The first delivery on ``topic``, checking nothing else came before it."""
    delivery = await inbox.next()
    assert delivery.topic == topic, f"expected a message on {topic}, got {delivery}"
    return delivery


async def publish_subscribe(connect: Connect, prefix: str) -> None:
    async with connect(f"{prefix}-sub") as sub, connect(f"{prefix}-pub") as pub, Inbox(sub) as box:
        await sub.subscribe(f"{prefix}/a")
        await pub.publish(f"{prefix}/b", b"not subscribed")
        await pub.publish(f"{prefix}/a", b"one", qos=1)
        await pub.publish(f"{prefix}/a", b"two", qos=0)
        assert await box.next() == Delivery(f"{prefix}/a", b"one", False)
        assert await box.next() == Delivery(f"{prefix}/a", b"two", False)


async def self_delivery(connect: Connect, prefix: str) -> None:
    """A client subscribed to its own topic receives what it publishes (MQTT 3.1.1)."""
    async with connect(f"{prefix}-c") as bus, Inbox(bus) as box:
        await bus.subscribe(f"{prefix}/echo")
        await bus.publish(f"{prefix}/echo", b"hello")
        assert await box.next() == Delivery(f"{prefix}/echo", b"hello", False)


async def wildcards(connect: Connect, prefix: str) -> None:
    async with (
        connect(f"{prefix}-plus") as plus,
        connect(f"{prefix}-hash") as hash_,
        connect(f"{prefix}-pub") as pub,
        Inbox(plus) as plus_box,
        Inbox(hash_) as hash_box,
    ):
        await plus.subscribe(f"{prefix}/agents/+/state")
        await hash_.subscribe(f"{prefix}/jobs/#")
        topics = [
            f"{prefix}/agents/n1/events",  # neither
            f"{prefix}/agents/n1/state",  # plus
            f"{prefix}/agents/n1/x/state",  # neither: + is one level
            f"{prefix}/jobs",  # hash: # matches the parent level too
            f"{prefix}/jobs/j1/control",  # hash
            f"{prefix}/agents/n2/state",  # plus
        ]
        for topic in topics:
            await pub.publish(topic, topic.encode())
        assert [(await plus_box.next()).topic for _ in range(2)] == [topics[1], topics[5]]
        assert [(await hash_box.next()).topic for _ in range(2)] == [topics[3], topics[4]]
        await pub.publish(f"{prefix}/agents/n3/state", b"sentinel")
        await pub.publish(f"{prefix}/jobs/sentinel", b"sentinel")
        await next_on(plus_box, f"{prefix}/agents/n3/state")
        await next_on(hash_box, f"{prefix}/jobs/sentinel")


async def retained(connect: Connect, prefix: str) -> None:
    state = f"{prefix}/agents/n1/state"
    async with connect(f"{prefix}-pub") as pub:
        await pub.publish(state, b"v1", retain=True)
        await pub.publish(state, b"v2", retain=True)  # replaces v1
        async with connect(f"{prefix}-late") as late, Inbox(late) as box:
            await late.subscribe(f"{prefix}/agents/+/state")
            # Replayed on subscribe, flagged retained; only the last value.
            assert await box.next() == Delivery(state, b"v2", True)
            # A live subscriber gets later retained publishes as ordinary ones.
            await pub.publish(state, b"v3", retain=True)
            assert await box.next() == Delivery(state, b"v3", False)
            # An empty retained payload clears it (and is forwarded as is).
            await pub.publish(state, b"", retain=True)
            assert await box.next() == Delivery(state, b"", False)
        async with connect(f"{prefix}-later") as later, Inbox(later) as box:
            await later.subscribe(f"{prefix}/agents/+/state")
            await pub.publish(f"{prefix}/agents/n2/state", b"sentinel")
            assert await box.next() == Delivery(f"{prefix}/agents/n2/state", b"sentinel", False)


async def order(connect: Connect, prefix: str, n: int = 300) -> None:
    """One publisher's messages arrive in the order it published them, QoS 0 and 1 mixed."""
    async with connect(f"{prefix}-sub") as sub, connect(f"{prefix}-pub") as pub, Inbox(sub) as box:
        await sub.subscribe(f"{prefix}/#")
        for i in range(n):
            await pub.publish(f"{prefix}/{i % 3}", str(i).encode(), qos=i % 2)
        assert [int((await box.next()).payload) for _ in range(n)] == list(range(n))


async def concurrent_publishes_keep_call_order(connect: Connect, prefix: str) -> None:
    """Publishes started together (one task each) go out in the order they were called."""
    n = 300
    async with connect(f"{prefix}-sub") as sub, connect(f"{prefix}-pub") as pub, Inbox(sub) as box:
        await sub.subscribe(f"{prefix}/x")
        async with asyncio.TaskGroup() as tg:
            for i in range(n):
                tg.create_task(pub.publish(f"{prefix}/x", str(i).encode()), name=f"publish-{i}")
        assert [int((await box.next()).payload) for _ in range(n)] == list(range(n))


async def clean_close_sends_no_will(connect: Connect, prefix: str) -> None:
    will = Will(f"{prefix}/agents/n1/state", b"lost", retain=False)
    async with connect(f"{prefix}-watch") as watch, Inbox(watch) as box:
        await watch.subscribe(f"{prefix}/agents/#")
        async with connect(f"{prefix}-agent", will=will) as agent:
            await agent.publish(f"{prefix}/agents/n1/state", b"online")
        await watch.publish(f"{prefix}/agents/sentinel", b"")
        assert await box.next() == Delivery(f"{prefix}/agents/n1/state", b"online", False)
        await next_on(box, f"{prefix}/agents/sentinel")


KilledClient = Callable[[str, Will], AbstractAsyncContextManager[Callable[[], Awaitable[None]]]]
"""``killed_client(client_id, will)``: a connected client; the value is its ``kill()``."""


async def will_on_unclean_death(
    connect: Connect,
    prefix: str,
    killed_client: KilledClient,
) -> None:
    """The broker publishes the will of a connection that dies without a clean close."""
    state = f"{prefix}/agents/n1/state"
    will = Will(state, b"lost", retain=True)
    async with connect(f"{prefix}-watch") as watch, Inbox(watch) as box:
        await watch.subscribe(state)
        async with killed_client(f"{prefix}-agent", will) as kill:
            await watch.publish(state, b"online", retain=True)
            assert await box.next() == Delivery(state, b"online", False)
            await kill()
            assert await box.next() == Delivery(state, b"lost", False)
    async with connect(f"{prefix}-late") as late, Inbox(late) as box:
        await late.subscribe(state)
        assert await box.next() == Delivery(state, b"lost", True)  # the will was retained
        await late.publish(state, b"", retain=True)


async def takeover_routes_to_the_new_connection(connect: Connect, prefix: str) -> None:
    async with connect(f"{prefix}-pub") as pub:
        old = connect(f"{prefix}-dup")
        async with old, Inbox(old):
            await old.subscribe(f"{prefix}/x")
            async with connect(f"{prefix}-dup") as new, Inbox(new) as new_box:
                await new.subscribe(f"{prefix}/x")
                await pub.publish(f"{prefix}/x", b"after takeover")
                assert await new_box.next() == Delivery(f"{prefix}/x", b"after takeover", False)
