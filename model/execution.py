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
* ``calibrated``: the ``linear`` formula with ``u`` and ``OV`` measured per
  application instead of assumed: ``factor = 1 + (m - 1) * (u_a + OV_a)`` for a
  job of application ``a`` (``Job.app``), the pair read from a
  :class:`Calibration` that ``bench.mpi`` fits from real MPI programs run
  folded and expanded on real cores (``workload.calibration`` reads and writes
  its file). A job that names no application falls back to the ``linear``
  reading with its own ``u`` and no overhead; a job that names an application
  the calibration lacks is refused (:class:`UnknownAppError`): a misspelt name
  must not silently run at another program's pace.

The per-job draw is the BLAKE2b digest of ``"<seed>:<job id>"`` (top 53 bits
of its first 8 bytes as a float in ``[0, 1)``), the scheme of
``workload.deadlines``: no generator state, the same value on every platform
and for every subset of the jobs.

The live agents' sleep workload and the twin's modelled agents both call
:meth:`ExecutionModel.rate`; nothing else may compute progress.

A model travels by name and parameters: in a ``StartPart`` (the wire's
``broker.messages.ExecutionSpec``) and on a job process's command line
(``nodeagent.launch.spawn``). :func:`model_of` is the one way back from
either to an :class:`ExecutionModel`. It lives here, not in ``broker``:
the wire imports nothing of the project, while the scheduler, the agents,
the job process and the twin all import this module. It reads the five
values by name (:class:`ExecutionParams`), so it needs no import of the
wire's types either: the wire's struct and the parsed command line carry
the same names, and a test holds the wire's fields to the model's.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

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
    CALIBRATED = "calibrated"


class UnknownAppError(ValueError):
    """A job names an application that the calibrated model has no parameters for."""


@dataclass(frozen=True, slots=True)
class AppParams:
    """One application's measured parameters: its CPU-utilisation fraction ``u``
    (compute time over total, expanded) and formula (4)'s overhead ``ov``."""

    u: float
    ov: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 < self.u <= 1.0:
            raise ValueError(f"u must be in (0, 1], got {self.u!r}")
        if not (self.ov >= 0 and math.isfinite(self.ov)):
            raise ValueError(f"ov must be a finite value >= 0, got {self.ov!r}")


@dataclass(frozen=True, slots=True)
class Calibration:
    """A named table application -> :class:`AppParams` (the ``calibrated`` model's).

    ``apps`` is kept sorted by name, so two calibrations of the same table are
    equal whatever order they were built in.
    """

    name: str
    apps: tuple[tuple[str, AppParams], ...]
    _index: dict[str, AppParams] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a calibration needs a name")
        if not self.apps:
            raise ValueError(f"calibration {self.name!r} has no application")
        names = [app for app, _ in self.apps]
        if len(set(names)) != len(names):
            raise ValueError(f"calibration {self.name!r} names an application twice")
        if any(not app for app in names):
            raise ValueError(f"calibration {self.name!r}: an application name is empty")
        object.__setattr__(self, "apps", tuple(sorted(self.apps)))
        object.__setattr__(self, "_index", dict(self.apps))

    @classmethod
    def of(cls, name: str, apps: Mapping[str, AppParams]) -> Calibration:
        return cls(name, tuple(apps.items()))

    def get(self, app: str) -> AppParams | None:
        return self._index.get(app)

    def names(self) -> tuple[str, ...]:
        return tuple(app for app, _ in self.apps)


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
        calibration: the per-application ``u`` and ``OV`` of ``calibrated``
            (required there, refused by the other kinds).
    """

    kind: ModelKind = ModelKind.LINEAR
    overhead: float = 0.0
    ov_min: float = 0.0
    ov_max: float = 1.0
    seed: int = 0
    calibration: Calibration | None = None

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
        if (self.kind is ModelKind.CALIBRATED) != (self.calibration is not None):
            raise ValueError(
                "the calibrated execution model needs a calibration (application -> u, OV), "
                "and only it takes one"
            )
        if self.kind is ModelKind.CALIBRATED and self.overhead:
            raise ValueError("the calibrated model's OV is each application's own, not a fixed one")

    def job_overhead(self, job_id: str) -> float:
        """``OV_j`` of the ``paper`` model for this job (the fixed ``overhead`` otherwise)."""
        if self.kind is not ModelKind.PAPER:
            return self.overhead
        return self.ov_min + unit_draw(self.seed, job_id) * (self.ov_max - self.ov_min)

    def app_params(self, app: str | None, cpu_util: float) -> AppParams:
        """The ``u`` and ``OV`` a job of ``app`` (None: unknown) runs with under
        ``calibrated`` (module docstring); :class:`UnknownAppError` if it names one
        the calibration lacks."""
        assert self.calibration is not None  # checked at construction
        if app is None:
            return AppParams(cpu_util)
        params = self.calibration.get(app)
        if params is None:
            raise UnknownAppError(
                f"application {app!r} is not in calibration {self.calibration.name!r} "
                f"(it has {', '.join(self.calibration.names())})"
            )
        return params

    def factor(
        self, *, m: float, cpu_util: float, job_id: str | None = None, app: str | None = None
    ) -> float:
        """Wall seconds per unit of work at reference speed, at MPL ``m``."""
        if self.kind is ModelKind.LINEAR:
            return 1.0 + (m - 1.0) * (cpu_util + self.overhead)
        if self.kind is ModelKind.MAX:
            return max(1.0, m * cpu_util) + (self.overhead if m > 1.0 else 0.0)
        if self.kind is ModelKind.CALIBRATED:
            params = self.app_params(app, cpu_util)
            return 1.0 + (m - 1.0) * (params.u + params.ov)
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
        app: str | None = None,
    ) -> float:
        """Units of work (reference-speed seconds) done per second of wall time."""
        m = mpl(procs, cpus)
        return (speed / ref_speed) / self.factor(m=m, cpu_util=cpu_util, job_id=job_id, app=app)

    def describe(self) -> dict[str, object]:
        """What a summary records about the model: every result says which model it used."""
        if self.calibration is not None:
            return {
                "kind": str(self.kind),
                "calibration": self.calibration.name,
                "apps": {app: {"u": p.u, "ov": p.ov} for app, p in self.calibration.apps},
            }
        if self.kind is ModelKind.PAPER:
            return {
                "kind": str(self.kind),
                "ov_min": self.ov_min,
                "ov_max": self.ov_max,
                "seed": self.seed,
            }
        return {"kind": str(self.kind), "overhead": self.overhead}


DEFAULT_MODEL = ExecutionModel()


class ExecutionParams(Protocol):
    """A model by name and parameters, in any form that carries the five values under
    these names: the wire's ``ExecutionSpec``, a job process's parsed command line,
    an :class:`ExecutionModel` itself."""

    @property
    def kind(self) -> str: ...
    @property
    def overhead(self) -> float: ...
    @property
    def ov_min(self) -> float: ...
    @property
    def ov_max(self) -> float: ...
    @property
    def seed(self) -> int: ...


class ExecutionModelError(ValueError):
    """Parameters that name no execution model (an unknown kind, a bad OV range)."""


def model_of(params: ExecutionParams | None) -> ExecutionModel:
    """The model ``params`` name; None (a sender that names none) is the default.

    Raises :class:`ExecutionModelError` saying what is wrong.
    """
    if params is None:
        return DEFAULT_MODEL
    kinds = [k.value for k in ModelKind]
    if params.kind not in kinds:
        raise ExecutionModelError(
            f"execution model: no kind {params.kind!r} (one of {', '.join(kinds)})"
        )
    try:
        return ExecutionModel(
            kind=ModelKind(params.kind),
            overhead=params.overhead,
            ov_min=params.ov_min,
            ov_max=params.ov_max,
            seed=params.seed,
        )
    except ValueError as exc:
        raise ExecutionModelError(f"execution model: {exc}") from exc
