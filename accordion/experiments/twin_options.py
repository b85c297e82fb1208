"""Options shared by the twin's commands: trace windows, tau, machine size, execution model.

Kept out of ``accordion/cli.py`` so that the options can be added to any
command (``simulate``, ``compare``, ``replay``, ``sweep``) with one parameter
each, and so their parsing is tested without a command line.

A **window** ``FROM:TO`` picks jobs by position: the replayable jobs of the
trace (after the SWF rules have skipped what cannot be replayed), in submit
order, numbered from 0, with ``TO`` excluded, as a Python slice. So
``--window 0:20000`` is ``--jobs 20000``, and ``--window 20000:25000`` the
5,000 jobs after those. Either end may be left out (``:25000``,
``20000:``). Submit times are kept as in the trace: metrics run from the
window's first submission, not from the trace's start.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from model.execution import ExecutionModel, ModelKind
from workload.calibration import load_calibration


@dataclass(frozen=True, slots=True)
class Window:
    """Job positions ``[start, stop)`` in submit order (``stop`` None: to the end)."""

    start: int = 0
    stop: int | None = None

    def __post_init__(self) -> None:
        if self.start < 0 or (self.stop is not None and self.stop <= self.start):
            raise ValueError(f"window {self}: need 0 <= FROM < TO")

    def __str__(self) -> str:
        return f"{self.start}:{'' if self.stop is None else self.stop}"

    @classmethod
    def parse(cls, text: str) -> Window:
        """``FROM:TO`` with either end optional; a one-line error quoting the text."""
        lo, sep, hi = text.strip().partition(":")
        if not sep:
            raise ValueError(f"--window wants FROM:TO (job positions), got {text!r}")
        try:
            start = int(lo) if lo.strip() else 0
            stop = int(hi) if hi.strip() else None
        except ValueError:
            raise ValueError(f"--window wants whole job positions FROM:TO, got {text!r}") from None
        if start < 0 or (stop is not None and stop <= start):
            raise ValueError(f"--window {text!r}: need 0 <= FROM < TO")
        return cls(start, stop)

    @classmethod
    def of(cls, window: str | None, jobs: int | None) -> Window | None:
        """The window of ``--window`` and ``--jobs N`` (which is ``0:N``); not both."""
        if window is not None and jobs is not None:
            raise ValueError("give --jobs N or --window FROM:TO, not both")
        if window is not None:
            return cls.parse(window)
        if jobs is not None:
            return cls(0, jobs)
        return None


def execution_model(
    kind: ModelKind, *, overhead: float, seed: int, calibration: Path | None = None
) -> ExecutionModel:
    """The model the options name; ``--overhead`` applies to ``linear`` and ``max`` only,
    ``--calibration`` (a ``workload.calibration`` file) to ``calibrated`` only."""
    if kind is ModelKind.PAPER and overhead:
        raise ValueError(
            "--overhead is the fixed OV of the linear and max models; the paper model "
            "draws OV per job from U[0, 1]"
        )
    if kind is ModelKind.CALIBRATED:
        if overhead:
            raise ValueError(
                "--overhead is the fixed OV of the linear and max models; the calibrated "
                "model reads each application's OV from --calibration"
            )
        if calibration is None:
            raise ValueError(
                "the calibrated model reads u and OV per application from --calibration FILE "
                "(written by python -m bench.mpi)"
            )
        table = load_calibration(calibration).calibration
        return ExecutionModel(kind=kind, seed=seed, calibration=table)
    if calibration is not None:
        raise ValueError(f"--calibration is read by the calibrated model only, not by {kind}")
    return ExecutionModel(kind=kind, overhead=overhead, seed=seed)


WindowOpt = Annotated[
    str | None,
    typer.Option(
        "--window",
        metavar="FROM:TO",
        help="replay only the jobs at positions FROM..TO-1 (submit order, from 0)",
    ),
]
TauOpt = Annotated[
    float,
    typer.Option("--tau", min=1e-9, help="bound of the bounded slowdown, seconds (DPSA paper)"),
]
CpusOpt = Annotated[
    int | None,
    typer.Option(
        "--cpus",
        min=1,
        help="machine size instead of the trace header's (not with --cluster); wider jobs "
        "are skipped",
    ),
]
ModelOpt = Annotated[
    ModelKind,
    typer.Option(
        "--execution-model",
        help="reading of formulas (3)/(4): linear 1+(m-1)(u+OV), max max(1,m*u), paper "
        "m*u+OV_j with OV_j~U[0,1] per job (seeded by --seed), calibrated 1+(m-1)(u+OV) "
        "with u and OV measured per application (--calibration)",
    ),
]
CalibrationOpt = Annotated[
    Path | None,
    typer.Option(
        "--calibration",
        metavar="FILE",
        help="with --execution-model calibrated: each application's u and OV (TOML, "
        "written by python -m bench.mpi); a job's application is its trace's executable "
        "number named by the header line '; Applications: 1=cg 2=halo'",
    ),
]
MaxUserCpusOpt = Annotated[
    int | None,
    typer.Option(
        "--max-user-cpus",
        min=1,
        help="the live scheduler's per-user CPU limit: a job that would take its user's "
        "running jobs past this many CPUs waits, a wider one is rejected",
    ),
]
MissingUtilOpt = Annotated[
    float,
    typer.Option(
        "--missing-util",
        min=0.01,
        max=1.0,
        help="CPU utilisation u of jobs whose trace line has no CPU time",
    ),
]
