"""The MPI-like workload's rank processes: their parameters, their loop, their wire.

Theory of operation. A part of an MPI-like job runs ``ranks`` real OS
processes, forked by the part's job process (its leader, ``nodeagent.job.mpi``)
before it starts its event loop, so a fork never copies a running loop. Each
rank talks to the leader over its own Unix socketpair (local IPC) and runs,
for every iteration:

1. compute: :func:`nodeagent.job.kernel.burn` of ``cpu_seconds`` (the job's
   ``compute`` scaled by the machine's speed and the time compression, the
   way the sleep workload scales time);
2. communication: one frame to the leader (its contribution: ``message_bytes``
   of float64 ones for an allreduce, nothing for a barrier), then a blocking
   wait for the leader's answer (the job-wide sum, or the barrier's release).

Each frame also carries the wall time of the rank's last compute phase and of
its previous communication phase, so the leader can report the job's CPU
utilisation ``u``. An allreduce's answer is checked: every element must be
the job's total rank count, else the rank exits :data:`EXIT_BAD_REDUCE`.

A rank dies with its leader (``PR_SET_PDEATHSIG``) and also exits when its
socket closes, so no rank outlives its part. Its stdin and stdout are
/dev/null: a leader relayed over its stdout (``--pipe``) must see that pipe
close when it exits, whatever its ranks do.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import struct
import sys
import time
import traceback
from array import array
from dataclasses import dataclass

from nodeagent.job.kernel import burn
from nodeagent.launch.contract import MpiParams

EXIT_BAD_REDUCE = 3
"""A rank whose allreduce came back wrong."""
EXIT_RANK_BUG = 70
"""A rank that raised (its traceback is on stderr): EX_SOFTWARE."""

# A frame: length (4 bytes), then iteration, compute wall s, previous comm wall s, data.
_LEN = struct.Struct("!I")
_HEAD = struct.Struct("!Idd")
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class Rank:
    """A forked rank, as its leader holds it."""

    index: int
    pid: int
    sock: socket.socket


@dataclass(frozen=True, slots=True)
class Contribution:
    """One frame from a rank: its iteration, phase timings and data."""

    iteration: int
    compute: float
    comm: float
    data: bytes


def fork_ranks(
    count: int, params: MpiParams, *, cpu_seconds: float, total_ranks: int
) -> list[Rank]:
    """Fork ``count`` ranks running :func:`rank_main`; call before any event loop runs.

    The ranks start together once all are forked (they wait on a gate, a pipe the
    leader closes): a rank that computed at once would compete for the cores with
    the leader still forking its siblings (64 ranks on 2 cores took twice as long).
    """
    ranks: list[Rank] = []
    libc = _libc()  # once here, not once per rank
    gate, gate_w = os.pipe()
    for index in range(count):
        parent_end, child_end = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the rank: never returns
            parent_end.close()
            for other in ranks:
                other.sock.close()
            code = EXIT_RANK_BUG
            try:
                os.close(gate_w)
                os.read(gate, 1)  # EOF once the leader forked every rank
                os.close(gate)
                code = rank_main(child_end, params, cpu_seconds, total_ranks, libc)
            # A forked rank must never unwind into the leader's code: a bug prints its
            # traceback here and the rank exits EXIT_RANK_BUG.
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        child_end.close()
        ranks.append(Rank(index, pid, parent_end))
    os.close(gate_w)  # the ranks go
    os.close(gate)
    return ranks


def _libc() -> ctypes.CDLL | None:
    """The C library (for ``prctl``), loaded once by a leader before it forks its ranks."""
    with contextlib.suppress(OSError):
        return ctypes.CDLL(None, use_errno=True)
    return None


def _die_with_parent(libc: ctypes.CDLL | None) -> None:
    if libc is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def rank_main(
    sock: socket.socket,
    params: MpiParams,
    cpu_seconds: float,
    total: int,
    libc: ctypes.CDLL | None = None,
) -> int:
    """One rank's whole life; its exit code."""
    leader = os.getppid()
    _die_with_parent(libc)
    if os.getppid() != leader:  # the leader died before the death signal was armed
        return 1
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    data = array("d", [1.0]) * params.doubles
    payload = data.tobytes()
    comm = 0.0
    try:
        for iteration in range(params.iterations):
            start = time.perf_counter()
            burn(cpu_seconds)
            computed = time.perf_counter()
            send_frame(sock, _HEAD.pack(iteration, computed - start, comm) + payload)
            answer = recv_frame(sock)
            comm = time.perf_counter() - computed
            if answer is None:
                return 1  # the leader is gone
            if params.doubles and not _summed(answer, params.doubles, total):
                return EXIT_BAD_REDUCE
        send_frame(sock, _HEAD.pack(params.iterations, 0.0, comm))
    except OSError:
        return 1
    return 0


def _summed(answer: bytes, doubles: int, total: int) -> bool:
    values = array("d")
    values.frombytes(answer)
    return len(values) == doubles and all(v == total for v in values)


def send_frame(sock: socket.socket, body: bytes) -> None:
    sock.sendall(_LEN.pack(len(body)) + body)


def recv_frame(sock: socket.socket) -> bytes | None:
    head = _recv_exactly(sock, _LEN.size)
    if head is None:
        return None
    (length,) = _LEN.unpack(head)
    return _recv_exactly(sock, length)


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks: list[bytes] = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def parse_contribution(body: bytes) -> Contribution:
    """A rank's frame; ValueError if it is too short."""
    if len(body) < _HEAD.size:
        raise ValueError(f"a rank frame of {len(body)} bytes is too short")
    iteration, compute, comm = _HEAD.unpack_from(body)
    return Contribution(iteration, compute, comm, body[_HEAD.size :])


def frame(body: bytes) -> bytes:
    """``body`` framed for a rank's socket."""
    return _LEN.pack(len(body)) + body


def add_into(total: array[float], data: bytes) -> None:
    """Element-wise ``total += data`` (float64s); ValueError on a size mismatch."""
    values = array("d")
    values.frombytes(data)
    if len(values) != len(total):
        raise ValueError(f"{len(values)} elements, expected {len(total)}")
    for i, v in enumerate(values):
        total[i] += v


def describe_exit(status: int) -> str:
    """A waitpid status in words: 'exit status 3' or 'killed by SIGKILL'."""
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.WEXITSTATUS(status)}"
