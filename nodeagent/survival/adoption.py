"""A new incarnation of an agent adopts the parts its predecessor left running.

Theory of operation. A killed agent's job processes go on within their lease
(``nodeagent.job.rejoin``) and its state directory keeps, per part, the record it
wrote at admission and the pid file its fork server wrote at the fork
(``nodeagent.survival.state``). Before it registers, the next incarnation for the same
machine, holding the directory's lock (so no launch of the old one is under
way), surveys them (:func:`survey`):

- a record and a pid file whose process is alive *and* still the one that was
  forked (its ``/proc/PID/stat`` start time is the recorded one, read again
  after ``pidfd_open`` so the pidfd holds that very process) is *adopted*:
  an :class:`AdoptedProcess` signals it through the pidfd, notices its exit
  when the pidfd polls readable, and learns its exit code from the job's last
  frame (``EXIT``) once it has rejoined over the relay socket
  (:class:`RejoinServer`); a process that ends without saying counts
  ``EXIT_LOST`` (reported ``fenced``: the scheduler requeues it);
- anything else is *lost*: a process that is alive and verifiably ours is
  killed (and waited for) first; a dead one, or a pid now held by another
  process (the start time differs), is never signalled; a record that cannot
  be read is counted (``bad_records``) and reported by the key its file is
  named after when that is a part's name. Their files are removed.

With adoption off (``--no-adopt``) every part found is lost that way: the
agent kills them before it registers, as if they had died with the old one.

The relay socket (:class:`RejoinServer`): a job rejoining says ``HELLO`` with
its part's key; it is welcomed only if that part was adopted, is not already
attached, and the socket's peer (``SO_PEERCRED``) *is* its process. Anything
else is refused, counted (``rejoin_refused``), and told so, and the agent goes
on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from nodeagent.launch.contract import EXIT_LOST, Launch, LaunchError, part_key
from nodeagent.launch.forkserver import PidfdProcess
from nodeagent.launch.frames import HELLO, WELCOME, Frame, PipeError, read_frame
from nodeagent.launch.relay import Relay, RelayStats, WorkDone
from nodeagent.survival.state import Forked, PartRecord, StateDir, StateError, start_time

log = logging.getLogger(__name__)

HELLO_TIMEOUT = 5.0
"""Wall seconds a connection to the relay socket has to say ``HELLO``."""


class AdoptedProcess(PidfdProcess):
    """A job process this agent did not fork; fits ``nodeagent.launch.spawn.JobProcess``."""

    def __init__(self, pid: int, pidfd: int, forked: Forked, relay: Relay, launch: Launch):
        super().__init__(pid, pidfd, forked.at, forked.mono)
        self._relay = relay
        self._launch = launch
        self.work_done = WorkDone()
        self._streams: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] | None
        self._streams = None
        self.attached = False
        #: Set once its relay is over: the socket server's handler waits for it.
        self._detached: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def attach(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> asyncio.Future[None]:
        """Its rejoined connection (:class:`RejoinServer`, before ``WELCOME``); the
        future is done once its relay is over."""
        self.attached = True
        if self._streams is None:
            self._streams = asyncio.get_running_loop().create_future()
        if not self._streams.done():
            self._streams.set_result((reader, writer))
        return self._detached

    async def wait(self) -> int:
        """Relay its rejoined connection until it closes, then await its exit: the
        code it said in its last frame, else ``EXIT_LOST``."""
        loop = asyncio.get_running_loop()
        if self._streams is None:
            self._streams = loop.create_future()
        gone = asyncio.ensure_future(self._gone())
        try:
            waiting: list[asyncio.Future[Any]] = [gone, self._streams]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if self._streams.done():
                reader, writer = self._streams.result()
                try:
                    await self._relay.serve(self._launch, reader, writer, self.work_done)
                except PipeError as exc:
                    log.error("adopted job %s: bad frame, killing it: %s", self._launch.job_id, exc)
                    with contextlib.suppress(ProcessLookupError):
                        self.kill()
                finally:
                    writer.close()
            await gone
        finally:
            gone.cancel()
        if self.exited_mono is None:
            self.exited_mono = time.monotonic()
        if self._streams.done() and not self._detached.done():
            self._detached.set_result(None)
        code = self.work_done.code
        return EXIT_LOST if code is None else code

    async def _gone(self) -> None:
        pidfd = self._pidfd
        if pidfd is None:
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        loop.add_reader(pidfd, _settle, done)
        try:
            await done
        finally:
            loop.remove_reader(pidfd)
        self.exited_mono = time.monotonic()
        self._close()


@dataclass(frozen=True, slots=True)
class Adopted:
    """A part taken over: its record, its launch and its process."""

    record: PartRecord
    launch: Launch
    forked: Forked
    process: AdoptedProcess


@dataclass(frozen=True, slots=True)
class Lost:
    """A part found that is not adopted: reported ``fenced`` so the scheduler requeues it."""

    job_id: str
    attempt: int
    why: str


@dataclass(slots=True)
class Survey:
    adopted: list[Adopted] = field(default_factory=list)
    lost: list[Lost] = field(default_factory=list)
    #: Records that could not be read (garbage, forged, another part's name).
    bad_records: int = 0
    #: Processes killed because they could not be adopted (alive and verifiably ours).
    killed: int = 0
    #: The predecessor stopped because its operator asked (its incarnation record says
    #: so, ``nodeagent.survival.incarnation``): what is lost is reported ``stopped``.
    after_stop: bool = False


def _launch_of(record: PartRecord, agent_id: str) -> Launch:
    try:
        launch = Launch.from_argv(record.argv)
    except LaunchError as exc:
        raise StateError(f"record of {record.job_id!r}: {exc}") from None
    if (launch.job_id, launch.attempt, launch.agent) != (record.job_id, record.attempt, agent_id):
        raise StateError(f"record of {record.job_id!r} names another part or agent")
    if launch.relay_socket is None:
        raise StateError(f"part {record.job_id!r} was not launched to rejoin (no relay socket)")
    return launch


def _open_own(forked: Forked) -> int | None:
    """A pidfd on the very process the fork server noted, or None (gone or pid reused)."""
    if start_time(forked.pid) != forked.start_time:
        return None
    try:
        pidfd = os.pidfd_open(forked.pid)
    except ProcessLookupError:
        return None
    # Read again now that the pidfd pins the pid: the same start time means the pidfd
    # holds the process that was forked, not one that took its pid since.
    if start_time(forked.pid) != forked.start_time:
        os.close(pidfd)
        return None
    return pidfd


async def _kill_and_wait(pidfd: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    loop.add_reader(pidfd, _settle, done)
    try:
        await done
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def survey(state: StateDir, agent_id: str, relay: Relay, *, adopt: bool) -> Survey:
    """Adopt or settle every part the state directory names (module docstring)."""
    result = Survey()
    for key in state.part_keys():
        record, forked, why = state.read(key)
        job_id, _, attempt_text = key.rpartition("@")
        launch: Launch | None = None
        if record is not None and why is None:
            try:
                launch = _launch_of(record, agent_id)
            except StateError as exc:
                why = str(exc)
        elif record is None and why not in (None, "no record"):
            result.bad_records += 1
            log.warning("agent %s: part record %s refused: %s", agent_id, key, why)
        pidfd = None if forked is None else _open_own(forked)
        if forked is not None and pidfd is None and why is None:
            why = f"process {forked.pid} is gone (or its pid is another process's now)"
        if not adopt and why is None:
            why = "adoption is off (--no-adopt)"
        if (
            why is None
            and record is not None
            and launch is not None
            and forked is not None
            and pidfd is not None
        ):
            process = AdoptedProcess(forked.pid, pidfd, forked, relay, launch)
            result.adopted.append(Adopted(record, launch, forked, process))
            log.info("agent %s: adopted part %s (pid %d)", agent_id, key, forked.pid)
            continue
        if pidfd is not None and forked is not None:
            result.killed += 1
            log.warning("agent %s: killing part %s (pid %d): %s", agent_id, key, forked.pid, why)
            await _kill_and_wait(pidfd)
        ran = forked is not None or state.has_pid_file(key)
        state.remove_key(key)
        if not ran:
            # No pid file: never forked (the fork server writes it before the child may
            # run), so nothing ran. Not reported: the scheduler, which never heard it
            # started, sends that start again (``scheduler.live.agent_hold``).
            log.info("agent %s: part %s was never forked: dropped", agent_id, key)
            continue
        if job_id and attempt_text.isdigit() and int(attempt_text) >= 1:
            result.lost.append(Lost(job_id, int(attempt_text), why or "unknown"))
            log.warning("agent %s: part %s not adopted: %s", agent_id, key, why)
    return result


def _peer_pid(writer: asyncio.StreamWriter) -> int | None:
    sock = writer.get_extra_info("socket")
    if sock is None:
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _uid, _gid = struct.unpack("3i", creds)
    return int(pid)


class RejoinServer:
    """The agent's relay socket: adopted jobs rejoin here (module docstring)."""

    def __init__(
        self, state: StateDir, adopted: dict[str, AdoptedProcess], stats: RelayStats
    ) -> None:
        self._state = state
        self._adopted = adopted
        self._server: asyncio.AbstractServer | None = None
        self.stats = stats

    async def __aenter__(self) -> RejoinServer:
        path = self._state.socket_path
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # the old incarnation's: we hold the machine's lock
        self._server = await asyncio.start_unix_server(self._serve, path=str(path))
        os.chmod(path, 0o600)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Take no more connections: a job whose pipe breaks now (its agent leaves it
        to the next incarnation) finds the socket refusing and tries again, until
        that incarnation's server is there, instead of being refused by this one."""
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HELLO_TIMEOUT):
                hello = await read_frame(reader)
        except (TimeoutError, PipeError, ConnectionError) as exc:
            self._refuse(writer, f"no hello: {exc}")
            return
        if hello is None or hello.op != HELLO:
            self._refuse(writer, "the first frame is not HELLO")
            return
        process = self._adopted.get(hello.topic)
        pid = _peer_pid(writer)
        if process is None or process.attached or pid != process.pid:
            self._refuse(writer, f"{hello.topic!r} from pid {pid} is no adopted part's process")
            return
        detached = process.attach(reader, writer)
        writer.write(Frame(WELCOME, hello.topic).pack())
        self.stats.rejoined += 1
        log.info("adopted part %s rejoined (pid %d)", hello.topic, pid)
        await detached  # the connection is the relay's until the job is gone

    def _refuse(self, writer: asyncio.StreamWriter, why: str) -> None:
        self.stats.rejoin_refused += 1
        log.warning("relay socket: connection refused: %s", why)
        with contextlib.suppress(ConnectionError, RuntimeError):
            writer.write(Frame(WELCOME, "").pack())
        writer.close()


def adopted_key(process: Adopted) -> str:
    return part_key(process.record.job_id, process.record.attempt)
