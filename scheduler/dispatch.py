"""A policy's decisions as journal records and agent commands.

``SchedulerCore.schedule`` returns the starts and resizes it applied; each is
journalled (inside the decision's transaction) before its ``StartPart`` or
``ResizePart`` is queued for publication, so a scheduler killed in between
finds the job pending on restart. Every part of a start carries the job's
attempt (fencing, ``scheduler.part_lifecycle``), its pace (the slowest part's
speed) and the job's CPUs over all parts, from which each agent derives the
MPL it runs at.
"""

from __future__ import annotations

from broker.messages import ExecutionSpec, ResizePart, StartPart
from model.allocation import Allocation
from scheduler.context import Context
from scheduler.core import PolicyError
from scheduler.lifecycle import JobState
from scheduler.snapshot import Decisions


def dispatch(ctx: Context, decisions: Decisions, now: float) -> None:
    """Journal ``decisions`` (already applied to the core) and queue their commands."""
    core = ctx.core
    speeds = core.speeds
    for resize in decisions.resizes:
        job_id = resize.job.id
        live = ctx.placements[job_id]
        if {p.machine for p in resize.parts} != set(live.machines()):
            # Agents cannot move a job's processes: a local bug, crash loudly.
            raise PolicyError(f"policy moved job {job_id!r} to other machines")
        ctx.journal.record_parts(job_id, now, resize.parts)
        ctx.placements.resize(job_id, resize.parts)
        alloc = Allocation.of(resize.parts, speeds)
        for p in resize.parts:
            ctx.command(
                p.machine,
                ResizePart(
                    job_id=job_id,
                    cpus=p.cpus,
                    pace=alloc.pace,
                    job_cpus=alloc.cpus,
                    attempt=live.attempt,
                ),
            )
        ctx.event(job_id, "resized", now, f"{alloc.cpus} CPUs")
    issued = ctx.wall()
    model = core.execution
    execution = ExecutionSpec(
        kind=model.kind.value,
        overhead=model.overhead,
        ov_min=model.ov_min,
        ov_max=model.ov_max,
        seed=model.seed,
    )
    for start in decisions.starts:
        job_id = start.job.id
        spec = ctx.specs[job_id]
        attempt = ctx.attempt(job_id)
        ctx.journal.record_start(job_id, now, start.parts)
        ctx.placements.track(job_id, start.parts, attempt)
        alloc = Allocation.of(start.parts, speeds)
        n = len(start.parts)
        for i, p in enumerate(start.parts):
            ctx.command(
                p.machine,
                StartPart(
                    job=spec,
                    cpus=p.cpus,
                    pace=alloc.pace,
                    part=i,
                    parts=n,
                    time_scale=ctx.time_scale,
                    job_cpus=alloc.cpus,
                    attempt=attempt,
                    issued=issued,
                    execution=execution,
                ),
            )
        ctx.event(
            job_id,
            JobState.RUNNING.value,
            now,
            ",".join(f"{p.machine}:{p.cpus}" for p in start.parts),
        )
