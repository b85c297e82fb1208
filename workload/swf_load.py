"""A trace's jobs under the rules: streamed in order, or loaded whole in any order.

Theory of operation
-------------------
``iter_jobs`` streams a trace that is already in submit order and raises
``TraceOrderError`` when it is not. ``load_jobs`` reads a whole file in one
pass whatever its order: it keeps the replayable jobs, sorts them by
``(submit, job number)`` (stable) only when the file was not already in that
order, and with ``limit=N`` keeps only the N earliest in a bounded heap, so
that only the jobs returned are ever built. Its skip counts always cover the
whole file. Both skip a repeated job number (``SkipReason.DUPLICATE``: the
first one wins); each record is judged by ``workload.swf_rules``. A trace whose
header names its applications (``workload.applications``) gives each job
``load_jobs`` builds the name of its executable number.
"""

from __future__ import annotations

import heapq
import math
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from model import Job
from workload.applications import HEADER_KEY as APPS_KEY
from workload.applications import apps_from_text
from workload.swf import SwfError, SwfHeader, SwfRecord, open_swf
from workload.swf_rules import (
    DEFAULT_RULES,
    AdjustReason,
    SkipReason,
    SwfRules,
    build,
    check_total,
    judge,
)

__all__ = ["LoadResult", "TraceOrderError", "iter_jobs", "load_jobs"]


class TraceOrderError(ValueError):
    """A trace streamed with ``iter_jobs`` is not in ``(submit, job number)`` order."""

    def __init__(self, message: str, *, job_number: int, previous: int):
        super().__init__(message)
        self.job_number = job_number
        self.previous = previous


def iter_jobs(
    records: Iterable[SwfRecord],
    rules: SwfRules = DEFAULT_RULES,
    *,
    total_cpus: int | None = None,
    skipped: Counter[str] | None = None,
    adjusted: Counter[str] | None = None,
) -> Iterator[Job]:
    """Stream the replayable jobs of records already in submit order.

    Skips are counted into ``skipped`` (and adjustments into ``adjusted``)
    when given. Raises ``TraceOrderError`` at the first replayable record
    whose ``(submit, job number)`` is below its predecessor's: use
    ``load_jobs`` for traces that may be unsorted.
    """
    check_total(total_cpus)
    seen: set[int] = set()
    prev_key = (-math.inf, -1)
    prev_number = -1
    for rec in records:
        judged = judge(rec, rules, total_cpus)
        if not isinstance(judged, SkipReason) and rec.job_number in seen:
            judged = SkipReason.DUPLICATE
        if isinstance(judged, SkipReason):
            if skipped is not None:
                skipped[judged] += 1
            continue
        seen.add(rec.job_number)
        key = (rec.submit_time, rec.job_number)
        if key < prev_key:
            raise TraceOrderError(
                f"job {rec.job_number} (submit {rec.submit_time:g}) comes after job "
                f"{prev_number} (submit {prev_key[0]:g}): the trace is not in submit order",
                job_number=rec.job_number,
                previous=prev_number,
            )
        prev_key = key
        prev_number = rec.job_number
        procs, clip = judged
        job, more = build(rec, procs, rules)
        if adjusted is not None and (clip or more):
            adjusted.update(clip + more)
        yield job


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What ``load_jobs`` made of a trace.

    Attributes:
        jobs: the jobs, in ``(submit, job number)`` order (at most ``limit``).
        skipped: records not replayable, by ``SkipReason``, over the whole file.
        header: the file's header.
        sorted_input: whether the replayable records were already in order.
        records: job lines read (the whole file).
        replayable: records that were not skipped (>= ``len(jobs)``).
        adjusted: changes made to the returned jobs, by ``AdjustReason``.
    """

    jobs: list[Job]
    skipped: Counter[str]
    header: SwfHeader
    sorted_input: bool
    records: int = 0
    replayable: int = 0
    adjusted: Counter[str] = field(default_factory=Counter)


Builder = Callable[[SwfRecord, int, SwfRules], tuple[Job, tuple[AdjustReason, ...]]]


def _naming(apps: Mapping[int, str]) -> Builder:
    """``build``, and the job named after its executable number (module docstring)."""

    def build_named(
        rec: SwfRecord, procs: int, rules: SwfRules
    ) -> tuple[Job, tuple[AdjustReason, ...]]:
        job, adjusted = build(rec, procs, rules)
        app = apps.get(rec.executable)
        return (job if app is None else replace(job, app=app)), adjusted

    return build_named


def load_jobs(
    path: str | os.PathLike[str],
    rules: SwfRules = DEFAULT_RULES,
    *,
    limit: int | None = None,
    total_cpus: int | None = None,
) -> LoadResult:
    """Read an SWF file into jobs in submit order; ``limit=N`` keeps the first N.

    The whole file is read once (so that skip counts and order are known for
    all of it) but only the jobs returned are built. An unsorted file is
    sorted stably by ``(submit, job number)``; ``sorted_input`` says which
    case it was. ``total_cpus`` is the cluster size for the oversize rule
    (``None``: no size check). Raises ``SwfError`` on an unreadable file or
    malformed line.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit!r}")
    check_total(total_cpus)
    skipped: Counter[str] = Counter()
    seen: set[int] = set()
    in_order = True
    prev_key = (-math.inf, -1)
    records = 0
    # Unlimited: every kept job, in file order. Limited: a max-heap (keys
    # negated) of the `limit` smallest keys seen so far; a sorted file never
    # replaces its top, so past the first `limit` jobs nothing more is built.
    kept: list[tuple[float, int, Job, tuple[AdjustReason, ...]]] = []
    heap: list[tuple[float, int, Job, tuple[AdjustReason, ...]]] = []
    # Local names: the loop below runs once per line of traces of millions.
    judge_record = judge
    build_job: Builder = build
    with open_swf(path) as reader:
        header = reader.header
        named = header.get(APPS_KEY)
        if named is not None:
            try:
                build_job = _naming(apps_from_text(named))
            except ValueError as exc:
                raise SwfError(str(exc), source=os.fspath(path)) from None
        for rec in reader:
            records += 1
            judged = judge_record(rec, rules, total_cpus)
            number = rec.job_number
            if not isinstance(judged, SkipReason) and number in seen:
                judged = SkipReason.DUPLICATE
            if isinstance(judged, SkipReason):
                skipped[judged] += 1
                continue
            seen.add(number)
            submit = rec.submit_time
            key = (submit, number)
            if key < prev_key:
                in_order = False
            prev_key = key
            procs, clip = judged
            if limit is None:
                job, more = build_job(rec, procs, rules)
                kept.append((submit, number, job, clip + more))
            elif len(heap) < limit:
                job, more = build_job(rec, procs, rules)
                heapq.heappush(heap, (-submit, -number, job, clip + more))
            elif limit and key < (-heap[0][0], -heap[0][1]):
                job, more = build_job(rec, procs, rules)
                heapq.heapreplace(heap, (-submit, -number, job, clip + more))
    replayable = len(seen)
    if limit is not None:
        # Keys are unique (job numbers are), so the Job in the tuple is never compared.
        kept = sorted((-s, -n, job, adj) for s, n, job, adj in heap)
    elif not in_order:
        kept.sort(key=lambda item: (item[0], item[1]))
    adjusted: Counter[str] = Counter()
    for *_, adj in kept:
        if adj:
            adjusted.update(adj)
    return LoadResult(
        jobs=[job for _, _, job, _ in kept],
        skipped=skipped,
        header=header,
        sorted_input=in_order,
        records=records,
        replayable=replayable,
        adjusted=adjusted,
    )
