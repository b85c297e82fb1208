"""A job process's bus that outlives its agent: it rejoins the agent's next incarnation.

Theory of operation. A job forked with ``--relay-socket`` (``Launch.relay_socket``)
starts on its relay pipes like any other (``nodeagent.job.pipe_bus``). When they
break (its agent died), the job does not stop: it keeps working, and
:class:`RejoiningBus` reconnects to the agent's relay socket (a unix socket
at a stable path in the machine's state directory, ``nodeagent.survival.state``) with
a capped backoff, for as long as its lease lets it run: the lease is what
bounds a part without an agent heard by the broker (``nodeagent.survival.lease``),
and the job's own check of it (every step of its loop) is unchanged.

Meanwhile what it publishes is kept, in order, up to :data:`BACKLOG` frames
(the oldest dropped first, so the last progress report is always kept and
sent), and sent on reconnection after its subscriptions are made again.
Deliveries simply pause.

Rejoining: the job sends ``HELLO`` (its part's key ``job@attempt``); the new
agent answers ``WELCOME`` if it adopted that part and the connecting process
*is* that part's process (the socket's peer credentials, not anything the
job says); any other answer (``WELCOME`` naming nothing) refuses it. An
agent that hangs up without answering is tried again. A refused job stops at once
(``EXIT_LOST``): an agent alive on its machine disowns it.

The job's last frame is ``EXIT`` with its exit code (:meth:`RejoiningBus.finish`):
an agent that adopted it cannot ``waitpid`` it, and learns it this way. A job
whose work ended while its agent was away waits to say so (its last progress
and its exit) until it rejoins or its lease lapses.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Self

from broker.bus import BusError, Delivery
from nodeagent.job.pipe_bus import stdio_streams
from nodeagent.launch.contract import lease_expired
from nodeagent.launch.frames import (
    DELIVER,
    EXIT,
    HELLO,
    PUBLISH,
    SUBSCRIBE,
    WELCOME,
    Frame,
    PipeError,
    read_frame,
)

log = logging.getLogger(__name__)

BACKLOG = 256
"""Frames kept while the agent is away (the oldest dropped first)."""
BACKOFF_FIRST, BACKOFF_CAP = 0.02, 0.5
"""Wall seconds between reconnection attempts: doubling from the first to the cap."""
WELCOME_TIMEOUT = 5.0
"""Wall seconds an agent that accepted the connection has to answer ``HELLO``."""


class RefusedError(BusError):
    """The agent on this machine refused this job: it must stop."""


class RejoiningBus:
    """A ``broker.bus.Bus`` over the relay pipes, then over the agent's socket."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client_id: str,
        *,
        key: str,
        socket_path: str | None,
        lease_file: str | None = None,
        lease: float = 0.0,
        read_transport: asyncio.BaseTransport | None = None,
        backlog: int = BACKLOG,
        lease_lapsed: Callable[[], bool] | None = None,
    ) -> None:
        self._client_id = client_id
        self._key = key
        self._path = socket_path
        self._reader: asyncio.StreamReader | None = reader
        self._writer: asyncio.StreamWriter | None = writer
        self._transports: list[asyncio.BaseTransport] = (
            [] if read_transport is None else [read_transport]
        )
        self._up = asyncio.Event()
        self._up.set()
        self._lock = asyncio.Lock()
        self._patterns: list[str] = []
        self._pending: collections.deque[Frame] = collections.deque(maxlen=backlog)
        self._dead: BusError | None = None
        self._rejoining: asyncio.Task[None] | None = None
        self._lapsed = lease_lapsed or (
            (lambda: lease_expired(lease_file, lease)) if lease_file else (lambda: False)
        )
        #: Counters, for the tests and the log: breaks, rejoins, frames dropped.
        self.breaks = 0
        self.rejoins = 0
        self.dropped = 0

    @classmethod
    async def stdio(
        cls,
        client_id: str,
        *,
        key: str,
        socket_path: str | None,
        lease_file: str | None,
        lease: float,
    ) -> Self:
        reader, writer, read_transport = await stdio_streams()
        return cls(
            reader,
            writer,
            client_id,
            key=key,
            socket_path=socket_path,
            lease_file=lease_file,
            lease=lease,
            read_transport=read_transport,
        )

    @property
    def client_id(self) -> str:
        return self._client_id

    @property
    def connected(self) -> bool:
        return self._writer is not None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._rejoining is not None:
            self._rejoining.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._rejoining
        self._close()

    # -- the Bus protocol ----------------------------------------------------------

    async def publish(
        self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False
    ) -> None:
        await self._send(Frame(PUBLISH, topic, payload, retain))

    async def subscribe(self, pattern: str, *, qos: int = 1) -> None:
        self._patterns.append(pattern)
        if self._writer is not None:
            await self._send(Frame(SUBSCRIBE, pattern), keep=False)
        # else: made again on rejoining, like every subscription

    async def deliveries(self) -> AsyncIterator[Delivery]:
        while True:
            if self._dead is not None:
                raise self._dead
            reader = self._reader
            if reader is None:
                await self._up.wait()
                continue
            try:
                frame = await read_frame(reader)
            except (PipeError, ConnectionError) as exc:
                log.warning("job: relay broken (%s)", exc)
                frame = None
            if frame is None:
                if reader is self._reader:
                    self._broken("the agent closed its end")
                continue
            if frame.op != DELIVER:
                raise PipeError(f"unexpected frame {frame.op!r} from the agent")
            yield Delivery(frame.topic, frame.payload, frame.retain)

    # -- the end ---------------------------------------------------------------------

    async def finish(self, code: int, *, step: float = 0.05) -> bool:
        """Send what is kept and the exit code; True once the agent has it.

        Waits for a rejoin while the agent is away, until the lease lapses or
        the agent refuses the job (False: nobody heard the end).
        """
        frame = Frame(EXIT, self._key, str(code).encode())
        while self._dead is None:
            if self._writer is not None:
                await self._send(frame)
                if self._writer is not None and not self._pending:
                    return True
                continue
            if self._lapsed():
                return False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(step):
                    await self._up.wait()
        return False

    # -- sending and rejoining ---------------------------------------------------------

    async def _send(self, frame: Frame, *, keep: bool = True) -> None:
        if self._dead is not None:
            raise self._dead
        async with self._lock:
            if self._writer is None:
                if keep:
                    self._keep(frame)
                return
            try:
                self._writer.write(frame.pack())
                await self._writer.drain()
            except (ConnectionError, RuntimeError) as exc:
                # RuntimeError: uvloop's write on a closed transport.
                if keep:
                    self._keep(frame)
                self._broken(f"the agent's end is gone: {exc}")

    def _keep(self, frame: Frame) -> None:
        if len(self._pending) == self._pending.maxlen:
            self.dropped += 1
        self._pending.append(frame)

    def _broken(self, why: str) -> None:
        if self._writer is None and self._rejoining is not None:
            return
        self._close()
        self.breaks += 1
        if self._path is None:
            self._dead = BusError(f"the agent closed the pipe ({why})")
            self._up.set()
            return
        log.warning("job %s: %s; rejoining its agent at %s", self._key, why, self._path)
        self._rejoining = asyncio.get_running_loop().create_task(
            self._rejoin(), name=f"job-{self._key}-rejoin"
        )

    def _close(self) -> None:
        self._up.clear()
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
        for transport in self._transports:
            transport.close()
        self._transports = []

    async def _rejoin(self) -> None:
        path = self._path
        if path is None:
            return
        delay = BACKOFF_FIRST
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(path)
            except OSError:
                await asyncio.sleep(delay)  # nobody listens yet: the agent is restarting
                delay = min(2 * delay, BACKOFF_CAP)
                continue
            try:
                welcomed = await self._hello(reader, writer)
            except (OSError, PipeError):
                writer.close()
                await asyncio.sleep(delay)
                delay = min(2 * delay, BACKOFF_CAP)
                continue
            if not welcomed:
                writer.close()
                log.error("job %s: refused by the agent at %s: stopping", self._key, path)
                self._dead = RefusedError(f"the agent at {path} refused {self._key}")
                self._up.set()
                return
            async with self._lock:
                try:
                    for pattern in self._patterns:
                        writer.write(Frame(SUBSCRIBE, pattern).pack())
                    while self._pending:
                        writer.write(self._pending[0].pack())
                        await writer.drain()
                        self._pending.popleft()
                except (ConnectionError, RuntimeError):
                    writer.close()
                    continue
                self._reader, self._writer = reader, writer
            self.rejoins += 1
            self._rejoining = None
            self._up.set()
            log.info("job %s: rejoined its agent", self._key)
            return

    async def _hello(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        sock = writer.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        writer.write(Frame(HELLO, self._key).pack())
        await writer.drain()
        try:
            async with asyncio.timeout(WELCOME_TIMEOUT):
                answer = await read_frame(reader)
        except TimeoutError:
            raise PipeError("no answer to HELLO") from None
        if answer is None or answer.op != WELCOME:
            raise PipeError("the agent hung up without an answer")  # it died: try again
        return answer.topic == self._key
