"""One allocation: the CPUs a job holds, and how fast it goes on them.

An allocation is a tuple of parts ``(machine, cpus)``. Everything the rest of
the code needs to know of it is here, computed one way, so that the core, the
policies and the twin cannot disagree on it:

* ``cpus``: the total over its parts;
* ``pace``: the speed of its slowest machine, since a job whose parts span
  machines proceeds at the pace of its slowest part (its processes advance
  together); on one machine, a machine's speed scales a run time as in the
  EG-EDF paper, sec. 2 (``Estimated * BM_m / BM_m'``);
* ``mpl(procs)``: the multiprogramming level ``p / c`` of a job's processes
  on it (FCFS-malleable paper, "virtual malleability");
* ``rate(job, model)``: the job's progress rate on it, which is the execution
  model's (``model.execution``) and only ever asked of it through here, so a
  change of model is a change in one call;
* ``expanded_runtime(work, ref_speed)``: the run time of ``work`` on it at
  MPL 1, the denominator of the FCFS-malleable paper's slowdown (formula (1)).

:func:`pace` is the same number for a policy's hot loop, without building
the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from model.execution import ExecutionModel, ModelKind, mpl
from model.job import Job
from model.machine import Part


class EmptyAllocationError(ValueError):
    """An allocation needs at least one part."""


def pace(parts: tuple[Part, ...], speeds: Mapping[str, float]) -> float:
    """The speed of an allocation: its slowest machine's."""
    if len(parts) == 1:
        return speeds[parts[0].machine]
    if not parts:
        raise EmptyAllocationError("an allocation needs at least one part")
    return min(speeds[p.machine] for p in parts)


@dataclass(frozen=True, slots=True)
class Allocation:
    """``parts`` with their total ``cpus`` and their ``pace``; build it with :meth:`of`."""

    parts: tuple[Part, ...]
    cpus: int
    pace: float

    def __post_init__(self) -> None:
        parts = self.parts
        if not parts:
            raise EmptyAllocationError("an allocation needs at least one part")
        # One part is the common case (a homogeneous trace): no generator for it.
        if self.cpus != (parts[0].cpus if len(parts) == 1 else sum(p.cpus for p in parts)):
            raise ValueError(f"allocation {self.parts}: cpus {self.cpus} is not their sum")
        if not self.pace > 0:
            raise ValueError(f"allocation {self.parts}: pace must be > 0, got {self.pace!r}")

    @classmethod
    def of(cls, parts: tuple[Part, ...], speeds: Mapping[str, float]) -> Allocation:
        """The allocation of ``parts``, with ``speeds`` by machine id."""
        if len(parts) == 1:
            return cls(parts, parts[0].cpus, speeds[parts[0].machine])
        return cls(parts, sum(p.cpus for p in parts), pace(parts, speeds))

    def mpl(self, procs: int) -> float:
        """Processes per CPU for a job of ``procs`` processes (raises outside [1, 2])."""
        return mpl(procs, self.cpus)

    def rate(self, job: Job, model: ExecutionModel) -> float:
        """``job``'s progress on this allocation, in reference-speed seconds per second."""
        return model.rate(
            procs=job.procs,
            cpus=self.cpus,
            speed=self.pace,
            ref_speed=job.ref_speed,
            cpu_util=job.cpu_util,
            job_id=job.id,
            app=job.app,
        )

    def expanded_runtime(self, work: float, ref_speed: float) -> float:
        """Run time of ``work`` (seconds at ``ref_speed``) on this allocation at MPL 1."""
        return work * ref_speed / self.pace


_MEMO_LIMIT = 4096
"""Entries an :class:`AllocationMemo` keeps before it starts afresh (bounds memory)."""


class AllocationMemo:
    """:meth:`Allocation.of` and :meth:`Allocation.rate`, remembered.

    A trace replay starts tens of thousands of jobs on a handful of distinct
    allocations (one machine, a few widths), and the rate of a job depends
    only on its processes, reference speed and CPU utilisation besides the
    allocation, except under the ``paper`` model, which draws per job (never
    remembered), and the ``calibrated`` one, whose rate off MPL 1 depends on the
    job's application instead of its utilisation. The values are the same ones
    the methods compute; the memo only skips computing them again. ``speeds``
    is read when an allocation is first built: its owner calls :meth:`clear`
    when a machine comes or goes.
    """

    __slots__ = ("_allocs", "_by_app", "_model", "_per_job", "_rates", "_speeds")

    def __init__(self, speeds: Mapping[str, float], model: ExecutionModel) -> None:
        self._speeds = speeds
        self._model = model
        self._per_job = model.kind is ModelKind.PAPER
        self._by_app = model.kind is ModelKind.CALIBRATED
        self._allocs: dict[object, Allocation] = {}
        self._rates: dict[tuple[int, int, float, float, float | str], float] = {}

    def clear(self) -> None:
        self._allocs.clear()
        self._rates.clear()

    def of(self, parts: tuple[Part, ...]) -> Allocation:
        # One part is keyed by its fields (a plain tuple hashes in C; a Part does not).
        key: object = (parts[0].machine, parts[0].cpus) if len(parts) == 1 else parts
        alloc = self._allocs.get(key)
        if alloc is None:
            if len(self._allocs) >= _MEMO_LIMIT:
                self._allocs.clear()
            alloc = self._allocs[key] = Allocation.of(parts, self._speeds)
        return alloc

    def rate(self, alloc: Allocation, job: Job) -> float:
        if self._per_job:
            return alloc.rate(job, self._model)
        procs = job.procs
        cpus = alloc.cpus
        # At MPL 1 the ``linear``, ``max`` and ``calibrated`` factors are exactly 1.0
        # whatever the CPU utilisation or application (model.execution), so they are
        # left out of the key there: a trace gives nearly every job its own utilisation.
        util: float | str = -1.0
        if procs != cpus:
            util = job.app if self._by_app and job.app is not None else job.cpu_util
        key = (procs, cpus, alloc.pace, job.ref_speed, util)
        rate = self._rates.get(key)
        if rate is None:
            if len(self._rates) >= _MEMO_LIMIT:
                self._rates.clear()
            rate = self._rates[key] = alloc.rate(job, self._model)
        return rate
