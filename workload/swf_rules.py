"""SWF records to ``model.Job`` and back, by stated rules.

A trace line is not always a job that can be replayed: cancelled jobs without
a run time, jobs without a processor count, partial-execution lines of a job
already summarised elsewhere, jobs larger than the simulated cluster. Each
such record is skipped and counted under a ``SkipReason``; nothing is dropped
silently. The choices a replay depends on (which processor field, what
estimate when the user gave none, skip or clip oversized jobs) are the fields
of ``SwfRules``, each default stated in its docstring.

Theory of operation
-------------------
``record_to_job`` judges one record: :func:`judge` decides whether it is
replayable and on how many processors, :func:`build` makes the job (its
walltime, CPU utilisation, names). Reading a whole trace by these rules is
``workload.swf_load`` (``iter_jobs``, ``load_jobs``); the way back, a
schedule to SWF records, is ``workload.swf_schedule``.

Submit times are kept as they are: SWF times are already relative to the log
start (``UnixStartTime`` in the header).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, Literal

from model import Job
from workload.swf import SwfRecord

__all__ = [
    "DEFAULT_RULES",
    "AdjustReason",
    "SkipReason",
    "SwfRules",
    "build",
    "check_total",
    "judge",
    "record_to_job",
]


class SkipReason(StrEnum):
    """Why a record was not replayed (the keys of ``LoadResult.skipped``)."""

    STATUS = "status"
    """Its status is in ``SwfRules.skip_statuses`` (by default a partial-execution line)."""
    NO_SUBMIT = "no_submit"
    """Submit time missing (-1) or negative."""
    NO_RUNTIME = "no_runtime"
    """Run time missing (-1): typically cancelled before it started; cannot be replayed."""
    NO_PROCS = "no_procs"
    """Neither requested nor allocated processors known (both <= 0)."""
    NOT_ALLOCATED = "not_allocated"
    """Allocated processors <= 0 while ``SwfRules.require_allocated`` is set."""
    TOO_BIG = "too_big"
    """Needs more processors than the cluster has (``oversize="skip"``)."""
    DUPLICATE = "duplicate_id"
    """Same job number as an earlier replayable record (the first one wins)."""


class AdjustReason(StrEnum):
    """What was changed in a kept job (the keys of ``LoadResult.adjusted``)."""

    ESTIMATE_FALLBACK = "estimate_fallback"
    """Requested time missing (or ignored): walltime from ``SwfRules.missing_estimate``."""
    WALLTIME_RAISED = "walltime_raised"
    """Walltime below the run time, raised to it (``SwfRules.walltime_covers_runtime``)."""
    WALLTIME_FLOOR = "walltime_floor"
    """Walltime below ``SwfRules.min_walltime`` (e.g. a zero run time), raised to it."""
    CLIPPED = "clipped"
    """More processors than the cluster, cut to its size (``oversize="clip"``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SwfRules:
    """How SWF records become jobs. Every default is a choice; change it by name.

    Attributes:
        procs_from: ``"requested"`` (default) takes the requested processors
            (field 8) and falls back to the allocated ones (field 5) when the
            request is missing, as in CTC-SP2 and the Lublin model files;
            ``"allocated"`` prefers field 5 and falls back to field 8.
        missing_estimate: the walltime of a job whose requested time (field 9)
            is missing (-1 or 0). ``"runtime"`` (default): its run time, a
            perfect estimate; ``"fixed"``: ``estimate_seconds``; ``"factor"``:
            run time times ``estimate_factor``.
        estimate_seconds: the ``"fixed"`` estimate (default 3600 s).
        estimate_factor: the ``"factor"`` multiplier (default 2.0, must be > 0).
        ignore_requested_time: apply ``missing_estimate`` to every job, not only
            to those without a request (default False: keep the user's estimate),
            e.g. to replay with perfect estimates.
        walltime_covers_runtime: raise a walltime below the run time to the run
            time (default False: logs record jobs overrunning their request by
            a grace period, and a replay shows that as it happened).
        min_walltime: smallest walltime (default 1 s); ``model.Job`` requires a
            positive one and a zero run time with a perfect estimate gives 0.
        oversize: a job needing more processors than ``total_cpus``: ``"skip"``
            it (default, counted ``too_big``) or ``"clip"`` it to the cluster
            size (counted ``clipped``; its run time is not rescaled).
        skip_statuses: statuses (field 11) never replayed. Default {2, 3, 4}:
            the partial-execution lines of a checkpointed or swapped job, whose
            summary line (status 0, 1 or 5) carries the whole job. Completed (1),
            failed (0) and cancelled (5) jobs are all kept when their run time
            and processors are known: they did occupy the machine.
        require_allocated: skip jobs whose allocated processors (field 5) are
            <= 0 even when they requested some (default True: the archive's
            notes and ``SOURCES.md`` count these as cancelled before they got
            processors; SDSC-BLUE has 8,899 of them, all status 5). False
            replays them on their requested processors.
        cpu_util_from_trace: set ``Job.cpu_util`` to average CPU time (field 6,
            per processor) over run time, clamped to [min_cpu_util, 1]
            (default True); 1.0 when either is unknown or zero.
        min_cpu_util: lower clamp of that ratio (default 0.01; ``Job`` needs > 0).
        missing_cpu_util: ``Job.cpu_util`` of a job whose trace line has no CPU
            time (field 6 missing or zero, as in all of KTH-SP2), or of every
            job when ``cpu_util_from_trace`` is off. Default 1.0: a job of
            unknown utilisation is taken as compute-bound, the costliest case
            for sharing a CPU, so that a shrink is never cheaper than the
            trace can show; under the ``linear`` and ``paper`` execution
            models that makes every shrink to MPL 2 double the run time. The
            FCFS-malleable paper's traces had CPU times (its Table 2 averages
            them), so it never needed this rule.
        ref_speed: ``Job.ref_speed`` of every job: the speed the trace's
            machine had relative to the simulated cluster's (default 1.0).
    """

    procs_from: Literal["requested", "allocated"] = "requested"
    missing_estimate: Literal["runtime", "fixed", "factor"] = "runtime"
    estimate_seconds: float = 3600.0
    estimate_factor: float = 2.0
    ignore_requested_time: bool = False
    walltime_covers_runtime: bool = False
    min_walltime: float = 1.0
    oversize: Literal["skip", "clip"] = "skip"
    skip_statuses: frozenset[int] = frozenset({2, 3, 4})
    require_allocated: bool = True
    cpu_util_from_trace: bool = True
    min_cpu_util: float = 0.01
    missing_cpu_util: float = 1.0
    ref_speed: float = 1.0

    def __post_init__(self) -> None:
        if self.procs_from not in ("requested", "allocated"):
            raise ValueError(
                f"procs_from must be 'requested' or 'allocated', got {self.procs_from!r}"
            )
        if self.missing_estimate not in ("runtime", "fixed", "factor"):
            raise ValueError(
                f"missing_estimate must be 'runtime', 'fixed' or 'factor', "
                f"got {self.missing_estimate!r}"
            )
        if self.oversize not in ("skip", "clip"):
            raise ValueError(f"oversize must be 'skip' or 'clip', got {self.oversize!r}")
        if not (self.estimate_seconds > 0 and math.isfinite(self.estimate_seconds)):
            raise ValueError(f"estimate_seconds must be > 0, got {self.estimate_seconds!r}")
        if not (self.estimate_factor > 0 and math.isfinite(self.estimate_factor)):
            raise ValueError(f"estimate_factor must be > 0, got {self.estimate_factor!r}")
        if not (self.min_walltime > 0 and math.isfinite(self.min_walltime)):
            raise ValueError(f"min_walltime must be > 0, got {self.min_walltime!r}")
        if not 0 < self.min_cpu_util <= 1:
            raise ValueError(f"min_cpu_util must be in (0, 1], got {self.min_cpu_util!r}")
        if not 0 < self.missing_cpu_util <= 1:
            raise ValueError(
                f"the CPU utilisation of jobs without CPU time must be in (0, 1], "
                f"got {self.missing_cpu_util!r}"
            )
        if not (self.ref_speed > 0 and math.isfinite(self.ref_speed)):
            raise ValueError(f"ref_speed must be > 0, got {self.ref_speed!r}")
        # Accept any iterable of ints for convenience, store it hashable.
        object.__setattr__(self, "skip_statuses", frozenset(self.skip_statuses))

    @classmethod
    def from_fallback(cls, text: str, **overrides: Any) -> SwfRules:
        """Rules whose missing-estimate fallback is written as text (the CLI's form).

        ``"runtime"``: the run time; ``"runtime*F"``: run time times F;
        ``"S"`` (a number): S seconds. Other fields come from ``overrides``.
        Raises ``ValueError`` quoting the text when it is none of these.
        """
        spec = text.strip().lower().replace(" ", "")
        try:
            if spec == "runtime":
                return cls(missing_estimate="runtime", **overrides)
            if spec.startswith("runtime*"):
                factor = float(spec.removeprefix("runtime*"))
                return cls(missing_estimate="factor", estimate_factor=factor, **overrides)
            return cls(missing_estimate="fixed", estimate_seconds=float(spec), **overrides)
        except ValueError as exc:
            raise ValueError(
                f"missing-walltime fallback {text!r}: expected 'runtime', 'runtime*F' "
                f"(F > 0) or a number of seconds > 0 ({exc})"
            ) from None


DEFAULT_RULES: Final = SwfRules()


def _name(prefix: str, number: int) -> str:
    return f"{prefix}{number}" if number >= 0 else "unknown"


def check_total(total_cpus: int | None) -> None:
    """Refuse a cluster size below 1 (``None``: no size check)."""
    if total_cpus is not None and total_cpus < 1:
        raise ValueError(f"total_cpus must be >= 1, got {total_cpus!r}")


def judge(
    rec: SwfRecord, rules: SwfRules, total_cpus: int | None
) -> tuple[int, tuple[AdjustReason, ...]] | SkipReason:
    """The processor count and adjustments of a replayable record, or why it is not."""
    if rec.status in rules.skip_statuses:
        return SkipReason.STATUS
    if rec.submit_time < 0:
        return SkipReason.NO_SUBMIT
    if rec.run_time < 0:
        return SkipReason.NO_RUNTIME
    first, second = (
        (rec.requested_procs, rec.allocated_procs)
        if rules.procs_from == "requested"
        else (rec.allocated_procs, rec.requested_procs)
    )
    procs = first if first > 0 else second
    if procs <= 0:
        return SkipReason.NO_PROCS
    if rules.require_allocated and rec.allocated_procs <= 0:
        return SkipReason.NOT_ALLOCATED
    if total_cpus is not None and procs > total_cpus:
        if rules.oversize == "skip":
            return SkipReason.TOO_BIG
        return total_cpus, (AdjustReason.CLIPPED,)
    return procs, ()


def _walltime(rec: SwfRecord, rules: SwfRules) -> tuple[float, tuple[AdjustReason, ...]]:
    run = rec.run_time
    estimate = rec.requested_time
    adjusted: tuple[AdjustReason, ...] = ()
    if rules.ignore_requested_time or estimate <= 0:
        adjusted = (AdjustReason.ESTIMATE_FALLBACK,)
        if rules.missing_estimate == "runtime":
            estimate = run
        elif rules.missing_estimate == "fixed":
            estimate = rules.estimate_seconds
        else:
            estimate = run * rules.estimate_factor
    if rules.walltime_covers_runtime and estimate < run:
        estimate = run
        adjusted = (*adjusted, AdjustReason.WALLTIME_RAISED)
    if estimate < rules.min_walltime:
        estimate = rules.min_walltime
        adjusted = (*adjusted, AdjustReason.WALLTIME_FLOOR)
    return estimate, adjusted


def build(rec: SwfRecord, procs: int, rules: SwfRules) -> tuple[Job, tuple[AdjustReason, ...]]:
    """The job of a record :func:`judge` found replayable on ``procs``, and what was
    adjusted to make it."""
    walltime, adjusted = _walltime(rec, rules)
    run = rec.run_time
    util = rules.missing_cpu_util
    if rules.cpu_util_from_trace and rec.avg_cpu_time > 0 and run > 0:
        util = min(1.0, max(rules.min_cpu_util, rec.avg_cpu_time / run))
    job = Job(
        id=str(rec.job_number),
        submit=rec.submit_time,
        procs=procs,
        walltime=walltime,
        runtime=run,
        user=_name("u", rec.user_id),
        group=_name("g", rec.group_id),
        cpu_util=util,
        qos=rec.queue if rec.queue >= 0 else 0,
        ref_speed=rules.ref_speed,
    )
    return job, adjusted


def record_to_job(
    record: SwfRecord,
    rules: SwfRules = DEFAULT_RULES,
    *,
    total_cpus: int | None = None,
    adjusted: Counter[str] | None = None,
) -> Job | SkipReason:
    """The job of one record, or the reason it cannot be replayed.

    ``Job.id`` is the job number as text; ``user``/``group`` are ``u<id>`` and
    ``g<id>`` (``unknown`` when -1); ``qos`` is the queue number (0 when
    missing); ``runtime`` is the run time; processors, walltime and
    ``cpu_util`` follow ``rules``. ``total_cpus`` (the cluster size) enables
    the oversize rule. Adjustments are added to ``adjusted`` when given.
    Duplicate job numbers are not detected here (see ``workload.swf_load``).
    """
    check_total(total_cpus)
    judged = judge(record, rules, total_cpus)
    if isinstance(judged, SkipReason):
        return judged
    procs, clip = judged
    job, more = build(record, procs, rules)
    if adjusted is not None:
        adjusted.update(clip + more)
    return job
