"""The agent's lease over its parts: how a cut-off or frozen agent's jobs stop themselves.

Fencing, so that a job never runs twice at once beyond a stated bound: the
scheduler requeues the jobs of
an agent it has not heard from for its silence limit (12 s by default). If
that agent is in fact alive but cut off from the broker, or frozen
(SIGSTOP), its job processes go on running, and the requeued job would run
twice at once. So every part holds a *lease*: a file whose modification
time the agent renews each time the broker acknowledges one of its
heartbeats. A job process checks the file every step (one ``stat``,
``nodeagent.launch.contract.lease_expired``); when it has not been renewed
for ``lease`` wall seconds it stops by itself (exit ``EXIT_LOST``). The
child needs nothing of its agent to do so, so a frozen agent cannot keep it
alive, and the bound holds whatever the agent is doing: a job runs at most
``lease`` seconds after its agent was last heard by the broker. With a lease
below the scheduler's silence limit, a job requeued for silence is never
running twice at once (up to the process's exit, milliseconds).

The agent's side of the same bound is :func:`start_fenced`: a start is
refused when its command is older than the lease or the lease has lapsed,
and the agent asks it twice, on admission and again at the last moment
before the fork. Between the two the agent waits for the broker (it clears
the job's retained control topic); an agent frozen or cut off during that
wait wakes after the scheduler may have requeued the job, with its lease
perhaps renewed by a heartbeat acknowledged on waking. Checked only on
admission, that start ran the old attempt beside the new one until the
scheduler's "stale attempt" kill (seen once in bench/faults/__main__.py's agent-freeze
row: attempt 1 forked 20 ms after attempt 2 elsewhere).

:class:`AgentLease` is the agent's whole account: its own lease file and, in
a state directory (``nodeagent.survival.state``), each part's own, started
where the agent's stands and renewed with it; a part nobody adopts is then
renewed by nobody, and stops.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from nodeagent.survival.state import StateDir, renew

DEFAULT_LEASE = 8.0
"""Wall seconds: 4 heartbeats of 2 s, two below the scheduler's default silence limit
(6 heartbeats, 12 s), and longer than a broker restart."""


class LeaseFile:
    """The agent's side: one file, renewed on each acknowledged heartbeat."""

    def __init__(
        self,
        directory: str | None = None,
        *,
        prefix: str = "accordion-lease-",
        path: str | os.PathLike[str] | None = None,
    ) -> None:
        if path is None:
            fd, name = tempfile.mkstemp(prefix=prefix, dir=directory)
            os.close(fd)
            self.path = Path(name)
        else:
            # A stable path (the machine's state directory, ``nodeagent.survival.state``).
            self.path = Path(path)
            self.path.touch(mode=0o600)

    def renew(self, now: float | None = None) -> None:
        stamp = time.time() if now is None else now
        os.utime(self.path, (stamp, stamp))

    def age(self, now: float | None = None) -> float:
        """Wall seconds since the last renewal."""
        return (time.time() if now is None else now) - self.path.stat().st_mtime

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def start_fenced(issued: float, now: float, lease: float, lapsed: bool) -> str | None:
    """Why a start issued at ``issued`` (wall s; 0: unknown) must not run at ``now``, if so.

    ``lease`` 0 is no lease (nothing is fenced); ``lapsed``: the agent's lease has
    lapsed now (:class:`LeaseFile`). With a lease below the scheduler's silence
    limit, a start that passes this at the fork cannot have been requeued yet.
    """
    if not lease:
        return None
    age = now - issued
    if issued and age > lease:
        return f"the command is {age:.1f} s old, beyond the {lease:g} s lease"
    if lapsed:
        return "the agent's lease has lapsed"
    return None


class AgentLease:
    """The agent's lease and its parts' own; ``length`` 0 is no lease.

    The lease file exists from :meth:`take` (the agent's ``run()``) to
    :meth:`release`: in the state directory when there is one (a stable
    path, for the next incarnation), else a temporary file in ``directory``.
    """

    def __init__(
        self, *, length: float, state: StateDir | None, directory: str | None, agent_id: str
    ) -> None:
        self.length = length
        self._state = state
        self._directory = directory
        self._prefix = f"accordion-{agent_id}-"
        self._file: LeaseFile | None = None

    @property
    def held(self) -> bool:
        """Whether there is a lease (taken, not yet released)."""
        return self._file is not None

    def take(self) -> None:
        if self.length <= 0:
            return
        self._file = (
            LeaseFile(path=self._state.lease_path)
            if self._state is not None
            else LeaseFile(self._directory, prefix=self._prefix)
        )
        self._file.renew()

    def release(self) -> None:
        if self._file is not None:
            self._file.remove()
            self._file = None

    def lapsed(self) -> bool:
        """Whether the broker has not acknowledged a heartbeat for the lease's length."""
        return self._file is not None and self._file.age() > self.length

    def part_file(self, job_id: str, attempt: int) -> str | None:
        """A new part's lease file: its own in a state directory, else the agent's."""
        if self._file is None:
            return None
        if self._state is None:
            return str(self._file.path)
        return str(self._state.part_lease(job_id, attempt))

    def start_part(self, path: str) -> None:
        """A new part's lease starts where the agent's stands (its last acknowledged
        heartbeat), never fresher: the bound is from when the broker last heard us."""
        if self._file is not None:
            renew(path, self._file.path.stat().st_mtime)

    def renew(self, parts: Iterable[str | None]) -> None:
        """The broker acknowledged a heartbeat: renew the agent's lease, and the lease
        files of its ``parts`` where they are their own (in a state directory)."""
        if self._file is None:
            return
        self._file.renew()
        if self._state is None:
            return
        stamp = self._file.path.stat().st_mtime
        for path in parts:
            if path is not None:
                renew(path, stamp)
