"""Machines and allocations.

A machine has a CPU count and a benchmark speed (EG-EDF paper, sec. 2: ``R_m``
and ``BM_m``). An allocation is a tuple of parts ``(machine, cpus)``; its pace,
rate and the rest are ``model.allocation``'s.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


class MachineError(ValueError):
    """A machine description that cannot be used."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Machine:
    """One machine (a node or a whole homogeneous partition)."""

    id: str
    cpus: int
    speed: float = 1.0
    labels: tuple[str, ...] = ()

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
