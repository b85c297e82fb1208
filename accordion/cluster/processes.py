"""One child process of ``accordion up``: started, stopped, restarted, in its own group.

Each child runs in a session (process group) of its own, so the terminal's
Ctrl-C reaches only ``accordion up``, which stops the cluster in order. A stop
is SIGTERM, SIGKILL after a grace, and anything left in the child's process
group (job processes of an agent that had to be killed) is killed too. On
Linux each child also gets SIGTERM when ``accordion up`` itself dies
(``PR_SET_PDEATHSIG``), so even a SIGKILLed ``accordion up`` leaves nothing
running. A child keeps its command line, so it can be started again the same
way after it died (:meth:`Child.restart`); its log is appended to.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_libc_name = ctypes.util.find_library("c") if sys.platform == "linux" else None
# Loaded here, in the parent: the child only calls it between fork and exec.
_libc = ctypes.CDLL(_libc_name, use_errno=True) if _libc_name else None


class UpError(RuntimeError):
    """The local cluster could not be started or stopped working (names the log)."""


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux)."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM meanwhile (main thread only): a second Ctrl-C must
    not cut an ordered stop short, which is bounded by the graces anyway."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@dataclass(slots=True, kw_only=True)
class Child:
    """A supervised process: how to start it, and the running one."""

    role: str
    name: str
    argv: tuple[str, ...]
    log: Path
    cwd: Path
    env: Mapping[str, str]
    #: Give it a stdin pipe that we hold: the embedded broker ends on its EOF.
    stdin_pipe: bool = False
    address: str = ""
    #: Times it was started again after it died.
    restarts: int = 0
    #: When it was last started, on the ``clock`` of :func:`spawn` (a supervisor's).
    started_at: float = 0.0
    clock: Callable[[], float] = time.monotonic
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def process(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise RuntimeError(f"{self.name} was never started")
        return self._process

    @property
    def pid(self) -> int:
        return self.process.pid

    def start(self) -> None:
        with self.log.open("ab") as out:
            self._process = subprocess.Popen(
                list(self.argv),
                stdin=subprocess.PIPE if self.stdin_pipe else subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=dict(self.env),
                # Our own group: the terminal's Ctrl-C is ours to turn into an ordered stop.
                start_new_session=True,
                # Only prctl runs between fork and exec, on a libc loaded beforehand.
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )
        self.started_at = self.clock()

    def restart(self) -> None:
        """Start it again the same way (after :meth:`finish` of the dead one)."""
        self.restarts += 1
        self.start()

    def alive(self) -> bool:
        return self.process.poll() is None

    def exit_code(self) -> int | None:
        return self.process.poll()

    def terminate(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)

    def finish(self, grace: float, *, keep_group: bool = False) -> None:
        """Wait for the child after ``terminate``; SIGKILL its group after ``grace`` s.

        ``keep_group``: a child that exits by itself within the grace leaves what is
        left in its group running (an agent's job processes, which its next
        incarnation adopts within their lease, and which stop by it otherwise).
        """
        pgid = self.process.pid  # start_new_session: the child leads its own group
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            keep_group = False
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            self.process.wait()
        if self.process.stdin is not None:
            self.process.stdin.close()
        if keep_group:
            return
        # Members left in the group (job processes of a killed agent) keep the group
        # id theirs, so it cannot name anyone else's processes while the check succeeds.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, 0)
            os.killpg(pgid, signal.SIGKILL)

    def tail(self, lines: int = 5) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    def died(self) -> UpError:
        code = self.process.poll()
        return UpError(
            f"{self.role} {self.name} exited with code {code} (log {self.log}): {self.tail()}"
        )


def spawn(
    role: str,
    name: str,
    argv: Sequence[str],
    *,
    run_dir: Path,
    env: Mapping[str, str],
    stdin_pipe: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> Child:
    """Start ``argv`` as a child logging to ``run_dir/<name>.log``."""
    child = Child(
        role=role,
        name=name,
        argv=tuple(argv),
        log=run_dir / f"{name}.log",
        cwd=run_dir,
        env=env,
        stdin_pipe=stdin_pipe,
        clock=clock,
    )
    child.start()
    return child
