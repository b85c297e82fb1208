"""What happened to a job: the record every metric is computed from.

A job's life on CPUs is a list of segments: one for a rigid job, one more at
every resize of a malleable one. The twin writes these records; the live
scheduler will write the same ones from the agents' reports. Each segment's
machines (its parts) are kept beside the segments, for the pictures that draw
a job on its machines (the Gantt chart); no metric reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

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
    #: The parts of each segment, one per segment in the same order; empty when the
    #: job was never resized (every segment is then on ``parts``). Left out of
    #: equality: it says where the CPUs were, not what happened to the job.
    segment_parts: tuple[tuple[Part, ...], ...] = field(default=(), compare=False)

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

    def placements(self) -> tuple[tuple[Segment, tuple[Part, ...]], ...]:
        """Each segment with the parts it ran on."""
        if not self.segment_parts:
            return tuple((s, self.parts) for s in self.segments)
        return tuple(zip(self.segments, self.segment_parts, strict=True))


# -- building many records ---------------------------------------------------------
#
# The twin builds one outcome and one segment per job of a trace (tens of
# thousands). A frozen dataclass's ``__init__`` sets every field through
# ``object.__setattr__``; setting the slots through their descriptors builds the
# same immutable value for about two thirds of the cost. The field lists are checked
# at import, so a field added to either class cannot be silently left unset.

_OUTCOME_FIELDS = (
    "job",
    "start",
    "end",
    "parts",
    "segments",
    "expanded_runtime",
    "failed",
    "segment_parts",
)
_SEGMENT_FIELDS = ("start", "end", "cpus")
if (
    tuple(f.name for f in fields(JobOutcome)) != _OUTCOME_FIELDS
    or tuple(f.name for f in fields(Segment)) != _SEGMENT_FIELDS
):
    raise RuntimeError("model.outcome sets its records' fields one by one: they changed")
_new = object.__new__
_o_job, _o_start, _o_end, _o_parts, _o_segments, _o_expanded, _o_failed, _o_segment_parts = (
    getattr(JobOutcome, name).__set__ for name in _OUTCOME_FIELDS
)
_s_start, _s_end, _s_cpus = (getattr(Segment, name).__set__ for name in _SEGMENT_FIELDS)


def make_segment(start: float, end: float, cpus: int) -> Segment:
    """``Segment(start, end, cpus)``, built through the slots."""
    seg: Segment = _new(Segment)
    _s_start(seg, start)
    _s_end(seg, end)
    _s_cpus(seg, cpus)
    return seg


def make_outcome(  # noqa: PLR0917 - one argument per field, in the fields' order
    job: Job,
    start: float,
    end: float,
    parts: tuple[Part, ...],
    segments: tuple[Segment, ...],
    expanded_runtime: float,
    segment_parts: tuple[tuple[Part, ...], ...] = (),
) -> JobOutcome:
    """``JobOutcome(job=job, ..., failed=False)``, built through the slots."""
    out: JobOutcome = _new(JobOutcome)
    _o_job(out, job)
    _o_start(out, start)
    _o_end(out, end)
    _o_parts(out, parts)
    _o_segments(out, segments)
    _o_expanded(out, expanded_runtime)
    _o_failed(out, False)
    _o_segment_parts(out, segment_parts)
    return out
