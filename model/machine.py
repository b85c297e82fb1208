"""Machines and allocations.

A machine has a CPU count and a benchmark speed (EG-EDF paper, sec. 2: ``R_m``
and ``BM_m``). An allocation is a tuple of parts ``(machine, cpus)``; its pace,
rate and the rest are ``model.allocation``'s.

A machine may also have *capabilities*, what it can do beyond giving CPUs to
the built-in workloads, and a job may *need* some (``Job.needs``): such a job
runs only on machines that have every capability it needs, as a Slurm job with
``--constraint`` runs only on nodes with those features. Unlike a machine's
free ``labels`` (its operator's words, for display), a capability is the
scheduler's fact about the machine: the live scheduler sets it from what the
agent's registration says it does, never from a label an operator typed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class MachineError(ValueError):
    """A machine description that cannot be used."""


class Capability(StrEnum):
    """What a machine can do that not every machine does (module docstring)."""

    #: It runs users' own commands (an agent started with ``--allow-commands``).
    COMMANDS = "commands"
    #: It launches MPI programs' ranks with Open MPI, or with MPICH (its agent found
    #: the launcher, and for MPICH the yield shim, on its host).
    OPENMPI = "openmpi"
    MPICH = "mpich"


@dataclass(frozen=True, slots=True, kw_only=True)
class Machine:
    """One machine (a node or a whole homogeneous partition)."""

    id: str
    cpus: int
    speed: float = 1.0
    labels: tuple[str, ...] = ()
    capabilities: frozenset[Capability] = frozenset()

    def __post_init__(self) -> None:
        if not self.id:
            raise MachineError("machine id must be a non-empty string")
        if self.cpus < 1:
            raise MachineError(f"machine {self.id!r}: cpus must be >= 1, got {self.cpus!r}")
        if not (self.speed > 0 and math.isfinite(self.speed)):
            raise MachineError(f"machine {self.id!r}: speed must be > 0, got {self.speed!r}")


@dataclass(frozen=True, slots=True)
class Part:
    """``cpus`` CPUs of machine ``machine`` given to one job."""

    machine: str
    cpus: int


def parts_cpus(parts: Iterable[Part]) -> int:
    """Total CPUs of an allocation."""
    return sum(p.cpus for p in parts)
