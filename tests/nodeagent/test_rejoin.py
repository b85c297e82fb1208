"""The job's rejoining bus: kept frames, reconnection, refusal, and its last frame."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.bus import BusError
from nodeagent.job.rejoin import RefusedError, RejoiningBus
from nodeagent.launch.frames import EXIT, HELLO, PUBLISH, SUBSCRIBE, WELCOME, Frame, read_frame
from tests.nodeagent.harness import HANG


class Agent:
    """A relay socket that welcomes (or refuses) and records what it reads."""

    def __init__(self, path: Path, *, welcome: bool = True) -> None:
        self.path = path
        self.welcome = welcome
        self.frames: list[Frame] = []
        self.arrived = asyncio.Condition()
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_unix_server(self._serve, path=str(self.path))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        hello = await read_frame(reader)
        assert hello is not None
        assert hello.op == HELLO
        writer.write(Frame(WELCOME, hello.topic if self.welcome else "").pack())
        await writer.drain()
        while (frame := await read_frame(reader)) is not None:
            async with self.arrived:
                self.frames.append(frame)
                self.arrived.notify_all()

    async def until(self, count: int) -> list[Frame]:
        async with asyncio.timeout(HANG), self.arrived:
            await self.arrived.wait_for(lambda: len(self.frames) >= count)
        return self.frames

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for writer in self.writers:
            writer.close()


@contextlib.asynccontextmanager
async def broken_bus(
    tmp_path: Path, *, backlog: int = 256, lapsed: bool = False
) -> AsyncIterator[RejoiningBus]:
    """A bus whose first connection (a socket pair) is already broken."""
    loop = asyncio.get_running_loop()
    ours, theirs = await _pair()
    reader, writer = ours
    bus = RejoiningBus(
        reader,
        writer,
        "job",
        key="j@1",
        socket_path=str(tmp_path / "relay.sock"),
        backlog=backlog,
        lease_lapsed=lambda: lapsed,
    )
    theirs[1].close()  # the agent died
    deliveries = bus.deliveries()
    reading = loop.create_task(anext(deliveries))
    async with asyncio.timeout(HANG):
        while bus.connected:
            await asyncio.sleep(0.01)  # the read sees the EOF on its next turn
    try:
        yield bus
    finally:
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError, BusError):
            await reading
        await bus.__aexit__(None, None, None)


async def _drain(bus: RejoiningBus) -> None:
    async with asyncio.timeout(HANG):
        async for _ in bus.deliveries():
            pass


async def _pair() -> tuple[
    tuple[asyncio.StreamReader, asyncio.StreamWriter],
    tuple[asyncio.StreamReader, asyncio.StreamWriter],
]:
    import socket

    a, b = socket.socketpair()
    return await asyncio.open_connection(sock=a), await asyncio.open_connection(sock=b)


async def test_frames_sent_while_away_are_kept_and_sent_on_rejoining(tmp_path: Path) -> None:
    async with broken_bus(tmp_path, backlog=3) as bus:
        await bus.subscribe("R/jobs/j/control")
        for i in range(5):
            await bus.publish("t", str(i).encode())
        assert bus.dropped == 2  # the oldest went; the last report is always kept
        agent = Agent(tmp_path / "relay.sock")
        await agent.start()
        try:
            frames = await agent.until(4)
            assert [(f.op, f.payload) for f in frames] == [
                (SUBSCRIBE, b""),
                (PUBLISH, b"2"),
                (PUBLISH, b"3"),
                (PUBLISH, b"4"),
            ]
            assert bus.rejoins == 1
            assert await bus.finish(0)
            last = (await agent.until(5))[-1]
            assert (last.op, last.topic, last.payload) == (EXIT, "j@1", b"0")
        finally:
            agent.close()


async def test_a_refused_job_stops(tmp_path: Path) -> None:
    agent = Agent(tmp_path / "relay.sock", welcome=False)
    await agent.start()
    try:
        async with broken_bus(tmp_path) as bus:
            with pytest.raises(RefusedError):
                await _drain(bus)
            assert not await bus.finish(0)
            with pytest.raises(BusError):
                await bus.publish("t", b"x")
    finally:
        agent.close()


async def test_its_end_waits_for_no_agent_past_the_lease(tmp_path: Path) -> None:
    async with broken_bus(tmp_path, lapsed=True) as bus:
        assert not await bus.finish(0)
