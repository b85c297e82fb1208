"""The job process's side of its relay pipes: a bus over its stdin and stdout.

Theory of operation. The job process is a bus client whichever transport
carries it. With ``--pipe`` it speaks the pipe's frames
(``nodeagent.launch.frames``) over its standard streams instead of MQTT: it
writes ``publish`` and ``subscribe`` frames to stdout and reads ``deliver``
frames from stdin (:class:`PipeBus`). Its agent relays them
(``nodeagent.launch.pipe``, ``nodeagent.launch.relay``); a killed agent is
noticed at once (stdin reaches EOF). :func:`stdio_streams` opens those
streams, for this bus and for the one that rejoins a next incarnation of the
agent (``nodeagent.job.rejoin``).
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Self

from broker.bus import BusError, Delivery
from nodeagent.launch.frames import DELIVER, PUBLISH, SUBSCRIBE, Frame, PipeError, read_frame


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
        await self._send(Frame(PUBLISH, topic, payload, retain))

    async def subscribe(self, pattern: str, *, qos: int = 1) -> None:
        await self._send(Frame(SUBSCRIBE, pattern))

    async def deliveries(self) -> AsyncIterator[Delivery]:
        while True:
            frame = await read_frame(self._reader)
            if frame is None:
                raise BusError("the agent closed the pipe")
            if frame.op != DELIVER:
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
