"""A user's command, forked by its supervisor and set up until it execs.

Theory of operation. The supervisor (``nodeagent.job.command``) forks the
command before its event loop exists (a fork never copies a running loop),
as the MPI-like leader forks its ranks. The child then, in this order, and
nothing of Python's runs after its ``exec``:

1. every signal back to its default and none blocked (Python ignores
   ``SIGPIPE`` and ``SIGXFSZ``, and an ignored signal stays ignored across
   ``exec``);
2. into the part's cgroup, if it has one (while it still may: as the agent's
   account), so everything it starts is born inside;
3. pinned to the part's cores (inherited by all it starts);
4. a session of its own (``setsid``): no terminal, and signals to the
   supervisor's group never reach it;
5. the job's OS account: supplementary groups, group, then user (``setuid``
   as root sets all three uids, so there is no way back);
6. ``PR_SET_PDEATHSIG`` SIGKILL, armed after the ids changed (a change of ids
   clears it), then a check that the supervisor is still its parent;
7. as that account: into the working directory, stdout and stderr files
   opened (created 0644 under umask 022, truncated as ``sbatch`` does),
   stdin from ``/dev/null``, every other descriptor closed (the relay pipes
   and the agent's log are the supervisor's, never the job's);
8. ``execvpe`` with the plan's environment (``PATH`` searched in it).

A step that fails writes ``what: why`` on an error pipe (close-on-exec, so a
successful ``exec`` closes it empty) and exits 127 when there was nothing to
exec, 126 otherwise, as a shell would.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass

from nodeagent.launch.command_plan import CommandPlan
from nodeagent.launch.jobtree import CgroupTree, become_subreaper

_PR_SET_PDEATHSIG = 1
EXIT_NOT_FOUND = 127
EXIT_CANNOT_RUN = 126


@dataclass(slots=True)
class CommandChild:
    """The forked command, as its supervisor holds it: its pid, a pidfd that polls
    readable once it exits, and the read end of its error pipe."""

    pid: int
    pidfd: int
    errors: int

    def why_not_started(self) -> str | None:
        """What the child wrote before it could exec (None: it exec'd, or wrote nothing).

        Read once it has exited: its end of the pipe is closed by then.
        """
        chunks: list[bytes] = []
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.errors, 4096):
                chunks.append(chunk)
                if sum(map(len, chunks)) > 4096:
                    break
        text = b"".join(chunks).decode("utf-8", "replace").strip()
        return text or None

    def close(self) -> None:
        for fd in (self.pidfd, self.errors):
            with contextlib.suppress(OSError):
                os.close(fd)


def spawn(plan: CommandPlan) -> CommandChild:
    """Fork the plan's command (module docstring); call before any event loop runs.

    The caller becomes the subreaper of what the command leaves behind.
    """
    become_subreaper()
    libc = ctypes.CDLL(None, use_errno=True)
    errors, errors_w = os.pipe2(os.O_CLOEXEC)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the command: never returns
        _become(plan, errors_w, parent, libc)
    os.close(errors_w)
    os.set_blocking(errors, False)
    return CommandChild(pid, os.pidfd_open(pid), errors)


class _StepError(Exception):
    def __init__(self, what: str, exc: OSError) -> None:
        super().__init__(f"{what}: {exc.strerror or exc}")
        self.errno = exc.errno


def _become(plan: CommandPlan, errors: int, parent: int, libc: ctypes.CDLL) -> None:
    code = EXIT_CANNOT_RUN
    try:
        _setup(plan, parent, libc)
        program = plan.argv[0]
        try:
            os.execvpe(program, list(plan.argv), plan.environ())
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                code = EXIT_NOT_FOUND
            raise _StepError(f"cannot run {program!r}", exc) from None
    except _StepError as exc:
        with contextlib.suppress(OSError):
            os.write(errors, str(exc).encode()[:4000])
    except BaseException as exc:  # noqa: BLE001 (a forked child never returns into the supervisor)
        with contextlib.suppress(OSError):
            os.write(errors, f"the command's set-up failed: {exc!r}".encode()[:4000])
    os._exit(code)


def _setup(plan: CommandPlan, parent: int, libc: ctypes.CDLL) -> None:
    for signum in signal.valid_signals():
        if signum not in (signal.SIGKILL, signal.SIGSTOP):
            with contextlib.suppress(OSError, ValueError):
                signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    if plan.cgroup is not None:
        _step("cannot enter the job's cgroup", lambda: CgroupTree(plan.cgroup or "").enter())
    if plan.cores:
        _step("cannot pin to the part's cores", lambda: os.sched_setaffinity(0, plan.cores))
    os.setsid()
    run_as = plan.run_as
    if run_as is not None:

        def drop() -> None:
            os.setgroups(list(run_as.groups))
            os.setgid(run_as.gid)
            os.setuid(run_as.uid)

        _step(f"cannot become {run_as.user!r}", drop)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != parent:
        os._exit(EXIT_CANNOT_RUN)  # the supervisor is gone: nobody would end this command
    os.umask(0o022)
    _step(f"cannot enter the working directory {plan.chdir}", lambda: os.chdir(plan.chdir))
    out = _open_output(plan.stdout)
    err = out if plan.stderr is None else _open_output(plan.stderr)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    # Everything else is the supervisor's: its relay pipes above all.
    _close_above(2)


def _close_above(low: int) -> None:
    """Close every descriptor above ``low`` but the close-on-exec ones (the error pipe
    closes itself at exec)."""
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        if fd <= low:
            continue
        with contextlib.suppress(OSError):
            if os.get_inheritable(fd):
                os.close(fd)


def _open_output(path: str) -> int:
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as exc:
        raise _StepError(f"cannot open the output file {path}", exc) from None


def _step(what: str, action: Callable[[], object]) -> None:
    try:
        action()
    except OSError as exc:
        raise _StepError(what, exc) from None
