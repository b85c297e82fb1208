"""The fault bench's eye on the job processes: which attempts of a job are alive at once.

A sampler thread reads ``/proc`` every ``period`` (20 ms) for the job
processes of one cluster (their command line names the cluster's topic root,
the job, its attempt, and the agent's lease file and length). Two attempts
of one job alive in the same sample are an *overlap*. The README's fencing
bound (nodeagent/survival/lease.py) allows exactly one kind: the old attempt's process
found its lease lapsed and is leaving while the new one starts, "up to the
exit of a process". So an overlap is classified:

- **within the bound** when the old attempt's process was there first and
  both were seen together for at most ``allowance`` seconds (default 0.25 s:
  the job's lease check step, 0.1 s, plus the exit and two sampler periods,
  with room for a loaded host);
- **beyond the bound** otherwise: a job really ran twice at once. An old
  attempt whose process appeared *after* the new one's is a stale start,
  beyond the bound however briefly it lived.

Each overlap keeps what explains it: the pids, how long it lasted, and the
age of the old attempt's lease file when the overlap was first seen (past the
lease: the old process should have been stopping; within it: the scheduler
started the new attempt while the old one still held a valid lease).
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PERIOD = 0.02
"""Wall seconds between two samples."""
ALLOWANCE = 0.25
"""Wall seconds two attempts may be seen together and still be within the fencing bound."""


@dataclass(frozen=True, slots=True)
class JobProcess:
    """One live job process as its command line shows it."""

    job: str
    attempt: int
    lease_file: str | None = None
    lease: float = 0.0


@dataclass(slots=True)
class Overlap:
    """Two attempts of ``job`` seen alive in the same samples."""

    job: str
    old: tuple[int, int]  # (attempt, pid)
    new: tuple[int, int]
    first: float  # monotonic time of the first sample that saw both
    last: float  # ... and of the last one
    #: The old attempt's lease file age when first seen together (inf: no file or no lease).
    old_lease_age: float
    lease: float
    #: The old attempt's process appeared after the new one's: a stale attempt started.
    stale_start: bool = False

    @property
    def seconds(self) -> float:
        """How long both were seen together (one sample counts one period)."""
        return self.last - self.first + PERIOD

    def within(self, allowance: float) -> bool:
        return not self.stale_start and self.seconds <= allowance

    def describe(self) -> str:
        age = "no lease" if math.isinf(self.old_lease_age) else f"{self.old_lease_age:.2f} s"
        stale = " (stale start: old one forked after the new)" if self.stale_start else ""
        return (
            f"{self.job}{stale} attempts {self.old[0]}(pid {self.old[1]})+{self.new[0]}"
            f"(pid {self.new[1]}) for {self.seconds:.2f} s, old lease age {age}"
            f" of {self.lease:g} s"
        )


def parse_cmdline(raw: bytes, root_arg: str) -> JobProcess | None:
    """The job process of ``raw`` (``/proc/<pid>/cmdline``) if it belongs to ``root_arg``.

    A forked job process (the fork server's) shows its command line as one
    title (setproctitle, space-separated), an exec'd one as NUL-separated
    argv: both are read.
    """
    if b"nodeagent.job" not in raw:
        return None
    args = [a.decode(errors="replace") for a in raw.replace(b"\0", b" ").split()]
    if root_arg not in args:
        return None
    values = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
    try:
        attempt = int(values.get("attempt", "1"))
        lease = float(values.get("lease", "0"))
    except ValueError:
        return None
    return JobProcess(values.get("job-id", ""), attempt, values.get("lease-file"), lease)


def lease_age(process: JobProcess, now: float) -> float:
    """Wall seconds since ``process``'s lease file was renewed (inf without one)."""
    if process.lease_file is None:
        return math.inf
    try:
        return now - os.stat(process.lease_file).st_mtime
    except OSError:
        return math.inf


class OverlapLog:
    """Overlaps from a sequence of samples (sans-I/O: the sampler feeds it)."""

    def __init__(self) -> None:
        self.overlaps: dict[tuple[str, int, int], Overlap] = {}
        #: Monotonic time each pid was first seen.
        self.born: dict[int, float] = {}

    def sample(
        self,
        at: float,
        alive: dict[int, JobProcess],
        age_of: Callable[[JobProcess], float],
    ) -> None:
        """One sample at monotonic time ``at``: ``pid -> process`` of every live job process."""
        by_job: dict[str, dict[int, int]] = {}
        for pid, process in alive.items():
            self.born.setdefault(pid, at)
            by_job.setdefault(process.job, {})[pid] = process.attempt
        for job, pids in by_job.items():
            if len(set(pids.values())) < 2:
                continue
            ordered = sorted(pids.items(), key=lambda item: (item[1], item[0]))
            old_pid, old_attempt = ordered[0]
            for new_pid, new_attempt in ordered[1:]:
                if new_attempt == old_attempt:
                    continue
                key = (job, old_pid, new_pid)
                seen = self.overlaps.get(key)
                if seen is None:
                    old = alive[old_pid]
                    self.overlaps[key] = Overlap(
                        job,
                        (old_attempt, old_pid),
                        (new_attempt, new_pid),
                        at,
                        at,
                        age_of(old),
                        old.lease,
                        stale_start=self.born[old_pid] > self.born[new_pid],
                    )
                else:
                    seen.last = at

    def within(self, allowance: float) -> list[Overlap]:
        return [o for o in self.overlaps.values() if o.within(allowance)]

    def beyond(self, allowance: float) -> list[Overlap]:
        return [o for o in self.overlaps.values() if not o.within(allowance)]


class Sampler:
    """Samples this cluster's job processes in a thread; :attr:`log` holds the overlaps."""

    def __init__(self, root: str, *, period: float = PERIOD) -> None:
        self._root = f"--root={root}"
        self._period = period
        self.log = OverlapLog()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="faults-sampler")

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def alive(self) -> dict[int, JobProcess]:
        """``pid -> process`` of every live (not zombie) job process of the cluster."""
        found: dict[int, JobProcess] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                raw = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state in ("Z", "X"):
                continue
            process = parse_cmdline(raw, self._root)
            if process is not None:
                found[int(entry.name)] = process
        return found

    def processes(self) -> dict[int, tuple[str, int]]:
        """``pid -> (job id, attempt)`` of every live job process of the cluster."""
        return {pid: (p.job, p.attempt) for pid, p in self.alive().items()}

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            alive = self.alive()
            self.log.sample(time.monotonic(), alive, functools.partial(lease_age, now=time.time()))
