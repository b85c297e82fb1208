"""Where every live job runs: its parts' lifecycles, by job and by machine.

The core knows a running job's parts as CPU counts; this index adds what
only the live runtime has: each part's lifecycle (``scheduler.live.part_lifecycle``),
the job's current attempt, which jobs each machine holds, so an agent's
heartbeat is checked against its jobs in one lookup, and the run as the agents
measured it (:meth:`LiveJob.measured_run`).
"""

from __future__ import annotations

from collections.abc import Iterator

from model.machine import Part
from scheduler.live.part_lifecycle import PartInput, PartLifecycle, PartState


class LiveJob:
    """A job on CPUs (or pending after a restart) in its current attempt."""

    __slots__ = (
        "announced",
        "attempt",
        "decided",
        "ended",
        "job_id",
        "parts",
        "ran",
        "resent",
        "stopped",
    )

    def __init__(
        self, job_id: str, parts: tuple[Part, ...], attempt: int, *, pending: bool
    ) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.parts = {
            p.machine: PartLifecycle(p.machine, p.cpus, attempt, pending=pending) for p in parts
        }
        #: CPUs an agent re-announced for a pending job's part, by machine.
        self.announced: dict[str, int] = {}
        #: Machines a pending part's start was sent to again (``scheduler.live.reconcile``).
        self.resent: set[str] = set()
        #: Cluster time of the decision that started this attempt (None: restored).
        self.decided: float | None = None
        #: Per machine, when its part's process began running and when it exited,
        #: in cluster time, dated from the decision by the agent's own measurements.
        self.ran: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        #: Restored while its parts were held because its agent's operator stopped the
        #: agent (``hold_cause`` ``stop``): a part not re-announced is not charged.
        self.stopped = False

    def measured_run(self, now: float) -> tuple[float, float] | None:
        """The job's run ``(start, end)`` as its agents measured it, if every part said.

        Start: the last part's process running (the job runs whole from then); end:
        the last part's exit; both within the decision and ``now`` (the scheduler hears
        of an exit after it happened, never before).
        """
        if self.decided is None or set(self.ended) != set(self.parts):
            return None
        start = min(max(self.decided, *self.ran.values()), now)
        end = min(max(start, *self.ended.values()), now)
        return start, end

    def part(self, machine: str) -> PartLifecycle | None:
        return self.parts.get(machine)

    def machines(self) -> Iterator[str]:
        return iter(self.parts)

    def layout(self) -> tuple[Part, ...]:
        return tuple(Part(p.machine, p.cpus) for p in self.parts.values())

    @property
    def all_done(self) -> bool:
        return all(p.state is PartState.DONE for p in self.parts.values())

    @property
    def confirmed(self) -> bool:
        return all(p.confirmed for p in self.parts.values())

    def unfinished(self) -> Iterator[PartLifecycle]:
        """Parts whose process may still run (not final)."""
        return (p for p in self.parts.values() if not p.final)

    def end_all(self, what: PartInput) -> list[PartLifecycle]:
        """Move every part that is not final by ``what``; returns the parts moved."""
        moved = [p for p in self.parts.values() if not p.final]
        for p in moved:
            p.apply(what)
        return moved


class Placements:
    """Every live job by id, and the ids on each machine."""

    def __init__(self) -> None:
        self._jobs: dict[str, LiveJob] = {}
        self._on: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def get(self, job_id: str) -> LiveJob | None:
        return self._jobs.get(job_id)

    def __getitem__(self, job_id: str) -> LiveJob:
        return self._jobs[job_id]

    def track(
        self, job_id: str, parts: tuple[Part, ...], attempt: int, *, pending: bool = False
    ) -> LiveJob:
        if job_id in self._jobs:
            raise ValueError(f"job {job_id!r} is placed already")
        live = LiveJob(job_id, parts, attempt, pending=pending)
        self._jobs[job_id] = live
        for machine in live.machines():
            self._on.setdefault(machine, set()).add(job_id)
        return live

    def untrack(self, job_id: str) -> LiveJob:
        live = self._jobs.pop(job_id)
        for machine in live.machines():
            jobs = self._on[machine]
            jobs.discard(job_id)
            if not jobs:
                del self._on[machine]
        return live

    def resize(self, job_id: str, parts: tuple[Part, ...]) -> None:
        """New CPU counts on the same machines (agents cannot move processes)."""
        live = self._jobs[job_id]
        if {p.machine for p in parts} != set(live.parts):
            raise ValueError(f"job {job_id!r} cannot move to other machines")
        for p in parts:
            live.parts[p.machine].cpus = p.cpus

    def on_machine(self, machine: str) -> list[str]:
        """Ids of the jobs with a part on ``machine``, sorted (a stable order for logs)."""
        return sorted(self._on.get(machine, ()))
