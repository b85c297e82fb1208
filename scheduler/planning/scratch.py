"""Small helpers policies share to book CPUs on a scratch copy of the free map.

An allocation's speed, CPUs and rate are ``model.allocation``'s, not here.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence

from model.job import Job
from model.machine import Machine, Part
from scheduler.core.snapshot import Start
from scheduler.planning.placement import Placement, machines_for


def take(free: MutableMapping[str, int], parts: tuple[Part, ...]) -> None:
    """Book ``parts`` out of ``free`` (a policy's scratch copy, never the core's)."""
    for p in parts:
        free[p.machine] -= p.cpus


def give(free: MutableMapping[str, int], parts: tuple[Part, ...]) -> None:
    """Return ``parts`` to ``free``."""
    for p in parts:
        free[p.machine] += p.cpus


def start_while_fit(
    order: Sequence[Job],
    free: MutableMapping[str, int],
    machines: Sequence[Machine],
    placement: Placement,
) -> tuple[list[Start], int]:
    """Start jobs from the head of ``order`` while each fits (FCFS's rule, and the
    first step of EASY and DPSA, Fig. 2 lines 3-7); books them out of ``free``.
    Returns the starts and the index of the first job that did not fit."""
    total_free = sum(free.values())
    starts: list[Start] = []
    for i, job in enumerate(order):
        parts = (
            placement.for_job(job).place(job.procs, free, machines_for(job, machines))
            if job.procs <= total_free
            else None
        )
        if parts is None:
            return starts, i
        take(free, parts)
        total_free -= job.procs
        starts.append(Start(job, parts))
    return starts, len(order)
