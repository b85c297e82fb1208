"""A job process's bus over its stdin/stdout, relayed by its agent.

Theory of operation. The job process is a bus client whichever transport
carries it. With ``--pipe`` it speaks a tiny framing over its standard
streams instead of MQTT: it writes ``publish`` and ``subscribe`` frames to
stdout and reads ``deliver`` frames from stdin (:class:`PipeBus`). The agent
side (:class:`PipeSpawn`) opens one bus client per job process on whatever bus
it was given (the in-process memory broker in the tests, MQTT in a pinch) and
relays frames both ways for as long as the process lives. So a real OS process
runs the real job module against the memory broker, and a killed agent is
noticed by its children at once (their stdin reaches EOF).

The relay runs inside :meth:`RelayedProcess.wait`, i.e. in the agent's
supervisor task of that part: no task outlives the process it serves.

Frame: ``op`` (1 byte: ``P`` publish, ``S`` subscribe, ``D`` deliver; ``H``,
``W`` and ``X`` for rejoining, see :data:`HELLO`), a
retain flag (1 byte), the topic length (2 bytes, MQTT's bound) and the
payload length (4 bytes), big-endian, then the topic (UTF-8) and the payload.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import struct
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from broker.bus import Bus, BusError, Delivery
from nodeagent.launch.spawn import JOB_MODULE, Launch

log = logging.getLogger(__name__)

_HEADER = struct.Struct("!cBHI")
PUBLISH, SUBSCRIBE, DELIVER = b"P", b"S", b"D"
_PUBLISH, _SUBSCRIBE, _DELIVER = PUBLISH, SUBSCRIBE, DELIVER
#: Rejoining (``nodeagent.survival.rejoin``): a job's ``HELLO`` (topic: its part's key) on its
#: agent's relay socket, the agent's ``WELCOME``; and the job's last frame, ``EXIT``
#: (payload: its exit code in ASCII), which tells an agent that did not fork it.
HELLO, WELCOME, EXIT = b"H", b"W", b"X"
OPS = (PUBLISH, SUBSCRIBE, DELIVER, HELLO, WELCOME, EXIT)
MAX_PAYLOAD = 1 << 24
"""16 MiB: far above any message of the protocol, low enough to refuse garbage lengths."""


class PipeError(BusError):
    """A frame that cannot be read (truncated, unknown op, absurd length)."""


@dataclass(frozen=True, slots=True)
class Frame:
    op: bytes
    topic: str
    payload: bytes = b""
    retain: bool = False

    def pack(self) -> bytes:
        topic = self.topic.encode()
        if len(topic) > 0xFFFF or len(self.payload) > MAX_PAYLOAD:
            raise PipeError(f"frame too large for topic {self.topic!r}")
        head = _HEADER.pack(self.op, int(self.retain), len(topic), len(self.payload))
        return head + topic + self.payload


async def read_frame(reader: asyncio.StreamReader) -> Frame | None:
    """The next frame, or None at a clean end of stream."""
    try:
        head = await reader.readexactly(_HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise PipeError("stream ended inside a frame header") from exc
        return None
    op, retain, topic_len, payload_len = _HEADER.unpack(head)
    if op not in OPS or retain > 1 or payload_len > MAX_PAYLOAD:
        raise PipeError(f"bad frame header {head!r}")
    try:
        body = await reader.readexactly(topic_len + payload_len)
    except asyncio.IncompleteReadError as exc:
        raise PipeError("stream ended inside a frame") from exc
    try:
        topic = body[:topic_len].decode()
    except UnicodeDecodeError as exc:
        raise PipeError("frame topic is not UTF-8") from exc
    return Frame(op, topic, body[topic_len:], bool(retain))


class PipeBus:
    """The job process's side: a :class:`broker.bus.Bus` over two byte streams."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client_id: str,
        read_transport: asyncio.BaseTransport | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._client_id = client_id
        self._read_transport = read_transport

    @classmethod
    async def stdio(cls, client_id: str) -> Self:
        """Frames on this process's stdin and stdout (:func:`stdio_streams`)."""
        reader, writer, read_transport = await stdio_streams()
        return cls(reader, writer, client_id, read_transport)

    @property
    def client_id(self) -> str:
        return self._client_id

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Nothing is buffered (see stdio()), so closing loses nothing; a write pipe's
        # protocol has no close waiter to await.
        self._writer.close()
        if self._read_transport is not None:
            self._read_transport.close()

    async def _send(self, frame: Frame) -> None:
        try:
            self._writer.write(frame.pack())
            await self._writer.drain()
        except ConnectionError as exc:
            raise BusError(f"the agent's pipe is closed: {exc}") from exc

    async def publish(
        self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False
    ) -> None:
        await self._send(Frame(_PUBLISH, topic, payload, retain))

    async def subscribe(self, pattern: str, *, qos: int = 1) -> None:
        await self._send(Frame(_SUBSCRIBE, pattern))

    async def deliveries(self) -> AsyncIterator[Delivery]:
        while True:
            frame = await read_frame(self._reader)
            if frame is None:
                raise BusError("the agent closed the pipe")
            if frame.op != _DELIVER:
                raise PipeError(f"unexpected frame {frame.op!r} from the agent")
            yield Delivery(frame.topic, frame.payload, frame.retain)


async def stdio_streams() -> tuple[
    asyncio.StreamReader, asyncio.StreamWriter, asyncio.BaseTransport
]:
    """Streams over this process's stdin and stdout, for frames.

    File descriptor 1 is moved aside for the frames and pointed at stderr,
    so a stray ``print`` (or a C library's write) can never corrupt them.
    """
    for fd in (0, 1):
        mode = os.fstat(fd).st_mode
        # Only the relay's pipes make sense here; uvloop even aborts the
        # process on a write "pipe" that is /dev/null.
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            raise BusError(f"--pipe needs pipes on stdin and stdout (fd {fd} is not one)")
    frames_fd = os.dup(1)
    os.dup2(2, 1)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
    )
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(frames_fd, "wb", buffering=0)
    )
    # drain() then waits until every byte is in the pipe: a published frame is
    # never left in a buffer that the process's exit would drop.
    transport.set_write_buffer_limits(high=0)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return reader, writer, read_transport


BusFactory = Callable[[str], AbstractAsyncContextManager[Bus]]
"""Opens a bus client with the given client id (e.g. ``MemoryBroker.client``)."""


class RelayedProcess:
    """A job process whose bus is relayed; :meth:`wait` runs the relay until it exits."""

    def __init__(
        self, process: asyncio.subprocess.Process, connect: AbstractAsyncContextManager[Bus]
    ) -> None:
        self._process = process
        self._connect = connect
        self._relayed = False

    @property
    def pid(self) -> int:
        return self._process.pid

    def terminate(self) -> None:
        self._process.terminate()

    def kill(self) -> None:
        self._process.kill()

    async def wait(self) -> int:
        """Relay until the process exits; its exit code.

        The relay runs once: a second call (after the first was cancelled)
        only waits for the process.
        """
        process = self._process
        if self._relayed:
            return await process.wait()
        self._relayed = True
        if process.stdin is None or process.stdout is None:
            raise TypeError("a relayed job process needs pipes on stdin and stdout")
        try:
            async with self._connect as bus, asyncio.TaskGroup() as tg:
                down = tg.create_task(self._down(bus, process.stdin), name=f"pipe-down-{self.pid}")
                try:
                    await self._up(bus, process.stdout)
                except BusError as exc:
                    self._fail(exc)
                await process.wait()
                down.cancel()
        except BusError as exc:  # the relay's own client could not connect
            self._fail(exc)
        finally:
            process.stdin.close()
        return await process.wait()

    def _fail(self, exc: BusError) -> None:
        # A child that writes garbage, or a bus that failed, cannot be served any
        # more: it is stopped, and the agent reports it as the exit it causes.
        log.error("job process %d: relay failed, killing it: %s", self.pid, exc)
        with contextlib.suppress(ProcessLookupError):
            self._process.kill()

    @staticmethod
    async def _up(bus: Bus, stdout: asyncio.StreamReader) -> None:
        """Child to bus, until the child closes its stdout (it exited)."""
        while (frame := await read_frame(stdout)) is not None:
            if frame.op == _PUBLISH:
                await bus.publish(frame.topic, frame.payload, retain=frame.retain)
            elif frame.op == _SUBSCRIBE:
                await bus.subscribe(frame.topic)
            elif frame.op == EXIT:
                pass  # its exit code: this relay learns it from the process itself
            else:
                raise PipeError(f"unexpected frame {frame.op!r} from a job process")

    async def _down(self, bus: Bus, stdin: asyncio.StreamWriter) -> None:
        """Bus to child, until cancelled or the child's stdin breaks."""
        try:
            async for delivery in bus.deliveries():
                if stdin.is_closing():
                    # The child exited and its pipe is closed (uvloop then raises a
                    # RuntimeError on write, not a ConnectionError): it no longer needs
                    # what it did not read.
                    return
                stdin.write(
                    Frame(_DELIVER, delivery.topic, delivery.payload, delivery.retain).pack()
                )
                await stdin.drain()
        except ConnectionError:
            return  # the child exited: what it did not read, it no longer needs
        except BusError as exc:
            self._fail(exc)


@dataclass(frozen=True, slots=True)
class PipeSpawn:
    """Runs ``python -m nodeagent.job --pipe ...`` with its bus relayed over ``connect``."""

    connect: BusFactory
    python: str = sys.executable

    async def __call__(self, launch: Launch) -> RelayedProcess:
        process = await asyncio.create_subprocess_exec(
            self.python,
            "-m",
            JOB_MODULE,
            "--pipe",
            *launch.argv(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return RelayedProcess(process, self.connect(f"job-{launch.agent}-{launch.job_id}"))
