"""Job processes reach the broker through their agent: one connection, a relay per job.

Theory of operation. A job process holds no broker credentials and opens no
connection of its own: it speaks ``nodeagent.launch.pipe``'s frames over a unix
socket to its agent, and the agent's :class:`Relay` carries them over the
agent's own bus connection. Why: with credentials and ACLs a job process
would need a login of its own (and could then be impersonated by any
process of that user); the embedded broker (amqtt) cannot carry one
connection per job process reliably; and a connection costs the broker
and the job a handshake per launch.

The relay owns the one consumer of the agent's bus deliveries (:meth:`pump`)
and routes each delivery: to the agent (:attr:`agent_bus`, a
``broker.bus.Bus`` the agent uses as if it were the connection) when it
matches one of the agent's own subscriptions, and to every job whose
subscriptions match it. Each job's subscriptions are its own set.

What a job may do (checked per frame, on the agent's side of the socket):

- subscribe to filters inside its own job's subtree ``<root>/jobs/<job>/...``
  (the parent of its control topic: ``R/jobs/J/control``, ``R/jobs/J/#``,
  ``R/jobs/J/ranks/+``);
- publish on topics inside that subtree (wildcards refused), and publish its
  own ``PartProgress`` (its job id, its agent, its attempt) on its agent's
  events topic, which is how the scheduler hears its progress today.

Periodic progress reports are thinned to one per :data:`PROGRESS_EVERY`
per job (``coalesced``): the first, every rate change and the last go through.

Anything else is dropped and counted (:class:`RelayStats`: ``forged_publish``,
``forged_subscribe``) and the job goes on. A frame that cannot be read
(``nodeagent.launch.pipe.PipeError``: unknown op, absurd length, truncated) ends the
relay of that job: the stream cannot be resynchronised, so the job process is
killed (the agent reports it ``failed``) and counted in ``bad_frames``; the
agent and the other jobs are untouched. A job that does not read its
deliveries fills its own bounded queue; what overflows is dropped and counted
(``overflow``), never blocking the agent.

Deliveries of subscriptions left by ended jobs are dropped here (the bus has
no unsubscribe: the filters stay on the agent's session until it ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from broker.bus import Bus, BusError, Delivery
from broker.codec import WireError, decode
from broker.messages import PartProgress
from broker.topics import Topics, matches
from nodeagent.launch.contract import Launch
from nodeagent.launch.forkserver import ForkedProcess, ForkServer
from nodeagent.launch.frames import DELIVER, EXIT, PUBLISH, SUBSCRIBE, Frame, PipeError, read_frame
from nodeagent.survival.state import StateDir

log = logging.getLogger(__name__)

JOB_QUEUE = 256
"""Deliveries waiting for one job process (control messages are rare)."""

PROGRESS_EVERY = 10.0
"""Wall seconds between two periodic progress reports of a job that the relay forwards.

A job reports every second (``nodeagent.job``); nobody acts on the reports in
between (the scheduler estimates from the model), and a hundred jobs on one
agent would cost the broker and the scheduler a hundred messages a second.
The first report (readiness), a rate change (a resize) and the last one (the
work done) always go through.
"""

_COALESCE = object()


@dataclass(slots=True)
class RelayStats:
    """What the relay did, for the agent's exporter (plain counters)."""

    sessions: int = 0
    published: int = 0
    delivered: int = 0
    forged_publish: int = 0
    forged_subscribe: int = 0
    bad_frames: int = 0
    overflow: int = 0
    #: Periodic progress reports not forwarded (see ``Relay.progress_every``).
    coalesced: int = 0
    #: Adopted job processes that rejoined over the relay socket, and connections
    #: refused there (not an adopted part's process, no HELLO: ``nodeagent.survival.adoption``).
    rejoined: int = 0
    rejoin_refused: int = 0


@dataclass(slots=True)
class WorkDone:
    """When a relayed job said its work was complete (its last ``PartProgress.at``:
    wall seconds of this host's clock, the one its fork was stamped on), and the exit
    code it said in its last frame (``nodeagent.launch.pipe.EXIT``), if it did."""

    at: float | None = None
    code: int | None = None


@dataclass(slots=True, eq=False)
class _Session:
    launch: Launch
    subtree: str
    done: WorkDone = field(default_factory=WorkDone)
    queue: asyncio.Queue[Delivery] = field(default_factory=lambda: asyncio.Queue(JOB_QUEUE))
    patterns: list[str] = field(default_factory=list)
    warned: bool = False
    #: The last progress forwarded: its monotonic time and rate (None: none yet).
    reported: tuple[float, float] | None = None


class _AgentBus:
    """The agent's view of the shared connection (a ``broker.bus.Bus``)."""

    def __init__(self, relay: Relay) -> None:
        self._relay = relay

    @property
    def client_id(self) -> str:
        return self._relay.bus.client_id

    async def publish(
        self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False
    ) -> None:
        await self._relay.bus.publish(topic, payload, qos=qos, retain=retain)

    async def subscribe(self, pattern: str, *, qos: int = 1) -> None:
        self._relay.agent_patterns.append(pattern)
        await self._relay.bus.subscribe(pattern, qos=qos)

    async def deliveries(self) -> AsyncIterator[Delivery]:
        while True:
            item = await self._relay.agent_queue.get()
            if item is None:
                return
            if isinstance(item, BusError):
                raise item
            yield item


class Relay:
    """The agent's connection, shared by the agent and its job processes."""

    def __init__(
        self,
        bus: Bus,
        topics: Topics,
        agent_id: str,
        *,
        queue_size: int = 1024,
        progress_every: float = PROGRESS_EVERY,
    ):
        self.bus = bus
        self.progress_every = progress_every
        self.topics = topics
        self.agent_id = agent_id
        self.agent_patterns: list[str] = []
        self.agent_queue: asyncio.Queue[Delivery | BusError | None] = asyncio.Queue(queue_size)
        self.agent_bus = _AgentBus(self)
        self._events = topics.agent_events(agent_id)
        self._sessions: set[_Session] = set()
        self.stats = RelayStats()

    async def pump(self) -> None:
        """Route every delivery of the connection until it ends (run it in a task)."""
        try:
            async for delivery in self.bus.deliveries():
                if any(matches(p, delivery.topic) for p in self.agent_patterns):
                    await self.agent_queue.put(delivery)
                for session in self._sessions:
                    if any(matches(p, delivery.topic) for p in session.patterns):
                        try:
                            session.queue.put_nowait(delivery)
                        except asyncio.QueueFull:
                            self.stats.overflow += 1
        except BusError as exc:
            await self.agent_queue.put(exc)
            return
        await self.agent_queue.put(None)

    async def serve(
        self,
        launch: Launch,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        done: WorkDone | None = None,
    ) -> None:
        """Relay one job process's frames until it closes its end (it exited).

        Raises :class:`PipeError` on an unreadable frame and :class:`BusError`
        if the connection failed; the caller ends the job process either way.
        """
        control = self.topics.job_control(launch.job_id)
        session = _Session(launch=launch, subtree=control.rpartition("/")[0] + "/")
        if done is not None:
            session.done = done
        self._sessions.add(session)
        self.stats.sessions += 1
        failure: PipeError | BusError | None = None
        try:
            async with asyncio.TaskGroup() as tg:
                down = tg.create_task(
                    self._down(session, writer), name=f"relay-{launch.job_id}-down"
                )
                try:
                    while (frame := await read_frame(reader)) is not None:
                        await self._up(session, frame)
                except (PipeError, BusError) as exc:  # PipeError is a BusError
                    failure = exc
                except ConnectionError:
                    pass  # its end was torn down: it is gone, like an end of stream
                finally:
                    down.cancel()
        finally:
            self._sessions.discard(session)
        if isinstance(failure, PipeError):
            self.stats.bad_frames += 1
        if failure is not None:
            raise failure

    async def _up(self, session: _Session, frame: Frame) -> None:
        if frame.op == SUBSCRIBE:
            if _inside(frame.topic, session.subtree):
                session.patterns.append(frame.topic)
                await self.bus.subscribe(frame.topic)
            else:
                self.stats.forged_subscribe += 1
                self._forged(session, "subscribe to", frame.topic)
        elif frame.op == PUBLISH:
            verdict = self._may_publish(session, frame)
            if verdict is _COALESCE:
                self.stats.coalesced += 1
            elif verdict:
                await self.bus.publish(frame.topic, frame.payload, retain=frame.retain)
                self.stats.published += 1
            else:
                self.stats.forged_publish += 1
                self._forged(session, "publish on", frame.topic)
        elif frame.op == EXIT:
            session.done.code = exit_code(frame.payload)
        else:
            raise PipeError(f"unexpected frame {frame.op!r} from a job process")

    def _may_publish(self, session: _Session, frame: Frame) -> bool | object:
        """True, False (forged), or :data:`_COALESCE` (its own periodic progress, held)."""
        if any(c in frame.topic for c in "+#\0"):
            return False
        if frame.topic.startswith(session.subtree):
            return True
        if frame.topic != self._events or frame.retain:
            return False
        # Its own progress, on its agent's events: the agent vouches for it.
        try:
            message = decode(frame.payload)
        except WireError:
            return False
        launch = session.launch
        if not (
            isinstance(message, PartProgress)
            and message.job_id == launch.job_id
            and message.agent_id == launch.agent
            and message.attempt == launch.attempt
        ):
            return False
        if message.done >= launch.work:
            session.done.at = message.at  # the run the agent reports ends here
        now = time.monotonic()
        previous = session.reported
        if (
            previous is None  # its readiness signal
            or message.rate != previous[1]  # a resize took effect
            or message.done >= launch.work  # the end of its work
            or now - previous[0] >= self.progress_every
        ):
            session.reported = (now, message.rate)
            return True
        return _COALESCE

    def _forged(self, session: _Session, what: str, topic: str) -> None:
        if not session.warned:  # once per job: a hostile job must not flood the log
            session.warned = True
            log.warning(
                "job %s tried to %s %r, outside its own topics: dropped (and counted from now)",
                session.launch.job_id,
                what,
                topic,
            )

    async def _down(self, session: _Session, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                d = await session.queue.get()
                if writer.transport.is_closing():
                    # The job exited and its pipe broke (uvloop then raises RuntimeError
                    # on a write, not ConnectionError): a resize or a clear relayed as it
                    # ended. Nobody is left to read it; that is no failure of the agent.
                    return
                writer.write(Frame(DELIVER, d.topic, d.payload, d.retain).pack())
                await writer.drain()
                self.stats.delivered += 1
        except ConnectionError:
            return  # the job exited: what it did not read, it no longer needs


def exit_code(payload: bytes) -> int:
    """The code of an ``EXIT`` frame (ASCII, -255..255); PipeError if it is not one."""
    try:
        code = int(payload.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise PipeError(f"bad exit frame {payload[:20]!r}") from None
    if not -255 <= code <= 255:
        raise PipeError(f"exit code {code} out of range")
    return code


def _inside(pattern: str, subtree: str) -> bool:
    """Whether a filter only matches topics under ``subtree`` (which ends with /)."""
    return pattern.startswith(subtree) and len(pattern) > len(subtree)


@dataclass(frozen=True, slots=True)
class PipeStreams:
    """Streams over the agent's ends of a job's two relay pipes; ``close()`` closes both."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    read_transport: asyncio.BaseTransport

    def close(self) -> None:
        self.writer.close()
        self.read_transport.close()


async def pipe_streams(read_fd: int, write_fd: int) -> PipeStreams:
    """Streams over two pipe ends (they then own the fds)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
    )
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb", buffering=0)
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return PipeStreams(reader, writer, read_transport)


class RelayedJob:
    """A forked job process whose bus is the relay; :meth:`wait` relays until it exits."""

    def __init__(self, process: ForkedProcess, relay: Relay, launch: Launch, fds: tuple[int, int]):
        self._process = process
        self._relay = relay
        self._launch = launch
        self._fds: tuple[int, int] | None = fds  # (its stdout's read end, its stdin's write end)
        self.started_at = process.started_at
        self.started_mono = process.started_mono
        #: When the job said its work was complete, if it did (``nodeagent.agent.runs``).
        self.work_done = WorkDone()

    @property
    def exited_mono(self) -> float | None:
        return self._process.exited_mono

    @property
    def pid(self) -> int:
        return self._process.pid

    def terminate(self) -> None:
        self._process.terminate()

    def kill(self) -> None:
        self._process.kill()

    async def wait(self) -> int:
        """Relay until the process exits; its exit code (a second call only waits)."""
        fds, self._fds = self._fds, None
        if fds is None:
            return await self._process.wait()
        streams = await pipe_streams(*fds)
        try:
            await self._relay.serve(self._launch, streams.reader, streams.writer, self.work_done)
        except PipeError as exc:
            log.error(
                "job %s: bad frame from its process, killing it: %s", self._launch.job_id, exc
            )
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
        except BusError as exc:
            # Its stdin closes below: the job reads EOF and stops (EXIT_LOST), as it
            # would on a lost connection of its own.
            log.error("job %s: the agent's connection failed: %s", self._launch.job_id, exc)
        finally:
            streams.close()
        return await self._process.wait()


@dataclass(frozen=True, slots=True)
class RelaySpawn:
    """The default spawn strategy: fork from the warm launcher, relay over the agent's bus."""

    server: ForkServer
    relay: Relay
    #: The machine's state directory: the fork server notes each child's pid there
    #: before it runs (``nodeagent.survival.state``); None: nothing is noted.
    state: StateDir | None = None

    async def __call__(self, launch: Launch) -> RelayedJob:
        down_r, down_w = os.pipe2(os.O_CLOEXEC)
        up_r, up_w = os.pipe2(os.O_CLOEXEC)
        pidfile = (
            None if self.state is None else str(self.state.pid_path(launch.job_id, launch.attempt))
        )
        try:
            process = await self.server.launch(
                ["--pipe", *launch.argv()], down_r, up_w, pidfile=pidfile
            )
        except BaseException:
            os.close(down_w)
            os.close(up_r)
            raise
        finally:
            os.close(down_r)
            os.close(up_w)
        decided = launch.start_at if launch.start_at is not None else time.time()
        latency = max(0.0, process.started_at - decided)
        self.server.stats.observe(latency)
        log.info(
            "job %s: process %d running %.1f ms after the start",
            launch.job_id,
            process.pid,
            latency * 1e3,
        )
        return RelayedJob(process, self.relay, launch, (up_r, down_w))
