"""The framing of a job process's bus over its stdin/stdout."""

from __future__ import annotations

import asyncio
import sys

import pytest

from broker.bus import BusError
from broker.memory import MemoryBroker
from nodeagent.job.pipe_bus import PipeBus
from nodeagent.launch.frames import Frame, PipeError, read_frame
from nodeagent.launch.pipe import RelayedProcess


def reader_of(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


async def test_frames_round_trip() -> None:
    frames = [
        Frame(b"P", "a/b/c", b"\x00\x01payload", retain=True),
        Frame(b"S", "a/+/c"),
        Frame(b"D", "a/b/c", b""),
    ]
    reader = reader_of(b"".join(f.pack() for f in frames))
    assert [await read_frame(reader) for _ in frames] == frames
    assert await read_frame(reader) is None


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(Frame(b"P", "t", b"xyz").pack()[:-1], id="truncated-body"),
        pytest.param(Frame(b"P", "t", b"xyz").pack()[:3], id="truncated-header"),
        pytest.param(b"Z" + Frame(b"P", "t", b"xyz").pack()[1:], id="unknown-op"),
        pytest.param(b"P\x00\x00\x01\xff\xff\xff\xfft", id="absurd-length"),
        pytest.param(b"P\x00\x00\x01\x00\x00\x00\x00\xff", id="topic-not-utf8"),
    ],
)
async def test_bad_frames_raise(data: bytes) -> None:
    with pytest.raises(PipeError):
        await read_frame(reader_of(data))


async def test_pipe_bus_reports_a_closed_pipe_as_lost() -> None:
    bus = PipeBus(reader_of(b""), writer=None, client_id="j")  # type: ignore[arg-type]
    with pytest.raises(BusError, match="closed the pipe"):
        await anext(bus.deliveries())


async def test_relay_kills_a_child_that_writes_garbage() -> None:
    broker = MemoryBroker()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import sys, time; sys.stdout.write('hello, not a frame'); sys.stdout.flush(); "
        "time.sleep(30)",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    relayed = RelayedProcess(process, broker.client("job-x"))
    async with asyncio.timeout(10):
        assert await relayed.wait() == -9


async def test_relay_carries_publishes_subscriptions_and_deliveries() -> None:
    broker = MemoryBroker()
    # A child that subscribes, echoes the first delivery back under another topic, exits.
    child = (
        "import os, struct, sys\n"
        "H = struct.Struct('!cBHI')\n"
        "def send(op, topic, payload=b''):\n"
        "    t = topic.encode(); os.write(1, H.pack(op, 0, len(t), len(payload)) + t + payload)\n"
        "def read(n):\n"
        "    b = b''\n"
        "    while len(b) < n: b += os.read(0, n - len(b))\n"
        "    return b\n"
        "send(b'S', 'in')\n"
        "send(b'P', 'ready')\n"
        "op, _, tl, pl = H.unpack(read(H.size)); body = read(tl + pl)\n"
        "send(b'P', 'out', body[tl:])\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", child, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    relayed = RelayedProcess(process, broker.client("job-y"))
    async with broker.client("peer") as peer:
        await peer.subscribe("ready")
        await peer.subscribe("out")
        async with asyncio.TaskGroup() as tg:
            waiting = tg.create_task(relayed.wait(), name="test-relay")
            assert (await anext(peer.deliveries())).topic == "ready"
            await peer.publish("in", b"ping")
            echoed = await anext(peer.deliveries())
        assert (echoed.topic, echoed.payload) == ("out", b"ping")
        assert waiting.result() == 0
