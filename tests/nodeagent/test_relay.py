"""The agent's relay: job processes on the agent's one connection, each fenced to its own topics.

Over the in-process memory broker. A real forked job runs through
:class:`RelaySpawn`; the hostile tests play the job process themselves on a
socket pair and count what leaks (must be nothing) and what is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest

from broker.bus import BusError, Delivery
from broker.codec import decode, encode
from broker.memory import MemoryBroker, MemoryBus
from broker.messages import CancelPart, PartFinished, PartProgress
from broker.topics import Topics
from nodeagent.launch.contract import EXIT_CANCELLED, EXIT_DONE, Launch
from nodeagent.launch.forkserver import ForkServer
from nodeagent.launch.frames import DELIVER, PUBLISH, SUBSCRIBE, Frame, PipeError, read_frame
from nodeagent.launch.relay import Relay, RelaySpawn, _Session, pipe_streams
from tests.nodeagent.harness import HANG

T = Topics()
AGENT = "a1"


def launch(job_id: str, *, attempt: int = 1, work: float = 3600.0) -> Launch:
    return Launch(agent=AGENT, job_id=job_id, procs=1, cpus=1, pace=1.0, work=work, attempt=attempt)


@dataclass
class World:
    broker: MemoryBroker
    relay: Relay
    observer: MemoryBus
    seen: list[Delivery]

    async def observed(self, topic: str) -> Delivery:
        """The next message the observer (subscribed to everything) sees on ``topic``."""
        while True:
            for delivery in self.seen:
                if delivery.topic == topic:
                    self.seen.remove(delivery)
                    return delivery
            await asyncio.sleep(0)  # the memory broker delivers in this loop


@asynccontextmanager
async def world() -> AsyncIterator[World]:
    broker = MemoryBroker()
    async with broker.client(f"agent-{AGENT}") as bus, broker.client("observer") as observer:
        await observer.subscribe("#")
        relay = Relay(bus, T, AGENT)
        seen: list[Delivery] = []

        async def watch() -> None:
            async for delivery in observer.deliveries():
                seen.append(delivery)

        async with asyncio.TaskGroup() as tg:
            pump = tg.create_task(relay.pump(), name="test-relay-pump")
            watcher = tg.create_task(watch(), name="test-relay-observer")
            try:
                yield World(broker, relay, observer, seen)
            finally:
                pump.cancel()
                watcher.cancel()


@dataclass
class FakeJob:
    """The test as a job process: frames in, frames out, on a socket pair."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    async def send(self, frame: Frame) -> None:
        self.writer.write(frame.pack())
        await self.writer.drain()

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def delivery(self) -> Frame:
        frame = await read_frame(self.reader)
        assert frame is not None
        assert frame.op == DELIVER
        return frame


@asynccontextmanager
async def served(
    w: World, job: Launch
) -> AsyncIterator[tuple[FakeJob, asyncio.Task[BusError | None]]]:
    """The relay serving ``job`` in a task, which returns the error that ended it."""
    ours, theirs = socket.socketpair()
    relay_reader, relay_writer = await asyncio.open_unix_connection(sock=ours)
    job_reader, job_writer = await asyncio.open_unix_connection(sock=theirs)

    async def serve() -> BusError | None:
        try:
            await w.relay.serve(job, relay_reader, relay_writer)
        except BusError as exc:  # PipeError included
            return exc
        return None

    async with asyncio.TaskGroup() as tg:
        serving = tg.create_task(serve(), name="test-relay-serve")
        try:
            yield FakeJob(job_reader, job_writer), serving
        finally:
            job_writer.close()
            if not serving.done():
                await asyncio.wait({serving})
            relay_writer.close()


def progress(job_id: str, *, agent: str = AGENT, attempt: int = 1) -> bytes:
    return encode(
        PartProgress(job_id=job_id, agent_id=agent, done=1.0, rate=1.0, at=1.0, attempt=attempt)
    )


async def test_a_forked_job_is_relayed_both_ways() -> None:
    async with world() as w, ForkServer() as server:
        process = await RelaySpawn(server, w.relay)(launch("real"))
        assert server.stats.launches == 1  # its launch latency was observed
        async with asyncio.TaskGroup() as tg:
            waiting = tg.create_task(process.wait(), name="test-relay-wait")
            first = decode((await w.observed(T.agent_events(AGENT))).payload)
            assert isinstance(first, PartProgress)
            assert first.job_id == "real"
            # The job is subscribed (its first report says so): a cancel reaches it.
            cancel = CancelPart(job_id="real", attempt=1)
            await w.observer.publish(T.job_control("real"), encode(cancel))
        assert waiting.result() == EXIT_CANCELLED
        assert w.relay.stats.published + w.relay.stats.coalesced >= 2
        assert w.relay.stats.delivered == 1
        assert w.relay.stats.forged_publish == w.relay.stats.forged_subscribe == 0


async def test_a_forked_jobs_work_ends_where_its_account_says_not_at_its_exit() -> None:
    """The run an agent reports (``nodeagent.agent.runs``) is the fork to the work's end, which
    the relay keeps from the job's last report: 50 units at 1000x is 50 ms after the
    fork, exactly, however long the process took to start or to tear down."""
    async with world() as w, ForkServer() as server:
        the_launch = Launch(
            agent=AGENT,
            job_id="timed",
            procs=1,
            cpus=1,
            pace=1.0,
            work=50.0,
            time_scale=1000.0,
            start_at=time.time(),
        )
        process = await RelaySpawn(server, w.relay)(the_launch)
        assert await process.wait() == EXIT_DONE
        done = process.work_done.at
        assert done is not None
        # (Within 0.1 ms: the job reads its wall and monotonic clocks a few µs apart.)
        assert done - process.started_at == pytest.approx(0.05, abs=1e-4)
        # The process itself lived longer: its exit (reaped) came after that end.
        assert process.exited_mono is not None
        assert process.exited_mono - process.started_mono >= done - process.started_at


async def test_a_job_reaches_only_its_own_topics() -> None:
    job = launch("mine", attempt=2)
    own = f"{T.root}/jobs/mine"
    forged_publishes = [
        Frame(PUBLISH, T.job_control("other"), b"x"),
        Frame(PUBLISH, own, b"the subtree's parent level is not inside it"),
        Frame(PUBLISH, f"{T.root}/jobs/mine2/control", b"a longer id sharing the prefix"),
        Frame(PUBLISH, T.agent_commands(AGENT), b"x"),
        Frame(PUBLISH, T.agent_state(AGENT), b"x"),
        Frame(PUBLISH, T.requests, b"x"),
        Frame(PUBLISH, f"{own}/#", b"wildcards are no topic"),
        Frame(PUBLISH, T.agent_events(AGENT), progress("other", attempt=2)),
        Frame(PUBLISH, T.agent_events(AGENT), progress("mine", attempt=1)),
        Frame(PUBLISH, T.agent_events(AGENT), progress("mine", agent="a2", attempt=2)),
        Frame(PUBLISH, T.agent_events(AGENT), progress("mine", attempt=2), retain=True),
        Frame(
            PUBLISH,
            T.agent_events(AGENT),
            encode(
                PartFinished(
                    job_id="mine", agent_id=AGENT, exit_code=0, at=1.0, attempt=2, reason="done"
                )
            ),
        ),
        Frame(PUBLISH, T.agent_events(AGENT), b"\xa1\xff"),
        Frame(PUBLISH, T.agent_events("a2"), progress("mine", agent="a2", attempt=2)),
    ]
    forged_subscriptions = [
        "#",
        f"{T.root}/jobs/+/control",
        own,
        f"{own}2/#",
        T.agent_commands(AGENT),
    ]
    async with world() as w, served(w, job) as (fake, serving):
        for frame in forged_publishes:
            await fake.send(frame)
        for pattern in forged_subscriptions:
            await fake.send(Frame(SUBSCRIBE, pattern))
        # What it may do, sent last: once it is seen, everything before was handled.
        await fake.send(Frame(SUBSCRIBE, f"{own}/#"))
        await fake.send(Frame(PUBLISH, f"{own}/ranks/0", b"rank 0"))
        await fake.send(Frame(PUBLISH, T.agent_events(AGENT), progress("mine", attempt=2)))
        assert (await w.observed(f"{own}/ranks/0")).payload == b"rank 0"
        assert (await w.observed(T.agent_events(AGENT))).payload == progress("mine", attempt=2)
        assert w.seen == []  # nothing forged reached the broker
        assert w.relay.stats.forged_publish == len(forged_publishes)
        assert w.relay.stats.forged_subscribe == len(forged_subscriptions)
        # Deliveries: its own subtree's only, not another job's, not the agent's.
        await w.observer.publish(T.job_control("other"), b"not yours")
        await w.observer.publish(T.agent_commands(AGENT), b"not yours either")
        await w.observer.publish(T.job_control("mine"), b"yours")
        echo = await fake.delivery()  # its own publish, as MQTT delivers to '#'
        assert (echo.topic, echo.payload) == (f"{own}/ranks/0", b"rank 0")
        frame = await fake.delivery()
        assert (frame.topic, frame.payload) == (T.job_control("mine"), b"yours")
        assert not serving.done()  # forged frames are dropped, the job goes on


async def test_a_malformed_frame_ends_that_job_only() -> None:
    async with world() as w:
        agent_bus = w.relay.agent_bus
        await agent_bus.subscribe(T.agent_commands(AGENT))
        async with (
            served(w, launch("good")) as (good, _),
            served(w, launch("bad")) as (bad, serving),
        ):
            await good.send(Frame(SUBSCRIBE, T.job_control("good")))
            await bad.send_raw(b"Z\x00\x00\x01\x00\x00\x00\x00?")
            assert isinstance(await serving, PipeError)
            assert w.relay.stats.bad_frames == 1
            # The agent and the other job are untouched.
            await w.observer.publish(T.agent_commands(AGENT), b"command")
            deliveries = agent_bus.deliveries()
            assert (await anext(deliveries)).payload == b"command"
            await w.observer.publish(T.job_control("good"), b"control")
            assert (await good.delivery()).payload == b"control"
            await agent_bus.publish(T.agent_events(AGENT), b"agent")
            assert (await w.observed(T.agent_events(AGENT))).payload == b"agent"


async def test_a_job_that_does_not_read_costs_only_itself() -> None:
    async with world() as w, served(w, launch("deaf")) as (deaf, _):
        await w.relay.agent_bus.subscribe(T.agent_commands(AGENT))
        await deaf.send(Frame(SUBSCRIBE, T.job_control("deaf")))
        await deaf.send(Frame(PUBLISH, f"{T.root}/jobs/deaf/up", b""))
        await w.observed(f"{T.root}/jobs/deaf/up")
        big = b"x" * 65536
        for _ in range(400):  # far beyond the socket's buffer and the job's queue
            await w.observer.publish(T.job_control("deaf"), big)
        await w.observer.publish(T.agent_commands(AGENT), b"still served")
        assert (await anext(w.relay.agent_bus.deliveries())).payload == b"still served"
        assert w.relay.stats.overflow > 0


async def test_periodic_progress_is_thinned_but_never_its_news() -> None:
    job = launch("chatty", work=100.0)

    def report(done: float, rate: float) -> Frame:
        message = PartProgress(
            job_id="chatty", agent_id=AGENT, done=done, rate=rate, at=1.0, attempt=1
        )
        return Frame(PUBLISH, T.agent_events(AGENT), encode(message))

    sent = [report(0.0, 1.0), report(1.0, 1.0), report(2.0, 1.0), report(3.0, 0.5)]
    sent += [report(4.0, 0.5), report(100.0, 0.5)]
    async with world() as w, served(w, job) as (fake, _):
        for frame in sent:
            await fake.send(frame)
        # Forwarded: the first (readiness), the rate change (a resize), the last (done).
        for done in (0.0, 3.0, 100.0):
            message = decode((await w.observed(T.agent_events(AGENT))).payload)
            assert isinstance(message, PartProgress)
            assert message.done == done
        assert w.relay.stats.coalesced == 3
        assert w.relay.stats.forged_publish == 0


async def test_a_delivery_to_a_job_that_just_exited_is_dropped_not_raised() -> None:
    """Seen in the demo: a resize relayed as its job ended. uvloop raises RuntimeError
    writing to the broken pipe (not ConnectionError), which ended the agent; the
    relay's writer now stops quietly, as for any job that is gone."""
    up_r, up_w = os.pipe2(os.O_CLOEXEC)
    down_r, down_w = os.pipe2(os.O_CLOEXEC)
    streams = await pipe_streams(up_r, down_w)  # the agent's ends, as RelayedJob has them
    os.close(up_w)
    os.close(down_r)  # the job process is gone: its pipe is broken
    writer = streams.writer
    writer.write(b"x")
    with contextlib.suppress(ConnectionError):
        await writer.drain()  # EPIPE: the transport closes itself
    async with world() as w:
        session = _Session(launch=launch("gone"), subtree=f"{T.root}/jobs/gone/")
        session.queue.put_nowait(Delivery(T.job_control("gone"), b"late"))
        async with asyncio.timeout(HANG):
            await w.relay._down(session, writer)
    assert w.relay.stats.delivered == 0
    streams.close()
