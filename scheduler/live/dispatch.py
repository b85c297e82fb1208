"""A policy's decisions as journal records and agent commands.

``SchedulerCore.schedule`` returns the starts and resizes it applied; each is
journalled (inside the decision's transaction) before its ``StartPart`` or
``ResizePart`` is queued for publication, so a scheduler killed in between
finds the job pending on restart (and, for a resize, tells the agent the
journal's CPUs when it reconciles, ``scheduler.live.reconcile``).

A resize is journalled with the parts before and after, counted in
``accordion_job_resizes_total{direction}`` (``shrink`` when the job's CPUs
over all parts drop, ``expand`` when they rise) and announced by a
``resized`` ``JobEvent`` carrying ``cpus_before`` and ``cpus_after``, whose
detail says the direction, the CPUs and the MPL (``procs / cpus``) from then
on. Its ``ResizePart`` carries the decision's wall time (``issued``): the job
process changes pace from then, as the twin does, even if it reads the command
later because it is still starting.

Every part of a start carries the job's attempt (fencing,
``scheduler.live.part_lifecycle``), its pace (the slowest part's speed), the
job's CPUs over all parts, from which each agent derives the MPL it runs at,
and its share of the job's processes (:func:`rank_shares`: they sum to the
job's ``procs`` however uneven the parts are).
"""

from __future__ import annotations

from broker.command_spec import HostSlots
from broker.messages import ExecutionSpec, ResizePart, StartPart
from broker.vocabulary import JobEventKind
from model.allocation import Allocation
from model.machine import Part
from scheduler.core.core import PolicyError
from scheduler.core.snapshot import Decisions
from scheduler.live.context import Context


def dispatch(ctx: Context, decisions: Decisions, now: float) -> None:
    """Journal ``decisions`` (already applied to the core) and queue their commands."""
    core = ctx.core
    speeds = core.speeds
    issued = ctx.wall()
    for resize in decisions.resizes:
        job_id = resize.job.id
        live = ctx.placements[job_id]
        if {p.machine for p in resize.parts} != set(live.machines()):
            # Agents cannot move a job's processes: a local bug, crash loudly.
            raise PolicyError(f"policy moved job {job_id!r} to other machines")
        before = live.layout()
        ctx.journal.record_parts(job_id, now, resize.parts, before)
        ctx.placements.resize(job_id, resize.parts)
        alloc = Allocation.of(resize.parts, speeds)
        was = sum(p.cpus for p in before)
        for p in resize.parts:
            ctx.command(
                p.machine,
                ResizePart(
                    job_id=job_id,
                    cpus=p.cpus,
                    pace=alloc.pace,
                    job_cpus=alloc.cpus,
                    attempt=live.attempt,
                    issued=issued,
                ),
            )
        direction = "shrink" if alloc.cpus < was else "expand"
        ctx.metrics.job_resizes.labels(direction=direction).inc()
        ctx.event(
            job_id,
            JobEventKind.RESIZED,
            now,
            resize_detail(direction, was, alloc.cpus, resize.job.procs),
            cpus=(was, alloc.cpus),
            parts=resize.parts,
        )
    for start in decisions.starts:
        job_id = start.job.id
        attempt = ctx.attempt(job_id)
        ctx.journal.record_start(job_id, now, start.parts)
        ctx.placements.track(job_id, start.parts, attempt).decided = now
        for machine, command in start_commands(ctx, job_id, start.parts, attempt, issued):
            ctx.command(machine, command)
        ctx.event(
            job_id,
            JobEventKind.RUNNING,
            now,
            ",".join(f"{p.machine}:{p.cpus}" for p in start.parts),
            parts=start.parts,
        )


def start_commands(
    ctx: Context, job_id: str, parts: tuple[Part, ...], attempt: int, issued: float
) -> list[tuple[str, StartPart]]:
    """``(machine, StartPart)`` of each part of a start of ``job_id`` (also the
    reconciliation's, which sends a start again that an agent never received)."""
    model = ctx.core.execution
    execution = ExecutionSpec(
        kind=model.kind.value,
        overhead=model.overhead,
        ov_min=model.ov_min,
        ov_max=model.ov_max,
        seed=model.seed,
    )
    alloc = Allocation.of(parts, ctx.core.speeds)
    spec = ctx.specs[job_id]
    shares = rank_shares(spec.procs, [p.cpus for p in parts])
    # Every part and its share of the processes: a command job's hostfile. Only a
    # command job's parts are told (the other workloads have no use for it).
    hosts = (
        tuple(
            HostSlots(machine=p.machine, slots=max(1, n))
            for p, (n, _) in zip(parts, shares, strict=True)
        )
        if spec.workload == "command"
        else ()
    )
    return [
        (
            p.machine,
            StartPart(
                job=spec,
                cpus=p.cpus,
                pace=alloc.pace,
                part=i,
                parts=len(parts),
                time_scale=ctx.time_scale,
                job_cpus=alloc.cpus,
                attempt=attempt,
                issued=issued,
                execution=execution,
                ranks=ranks,
                rank_offset=offset,
                hosts=hosts,
            ),
        )
        for i, (p, (ranks, offset)) in enumerate(zip(parts, shares, strict=True))
    ]


def rank_shares(procs: int, cpus: list[int]) -> list[tuple[int, int]]:
    """Each part's ``(ranks, first rank)``: the job's ``procs`` split over its parts
    in proportion to their CPUs, summing to ``procs`` (the MPI-like ranks' allreduce
    checks that sum), part ``i`` holding ranks ``first .. first + ranks - 1``.

    Cut at ``floor(procs * CPUs before the part / all CPUs)``: a part of ``c`` CPUs
    gets ``floor`` or ``ceil`` of ``procs * c / all``, so at least ``c`` ranks and at
    most ``2c`` when the job's MPL is within 1..2.
    """
    total = sum(cpus)
    cuts = [procs * before // total for before in _running_sums(cpus)]
    return [(cuts[i + 1] - cuts[i], cuts[i]) for i in range(len(cpus))]


def _running_sums(values: list[int]) -> list[int]:
    sums = [0]
    for v in values:
        sums.append(sums[-1] + v)
    return sums


def resize_detail(direction: str, before: int, after: int, procs: int) -> str:
    """A resize event's detail: ``shrunk 8 -> 4 CPUs, MPL 2.00``."""
    verb = "shrunk" if direction == "shrink" else "expanded"
    return f"{verb} {before} -> {after} CPUs, MPL {procs / after:.2f}"
