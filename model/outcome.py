"""What happened to a job: the record every metric is computed from.

A job's life on CPUs is a list of segments: one for a rigid job, one more at
every resize of a malleable one. The twin writes these records; the live
scheduler will write the same ones from the agents' reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.job import Job
from model.machine import Part


@dataclass(frozen=True, slots=True)
class Segment:
    """From ``start`` to ``end`` the job held ``cpus`` CPUs (all parts together)."""

    start: float
    end: float
    cpus: int


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOutcome:
    """One finished (or failed) job.

    ``expanded_runtime`` is the run time the job would have had on the speed of
    its first allocation at MPL 1: the denominator of the FCFS-malleable
    paper's slowdown (formula (1)). For a rigid job it equals ``end - start``.
    """

    job: Job
    start: float
    end: float
    parts: tuple[Part, ...]
    segments: tuple[Segment, ...]
    expanded_runtime: float
    failed: bool = False

    @property
    def wait(self) -> float:
        return self.start - self.job.submit

    @property
    def run(self) -> float:
        return self.end - self.start

    @property
    def response(self) -> float:
        return self.end - self.job.submit

    @property
    def deadline_met(self) -> bool | None:
        """None for a job without a deadline."""
        if self.job.deadline is None:
            return None
        return self.end <= self.job.deadline

    @property
    def max_cpus(self) -> int:
        return max(s.cpus for s in self.segments)
