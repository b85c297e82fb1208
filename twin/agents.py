"""Modelled agents: the twin's stand-in for the live node agents.

They run each job's real run time (``Job.runtime`` at the job's reference
speed) at the rate the shared execution model gives for the allocation's pace
and MPL, and re-plan a job's end when it is resized. They keep the CPU
segments every metric is computed from.

The engine hands them the allocation and rate the scheduler core has just
computed for the same parts (``RunningJob.alloc`` and ``rate``): one
:class:`~model.allocation.Allocation` per start, not one per side. A caller
without a core's numbers gives the parts alone and the agents compute them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from model.allocation import Allocation
from model.execution import ExecutionModel
from model.job import Job
from model.machine import Part
from model.outcome import JobOutcome, Segment, make_outcome, make_segment


class ModelError(ValueError):
    """A job the model cannot run (e.g. no run time known)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """A running job as the modelled agents see it: started at ``start`` on ``first``,
    ``done`` of its run time done by ``since`` (its last start or resize), its CPU
    segments before ``since`` and the parts of each, and ``version``, how many times
    it was resized (its end events' version)."""

    start: float
    since: float
    done: float
    first: tuple[Part, ...]
    segments: tuple[Segment, ...] = ()
    segment_parts: tuple[tuple[Part, ...], ...] = ()
    version: int = 0


class _Progress:
    """One running job's progress. A plain class, not a dataclass: the compiled
    build (``compiled``) then builds one natively at every start, where a
    dataclass's generated ``__init__`` would run as interpreted code."""

    __slots__ = (
        "alloc",
        "done",
        "first",
        "job",
        "rate",
        "segment_parts",
        "segments",
        "since",
        "start",
        "version",
    )

    def __init__(
        self,
        job: Job,
        alloc: Allocation,
        *,
        first: Allocation,
        start: float,
        since: float,
        rate: float,
        done: float = 0.0,
        version: int = 0,
    ) -> None:
        self.job = job
        #: Where the job runs now, and where it started (its expanded run time's).
        self.alloc = alloc
        self.first = first
        self.start = start
        self.since = since
        self.done = done
        self.rate = rate
        self.version = version
        #: The segments before the last resize, and the parts of each; None until the
        #: first (most jobs never resize, and a list per job would be built for nothing).
        self.segments: list[Segment] | None = None
        self.segment_parts: list[tuple[Part, ...]] | None = None


class ModelledAgents:
    """Progress of every running job; returns the instant each job will end."""

    def __init__(self, speeds: Mapping[str, float], execution: ExecutionModel) -> None:
        self._speeds = speeds
        self._execution = execution
        self._jobs: dict[str, _Progress] = {}

    def start(
        self,
        job: Job,
        parts: tuple[Part, ...],
        now: float,
        *,
        alloc: Allocation | None = None,
        rate: float | None = None,
    ) -> tuple[float, int]:
        """Start ``job``; returns ``(end time, version)`` of its end event. ``alloc``
        and ``rate``, when given, are ``parts``' (module docstring)."""
        if job.runtime is None:
            raise ModelError(f"job {job.id!r} has no run time; the twin needs one")
        if alloc is None or rate is None:
            alloc = Allocation.of(parts, self._speeds)
            rate = alloc.rate(job, self._execution)
        prog = _Progress(job, alloc, first=alloc, start=now, since=now, rate=rate)
        self._jobs[job.id] = prog
        return now + job.runtime / rate, 0

    def resize(
        self,
        job: Job,
        parts: tuple[Part, ...],
        now: float,
        *,
        alloc: Allocation | None = None,
        rate: float | None = None,
    ) -> tuple[float, int]:
        """Move ``job`` to ``parts``; returns its new ``(end time, version)``."""
        prog = self._jobs[job.id]
        assert job.runtime is not None  # checked at start
        prog.done = min(job.runtime, prog.done + (now - prog.since) * prog.rate)
        if now > prog.since:
            if prog.segments is None or prog.segment_parts is None:
                prog.segments = []
                prog.segment_parts = []
            prog.segments.append(Segment(prog.since, now, prog.alloc.cpus))
            prog.segment_parts.append(prog.alloc.parts)
        prog.since = now
        if alloc is None or rate is None:
            alloc = Allocation.of(parts, self._speeds)
            rate = alloc.rate(job, self._execution)
        prog.alloc = alloc
        prog.rate = rate
        prog.version += 1
        return now + (job.runtime - prog.done) / prog.rate, prog.version

    def progress(self, job_id: str) -> Progress:
        """Where running ``job_id`` stands (``twin.state`` keeps it in a checkpoint)."""
        prog = self._jobs[job_id]
        return Progress(
            start=prog.start,
            since=prog.since,
            done=prog.done,
            first=prog.first.parts,
            segments=() if prog.segments is None else tuple(prog.segments),
            segment_parts=() if prog.segment_parts is None else tuple(prog.segment_parts),
            version=prog.version,
        )

    def resume(self, job: Job, parts: tuple[Part, ...], at: Progress) -> tuple[float, int]:
        """Run ``job`` on ``parts`` from where ``at`` says it stands (a checkpoint's);
        returns its ``(end time, version)``: the end :meth:`start` or :meth:`resize`
        gave it, by the same formula."""
        if job.runtime is None:
            raise ModelError(f"job {job.id!r} has no run time; the twin needs one")
        alloc = Allocation.of(parts, self._speeds)
        rate = alloc.rate(job, self._execution)
        first = alloc if at.first == parts else Allocation.of(at.first, self._speeds)
        prog = _Progress(
            job,
            alloc,
            first=first,
            start=at.start,
            since=at.since,
            rate=rate,
            done=at.done,
            version=at.version,
        )
        if at.segments:
            prog.segments = list(at.segments)
            prog.segment_parts = list(at.segment_parts)
        self._jobs[job.id] = prog
        return at.since + (job.runtime - at.done) / rate, at.version

    def is_current(self, job_id: str, version: int) -> bool:
        prog = self._jobs.get(job_id)
        return prog is not None and prog.version == version

    def finish(self, job_id: str, now: float) -> JobOutcome:
        prog = self._jobs.pop(job_id)
        job = prog.job
        last = make_segment(prog.since, now, prog.alloc.cpus)
        earlier = prog.segments
        segment_parts: tuple[tuple[Part, ...], ...] = ()
        if earlier is None:
            segments: tuple[Segment, ...] = (last,)
            if prog.version:
                # Resized only at the instant it started: one segment, on its new parts.
                segment_parts = (prog.alloc.parts,)
        elif now > prog.since:
            segments = (*earlier, last)
            segment_parts = (*(prog.segment_parts or ()), prog.alloc.parts)
        else:
            segments = tuple(earlier)
            segment_parts = tuple(prog.segment_parts or ())
        assert job.runtime is not None
        # Through the slots: one outcome per job of a trace (model.outcome).
        return make_outcome(
            job,
            prog.start,
            now,
            prog.first.parts,
            segments,
            prog.first.expanded_runtime(job.runtime, job.ref_speed),
            segment_parts,
        )
