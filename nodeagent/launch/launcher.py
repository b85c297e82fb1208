"""The fork server's own process: warm once, then fork one job process per request.

Theory of operation (the agent's side, and the failure rules, are in
``nodeagent.launch.forkserver``). Started as ``python -m nodeagent.launch.launcher
--fd=N`` by its agent, this process imports the job module and its
dependencies once, says ``ready``, and then forks one job process per
request. It is single-threaded and never runs an event loop, so a fork copies
no loop, thread or lock in use. A forked child runs ``nodeagent.job.sleep_job.main``
on the request's command line, with the request's two pipes as its stdin and
stdout (the job's ``--pipe`` bus, relayed by its agent: ``nodeagent.launch.relay``).

The wire, over a ``SOCK_SEQPACKET`` unix socket pair (one JSON message per
packet; file descriptors ride along as ``SCM_RIGHTS``):

- agent to server: ``{"op": "launch", "id": n, "argv": [...]}`` with two
  fds, the job's ends of its two relay pipes (its stdin and stdout), and
  optionally ``"pidfile": path``: the server writes the child's pid, start
  time and fork instants there (``nodeagent.survival.state.Forked``) before the child
  may run, so an agent killed meanwhile leaves no job process unrecorded. The
  agent may send many before any answer: the server forks all those waiting
  back to back, in order, and only then lets their children run (a *batch*,
  see ``_launch_batch``);
- server to agent: ``{"op": "ready"}`` once warm; ``{"op": "started", "id":
  n, "pid": p, "at": t, "mono": m}`` with the child's pidfd (``at``: the wall
  time of the fork, which the child also counts its work from; ``mono``: the
  same instant on ``CLOCK_MONOTONIC``, which every process of the host shares,
  so the agent measures launch latency and run time on one clock);
  ``{"op": "failed", "id": n, "error": "..."}``; ``{"op": "exited", "pid":
  p, "code": c, "mono": m}`` (negative ``c``: killed by that signal; ``mono``:
  when it was reaped), as the server reaps its children on SIGCHLD.

The agent dies: the server reads EOF and exits; its children are left
running (no ``PR_SET_PDEATHSIG``, no signal to its group): they outlive their
agent within their lease, for a new incarnation to adopt
(``nodeagent.survival.adoption``). ``--hold-fd`` is an fd the server keeps open and
its children never get: the agent's lock on its state directory
(``nodeagent.survival.state``), held until the server is gone too. SIGINT and SIGTERM do not
stop the server (a Ctrl-C at a terminal reaches the agent's whole process
group, and the agent stops its parts first). Children get the default
handlers back before the job module runs.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import gc
import json
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from setproctitle import setproctitle

import nodeagent.job.command  # noqa: F401 (warm: a command part's supervisor is forked from here)
from nodeagent.job.sleep_job import main as job_main
from nodeagent.launch.contract import EXIT_LOST, JOB_MODULE
from nodeagent.survival.state import Forked, StateError, start_time, write_atomic

MODULE = "nodeagent.launch.launcher"
MAX_MESSAGE = 1 << 16
GATE_OPEN = b"g"
"""What the server writes on a batch's gate, once per launch, to let its children run."""
"""64 KiB: a launch's command line is well under 1 KiB."""

_FDS = socket.CMSG_SPACE(2 * array.array("i", [0]).itemsize)
MAX_BATCH = 256
"""Launches forked before their children start (``_launch_batch``)."""


def send(sock: socket.socket, message: dict[str, Any], fd: int | None = None) -> None:
    data = json.dumps(message).encode()
    if fd is None:
        sock.sendmsg([data])
    else:
        fds = array.array("i", [fd])
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])


def recv(sock: socket.socket, flags: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and its fds; (None, []) at EOF. With ``socket.MSG_DONTWAIT``,
    ``BlockingIOError`` when none is waiting."""
    data, ancdata, _flags, _addr = sock.recvmsg(MAX_MESSAGE, _FDS, flags)
    fds: list[int] = []
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(array.array("i", payload[: len(payload) - len(payload) % 4]))
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    message = json.loads(data)
    if not isinstance(message, dict):
        raise ValueError(f"fork server message is not an object: {data[:80]!r}")
    return message, fds


def _warm() -> None:
    """Settle what every job process shares, once, before any fork.

    The job module and its dependencies (msgspec, uvloop, aiomqtt) are
    imported with this module.
    """
    # Objects alive now are shared by every child; keeping the collector off them
    # keeps their pages shared (no copy-on-write from refcount-free GC passes).
    gc.collect()
    gc.freeze()


def _child(
    argv: list[str], stdio: Sequence[int], started: float, closing: Sequence[int], gate: int
) -> NoReturn:
    """In the forked child: become the job process of ``argv``; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in closing:
            os.close(fd)
        # Wait for the rest of this batch to be forked (see ``_launch_batch``): one
        # byte each once the server has recorded them all. End-of-file means the
        # server died first: the job must not run unrecorded (nobody could adopt it).
        if os.read(gate, 1) != GATE_OPEN:
            os._exit(EXIT_LOST)
        os.close(gate)
        os.dup2(stdio[0], 0)
        os.dup2(stdio[1], 1)
        for fd in stdio:
            os.close(fd)
        # The work counts from the fork: the moment this process runs (it is
        # already warm), whatever the agent's clock said when it asked.
        args = [a for a in argv if not a.startswith("--start-at=")]
        args.append(f"--start-at={started!r}")
        # ps and /proc show what runs here, as for an exec'd job process.
        setproctitle(" ".join([sys.executable, "-m", JOB_MODULE, *args]))
        code = job_main(args)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code if isinstance(exc.code, int) else 2
    except BaseException:  # noqa: BLE001 (the child must never return into the server's loop)
        # A bug in the job: its traceback, then exit 1.
        traceback.print_exc()
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
            sys.stderr.flush()
    os._exit(code)


def serve(sock: socket.socket, hold: Sequence[int] = ()) -> int:
    """The fork server's loop, until its agent closes ``sock``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    # A handler (not SIG_DFL) so the kernel delivers SIGCHLD and the wakeup fd is written.
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    _warm()
    send(sock, {"op": "ready", "pid": os.getpid()})
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    # What a child must not keep: it is its agent's launcher's, not the job's.
    closing = (sock.fileno(), wake_r, wake_w, selector.fileno(), *hold)
    while True:
        for key, _ in selector.select():
            if key.fd == wake_r:
                with contextlib.suppress(BlockingIOError):
                    while os.read(wake_r, 4096):
                        pass
                _reap(sock)
                continue
            if not _launch_batch(sock, closing):
                return 0  # the agent is gone or done: so is its launcher
        _reap(sock)


def _launch_batch(sock: socket.socket, closing: Sequence[int]) -> bool:
    """Fork every launch waiting on ``sock``, then let them all run; False at EOF.

    Why a batch: the server is one process among the children it forks, and a
    child starting up competes with it for the cores; 64 children starting
    while the server forks the 65th starve it (on two busy cores, forks of
    8-15 ms instead of about 1 ms). So the children of one batch wait on a
    gate (a pipe) until all of them are forked, then start together.
    """
    batch: list[tuple[dict[str, Any], list[int]]] = []
    message, fds = recv(sock)
    while message is not None:
        batch.append((message, fds))
        if len(batch) >= MAX_BATCH:
            break
        try:
            message, fds = recv(sock, socket.MSG_DONTWAIT)
        except BlockingIOError:
            break
    gate, gate_w = os.pipe()
    try:
        for i, (request, request_fds) in enumerate(batch):
            # A child must not keep the pipes of the launches after it in the batch
            # (still open here): a job's relay would see no end of stream while any
            # sibling holds its write end, and its agent would wait for that sibling.
            later = [fd for _, fds_after in batch[i + 1 :] for fd in fds_after]
            _launch(sock, request, request_fds, (*closing, gate_w, *later), gate)
    finally:
        # One byte per launch opens the gate: a child that reads end-of-file instead
        # (this server died after its fork, perhaps before its pid file was written)
        # never runs, so no job process runs unrecorded. Surplus bytes are harmless.
        with contextlib.suppress(OSError):
            os.write(gate_w, GATE_OPEN * len(batch))
        os.close(gate_w)  # the batch runs
        os.close(gate)
    return message is not None


def _launch(
    sock: socket.socket,
    message: dict[str, Any],
    fds: list[int],
    closing: Sequence[int],
    gate: int,
) -> None:
    request = message.get("id")
    argv = message.get("argv")
    if (
        message.get("op") != "launch"
        or len(fds) != 2
        or not isinstance(argv, list)
        or not all(isinstance(a, str) for a in argv)
    ):
        for fd in fds:
            os.close(fd)
        send(sock, {"op": "failed", "id": request, "error": "malformed launch request"})
        return
    started, mono = time.time(), time.monotonic()
    try:
        pid = os.fork()
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        send(sock, {"op": "failed", "id": request, "error": f"fork: {exc}"})
        return
    if pid == 0:
        _child(argv, fds, started, closing, gate)
    for fd in fds:
        os.close(fd)  # the child's now; the next child must not inherit them
    pidfile = message.get("pidfile")
    if isinstance(pidfile, str):
        _note_fork(pidfile, pid, started, mono)
    # The child cannot be reaped before this server waits for it: the pid is its own.
    pidfd = os.pidfd_open(pid)
    try:
        send(
            sock,
            {"op": "started", "id": request, "pid": pid, "at": started, "mono": mono},
            pidfd,
        )
    finally:
        os.close(pidfd)


def _note_fork(path: str, pid: int, started: float, mono: float) -> None:
    """Write the child's pid file; the child waits on the batch's gate meanwhile."""
    born = start_time(pid)
    if born is None:
        return  # it cannot be gone before its gate opens; nothing to adopt if it were
    try:
        write_atomic(Path(path), Forked(pid, born, started, mono).dump())
    except (OSError, StateError) as exc:
        # The part runs unrecorded: a new incarnation cannot adopt it, and its lease,
        # renewed by nobody then, stops it. Said, not fatal to the other launches.
        print(f"fork server: cannot write {path}: {exc}", file=sys.stderr)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        send(sock, {"op": "exited", "pid": pid, "code": code, "mono": time.monotonic()})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__)
    parser.add_argument("--fd", type=int, required=True, help="the agent's socket (inherited)")
    parser.add_argument(
        "--hold-fd", type=int, action="append", default=[], help="kept open, never inherited"
    )
    args = parser.parse_args(argv)
    with socket.socket(fileno=args.fd) as sock:
        sock.setblocking(True)
        try:
            return serve(sock, tuple(args.hold_fd))
        except (BrokenPipeError, ConnectionResetError):
            return 0  # the agent went away while we were telling it something


if __name__ == "__main__":
    sys.exit(main())
