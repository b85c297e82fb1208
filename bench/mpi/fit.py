"""From folded and expanded runs to an application's ``u`` and ``OV``.

The execution model (``model.execution``, the FCFS-malleable paper's formulas
(3)/(4) read as ``linear``) predicts that a job at MPL ``m`` takes
``1 + (m - 1)(u + OV)`` times its expanded time. Two ranks folded onto one
core are ``m = 2``, so the measured ratio ``R = folded / expanded`` (both
yielding, as the runtime runs them) gives the sum ``u + OV = R - 1``. The
model cannot tell the two terms apart from run times; the shim can: it times
each rank inside MPI calls, expanded, and ``u`` is compute over total (the
paper's CPUUtil "when the job runs expanded"). So the fit is

    u  = the shim's u, unless R - 1 is smaller (folding cost less than the
         compute time predicts: computation and communication overlap), when
         u = R - 1;
    OV = R - 1 - u  (>= 0): what folding costs beyond the shared compute,
         the paper's "contention" term.

``u`` is kept within the model's ``(0, 1]`` (at least :data:`U_MIN`).

Times are the best of the repeats, not their median: on a shared machine other
work only ever slows a run, so the fastest repeat is the least disturbed one
(as ``timeit`` reports). The shim's ``u`` is the median of its repeats.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from model.execution import AppParams

U_MIN = 0.01
"""The smallest ``u`` a fit gives (``model.job.Job`` needs ``u > 0``)."""


@dataclass(frozen=True, slots=True)
class Measured:
    """One kernel's runs: microseconds per iteration in each setting, and ``u``.

    ``*_default``: waiting ranks spin (the library's default); ``*_yield``:
    they yield (Open MPI's switch or the shim).
    """

    kernel: str
    expanded_default: Sequence[float]
    expanded_yield: Sequence[float]
    folded_default: Sequence[float]
    folded_yield: Sequence[float]
    u_runs: Sequence[float]

    def __post_init__(self) -> None:
        for name in ("expanded_default", "expanded_yield", "folded_default", "folded_yield"):
            times = getattr(self, name)
            if not times or min(times) <= 0:
                raise ValueError(f"{self.kernel}: {name} needs positive times, got {times!r}")
        if not self.u_runs:
            raise ValueError(f"{self.kernel}: no run measured u")

    @property
    def u(self) -> float:
        return statistics.median(self.u_runs)

    @property
    def ratio_default(self) -> float:
        return min(self.folded_default) / min(self.expanded_default)

    @property
    def ratio_yield(self) -> float:
        return min(self.folded_yield) / min(self.expanded_yield)

    def spread(self, name: str) -> float:
        """Slowest over fastest repeat of a setting (1.0: the repeats agree)."""
        times: Sequence[float] = getattr(self, name)
        return max(times) / min(times)


def fit(measured: Measured) -> AppParams:
    """``u`` and ``OV`` of ``1 + (m - 1)(u + OV)`` from the runs (module docstring)."""
    excess = measured.ratio_yield - 1.0
    u = min(1.0, max(U_MIN, measured.u))
    if excess < u:
        u = max(U_MIN, excess)
    return AppParams(u=u, ov=max(0.0, excess - u))


def model_ratio(params: AppParams, m: float = 2.0) -> float:
    """The time at MPL ``m`` over the expanded time that ``params`` predict."""
    return 1.0 + (m - 1.0) * (params.u + params.ov)
