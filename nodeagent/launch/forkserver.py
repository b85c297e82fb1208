"""A pre-warmed launcher per agent: job processes cost a fork, not an interpreter start.

Theory of operation. Starting ``python -m nodeagent.job`` costs about 0.4 s
of CPU (the interpreter, then msgspec, uvloop, aiomqtt, ...); a 64-rank job
would spend 25 CPU-seconds just starting. So each agent starts one *fork
server* (``nodeagent.launch.launcher``, whose docstring has the wire): a child
process that imports the job module and its dependencies once, says
``ready``, and then forks one job process per request. This module is the
agent's side of it: :class:`ForkServer` starts it, sends launches and reads
its answers; :class:`ForkedProcess` is one job process it forked.

Launches are pipelined: :meth:`ForkServer.launch` sends its request at once
and waits only for its own answer, so an agent that starts many parts has
them all in the server's socket while the first forks run.

Supervision. The agent signals a job through the child's pidfd
(``pidfd_send_signal``: never another process that reused the pid) and
learns its exit code from the server's ``exited``. Both ends of a run are
stamped by the server on ``CLOCK_MONOTONIC`` (:attr:`ForkedProcess.started_mono`,
:attr:`ForkedProcess.exited_mono`): the run a part reports is fork to reap.

Failure rules:

- The agent dies (even SIGKILL): the server reads EOF and exits; each job
  reads EOF on its relay pipe and exits ``EXIT_LOST``; the lease file stops
  any job that could not tell (``nodeagent.survival.lease``). Nothing outlives it
  unseen.
- The agent stops and leaves its parts to its next incarnation
  (:meth:`ForkServer.leave`): closing the server then kills none of its
  children; they run on within their lease, as after the agent's SIGKILL.
- The server dies: its jobs would be orphans whose exit codes nobody can read.
  So the agent SIGKILLs them through their pidfds, waits until they are gone,
  and reports each with ``EXIT_LOST`` (the agent reports ``fenced``, which the
  scheduler requeues: the job did nothing wrong). A launch in flight fails
  with ``OSError`` (the agent refuses that part ``failed``); the next launch
  starts a new server. :attr:`ForkServerStats.restarts` counts the deaths.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeagent.launch.contract import EXIT_LOST
from nodeagent.launch.launcher import MODULE, recv

__all__ = [
    "LAUNCH_BUCKETS",
    "MODULE",
    "ForkServer",
    "ForkServerError",
    "ForkServerStats",
    "ForkedProcess",
]

log = logging.getLogger(__name__)

MQTT_ENV = "ACCORDION_MQTT_"
"""The prefix of the broker login's variables (``broker.settings``), kept from jobs."""


class ForkServerError(OSError):
    """The fork server is gone or refused a launch."""


LAUNCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Upper bounds (wall s) of the launch-latency histogram; +Inf is implied."""


@dataclass(slots=True)
class ForkServerStats:
    """Launches and their latency (decision to fork), for the agent's exporter."""

    launches: int = 0
    failed: int = 0
    restarts: int = 0
    #: Cumulative counts per bucket of :data:`LAUNCH_BUCKETS`, then +Inf.
    buckets: list[int] = field(default_factory=lambda: [0] * (len(LAUNCH_BUCKETS) + 1))
    latency_sum: float = 0.0

    def observe(self, seconds: float) -> None:
        self.launches += 1
        self.latency_sum += seconds
        for i, bound in enumerate(LAUNCH_BUCKETS):
            if seconds <= bound:
                self.buckets[i] += 1
        self.buckets[-1] += 1


class PidfdProcess:
    """A job process held by its pidfd: signalled through it, so never a process that
    reused its pid. ``started_at`` is the wall time of its fork (the part's run starts
    there); ``started_mono`` the same instant on ``CLOCK_MONOTONIC``; ``exited_mono``
    when it was seen to end (None until then). What it is and how its end is learnt
    are the subclasses': :class:`ForkedProcess` here, ``nodeagent.survival.adoption``'s
    ``AdoptedProcess``."""

    def __init__(self, pid: int, pidfd: int, started_at: float, started_mono: float) -> None:
        self._pid = pid
        self._pidfd: int | None = pidfd
        self.started_at = started_at
        self.started_mono = started_mono
        self.exited_mono: float | None = None

    @property
    def pid(self) -> int:
        return self._pid

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def send_signal(self, signum: int) -> None:
        """ProcessLookupError once it has exited (never a recycled pid)."""
        if self._pidfd is None:
            raise ProcessLookupError(f"job process {self._pid} has exited")
        signal.pidfd_send_signal(self._pidfd, signum)

    def _close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class ForkedProcess(PidfdProcess):
    """A job process forked by the fork server; fits ``nodeagent.launch.spawn.JobProcess``.

    ``exited_mono`` is when the server reaped it (None until then, or when the
    server died first).
    """

    def __init__(
        self,
        pid: int,
        pidfd: int,
        started_at: float,
        exit_code: asyncio.Future[int],
        *,
        started_mono: float | None = None,
    ):
        super().__init__(
            pid, pidfd, started_at, time.monotonic() if started_mono is None else started_mono
        )
        self._exit = exit_code
        exit_code.add_done_callback(lambda _: self._close())

    @property
    def returncode(self) -> int | None:
        return self._exit.result() if self._exit.done() else None

    async def wait(self) -> int:
        return await asyncio.shield(self._exit)


class ForkServer:
    """The agent's handle on its fork server; ``async with ForkServer() as fs``.

    :meth:`launch` starts the server on first use and again after it died.
    """

    def __init__(
        self,
        *,
        python: str = sys.executable,
        ready_timeout: float = 60.0,
        hold_fds: Sequence[int] = (),
    ) -> None:
        self._python = python
        #: Fds the server keeps open for as long as it lives (the state directory's lock).
        self._hold = tuple(hold_fds)
        self._ready_timeout = ready_timeout
        self._sock: socket.socket | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._ready: asyncio.Future[int] | None = None
        self._starting: asyncio.Lock | None = None
        self._pending: dict[int, asyncio.Future[ForkedProcess]] = {}
        self._children: dict[int, tuple[ForkedProcess, asyncio.Future[int]]] = {}
        self._next_id = 0
        self._closing = False
        self._leaving = False
        self._reaper: set[asyncio.Task[None]] = set()
        self.stats = ForkServerStats()

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs."""
        return None if self._process is None else self._process.pid

    async def __aenter__(self) -> ForkServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the server (if it is not running) and wait until it is warm."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._sock is not None:
                return
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                process = await asyncio.create_subprocess_exec(
                    self._python,
                    "-m",
                    MODULE,
                    f"--fd={theirs.fileno()}",
                    *(f"--hold-fd={fd}" for fd in self._hold),
                    pass_fds=(theirs.fileno(), *self._hold),
                    stdin=asyncio.subprocess.DEVNULL,
                    # Job processes reach the broker only through their agent: they get
                    # none of its login (not even the path of its secret).
                    env={k: v for k, v in os.environ.items() if not k.startswith(MQTT_ENV)},
                )
            except OSError:
                ours.close()
                raise
            finally:
                theirs.close()
            ours.setblocking(False)
            loop = asyncio.get_running_loop()
            self._sock, self._process = ours, process
            self._ready = loop.create_future()
            loop.add_reader(ours.fileno(), self._readable)
            try:
                async with asyncio.timeout(self._ready_timeout):
                    await asyncio.shield(self._ready)
            except TimeoutError as exc:
                self._died("it did not get ready in time")
                raise ForkServerError(
                    f"the fork server was not ready in {self._ready_timeout:g} s"
                ) from exc
            log.info("fork server %d ready", process.pid)

    async def launch(
        self, argv: Sequence[str], stdin: int, stdout: int, *, pidfile: str | None = None
    ) -> ForkedProcess:
        """Fork ``python -m nodeagent.job *argv`` on these two pipe ends (its relay);
        ``pidfile``: where the server notes the child before it runs
        (``nodeagent.survival.state``)."""
        if self._closing:
            raise ForkServerError("the fork server is closing")
        if self._sock is None:
            await self.start()
        sock = self._sock
        if sock is None:
            raise ForkServerError("the fork server is not running")
        self._next_id += 1
        request = self._next_id
        future: asyncio.Future[ForkedProcess] = asyncio.get_running_loop().create_future()
        self._pending[request] = future
        ask: dict[str, Any] = {"op": "launch", "id": request, "argv": list(argv)}
        if pidfile is not None:
            ask["pidfile"] = pidfile
        data = json.dumps(ask).encode()
        fds = array.array("i", [stdin, stdout])
        try:
            await self._sendmsg(sock, data, fds)
            return await future
        except OSError:
            self.stats.failed += 1
            raise
        finally:
            self._pending.pop(request, None)

    async def _sendmsg(self, sock: socket.socket, data: bytes, fds: array.array[int]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
                return
            except BlockingIOError:
                writable = loop.create_future()
                loop.add_writer(sock.fileno(), writable.set_result, None)
                try:
                    await writable
                finally:
                    loop.remove_writer(sock.fileno())
            except OSError as exc:
                raise ForkServerError(f"the fork server is gone: {exc}") from exc

    def _readable(self) -> None:
        sock = self._sock
        while sock is not None and sock is self._sock:
            try:
                message, fds = recv(sock)
            except BlockingIOError:
                return
            except (OSError, ValueError) as exc:
                self._died(f"its socket failed: {exc}")
                return
            if message is None:
                self._died("it exited")
                return
            self._dispatch(message, fds)

    def _dispatch(self, message: dict[str, Any], fds: list[int]) -> None:
        op = message.get("op")
        if op == "ready" and self._ready is not None and not self._ready.done():
            self._ready.set_result(int(message["pid"]))
        elif op == "started" and len(fds) == 1:
            self._started(message, fds[0])
            return
        elif op == "failed":
            future = self._pending.get(message.get("id", -1))
            if future is not None and not future.done():
                future.set_exception(ForkServerError(str(message.get("error"))))
        elif op == "exited":
            entry = self._children.pop(int(message["pid"]), None)
            if entry is not None and not entry[1].done():
                entry[0].exited_mono = float(message.get("mono", time.monotonic()))
                entry[1].set_result(int(message["code"]))
        else:  # our own server said something else: a bug, shown loudly
            log.error("fork server: unexpected message %r", message)
        for fd in fds:
            os.close(fd)

    def _started(self, message: dict[str, Any], pidfd: int) -> None:
        loop = asyncio.get_running_loop()
        pid, at = int(message["pid"]), float(message["at"])
        mono = float(message.get("mono", time.monotonic()))
        exit_code: asyncio.Future[int] = loop.create_future()
        process = ForkedProcess(pid, pidfd, at, exit_code, started_mono=mono)
        self._children[pid] = (process, exit_code)
        future = self._pending.get(message.get("id", -1))
        if future is not None and not future.done():
            future.set_result(process)
        else:  # its launcher was cancelled meanwhile: nobody supervises it
            with contextlib.suppress(ProcessLookupError):
                process.kill()

    def _died(self, why: str) -> None:
        """The server is gone: fail its launches, stop its orphans (see the docstring)."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        loop = asyncio.get_running_loop()
        loop.remove_reader(sock.fileno())
        sock.close()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(ForkServerError(f"the fork server died: {why}"))
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ForkServerError(f"the fork server died: {why}"))
        children, self._children = self._children, {}
        if not self._closing:
            self.stats.restarts += 1
            log.error(
                "fork server %s died (%s): killing its %d job process(es); they are reported lost",
                self.pid,
                why,
                len(children),
            )
        process = self._process
        task = loop.create_task(self._bury(process, children), name="forkserver-bury")
        self._reaper.add(task)
        task.add_done_callback(self._reaper.discard)

    async def _bury(
        self,
        server: asyncio.subprocess.Process | None,
        children: dict[int, tuple[ForkedProcess, asyncio.Future[int]]],
    ) -> None:
        if self._leaving:
            children = {}  # left running for the agent's next incarnation
        for process, exit_code in children.values():
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            pidfd = process._pidfd
            if pidfd is not None:
                await _exited(pidfd)  # readable once the process is gone (not our child)
            if not exit_code.done():
                exit_code.set_result(EXIT_LOST)
        if server is not None:
            code = await server.wait()
            if server is self._process:
                self._process = None
            log.info("fork server %d exited with %d", server.pid, code)

    def leave(self) -> None:
        """Let :meth:`close` leave the children running (the agent leaves its parts)."""
        self._leaving = True

    async def close(self) -> None:
        """Stop the server (it exits on EOF); its remaining children are killed, unless
        the agent leaves them (:meth:`leave`)."""
        self._closing = True
        self._died("closed by its agent")
        while self._reaper:
            await asyncio.gather(*self._reaper)


async def _exited(pidfd: int) -> None:
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not gone.done():
            gone.set_result(None)

    loop.add_reader(pidfd, readable)
    try:
        await gone
    finally:
        loop.remove_reader(pidfd)
