"""The agent's lease over its parts: how a cut-off or frozen agent's jobs stop themselves.

Fencing (DESIGN.md, "Trust and faults"): the scheduler requeues the jobs of
an agent it has not heard from for its silence limit (12 s by default). If
that agent is in fact alive but cut off from the broker, or frozen
(SIGSTOP), its job processes go on running, and the requeued job would run
twice at once. So every part holds a *lease*: a file whose modification
time the agent renews each time the broker acknowledges one of its
heartbeats. A job process checks the file every step (one ``stat``); when
it has not been renewed for ``lease`` wall seconds it stops by itself
(exit :data:`~nodeagent.job.EXIT_LOST`). The child needs nothing of its
agent to do so, so a frozen agent cannot keep it alive, and the bound holds
whatever the agent is doing: a job runs at most ``lease`` seconds after its
agent was last heard by the broker. With a lease below the scheduler's
silence limit, a job requeued for silence is never running twice at once
(up to the process's exit, milliseconds).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

DEFAULT_LEASE = 8.0
"""Wall seconds: 4 heartbeats of 2 s, two below the scheduler's default silence limit
(6 heartbeats, 12 s), and longer than a broker restart."""


class LeaseFile:
    """The agent's side: one file, renewed on each acknowledged heartbeat."""

    def __init__(self, directory: str | None = None, *, prefix: str = "accordion-lease-") -> None:
        fd, name = tempfile.mkstemp(prefix=prefix, dir=directory)
        os.close(fd)
        self.path = Path(name)

    def renew(self, now: float | None = None) -> None:
        stamp = time.time() if now is None else now
        os.utime(self.path, (stamp, stamp))

    def age(self, now: float | None = None) -> float:
        """Wall seconds since the last renewal."""
        return (time.time() if now is None else now) - self.path.stat().st_mtime

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def lease_expired(path: str, lease: float, now: float | None = None) -> bool:
    """The job's side: whether the lease at ``path`` lapsed (a missing file has)."""
    try:
        mtime = os.stat(path).st_mtime
    except FileNotFoundError:
        return True
    return (time.time() if now is None else now) - mtime > lease
