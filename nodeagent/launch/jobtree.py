"""A command job's process tree: every process it started, found, signalled and pinned as one.

A user's command may fork, double-fork, ``setsid`` into a new session and
leave daemons behind: its process group and its session say nothing about
what it started. Cancel, the wall-time limit and a lapsed lease must still
end all of it. Two ways, chosen by the agent per machine (``cgroup_base``)
and said in its log and its docs:

- **a cgroup v2 per part** (:class:`CgroupTree`), where the agent may create
  one: a ``cgroup2`` mount (``/proc/self/mountinfo``; on a hybrid host the
  ``unified`` one), its own cgroup (``/proc/self/cgroup``'s ``0::`` line)
  writable by it, and ``cgroup.kill`` there (Linux 5.14). The command's
  process moves itself into its part's cgroup before it execs, so everything
  it starts is born inside, whatever session it makes. TERM goes to every
  process in it while the cgroup is frozen (none can fork or exit meanwhile,
  so no pid is reused under the signal); KILL is one write to ``cgroup.kill``,
  which the kernel applies to every process, including those forking at
  that moment. Empty is ``populated 0`` in ``cgroup.events``;
- **otherwise, the supervisor as subreaper** (:class:`DescendantTree`): the
  command's supervisor sets ``PR_SET_CHILD_SUBREAPER``, so an orphan of the
  command (a daemon whose parent exited) is re-parented to it, not to init,
  and the tree is every process whose parent chain leads to it, walked in
  ``/proc``. A pid is signalled through a pidfd opened after the walk and
  checked against the start time the walk read, so a pid reused meanwhile is
  never signalled. Its limit: a process that leaves the tree while the
  supervisor is not there to inherit it (the supervisor SIGKILLed) escapes.

Pinning (:func:`pin_tree`) sets the affinity of every thread
(``/proc/PID/task/*``) of every process of the tree: a resize folds or
unfolds a running program, as the FCFS-malleable paper's runtime did.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

PR_SET_CHILD_SUBREAPER = 36
FREEZE_PATIENCE = 1.0
"""Wall seconds a cgroup has to report itself frozen before TERM goes out unfrozen."""


class TreeError(OSError):
    """A cgroup that cannot be made, entered or removed."""


class JobTree(Protocol):
    """The processes of one command part, however they are kept."""

    def pids(self) -> set[int]: ...

    def signal(self, signum: int) -> None:
        """Send ``signum`` to every process of the tree."""
        ...

    def kill(self) -> None:
        """SIGKILL every process of the tree."""
        ...

    def populated(self) -> bool: ...


# -- cgroup v2 ---------------------------------------------------------------------


def cgroup2_mount(mountinfo: str = "/proc/self/mountinfo") -> Path | None:
    """Where the cgroup v2 hierarchy is mounted here, if it is."""
    try:
        with open(mountinfo, encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if " - " not in line:
                    continue
                after = line.split(" - ", 1)[1].split()
                if after and after[0] == "cgroup2":
                    return Path(fields[4])
    except OSError:
        return None
    return None


def own_cgroup(pid: int | str = "self") -> str | None:
    """A process's cgroup v2 path (``/proc/PID/cgroup``'s ``0::`` line)."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        return None
    return None


def cgroup_base(name: str) -> tuple[Path | None, str]:
    """Where an agent can keep its parts' cgroups: ``(directory, why)``.

    The directory is ``<mount><its own cgroup>/<name>``, created, when the agent may
    create cgroups there and move processes into them; else ``None`` and the reason
    (the supervisor then walks its descendants as their subreaper).
    """
    mount = cgroup2_mount()
    if mount is None:
        return None, "no cgroup v2 hierarchy is mounted"
    own = own_cgroup()
    if own is None:
        return None, "this process has no cgroup v2 path"
    parent = mount / own.lstrip("/")
    if not (os.access(parent, os.W_OK) and os.access(parent / "cgroup.procs", os.W_OK)):
        return None, f"{parent} is not writable by this agent (no cgroup delegated to it)"
    base = parent / name
    try:
        base.mkdir(exist_ok=True)
    except OSError as exc:
        return None, f"cannot create {base}: {exc.strerror}"
    # (A root cgroup has no cgroup.kill of its own: the test is on one we made.)
    if not (base / "cgroup.kill").exists():
        with contextlib.suppress(OSError):
            base.rmdir()
        return None, f"{base} has no cgroup.kill (Linux 5.14 or later needed)"
    return base, f"a cgroup v2 per part under {base}"


class CgroupTree:
    """A part's processes as one cgroup v2 directory (module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def create(self) -> None:
        """Make the cgroup; one left by an earlier run of the part is emptied first."""
        try:
            self.path.mkdir()
        except FileExistsError:
            self.kill()
            self.wait_empty(5.0)
        except OSError as exc:
            raise TreeError(exc.errno, f"cannot create cgroup {self.path}: {exc.strerror}") from exc

    def enter(self) -> None:
        """Move the calling process into the cgroup (its children are born inside)."""
        _write(self.path / "cgroup.procs", "0")

    def pids(self) -> set[int]:
        try:
            text = (self.path / "cgroup.procs").read_text()
        except FileNotFoundError:
            return set()
        return {int(p) for p in text.split()}

    def populated(self) -> bool:
        try:
            text = (self.path / "cgroup.events").read_text()
        except FileNotFoundError:
            return False
        return "populated 1" in text

    def signal(self, signum: int) -> None:
        if signum == signal.SIGKILL:
            self.kill()
            return
        frozen = self._freeze(True)
        try:
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)
        finally:
            if frozen:
                self._freeze(False)

    def kill(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            _write(self.path / "cgroup.kill", "1")

    def wait_empty(self, patience: float, *, step: float = 0.01) -> bool:
        """Block until the cgroup is empty (or ``patience`` s passed): whether it is."""
        deadline = time.monotonic() + patience
        while self.populated():
            if time.monotonic() >= deadline:
                return False
            time.sleep(step)
        return True

    def remove(self) -> bool:
        """Remove the (empty) cgroup; False if it still holds processes."""
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                return False
            raise
        return True

    def _freeze(self, on: bool) -> bool:
        """Freeze (or thaw) the cgroup; whether it is frozen now."""
        try:
            _write(self.path / "cgroup.freeze", "1" if on else "0")
        except OSError:
            return False
        if not on:
            return False
        deadline = time.monotonic() + FREEZE_PATIENCE
        while time.monotonic() < deadline:
            try:
                if "frozen 1" in (self.path / "cgroup.events").read_text():
                    return True
            except FileNotFoundError:
                return False
            time.sleep(0.001)
        return True  # the freeze is asked for: signals wait for the thaw either way


async def remove_cgroup(path: str | os.PathLike[str], patience: float = 5.0) -> bool:
    """KILL what is left in a part's cgroup and remove it; whether it is gone."""
    tree = CgroupTree(path)
    deadline = time.monotonic() + patience
    while True:
        tree.kill()
        if tree.remove():
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.01)  # a SIGKILLed tree empties within milliseconds


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# -- the subreaper walk --------------------------------------------------------------


def _stat(pid: int) -> tuple[int, int, bytes] | None:
    """``(ppid, start time, state)`` of ``pid`` from ``/proc``, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    return int(fields[1]), int(fields[19]), fields[0]


def parent(pid: int) -> int | None:
    """The parent of ``pid``, None if it is gone."""
    stat = _stat(pid)
    return None if stat is None else stat[0]


def descendants(root: int) -> dict[int, int]:
    """Every live process below ``root`` (not itself): pid -> start time."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        stat = _stat(pid)
        if stat is None or stat[2] in (b"Z", b"X"):
            continue
        children.setdefault(stat[0], []).append((pid, stat[1]))
    found: dict[int, int] = {}
    todo = [root]
    while todo:
        for pid, start in children.get(todo.pop(), ()):
            if pid not in found and pid != root:
                found[pid] = start
                todo.append(pid)
    return found


class DescendantTree:
    """A part's processes as the descendants of its supervisor, their subreaper."""

    def __init__(self, root: int) -> None:
        self.root = root

    def pids(self) -> set[int]:
        return set(descendants(self.root))

    def populated(self) -> bool:
        return bool(descendants(self.root))

    def signal(self, signum: int) -> None:
        for pid, start in descendants(self.root).items():
            _signal_checked(pid, start, signum)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)


def _signal_checked(pid: int, start: int, signum: int) -> None:
    """Signal ``pid`` only if it is still the process that started at ``start``."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        stat = _stat(pid)
        if stat is not None and stat[1] == start:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signum)
    finally:
        os.close(pidfd)


def become_subreaper() -> None:
    """Make the calling process the subreaper of its descendants (Linux 3.4)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"PR_SET_CHILD_SUBREAPER: {os.strerror(err)}")


# -- pinning -------------------------------------------------------------------------

PIN_PASSES = 20
"""At most this many passes over a tree's threads (each after the first only finds
threads created during the one before)."""


def pin_tree(pids: Iterable[int], cores: Iterable[int]) -> int:
    """Pin every thread of every process in ``pids`` to ``cores``; threads moved.

    A thread created while a pass runs copies its creator's mask, the old one if
    its creator was not pinned yet, and may not be listed by then (a program in
    its start-up, as MPI's initialisation is, starts threads at any moment). So
    passes repeat until one finds every thread already there: from then on, every
    thread that exists is pinned, and any new one inherits its creator's mask.
    """
    wanted = set(cores)
    members = tuple(pids)
    moved = 0
    for _ in range(PIN_PASSES):
        changed = 0
        for pid in members:
            try:
                threads = os.listdir(f"/proc/{pid}/task")
            except (FileNotFoundError, ProcessLookupError):
                continue
            for tid in threads:
                with contextlib.suppress(OSError):  # gone, or a core it may not use
                    if os.sched_getaffinity(int(tid)) != wanted:
                        os.sched_setaffinity(int(tid), wanted)
                        changed += 1
        moved += changed
        if not changed:
            break
    return moved


def thread_masks(pids: Iterable[int]) -> set[frozenset[int]]:
    """The distinct CPU masks of the threads of ``pids`` (one mask: they agree)."""
    seen: set[frozenset[int]] = set()
    for pid in pids:
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except (FileNotFoundError, ProcessLookupError):
            continue
        for tid in threads:
            with contextlib.suppress(OSError):  # gone meanwhile
                seen.add(frozenset(os.sched_getaffinity(int(tid))))
    return seen
