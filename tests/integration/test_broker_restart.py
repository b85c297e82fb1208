"""The MQTT bus across a broker SIGKILL and restart on the same port.

Every test here has a Mosquitto of its own (``private_mosquitto``), since it
kills it; the shared session broker is never touched. What is asserted is the
contract of ``broker.mqtt``'s docstring: deliveries go on from the same
iterator, subscriptions are made again, a publish made during the outage
waits for the connection and arrives after it, and a publish waits at most
``publish_timeout``.
"""

from __future__ import annotations

import asyncio
import time
from uuid import uuid4

import pytest

from broker.bus import BusError
from broker.mqtt import MqttBus, MqttSettings
from tests.broker.scenarios import Inbox
from tests.brokers import MosquittoProcess

pytestmark = pytest.mark.integration


def _settings(broker: MosquittoProcess, **kwargs: float) -> MqttSettings:
    # A short keepalive is not needed: a killed broker closes the sockets at once.
    return MqttSettings(broker.host, broker.port, **kwargs)  # type: ignore[arg-type]


async def test_a_subscriber_keeps_receiving_across_a_broker_restart(
    private_mosquitto: MosquittoProcess,
) -> None:
    settings = _settings(private_mosquitto)
    p = f"r-{uuid4().hex[:8]}"
    async with (
        MqttBus(settings, f"{p}-sub", clean_session=False) as sub,
        Inbox(sub) as box,
        MqttBus(settings, f"{p}-pub") as pub,
    ):
        await sub.subscribe(f"{p}/x")
        await pub.publish(f"{p}/x", b"before")
        assert (await box.next()).payload == b"before"

        private_mosquitto.kill()
        async with asyncio.timeout(10):
            await sub.wait_disconnected()
            await pub.wait_disconnected()
        assert sub.disconnected_since is not None
        # Made during the outage: waits for a connection instead of failing.
        during = asyncio.create_task(pub.publish(f"{p}/x", b"during"), name="test-publish")
        await asyncio.sleep(0)
        assert not during.done()

        restarted = time.monotonic()
        assert await asyncio.to_thread(private_mosquitto.start)
        async with asyncio.timeout(10):
            await sub.wait_connected()
        back_after = time.monotonic() - restarted
        await during
        # The subscriber subscribed again, but the publisher may have been back first
        # (this broker keeps no sessions across its restart), so publish once more.
        await pub.publish(f"{p}/x", b"after")
        got = [(await box.next()).payload for _ in range(1)]
        while got[-1] != b"after":
            got.append((await box.next()).payload)
        assert got[-1] == b"after"
        assert set(got) <= {b"during", b"after"}
        assert sub.reconnects == 1
        assert sub.disconnected_since is None
        print(f"subscriber reconnected {back_after:.3f} s after the broker started")


async def test_a_publish_during_the_outage_arrives_after_it(
    private_mosquitto: MosquittoProcess,
) -> None:
    """One bus publishing to its own subscription: resubscribed before it publishes again."""
    settings = _settings(private_mosquitto)
    p = f"r-{uuid4().hex[:8]}"
    async with MqttBus(settings, f"{p}-self") as bus, Inbox(bus) as box:
        await bus.subscribe(f"{p}/#")
        private_mosquitto.kill()
        async with asyncio.timeout(10):
            await bus.wait_disconnected()
        sent = [
            asyncio.create_task(bus.publish(f"{p}/seq", str(i).encode()), name=f"test-pub-{i}")
            for i in range(20)
        ]
        assert await asyncio.to_thread(private_mosquitto.start)
        await asyncio.gather(*sent)
        got: list[bytes] = []
        while len(set(got)) < 20:
            got.append((await box.next()).payload)
        # Each arrives at least once; the first arrivals keep the order of the calls.
        first = list(dict.fromkeys(got))
        assert first == [str(i).encode() for i in range(20)]


async def test_ordered_stream_across_a_restart_loses_nothing_published_after_it(
    private_mosquitto: MosquittoProcess,
) -> None:
    """A stream of QoS 1 publishes through a kill and restart: order of first arrivals kept."""
    settings = _settings(private_mosquitto)
    p = f"r-{uuid4().hex[:8]}"
    n = 300
    async with MqttBus(settings, f"{p}-self") as bus, Inbox(bus) as box:
        await bus.subscribe(f"{p}/seq")

        async def restart() -> None:
            await bus.wait_disconnected()
            assert await asyncio.to_thread(private_mosquitto.start)

        restarting: asyncio.Task[None] | None = None
        for i in range(n):
            await bus.publish(f"{p}/seq", str(i).encode())
            if i == n // 3:
                private_mosquitto.kill()  # mid-stream
                restarting = asyncio.create_task(restart(), name="test-restart")
        assert restarting is not None
        await restarting
        got: list[int] = []
        while not got or got[-1] != n - 1:
            got.append(int((await box.next()).payload))
        first = list(dict.fromkeys(got))
        assert first == sorted(first)  # never out of order
        # What the dead broker held may be gone; everything published after it is not.
        assert set(range(n // 3 + 1, n)) <= set(first)


async def test_publish_gives_up_after_publish_timeout(
    private_mosquitto: MosquittoProcess,
) -> None:
    settings = _settings(private_mosquitto, publish_timeout=0.3)
    async with MqttBus(settings, f"r-{uuid4().hex[:8]}") as bus:
        private_mosquitto.kill()
        async with asyncio.timeout(10):
            await bus.wait_disconnected()
        with pytest.raises(BusError, match=r"no connection for 0\.3 s"):
            await bus.publish("x/y", b"nobody")
        with pytest.raises(BusError, match=r"no connection for 0\.3 s"):
            await bus.subscribe("x/#")


async def test_on_reconnect_restores_what_the_broker_forgot(
    private_mosquitto: MosquittoProcess,
) -> None:
    """A restarted broker without persistence lost the retained state: the hook republishes it."""
    settings = _settings(private_mosquitto)
    p = f"r-{uuid4().hex[:8]}"
    state = f"{p}/agents/a1/state"

    async def announce() -> None:
        await agent.publish(state, b"online", retain=True)

    agent = MqttBus(settings, f"{p}-agent", on_reconnect=announce)
    async with agent:
        await announce()
        private_mosquitto.kill()
        async with asyncio.timeout(10):
            await agent.wait_disconnected()
        assert await asyncio.to_thread(private_mosquitto.start)
        async with asyncio.timeout(10):
            await agent.wait_connected()
        async with MqttBus(settings, f"{p}-watch") as watch, Inbox(watch) as box:
            await watch.subscribe(state)
            delivery = await box.next()
    assert (delivery.payload, delivery.retain) == (b"online", True)
