"""Placement: which machines' CPUs a job gets.

The rule is stated and configurable (``--placement``), since the papers leave it
open when a job could span machines. Machines are always considered in the
order ``(-speed, id)``, fastest first, so ties are total.

``fastest`` (default)
    Maximise the pace of the job, which is the speed of its slowest part (its
    processes advance together; a machine's speed scales a run time as in the
    EG-EDF paper, sec. 2): take the smallest
    set of speed levels, from the fastest down, whose machines together have
    enough free CPUs. Inside that set, a single machine that fits is preferred
    (the fastest one); otherwise the job spans machines, the ones with most free
    CPUs first so it has as few parts as possible.
``best-fit``
    A single machine that leaves the fewest CPUs free, else span like
    ``fastest``. Packs jobs tightly at the cost of sometimes slower machines.
``single``
    Never span machines; the fastest machine that fits (the EG-EDF paper's
    model: "parallel jobs are always executed on only one machine").

*Eligibility.* A job that needs capabilities (``Job.needs``, ``model.machine``)
is placed, and planned, only on the machines that have them all:
:func:`machines_for` is the subset every policy and planner hands the rule for
such a job (the same sequence, uncopied, for a job that needs nothing, so a
trace replay pays nothing for it). The rule itself never sees a job: it places
CPUs on the machines it is given.

*One machine.* A job that must run on one machine (``Job.one_machine``: a
user's MPI program) is placed, and planned, by the ``single`` rule whatever
the configured one: :meth:`Placement.for_job` is the rule every policy and
planner asks for that job (the configured rule itself for any other job).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from model.job import Job
from model.machine import Machine, Part


class PlacementRule(StrEnum):
    FASTEST = "fastest"
    BEST_FIT = "best-fit"
    SINGLE = "single"


def machine_order(machine: Machine) -> tuple[float, str]:
    """A machine's key in the canonical order: fastest first, then by id."""
    return (-machine.speed, machine.id)


def sort_machines(machines: Sequence[Machine]) -> list[Machine]:
    """The canonical machine order: fastest first, then by id."""
    return sorted(machines, key=machine_order)


def runs_on(job: Job, machine: Machine) -> bool:
    """Whether ``machine`` has every capability ``job`` needs."""
    return job.needs <= machine.capabilities


def machines_for(job: Job, machines: Sequence[Machine]) -> Sequence[Machine]:
    """The machines of ``machines`` that ``job`` may run on, in their order: ``machines``
    itself when the job needs nothing (module docstring, "Eligibility")."""
    needs = job.needs
    if not needs:
        return machines
    return [m for m in machines if needs <= m.capabilities]


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """A placement rule. ``machines`` passed to :meth:`place` must be in canonical order."""

    rule: PlacementRule = PlacementRule.FASTEST

    def for_job(self, job: Job) -> Placement:
        """The rule that places ``job``: ``single`` for a job that must run on one
        machine, this one for any other (module docstring, "One machine")."""
        if job.one_machine and self.rule is not PlacementRule.SINGLE:
            return _SINGLE
        return self

    def place(
        self, cpus: int, free: Mapping[str, int], machines: Sequence[Machine]
    ) -> tuple[Part, ...] | None:
        """Parts giving ``cpus`` CPUs out of ``free``, or None when they do not fit."""
        if len(machines) == 1:
            # The common case of a homogeneous trace cluster: one partition.
            only = machines[0].id
            return (Part(only, cpus),) if free[only] >= cpus else None
        if self.rule is PlacementRule.SINGLE:
            for m in machines:
                if free[m.id] >= cpus:
                    return (Part(m.id, cpus),)
            return None
        if self.rule is PlacementRule.BEST_FIT:
            best: Machine | None = None
            for m in machines:
                f = free[m.id]
                if f >= cpus and (best is None or f < free[best.id]):
                    best = m
            if best is not None:
                return (Part(best.id, cpus),)
            return _span(cpus, free, machines)
        return _fastest(cpus, free, machines)


#: The rule of every job that must run on one machine (``Placement.for_job``).
_SINGLE = Placement(rule=PlacementRule.SINGLE)


def _fastest(
    cpus: int, free: Mapping[str, int], machines: Sequence[Machine]
) -> tuple[Part, ...] | None:
    total = 0
    n = len(machines)
    for i, m in enumerate(machines):
        total += free[m.id]
        last_of_level = i + 1 == n or machines[i + 1].speed < m.speed
        if total >= cpus and last_of_level:
            candidates = machines[: i + 1]
            for c in candidates:
                if free[c.id] >= cpus:
                    return (Part(c.id, cpus),)
            return _span(cpus, free, candidates)
    return None


def _span(
    cpus: int, free: Mapping[str, int], machines: Sequence[Machine]
) -> tuple[Part, ...] | None:
    if sum(free[m.id] for m in machines) < cpus:
        return None
    # Most free first keeps the number of parts (and messages, and failure points) small;
    # the stable sort keeps the canonical order among equals.
    order = sorted(machines, key=lambda m: -free[m.id])
    parts: list[Part] = []
    need = cpus
    for m in order:
        take = min(need, free[m.id])
        if take > 0:
            parts.append(Part(m.id, take))
            need -= take
        if need == 0:
            break
    return tuple(parts)
