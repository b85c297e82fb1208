"""The one execution model: how fast a job progresses on an allocation, in named variants.

One function for the twin's modelled agents and the live sleep workload, so the
two agree by construction. Virtual malleability (FCFS-malleable paper, sec. 3.1):
a job keeps its ``p`` processes; on ``c`` CPUs (``ceil(p/2) <= c <= p``, the
paper's maximum MPL of 2) it runs at MPL ``m = p / c``. Its progress rate, in
units of work per second where one unit is one second of run time on a machine
of the job's reference speed, is

    rate = (BM_m / BM_ref) / factor(m, u, OV)

``BM_m`` is the speed of the slowest machine of the allocation (a job spanning
machines goes at its slowest part's pace), ``u`` the job's CPU-utilisation
fraction and ``OV`` formula (4)'s network-contention overhead. The
FCFS-malleable paper (Utrera et al., sec. 4) writes its model as

    (3)  estimatedIsolatedExecTime = sum over t of execTime * MPL(t) * CPUUtil
    (4)  estimatedExecTime = estimatedIsolatedExecTime + execTime * OV

which admits more than one reading. The variants (:class:`ModelKind`):

* ``linear`` (the default, and the only model before the variants existed):
  ``factor = 1 + (m - 1) * (u + OV)``. Time shared by two processes only costs
  the fraction ``u`` of time they compute; at ``m = 1`` the trace's run time
  comes back whatever ``u`` and ``OV`` are; at ``m = 2``, ``u = 1`` the run time
  doubles plus ``OV`` times the expanded run time.
* ``max``: ``factor = max(1, m * u) + OV * (m > 1)``. A CPU holding ``m``
  processes each busy a fraction ``u`` of the time is saturated only when
  ``m * u >= 1``; below that, sharing is free. Expanded jobs again take their
  trace time.
* ``paper``: formulas (3) + (4) literally, ``factor = m * u + OV_j`` at every
  MPL, with ``OV_j`` drawn per job from ``U[ov_min, ov_max]`` (the paper:
  "OV was set to random values between 0 and 1"), seeded by
  ``(seed, job id)`` alone. Taken literally an expanded job (``m = 1``) runs
  ``u + OV_j`` times its trace run time, under every policy alike, so a
  comparison is only fair between runs under the same model; every summary
  records which one it used.

The per-job draw is the BLAKE2b digest of ``"<seed>:<job id>"`` (top 53 bits
of its first 8 bytes as a float in ``[0, 1)``), the scheme of
``workload.deadlines``: no generator state, the same value on every platform
and for every subset of the jobs.

The live agents' sleep workload and the twin's modelled agents both call
:meth:`ExecutionModel.rate`; nothing else may compute progress.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from enum import StrEnum

MAX_MPL = 2.0
"""At most two processes per CPU (FCFS-malleable paper, sec. 3.1)."""

_UNIT = 2.0**-53


class AllocationError(ValueError):
    """An allocation that breaks the MPL bounds."""


class ModelKind(StrEnum):
    """The named readings of formulas (3) and (4) (see the module docstring)."""

    LINEAR = "linear"
    MAX = "max"
    PAPER = "paper"


def mpl(procs: int, cpus: int) -> float:
    """Multiprogramming level ``p / c``; raises unless ``1 <= p/c <= 2``."""
    if cpus < 1 or cpus > procs or procs > MAX_MPL * cpus:
        raise AllocationError(
            f"{procs} processes on {cpus} CPUs: need ceil(p/2) <= cpus <= p (MPL in [1, 2])"
        )
    return procs / cpus


def unit_draw(seed: int, key: str) -> float:
    """A uniform float in ``[0, 1)`` from ``(seed, key)`` alone (module docstring)."""
    digest = hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> 11) * _UNIT


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionModel:
    """One execution model: its kind and parameters.

    Attributes:
        kind: which reading of formulas (3)/(4) (:class:`ModelKind`).
        overhead: formula (4)'s ``OV`` for ``linear`` and ``max`` (default 0).
        ov_min, ov_max: the range of the per-job ``OV_j`` of ``paper``
            (default ``[0, 1]``, the paper's).
        seed: selects the per-job ``OV_j`` draws of ``paper``.
    """

    kind: ModelKind = ModelKind.LINEAR
    overhead: float = 0.0
    ov_min: float = 0.0
    ov_max: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.overhead >= 0 and math.isfinite(self.overhead)):
            raise ValueError(f"overhead must be a finite value >= 0, got {self.overhead!r}")
        if not (0 <= self.ov_min <= self.ov_max and math.isfinite(self.ov_max)):
            raise ValueError(
                f"the OV range must satisfy 0 <= ov_min <= ov_max < inf, "
                f"got [{self.ov_min!r}, {self.ov_max!r}]"
            )
        # Accept the plain string too (a CLI value, a summary read back).
        object.__setattr__(self, "kind", ModelKind(self.kind))

    def job_overhead(self, job_id: str) -> float:
        """``OV_j`` of the ``paper`` model for this job (the fixed ``overhead`` otherwise)."""
        if self.kind is not ModelKind.PAPER:
            return self.overhead
        return self.ov_min + unit_draw(self.seed, job_id) * (self.ov_max - self.ov_min)

    def factor(self, *, m: float, cpu_util: float, job_id: str | None = None) -> float:
        """Wall seconds per unit of work at reference speed, at MPL ``m``."""
        if self.kind is ModelKind.LINEAR:
            return 1.0 + (m - 1.0) * (cpu_util + self.overhead)
        if self.kind is ModelKind.MAX:
            return max(1.0, m * cpu_util) + (self.overhead if m > 1.0 else 0.0)
        if job_id is None:
            raise ValueError("the 'paper' execution model draws OV per job: pass job_id")
        return m * cpu_util + self.job_overhead(job_id)

    def rate(
        self,
        *,
        procs: int,
        cpus: int,
        speed: float,
        ref_speed: float,
        cpu_util: float,
        job_id: str | None = None,
    ) -> float:
        """Units of work (reference-speed seconds) done per second of wall time."""
        m = mpl(procs, cpus)
        return (speed / ref_speed) / self.factor(m=m, cpu_util=cpu_util, job_id=job_id)

    def describe(self) -> dict[str, float | str]:
        """What a summary records about the model: every result says which model it used."""
        if self.kind is ModelKind.PAPER:
            return {
                "kind": str(self.kind),
                "ov_min": self.ov_min,
                "ov_max": self.ov_max,
                "seed": self.seed,
            }
        return {"kind": str(self.kind), "overhead": self.overhead}


DEFAULT_MODEL = ExecutionModel()
