"""The agent's side of a job process's relay pipes: the process and its relay.

Theory of operation. A job process started with ``--pipe`` speaks the pipe's
frames (``nodeagent.launch.frames``) over its stdin and stdout
(``nodeagent.job.pipe_bus``). :class:`PipeSpawn` starts it and opens one
bus client per job process on whatever bus it was given (the in-process
memory broker in the tests, MQTT in a pinch), and :class:`RelayedProcess`
relays frames both ways for as long as the process lives. So a real OS
process runs the real job module against the memory broker, and a killed
agent is noticed by its children at once (their stdin reaches EOF).

The relay runs inside :meth:`RelayedProcess.wait`, i.e. in the agent's
supervisor task of that part: no task outlives the process it serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from broker.bus import Bus, BusError
from nodeagent.launch.contract import JOB_MODULE, Launch
from nodeagent.launch.frames import DELIVER, EXIT, PUBLISH, SUBSCRIBE, Frame, PipeError, read_frame

log = logging.getLogger(__name__)


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
            if frame.op == PUBLISH:
                await bus.publish(frame.topic, frame.payload, retain=frame.retain)
            elif frame.op == SUBSCRIBE:
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
                    Frame(DELIVER, delivery.topic, delivery.payload, delivery.retain).pack()
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
