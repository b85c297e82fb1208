"""The one execution model: how fast a job progresses on an allocation.

DESIGN.md, "The spine" point 4, and "Virtual malleability": a job keeps its
``p`` processes; on ``c`` CPUs (``ceil(p/2) <= c <= p``) it runs at MPL
``m = p / c``. Its progress rate, in units of work per second where one unit is
one second of run time on a machine of the job's reference speed, is

    rate = (BM_m / BM_ref) / (1 + (m - 1) * (u + OV))

with ``u`` the job's CPU-utilisation fraction (FCFS-malleable paper, formula (3):
time shared by two processes only costs the fraction of time they compute) and
``OV`` the paper's network-contention overhead of formula (4), 0 by default.
At MPL 2 with ``u = 1`` the run time doubles plus ``OV`` times the expanded run
time, which is exactly formula (4); at ``m = 1`` the rate is the speed ratio
alone, whatever ``u`` and ``OV`` are. ``BM_m`` is the speed of the slowest
machine of the allocation (a job spanning machines goes at its slowest part's
pace).

The live agents' sleep workload and the twin's modelled agents both call
:func:`rate`; nothing else may compute progress.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_MPL = 2.0
"""At most two processes per CPU (FCFS-malleable paper, sec. 3.1)."""


class AllocationError(ValueError):
    """An allocation that breaks the MPL bounds."""


def mpl(procs: int, cpus: int) -> float:
    """Multiprogramming level ``p / c``; raises unless ``1 <= p/c <= 2``."""
    if cpus < 1 or cpus > procs or procs > MAX_MPL * cpus:
        raise AllocationError(
            f"{procs} processes on {cpus} CPUs: need ceil(p/2) <= cpus <= p (MPL in [1, 2])"
        )
    return procs / cpus


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionModel:
    """Parameters of the execution model (``overhead`` is formula (4)'s ``OV``)."""

    overhead: float = 0.0

    def __post_init__(self) -> None:
        if not (self.overhead >= 0 and math.isfinite(self.overhead)):
            raise ValueError(f"overhead must be a finite value >= 0, got {self.overhead!r}")

    def rate(
        self, *, procs: int, cpus: int, speed: float, ref_speed: float, cpu_util: float
    ) -> float:
        """Units of work (reference-speed seconds) done per second of wall time."""
        m = mpl(procs, cpus)
        return (speed / ref_speed) / (1.0 + (m - 1.0) * (cpu_util + self.overhead))


DEFAULT_MODEL = ExecutionModel()
