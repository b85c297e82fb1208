"""A batch job as the schedulers see it.

Times are seconds. ``runtime`` is the job's real run time at the reference speed
``ref_speed`` (the ``BM_ref`` of the EG-EDF paper): on a machine of speed
``BM_m`` it takes ``runtime * ref_speed / BM_m``. ``walltime`` is the user's
estimate at the same reference speed: schedulers only ever see this one, the
modelled and live agents the real ``runtime``. A live job submitted without a
known run time has ``runtime = None`` and its work is given by its workload.

Every job is malleable unless marked rigid (``malleable=False``), as in the
FCFS-malleable paper ("all the jobs are candidate to be shrunk", sec. 2):
virtual malleability needs nothing from the job, it only packs its processes
on fewer CPUs. Only a policy that folds jobs (``fcfs-malleable``) reads the
flag; the others always run a job on ``procs`` CPUs.

A job may need capabilities of its machines (``needs``, ``model.machine``):
every part of it then goes to a machine that has them all. A user's own
command needs a machine that runs commands; the built-in workloads need
nothing, and neither does any job of a trace.

A job may also have to run on *one machine* (``one_machine``): every policy
places it whole on a single machine, whatever its placement rule (the
``single`` rule for that job, ``scheduler.planning.placement``). A user's MPI
program is one, since its launcher starts every rank on the host it runs on;
no job of a trace is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from model.machine import Capability


class JobError(ValueError):
    """A job description that cannot be scheduled (names the job and the field)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """One job. Validated at construction; equality and hashing are by value."""

    id: str
    submit: float
    procs: int
    walltime: float
    runtime: float | None = None
    user: str = "nobody"
    group: str = "nobody"
    deadline: float | None = None
    #: False marks the job rigid: never run on fewer than ``procs`` CPUs.
    malleable: bool = True
    cpu_util: float = 1.0
    qos: int = 0
    ref_speed: float = 1.0
    #: The application the job runs (a kernel's name), None if not known: the
    #: ``calibrated`` execution model's key to its measured ``u`` and ``OV``.
    app: str | None = None
    #: What every machine it runs on must be able to do (``model.machine.Capability``).
    needs: frozenset[Capability] = frozenset()
    #: True when its CPUs must all be on one machine (module docstring).
    one_machine: bool = False

    def __post_init__(self) -> None:
        def bad(field: str, why: str) -> JobError:
            return JobError(f"job {self.id!r}: {field} {why}")

        if not self.id:
            raise JobError("job id must be a non-empty string")
        if not math.isfinite(self.submit) or self.submit < 0:
            raise bad("submit", f"must be a finite time >= 0, got {self.submit!r}")
        if self.procs < 1:
            raise bad("procs", f"must be >= 1, got {self.procs!r}")
        if not (self.walltime > 0 and math.isfinite(self.walltime)):
            raise bad("walltime", f"must be a finite time > 0, got {self.walltime!r}")
        if self.runtime is not None and not (self.runtime >= 0 and math.isfinite(self.runtime)):
            raise bad("runtime", f"must be a finite time >= 0, got {self.runtime!r}")
        if self.deadline is not None and not math.isfinite(self.deadline):
            raise bad("deadline", f"must be a finite time, got {self.deadline!r}")
        if not 0.0 < self.cpu_util <= 1.0:
            raise bad("cpu_util", f"must be in (0, 1], got {self.cpu_util!r}")
        if not (self.ref_speed > 0 and math.isfinite(self.ref_speed)):
            raise bad("ref_speed", f"must be > 0, got {self.ref_speed!r}")
        if self.app is not None and (not self.app or self.app != self.app.strip()):
            raise bad("app", f"must be a non-empty name, no surrounding blanks, got {self.app!r}")

    @property
    def min_cpus(self) -> int:
        """Fewest CPUs the job may run on: ``ceil(p/2)`` if malleable (MPL <= 2), else ``p``."""
        return (self.procs + 1) // 2 if self.malleable else self.procs

    def estimate_on(self, speed: float) -> float:
        """The user's wall-time estimate scaled to a machine of ``speed`` (EG-EDF paper, sec. 2)."""
        # Written as the core and the execution model compute it (work / rate), so the
        # same estimate comes out to the last bit whichever of them asks.
        return self.walltime / (speed / self.ref_speed)
