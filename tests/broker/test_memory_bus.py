"""The in-process bus keeps the MQTT semantics the actors rely on (on asyncio and uvloop)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from broker.bus import Bus, BusError, Delivery, Will
from broker.memory import MemoryBroker, MemoryBus
from tests.broker import scenarios

PREFIX = "test"


@pytest.fixture
def broker() -> MemoryBroker:
    return MemoryBroker()


@pytest.fixture
def connect(broker: MemoryBroker) -> scenarios.Connect:
    def connect(client_id: str, *, will: Will | None = None) -> MemoryBus:
        return broker.client(client_id, will=will)

    return connect


def test_memory_bus_is_a_bus(broker: MemoryBroker) -> None:
    bus: Bus = broker.client("c")
    assert bus.client_id == "c"


async def test_publish_subscribe(connect: scenarios.Connect) -> None:
    await scenarios.publish_subscribe(connect, PREFIX)


async def test_a_client_receives_its_own_messages(connect: scenarios.Connect) -> None:
    await scenarios.self_delivery(connect, PREFIX)


async def test_wildcard_routing(connect: scenarios.Connect) -> None:
    await scenarios.wildcards(connect, PREFIX)


async def test_retained_replay_and_clearing(connect: scenarios.Connect) -> None:
    await scenarios.retained(connect, PREFIX)


async def test_per_client_order(connect: scenarios.Connect) -> None:
    await scenarios.order(connect, PREFIX)


async def test_concurrent_publishes_keep_call_order(connect: scenarios.Connect) -> None:
    await scenarios.concurrent_publishes_keep_call_order(connect, PREFIX)


async def test_clean_close_sends_no_will(connect: scenarios.Connect) -> None:
    await scenarios.clean_close_sends_no_will(connect, PREFIX)


async def test_last_will_on_kill(connect: scenarios.Connect, broker: MemoryBroker) -> None:
    @asynccontextmanager
    async def killed_client(
        client_id: str, will: Will
    ) -> AsyncIterator[Callable[[], Awaitable[None]]]:
        async with broker.client(client_id, will=will) as bus:

            async def kill() -> None:
                task = bus.kill()
                assert task is not None
                await task

            yield kill

    await scenarios.will_on_unclean_death(connect, PREFIX, killed_client)


async def test_kill_without_a_will_publishes_nothing(broker: MemoryBroker) -> None:
    async with broker.client("c") as bus:
        assert bus.kill() is None
    assert broker.published == 0


async def test_takeover_by_the_same_client_id(connect: scenarios.Connect) -> None:
    await scenarios.takeover_routes_to_the_new_connection(connect, PREFIX)


async def test_taken_over_connection_cannot_publish(broker: MemoryBroker) -> None:
    async with broker.client("dup") as old, broker.client("dup"):
        with pytest.raises(BusError, match="'dup' is not connected"):
            await old.publish("t", b"x")
        with pytest.raises(BusError, match="not connected"):
            await old.subscribe("t")


async def test_closed_bus_refuses_calls(broker: MemoryBroker) -> None:
    bus = broker.client("c")
    with pytest.raises(BusError):
        await bus.publish("t", b"x")
    async with bus:
        await bus.publish("t", b"x")
    with pytest.raises(BusError):
        await bus.publish("t", b"x")


async def every_ready_task_runs() -> None:
    """Return once every task that can run without waiting on something has run.

    The in-process broker routes a message with no timer and no I/O, so a publish
    that is not held back finishes within a few turns of the loop; a hundred turns
    are that many times over, and take no time at all (nothing here sleeps).
    """
    for _ in range(100):
        await asyncio.sleep(0)


async def test_full_inbox_makes_the_publisher_wait() -> None:
    """Backpressure: a slow subscriber holds the publisher back instead of losing messages."""
    broker = MemoryBroker(inbox_size=2)
    async with broker.client("slow") as slow, broker.client("pub") as pub:
        await slow.subscribe("t")
        await pub.publish("t", b"1")
        await pub.publish("t", b"2")
        third = asyncio.create_task(pub.publish("t", b"3"), name="third-publish")
        await every_ready_task_runs()
        assert not third.done(), "the publish went on past a full inbox"
        deliveries = slow.deliveries()
        first = await anext(deliveries)  # one slot frees...
        async with asyncio.timeout(5):  # bounds a hang, times nothing
            await third  # ...and the held publish goes on
        got = [first, await anext(deliveries), await anext(deliveries)]
        assert [d.payload for d in got] == [b"1", b"2", b"3"]
        assert got[0] == Delivery("t", b"1", False)


async def test_async_tests_run_on_the_named_loop(request: pytest.FixtureRequest) -> None:
    loop_module = type(asyncio.get_running_loop()).__module__
    assert loop_module.startswith("uvloop") == request.node.name.endswith("[uvloop]")
