"""An agent's state directory: what a restarted agent for the same machine finds again.

Theory of operation. Parts outlive a killed agent for at most their lease
(``nodeagent.survival.lease``), and a new incarnation of the agent for the same
machine adopts them within it (``nodeagent.survival.adoption``). Everything the new
process needs lives in one directory per machine, created 0700 (only this
user reads the records and reaches the relay socket):

- ``agent.lock``: an exclusive ``flock`` held by the agent *and* its fork
  server (which inherits the open file). A new incarnation takes it before
  anything else, so no launch of the old one is still under way while it
  reads the records, and two agents never serve one machine from one host;
- ``agent.lease``: the agent's own lease (``lease_lapsed``, start fencing);
- ``relay.sock``: the unix socket job processes reconnect to when their
  relay pipe breaks (``nodeagent.job.rejoin``);
- ``parts/<job>@<attempt>.json``: the part's record, written by the agent
  before the launch (its launch options, CPUs, slots, wall-time account);
- ``parts/<job>@<attempt>.pid``: ``pid starttime at mono``, written by the
  fork server right after the fork and before the child may run (the batch's
  gate, ``nodeagent.launch.launcher``), so no job process runs without one; the
  start time (``/proc/PID/stat`` field 22) tells a reused pid apart;
- ``parts/<job>@<attempt>.lease``: the part's own lease file, renewed with
  the agent's on each acknowledged heartbeat. A part nobody adopts is
  renewed by nobody, so it stops by itself within its lease, whatever its
  record says or whether it has one that can be read.

Records are removed when their part ends. Everything here is plain JSON or
text read with checks: a record that cannot be read is refused (counted),
never trusted.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from nodeagent.launch.contract import part_key
from nodeagent.launch.json_fields import ints, strs, typed

RECORD_VERSION = 1
_KEY = re.compile(r"^(?P<job>[A-Za-z0-9_.:@-]{1,200})@(?P<attempt>[0-9]{1,9})$")
MAX_SOCKET_PATH = 107
"""Bytes of a unix socket's path (``sun_path`` holds 108 with its NUL)."""
#: A part's files here: its record, pid file and lease, and, by their owners' leave, its
#: failure file and a command part's plan and status (``nodeagent.agent.commands``).
PART_FILES = ("json", "pid", "lease", "failure", "cmd", "status")
MAX_RECORD = 1 << 16
"""64 KiB: a record is well under 2 KiB; anything larger is not ours."""


class StateError(ValueError):
    """A state directory that cannot be used, or a record that cannot be read."""


def default_state_dir(machine: str) -> Path:
    """``$XDG_RUNTIME_DIR/accordion/<machine>``, else ``/tmp/accordion-<uid>/<machine>``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "accordion" / machine
    return Path(tempfile.gettempdir()) / f"accordion-{os.getuid()}" / machine


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, ``/proc/PID/stat`` field 22);
    None if it is gone (a zombie counts as gone: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may hold anything: split after it.
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


@dataclass(frozen=True, slots=True, kw_only=True)
class PartRecord:
    """What a new incarnation needs to adopt and report one part."""

    job_id: str
    attempt: int
    cpus: int
    slots: tuple[int, ...]
    #: The job module's options (``Launch.argv``): the launch is rebuilt from them.
    argv: tuple[str, ...]
    #: Wall-time account: units left at ``changed`` (monotonic, host-wide), at ``rate``.
    budget: float
    rate: float
    changed: float
    resized: bool = False

    def __post_init__(self) -> None:
        if _KEY.match(part_key(self.job_id, self.attempt)) is None or self.attempt < 1:
            raise StateError(f"record names no part: {self.job_id!r} attempt {self.attempt!r}")
        if self.cpus < 1 or any(s < 0 for s in self.slots) or len(self.slots) > 65_536:
            raise StateError(f"record of {self.job_id!r}: bad CPUs or slots")
        for name in ("budget", "rate", "changed"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise StateError(f"record of {self.job_id!r}: bad {name} {value!r}")
        if self.rate <= 0:
            raise StateError(f"record of {self.job_id!r}: rate must be > 0")

    def dump(self) -> bytes:
        return json.dumps(
            {
                "version": RECORD_VERSION,
                "job_id": self.job_id,
                "attempt": self.attempt,
                "cpus": self.cpus,
                "slots": list(self.slots),
                "argv": list(self.argv),
                "budget": self.budget,
                "rate": self.rate,
                "changed": self.changed,
                "resized": self.resized,
            }
        ).encode()

    @classmethod
    def load(cls, data: bytes) -> PartRecord:
        try:
            raw = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise StateError(f"record is not JSON: {exc}") from None
        if not isinstance(raw, dict) or raw.get("version") != RECORD_VERSION:
            raise StateError("record is not a version-1 part record")
        try:
            return cls(
                job_id=typed(raw, "job_id", str),
                attempt=typed(raw, "attempt", int),
                cpus=typed(raw, "cpus", int),
                slots=tuple(ints(raw.get("slots"))),
                argv=tuple(strs(raw.get("argv"))),
                budget=float(typed(raw, "budget", (int, float))),
                rate=float(typed(raw, "rate", (int, float))),
                changed=float(typed(raw, "changed", (int, float))),
                resized=bool(raw.get("resized", False)),
            )
        except TypeError as exc:
            raise StateError(f"record field: {exc}") from None


@dataclass(frozen=True, slots=True)
class Forked:
    """The fork server's note of a part's process: pid, start time and fork instants."""

    pid: int
    start_time: int
    at: float  # wall s of the fork (the part's PartStarted.at)
    mono: float  # the same instant on CLOCK_MONOTONIC (host-wide)

    def dump(self) -> bytes:
        return f"{self.pid} {self.start_time} {self.at!r} {self.mono!r}\n".encode()

    @classmethod
    def load(cls, data: bytes) -> Forked:
        try:
            pid, start, at, mono = data.decode().split()
            forked = cls(int(pid), int(start), float(at), float(mono))
        except (ValueError, UnicodeDecodeError):
            raise StateError(f"pid file is not 'pid starttime at mono': {data[:80]!r}") from None
        if forked.pid <= 1 or not (math.isfinite(forked.at) and math.isfinite(forked.mono)):
            raise StateError(f"pid file names no job process: {data[:80]!r}")
        return forked


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a reader never sees half)."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _read(path: Path) -> bytes:
    with open(path, "rb") as f:
        data = f.read(MAX_RECORD + 1)
    if len(data) > MAX_RECORD:
        raise StateError(f"{path.name} is larger than any record")
    return data


class StateDir:
    """One machine's state directory (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.parts = self.path / "parts"
        self.lock_path = self.path / "agent.lock"
        self.socket_path = self.path / "relay.sock"
        self.lease_path = self.path / "agent.lease"
        self._lock_fd: int | None = None

    def create(self) -> None:
        """Make the directory (0700); refuse one another user owns or others may read."""
        if len(os.fsencode(self.socket_path)) > MAX_SOCKET_PATH:
            raise StateError(
                f"state directory {self.path} is too deep for a unix socket in it "
                f"({MAX_SOCKET_PATH} bytes at most): choose a shorter --state-dir"
            )
        for folder in (self.path, self.parts):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = folder.stat()
            if st.st_uid != os.getuid():
                raise StateError(f"state directory {folder} belongs to uid {st.st_uid}, not us")
            if st.st_mode & 0o077:
                raise StateError(
                    f"state directory {folder} is open to others "
                    f"(mode {st.st_mode & 0o777:o}); it must be 0700"
                )

    def lock(self, patience: float, *, poll: float = 0.05) -> int:
        """Take the machine's lock, waiting up to ``patience`` s for an old agent and
        its fork server to be gone; the open fd (inherit it to the fork server)."""
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + patience
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise StateError(
                        f"another agent holds {self.lock_path} (same machine on this host)"
                    ) from None
                time.sleep(poll)  # a blocking lock at start-up: no loop runs yet
        self._lock_fd = fd
        return fd

    def unlock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)

    # -- part files ------------------------------------------------------------------

    def record_path(self, job_id: str, attempt: int) -> Path:
        return self.parts / f"{part_key(job_id, attempt)}.json"

    def pid_path(self, job_id: str, attempt: int) -> Path:
        return self.parts / f"{part_key(job_id, attempt)}.pid"

    def part_lease(self, job_id: str, attempt: int) -> Path:
        return self.parts / f"{part_key(job_id, attempt)}.lease"

    def write_record(self, record: PartRecord) -> None:
        write_atomic(self.record_path(record.job_id, record.attempt), record.dump())

    def remove_part(self, job_id: str, attempt: int) -> None:
        self.remove_key(part_key(job_id, attempt))

    def part_keys(self) -> list[str]:
        """Every part key with a file here (records, pid files or leases), sorted."""
        keys = set()
        for entry in self.parts.iterdir():
            stem, dot, ext = entry.name.rpartition(".")
            if dot and ext in ("json", "pid", "lease") and not stem.startswith(".tmp-"):
                keys.add(stem)
        return sorted(keys)

    def read(self, key: str) -> tuple[PartRecord | None, Forked | None, str | None]:
        """A key's record and pid file; the third item says why either is unusable."""
        if _KEY.match(key) is None:
            return None, None, f"{key!r} is not a part's name"
        record: PartRecord | None = None
        forked: Forked | None = None
        why: str | None = None
        try:
            record = PartRecord.load(_read(self.parts / f"{key}.json"))
            if part_key(record.job_id, record.attempt) != key:
                record, why = None, f"record {key!r} names another part"
        except FileNotFoundError:
            why = "no record"
        except (StateError, OSError) as exc:
            why = str(exc)
        try:
            forked = Forked.load(_read(self.parts / f"{key}.pid"))
        except FileNotFoundError:
            why = why or "never forked (no pid file)"
        except (StateError, OSError) as exc:
            why = why or str(exc)
        return record, forked, why

    def has_pid_file(self, key: str) -> bool:
        """Whether the fork server noted a process for ``key`` (readable or not)."""
        return _KEY.match(key) is not None and (self.parts / f"{key}.pid").exists()

    def remove_key(self, key: str) -> None:
        if _KEY.match(key) is None:
            return
        for ext in PART_FILES:
            with contextlib.suppress(FileNotFoundError):
                (self.parts / f"{key}.{ext}").unlink()


def renew(path: str | os.PathLike[str], now: float | None = None) -> None:
    """Touch a lease file (created if missing)."""
    stamp = time.time() if now is None else now
    try:
        os.utime(path, (stamp, stamp))
    except FileNotFoundError:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        os.close(fd)
        os.utime(path, (stamp, stamp))
