"""Booking a decision's CPUs on the core's free-CPU map, checked.

The core trusts no policy: every part of a start or resize must name a known
machine, ask at least one CPU and no more than are free there, no machine may
appear twice, and the total must lie between the fewest CPUs the job may hold
and its process count. A decision that breaks any of these is a bug in the
policy and raises :class:`~scheduler.core.answers.PolicyError`; what was booked
before the faulty part is the caller's to give back (the core checks before
it books where it must stay unchanged). A job that needs capabilities
(``Job.needs``) must also be on machines that have them, and one that must run
on one machine (``Job.one_machine``) on one machine only (:func:`check_needs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from model.job import Job
from model.machine import Capability, Part
from scheduler.core.answers import PolicyError


def book(free: dict[str, int], job: Job, parts: tuple[Part, ...], least: int) -> int:
    """Take ``parts`` out of ``free``; returns the CPUs taken. ``least`` is the
    fewest CPUs ``job`` may hold under the policy."""
    if len(parts) == 1:
        # One part (every start on a one-machine trace): the checks below, inline.
        part = parts[0]
        have = free.get(part.machine)
        cpus = part.cpus
        if have is not None and 0 < cpus <= have and least <= cpus <= job.procs:
            free[part.machine] = have - cpus
            return cpus
    cpus = 0
    for part in parts:
        have = free.get(part.machine)
        if have is None:
            raise PolicyError(f"job {job.id!r} placed on unknown machine {part.machine!r}")
        if part.cpus < 1 or part.cpus > have:
            raise PolicyError(
                f"job {job.id!r} asks {part.cpus} CPUs of {part.machine!r}, {have} are free"
            )
        free[part.machine] = have - part.cpus
        cpus += part.cpus
    if len(parts) > 1 and len({p.machine for p in parts}) != len(parts):
        raise PolicyError(f"job {job.id!r} has two parts on one machine")
    if not least <= cpus <= job.procs:
        raise PolicyError(
            f"job {job.id!r} ({job.procs} processes) placed on {cpus} CPUs; "
            f"allowed {least}..{job.procs}"
        )
    return cpus


def release(free: dict[str, int], parts: tuple[Part, ...]) -> None:
    """Give ``parts``' CPUs back to ``free``."""
    for part in parts:
        free[part.machine] += part.cpus


def check_needs(
    job: Job,
    parts: tuple[Part, ...],
    capabilities: Mapping[str, frozenset[Capability]],
    held: Set[str] = frozenset(),
) -> None:
    """Raise :class:`PolicyError` if ``job`` must run on one machine and ``parts`` are
    on several, or if a part of it is on a known machine without a capability the job
    needs; machines in ``held`` (where a resized job runs already) are not asked about
    capabilities, and an unknown machine is :func:`book`'s to refuse."""
    if job.one_machine and len(parts) > 1:
        raise PolicyError(
            f"job {job.id!r} must run on one machine; placed on {len(parts)} machines"
        )
    for p in parts:
        got = capabilities.get(p.machine)
        if got is not None and p.machine not in held and not job.needs <= got:
            lacks = ", ".join(sorted(job.needs - got))
            raise PolicyError(f"job {job.id!r} placed on {p.machine!r}, which lacks {lacks}")
