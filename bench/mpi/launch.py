"""One run of an MPI kernel: pinned to given cores, yielding or not, its lines read back.

The launcher (``mpirun``/``mpiexec``) is started with this process's CPU mask
set to the run's cores and ``--bind-to none``, so that it and every rank
inherit the mask: ``(a,)`` folds both ranks onto one core, ``(a, b)`` gives
each rank a core of its own. The kernel prints one ``accordion-kernel`` line
(``examples/mpi/kernel.h``); with the shim loaded each rank also reports one
``accordion-mpi-rank`` line (``examples/mpi/yield_shim.c``), collected here
through a file named by ``ACCORDION_MPI_REPORT``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.mpi.kernels import Kernel, Library, Yielding

KERNEL_TAG = "accordion-kernel "
RANK_TAG = "accordion-mpi-rank "


class RunError(RuntimeError):
    """A run that failed, or printed no timing line (the message has its output's tail)."""


@dataclass(frozen=True, slots=True)
class Setting:
    """Where and how a run goes: its cores, how waiting ranks yield, and whether the
    shim is loaded only to time the MPI calls (``ACCORDION_MPI_YIELD=0``)."""

    cores: tuple[int, ...]
    yielding: Yielding
    timing: bool = False

    def __post_init__(self) -> None:
        if self.timing and self.yielding is not Yielding.OFF:
            raise ValueError("a timing run measures u without yielding")


@dataclass(frozen=True, slots=True)
class RankReport:
    """One rank's line from the shim."""

    rank: int
    wall_s: float
    mpi_s: float
    u: float
    calls: int
    yields: int


@dataclass(frozen=True, slots=True)
class KernelRun:
    """What one run printed."""

    kernel: str
    ranks: int
    iterations: int
    seconds: float
    us_per_iteration: float
    check: float
    reports: tuple[RankReport, ...] = ()

    @property
    def u(self) -> float:
        """The ranks' mean CPU-utilisation fraction (the shim's; NaN without it)."""
        if not self.reports:
            return float("nan")
        return sum(r.u for r in self.reports) / len(self.reports)


@contextmanager
def pinned(cores: tuple[int, ...]) -> Iterator[None]:
    """This process's CPU mask set to ``cores`` while a child is started, then restored."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def command(
    kernel: Kernel,
    lib: Library,
    setting: Setting,
    *,
    ranks: int,
    iterations: int,
    report: Path | None,
) -> list[str]:
    """The launch command of one run (see the module docstring)."""
    env: dict[str, str] = {}
    mca: dict[str, str] = {}
    if lib.has_mca:
        mca["mpi_yield_when_idle"] = "1" if setting.yielding is Yielding.MCA else "0"
    elif setting.yielding is Yielding.MCA:
        raise ValueError(f"{lib.name} has no yield switch of its own: use the shim")
    if setting.yielding is Yielding.SHIM or setting.timing:
        env["LD_PRELOAD"] = str(lib.shim)
        env["ACCORDION_MPI_YIELD"] = "0" if setting.timing else "1"
        if report is not None:
            env["ACCORDION_MPI_REPORT"] = str(report)
    return lib.argv(ranks, kernel.program(lib, iterations=iterations), env=env, mca=mca)


def run(
    kernel: Kernel,
    lib: Library,
    setting: Setting,
    *,
    ranks: int = 2,
    iterations: int | None = None,
    timeout: float = 600.0,
) -> KernelRun:
    """Run ``kernel`` once; its timing line and, with the shim, each rank's report."""
    if iterations is None:
        spinning = setting.yielding is Yielding.OFF and len(setting.cores) < ranks
        iterations = kernel.spin_iterations if spinning else kernel.iterations
    with tempfile.TemporaryDirectory(prefix="accordion-mpi-") as tmp:
        report = Path(tmp) / "ranks.jsonl"
        argv = command(kernel, lib, setting, ranks=ranks, iterations=iterations, report=report)
        with pinned(setting.cores):
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, check=False
            )
        out = done.stdout + done.stderr
        if done.returncode != 0:
            raise RunError(f"{' '.join(argv)}: exit {done.returncode}\n{out[-2000:]}")
        lines = report.read_text().splitlines() if report.exists() else []
        return parse(out, lines)


def parse(output: str, rank_lines: list[str]) -> KernelRun:
    """The run's timing line in ``output`` and the shim's lines (from its report file
    or the output itself, where they go without one)."""
    timing = [line for line in output.splitlines() if line.startswith(KERNEL_TAG)]
    if len(timing) != 1:
        raise RunError(f"expected one {KERNEL_TAG.strip()} line, got {len(timing)}:\n{output}")
    t = json.loads(timing[0].removeprefix(KERNEL_TAG))
    ranks = [*rank_lines, *(line for line in output.splitlines() if line.startswith(RANK_TAG))]
    reports = []
    for line in ranks:
        r = json.loads(line.removeprefix(RANK_TAG))
        reports.append(
            RankReport(
                rank=int(r["rank"]),
                wall_s=float(r["wall_s"]),
                mpi_s=float(r["mpi_s"]),
                u=float(r["u"]),
                calls=int(r["calls"]),
                yields=int(r["yields"]),
            )
        )
    return KernelRun(
        kernel=str(t["kernel"]),
        ranks=int(t["ranks"]),
        iterations=int(t["iterations"]),
        seconds=float(t["seconds"]),
        us_per_iteration=float(t["us_per_iteration"]),
        check=float(t["check"]),
        reports=tuple(sorted(reports, key=lambda r: r.rank)),
    )
