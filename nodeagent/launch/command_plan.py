"""A command part's plan: what its supervisor runs, as whom, and where; and how it ended.

Part of the launch contract (``nodeagent.launch.contract``): the agent decides
everything about a user's command at admission (``nodeagent.agent.commands``)
and writes it as a :class:`CommandPlan` into a file only it and its job
processes can read (the machine's state directory); the part's job process,
the command's *supervisor* (``nodeagent.job.command``), reads it back with
checks (``Launch.command_file`` names the file, so an adoption record keeps it
too). The plan holds:

- ``batch``: whether this part runs the command (the job's first part, as
  ``sbatch`` runs a script on the first node); the others hold their CPUs,
  for an MPI launcher to reach them;
- the program and its arguments (a script: its copy in the job's directory),
  the working directory, the stdout and stderr files (patterns resolved), the
  environment (built afresh, never the agent's own);
- ``run_as``: the OS account (uid, gid, groups) the command runs as, or None
  for the supervisor's own;
- where the command's process tree is kept (``cgroup``, a cgroup v2
  directory of its own, or None: the supervisor is the tree's subreaper and
  walks it, ``nodeagent.launch.jobtree``), the host cores it is pinned to, and
  ``term_grace``, the wall seconds between TERM and KILL of the whole tree;
- ``status_file``: where the supervisor writes how the command ended
  (:class:`CommandStatus`: ``exit N`` or ``signal N``, then ``rank R`` when an
  MPI program's rank ended first), which the agent reads into
  ``PartFinished.exit_status`` or ``.signal``;
- ``mpi_ranks``: how many ranks of an MPI program this part holds (0: no MPI
  launch), which the agent pins one by one and the supervisor watches.

The files are JSON and one line of text, read with checks: a plan that does
not read is no plan (the part fails), never trusted in part.
"""

from __future__ import annotations

import json
import math
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from nodeagent.launch.json_fields import ints, items, optional, pair, strs, typed

PLAN_VERSION = 1
MAX_PLAN = 8 << 20
"""8 MiB: a plan holds at most 1,024 arguments of 4 KiB and its environment."""


class PlanError(ValueError):
    """A plan or status file that cannot be read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunAs:
    """An OS account: a command's process takes these ids before it execs."""

    user: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str

    def __post_init__(self) -> None:
        if min(self.uid, self.gid, *self.groups, 0) < 0:
            raise PlanError(f"account {self.user!r}: negative ids")


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandPlan:
    """What a command part's supervisor does (module docstring)."""

    batch: bool
    argv: tuple[str, ...]
    chdir: str
    stdout: str
    stderr: str | None
    env: tuple[tuple[str, str], ...]
    run_as: RunAs | None
    cgroup: str | None
    cores: tuple[int, ...]
    term_grace: float
    status_file: str
    #: The job's own directory (hostfile, script copy, ``TMPDIR``), the agent's to
    #: create and remove.
    job_dir: str
    mpi_ranks: int = 0

    def __post_init__(self) -> None:
        if self.batch and not self.argv:
            raise PlanError("a batch part needs a program to run")
        for path in (self.chdir, self.stdout, self.status_file, self.job_dir):
            if not os.path.isabs(path):
                raise PlanError(f"{path!r} is not an absolute path")
        if self.stderr is not None and not os.path.isabs(self.stderr):
            raise PlanError(f"{self.stderr!r} is not an absolute path")
        if any("\0" in a for a in self.argv) or any("\0" in k + v for k, v in self.env):
            raise PlanError("NUL in an argument or the environment")
        if any(not k or "=" in k for k, _ in self.env):
            raise PlanError("an environment variable without a name, or with = in it")
        if not (self.term_grace >= 0 and math.isfinite(self.term_grace)):
            raise PlanError(f"term_grace must be >= 0, got {self.term_grace!r}")
        if any(c < 0 for c in self.cores):
            raise PlanError("negative core number")
        if self.mpi_ranks < 0:
            raise PlanError(f"mpi_ranks must be >= 0, got {self.mpi_ranks}")

    def environ(self) -> dict[str, str]:
        return dict(self.env)

    def dump(self) -> bytes:
        run_as = None
        if self.run_as is not None:
            r = self.run_as
            run_as = {
                "user": r.user,
                "uid": r.uid,
                "gid": r.gid,
                "groups": list(r.groups),
                "home": r.home,
                "shell": r.shell,
            }
        return json.dumps(
            {
                "version": PLAN_VERSION,
                "batch": self.batch,
                "argv": list(self.argv),
                "chdir": self.chdir,
                "stdout": self.stdout,
                "stderr": self.stderr,
                "env": [list(kv) for kv in self.env],
                "run_as": run_as,
                "cgroup": self.cgroup,
                "cores": list(self.cores),
                "term_grace": self.term_grace,
                "status_file": self.status_file,
                "job_dir": self.job_dir,
                "mpi_ranks": self.mpi_ranks,
            }
        ).encode()

    @classmethod
    def load(cls, data: bytes) -> CommandPlan:
        try:
            raw = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise PlanError(f"command plan is not JSON: {exc}") from None
        if not isinstance(raw, dict) or raw.get("version") != PLAN_VERSION:
            raise PlanError("not a version-1 command plan")
        try:
            run_as = raw.get("run_as")
            return cls(
                batch=typed(raw, "batch", bool),
                argv=tuple(strs(raw.get("argv"))),
                chdir=typed(raw, "chdir", str),
                stdout=typed(raw, "stdout", str),
                stderr=optional(raw, "stderr", str),
                env=tuple(pair(kv) for kv in items(raw.get("env"))),
                run_as=None if run_as is None else _run_as(run_as),
                cgroup=optional(raw, "cgroup", str),
                cores=tuple(ints(raw.get("cores"))),
                term_grace=float(typed(raw, "term_grace", (int, float))),
                status_file=typed(raw, "status_file", str),
                job_dir=typed(raw, "job_dir", str),
                mpi_ranks=typed(raw, "mpi_ranks", int) if "mpi_ranks" in raw else 0,
            )
        except TypeError as exc:
            raise PlanError(f"command plan field: {exc}") from None

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> CommandPlan:
        with open(path, "rb") as f:
            data = f.read(MAX_PLAN + 1)
        if len(data) > MAX_PLAN:
            raise PlanError(f"{path} is larger than any command plan")
        return cls.load(data)


def _run_as(raw: object) -> RunAs:
    if not isinstance(raw, dict):
        raise TypeError(f"run_as is {raw!r}")
    return RunAs(
        user=typed(raw, "user", str),
        uid=typed(raw, "uid", int),
        gid=typed(raw, "gid", int),
        groups=tuple(ints(raw.get("groups"))),
        home=typed(raw, "home", str),
        shell=typed(raw, "shell", str),
    )


@dataclass(frozen=True, slots=True)
class CommandStatus:
    """How a command ended: its exit status, or the signal that killed it; and for an
    MPI program, the rank that ended first (the one that failed, when it did)."""

    exit_status: int | None = None
    signal: int | None = None
    first_rank: int | None = None

    def __post_init__(self) -> None:
        if (self.exit_status is None) == (self.signal is None):
            raise PlanError("a command ends with an exit status or a signal, one of the two")
        if self.exit_status is not None and not 0 <= self.exit_status <= 255:
            raise PlanError(f"exit status {self.exit_status} out of 0..255")
        if self.signal is not None and not 1 <= self.signal <= 64:
            raise PlanError(f"signal {self.signal} out of 1..64")
        if self.first_rank is not None and self.first_rank < 0:
            raise PlanError(f"rank {self.first_rank} is negative")

    @classmethod
    def of_wait_status(cls, status: int, first_rank: int | None = None) -> CommandStatus:
        """From ``waitpid``'s status word."""
        if os.WIFSIGNALED(status):
            return cls(signal=os.WTERMSIG(status), first_rank=first_rank)
        return cls(exit_status=os.waitstatus_to_exitcode(status) & 0xFF, first_rank=first_rank)

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def describe(self) -> str:
        """``exited with status 3`` or ``was killed by signal 9 (SIGKILL)``; a failed MPI
        program's ends ``..., rank 1 ended first``."""
        if self.signal is not None:
            text = f"was killed by signal {self.signal} ({signal_name(self.signal)})"
        else:
            text = f"exited with status {self.exit_status}"
        if self.first_rank is not None and not self.ok:
            text += f", rank {self.first_rank} ended first"
        return text

    def dump(self) -> bytes:
        text = f"signal {self.signal}" if self.signal is not None else f"exit {self.exit_status}"
        if self.first_rank is not None:
            text += f" rank {self.first_rank}"
        return f"{text}\n".encode()

    @classmethod
    def load(cls, data: bytes) -> CommandStatus:
        bad = f"status file is not 'exit N' or 'signal N' [rank R]: {data[:40]!r}"
        try:
            words = data.decode("ascii").split()
            numbers = [int(w) for w in words[1::2]]
        except (ValueError, UnicodeDecodeError):
            raise PlanError(bad) from None
        if len(words) not in (2, 4) or (len(words) == 4 and words[2] != "rank"):
            raise PlanError(bad)
        first = numbers[1] if len(numbers) == 2 else None
        if words[0] == "exit":
            return cls(exit_status=numbers[0], first_rank=first)
        if words[0] == "signal":
            return cls(signal=numbers[0], first_rank=first)
        raise PlanError(bad)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> CommandStatus | None:
        """The status a supervisor wrote at ``path``; None if it wrote none."""
        try:
            data = Path(path).read_bytes()[:64]
        except FileNotFoundError:
            return None
        return cls.load(data)


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; ``SIG<n>`` for a number without a name (real-time signals)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"
