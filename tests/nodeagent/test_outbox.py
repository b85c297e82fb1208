"""The agent's outbox: order per topic, no waiting for the poster, failures end the agent."""

from __future__ import annotations

import asyncio

import pytest

from broker.bus import BusError
from nodeagent.agent.outbox import Outbox
from nodeagent.agent.tasks import Tasks
from tests.nodeagent.harness import HANG


class SlowBus:
    """A bus whose publishes wait until the test lets each topic's next one through."""

    client_id = "slow"

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bool]] = []
        self.gates: dict[str, asyncio.Semaphore] = {}
        self.fail: set[str] = set()

    def gate(self, topic: str) -> asyncio.Semaphore:
        return self.gates.setdefault(topic, asyncio.Semaphore(0))

    async def publish(
        self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False
    ) -> None:
        await self.gate(topic).acquire()
        if topic in self.fail:
            raise BusError("the broker stayed away")
        self.sent.append((topic, payload, retain))


async def test_posts_return_at_once_and_each_topic_keeps_its_order() -> None:
    bus = SlowBus()
    tasks = Tasks("t")
    outbox = Outbox(bus, tasks)  # type: ignore[arg-type]
    async with asyncio.timeout(HANG), tasks.running():
        a = [outbox.post("a", bytes([i])) for i in range(3)]
        b = outbox.post("b", b"x", retain=True)
        assert outbox.pending == 4  # nothing published yet, and nobody waited
        # Topic b goes through while topic a is held: topics do not wait for each other.
        bus.gate("b").release()
        await b
        assert bus.sent == [("b", b"x", True)]
        assert not any(f.done() for f in a)
        for _ in range(3):
            bus.gate("a").release()
        await asyncio.gather(*a)
    assert [p for t, p, _ in bus.sent if t == "a"] == [b"\x00", b"\x01", b"\x02"]
    assert outbox.published == 4
    assert outbox.pending == 0


async def test_a_post_after_its_topic_drained_starts_a_new_writer() -> None:
    bus = SlowBus()
    tasks = Tasks("t")
    outbox = Outbox(bus, tasks)  # type: ignore[arg-type]
    async with asyncio.timeout(HANG), tasks.running():
        bus.gate("a").release()
        await outbox.post("a", b"1")
        bus.gate("a").release()
        await outbox.post("a", b"2")
    assert [p for _, p, _ in bus.sent] == [b"1", b"2"]


async def test_a_failed_publish_fails_the_waiting_posts_and_ends_the_group() -> None:
    bus = SlowBus()
    bus.fail.add("a")
    tasks = Tasks("t")
    outbox = Outbox(bus, tasks)  # type: ignore[arg-type]
    posted: list[asyncio.Future[None]] = []

    async def post_and_fail() -> None:
        async with asyncio.timeout(HANG), tasks.running():
            posted.extend((outbox.post("a", b"1"), outbox.post("a", b"2")))
            bus.gate("a").release()

    with pytest.raises(ExceptionGroup) as caught:
        await post_and_fail()
    assert caught.group_contains(BusError)
    first, second = posted
    assert isinstance(first.exception(), BusError)
    assert isinstance(second.exception(), BusError)
    assert bus.sent == []


async def test_posting_needs_a_task_group() -> None:
    outbox = Outbox(SlowBus(), Tasks("t"))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="run"):
        outbox.post("a", b"1")
