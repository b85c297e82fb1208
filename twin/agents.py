"""Modelled agents: the twin's stand-in for the live node agents.

They run each job's real run time (``Job.runtime`` at the job's reference
speed) at the rate the shared execution model gives for the allocation's pace
and MPL, and re-plan a job's end when it is resized. They keep the CPU
segments every metric is computed from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from model.execution import ExecutionModel
from model.job import Job
from model.machine import Part
from model.outcome import JobOutcome, Segment


class ModelError(ValueError):
    """A job the model cannot run (e.g. no run time known)."""


@dataclass(slots=True)
class _Progress:
    job: Job
    parts: tuple[Part, ...]
    cpus: int
    start: float
    first_pace: float
    first_parts: tuple[Part, ...]
    done: float = 0.0
    since: float = 0.0
    rate: float = 1.0
    version: int = 0
    segments: list[Segment] = field(default_factory=list)


class ModelledAgents:
    """Progress of every running job; returns the instant each job will end."""

    def __init__(self, speeds: Mapping[str, float], execution: ExecutionModel) -> None:
        self._speeds = speeds
        self._execution = execution
        self._jobs: dict[str, _Progress] = {}

    def _rate(self, job: Job, parts: tuple[Part, ...], cpus: int) -> float:
        pace = min(self._speeds[p.machine] for p in parts)
        return self._execution.rate(
            procs=job.procs,
            cpus=cpus,
            speed=pace,
            ref_speed=job.ref_speed,
            cpu_util=job.cpu_util,
            job_id=job.id,
        )

    def start(self, job: Job, parts: tuple[Part, ...], now: float) -> tuple[float, int]:
        """Start ``job``; returns ``(end time, version)`` of its end event."""
        if job.runtime is None:
            raise ModelError(f"job {job.id!r} has no run time; the twin needs one")
        cpus = sum(p.cpus for p in parts)
        pace = min(self._speeds[p.machine] for p in parts)
        prog = _Progress(
            job, parts, cpus, now, pace, parts, since=now, rate=self._rate(job, parts, cpus)
        )
        self._jobs[job.id] = prog
        return now + job.runtime / prog.rate, prog.version

    def resize(self, job: Job, parts: tuple[Part, ...], now: float) -> tuple[float, int]:
        """Move ``job`` to ``parts``; returns its new ``(end time, version)``."""
        prog = self._jobs[job.id]
        assert job.runtime is not None  # checked at start
        prog.done = min(job.runtime, prog.done + (now - prog.since) * prog.rate)
        if now > prog.since:
            prog.segments.append(Segment(prog.since, now, prog.cpus))
        prog.since = now
        prog.parts = parts
        prog.cpus = sum(p.cpus for p in parts)
        prog.rate = self._rate(job, parts, prog.cpus)
        prog.version += 1
        return now + (job.runtime - prog.done) / prog.rate, prog.version

    def is_current(self, job_id: str, version: int) -> bool:
        prog = self._jobs.get(job_id)
        return prog is not None and prog.version == version

    def finish(self, job_id: str, now: float) -> JobOutcome:
        prog = self._jobs.pop(job_id)
        job = prog.job
        segments = prog.segments
        if now > prog.since or not segments:
            segments.append(Segment(prog.since, now, prog.cpus))
        assert job.runtime is not None
        return JobOutcome(
            job=job,
            start=prog.start,
            end=now,
            parts=prog.first_parts,
            segments=tuple(segments),
            expanded_runtime=job.runtime * job.ref_speed / prog.first_pace,
        )
