"""The MPI programs of ``examples/mpi`` and the MPI libraries that run them.

A :class:`Kernel` names a program, its communication pattern and the size and
iterations the bench runs it at; a :class:`Library` is one of Debian's two MPI
implementations, found by its suffixed commands (``mpirun.openmpi``,
``mpiexec.mpich``: Debian's alternatives point the plain ``mpirun`` at one of
them, so the bench never uses the plain names). ``scripts/setup`` installs both
and builds the kernels and the yield shim once per library into
``examples/mpi/build/<library>/`` (``examples/mpi/Makefile``).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "mpi"
BUILD = EXAMPLES / "build"


class Yielding(StrEnum):
    """How waiting ranks give their core away."""

    #: They spin (each library's default, set explicitly: Open MPI turns yielding
    #: on by itself when it sees more ranks than slots).
    OFF = "off"
    #: Open MPI's own switch, the MCA parameter ``mpi_yield_when_idle``.
    MCA = "mca"
    #: The PMPI shim ``examples/mpi/yield_shim.c`` loaded with ``LD_PRELOAD``.
    SHIM = "shim"


@dataclass(frozen=True, slots=True)
class Library:
    """One MPI implementation: its launcher and how it is told things."""

    name: str
    launcher: str
    #: Whether it has a yield switch of its own (``Yielding.MCA``).
    has_mca: bool

    @property
    def build(self) -> Path:
        return BUILD / self.name

    @property
    def shim(self) -> Path:
        return self.build / "libaccordion_yield.so"

    def missing(self) -> str | None:
        """Why this library cannot run here, or None."""
        if shutil.which(self.launcher) is None:
            return f"{self.launcher} is not installed (scripts/setup installs it)"
        if not self.shim.is_file():
            return f"{self.build} is not built (scripts/setup runs make -C examples/mpi)"
        return None

    def default_yielding(self) -> Yielding:
        """How the runtime makes this library's ranks yield (``docs/guide/mpi-programs.md``)."""
        return Yielding.MCA if self.has_mca else Yielding.SHIM

    def argv(
        self, ranks: int, program: list[str], *, env: dict[str, str], mca: dict[str, str]
    ) -> list[str]:
        """The launch command: ``ranks`` copies of ``program`` on this host, each rank
        keeping the CPU mask the launcher inherited, with ``env`` set in every rank."""
        if self.name == "openmpi":
            argv = [self.launcher]
            if _is_root():
                argv.append("--allow-run-as-root")
            # --bind-to none: the default binding would move rank 1 onto another core
            # than the mask allows. --oversubscribe: a mask of one core is one slot.
            argv += ["--bind-to", "none", "--oversubscribe", "-np", str(ranks)]
            for key, value in mca.items():
                argv += ["--mca", key, value]
            for key, value in env.items():
                argv += ["-x", f"{key}={value}"]
            return argv + program
        if mca:
            raise ValueError(f"{self.name} has no MCA parameters: {sorted(mca)}")
        argv = [self.launcher, "-n", str(ranks), "-bind-to", "none"]
        for key, value in env.items():
            argv += ["-genv", key, value]
        return argv + program


def _is_root() -> bool:
    return os.geteuid() == 0


OPENMPI = Library("openmpi", "mpirun.openmpi", has_mca=True)
MPICH = Library("mpich", "mpiexec.mpich", has_mca=False)
LIBRARIES = {lib.name: lib for lib in (OPENMPI, MPICH)}


@dataclass(frozen=True, slots=True)
class Kernel:
    """One program of ``examples/mpi`` as the bench runs it.

    ``iterations`` is for the runs where waiting ranks cost little (expanded,
    or folded and yielding); ``spin_iterations`` for folded runs without
    yielding, where each blocking call can wait for the kernel's scheduler
    tick: fewer iterations keep those runs to seconds. Results are compared per
    iteration, so the two counts need not agree.
    """

    name: str
    pattern: str
    size: int
    iterations: int
    spin_iterations: int
    #: The libraries it runs under (None: all).
    libraries: frozenset[str] | None = None

    def runs_under(self, lib: Library) -> bool:
        return self.libraries is None or lib.name in self.libraries

    def program(self, lib: Library, *, iterations: int) -> list[str]:
        if not self.runs_under(lib):
            raise ValueError(f"{self.name} does not run under {lib.name}")
        args = ["-i", str(iterations), "-n", str(self.size)]
        if self.name.endswith(".py"):
            return [sys.executable, str(EXAMPLES / self.name), *args]
        return [str(lib.build / self.name), *args]


KERNELS = (
    Kernel(
        "cg",
        "compute-bound: one MPI_Allreduce of 2 doubles per iteration (CG)",
        size=20_000,
        iterations=2_000,
        spin_iterations=300,
    ),
    Kernel(
        "halo",
        "neighbours: 4 messages of 8 B per rank per iteration, 64 cells",
        size=64,
        iterations=200_000,
        spin_iterations=300,
    ),
    Kernel(
        "ep",
        "embarrassingly parallel: no message until one MPI_Reduce at the end",
        size=200_000,
        iterations=150,
        spin_iterations=150,
    ),
    Kernel(
        "ring",
        "latency-bound: one 8-byte token round the ranks per iteration",
        size=8,
        iterations=100_000,
        spin_iterations=300,
    ),
    Kernel(
        "cg.py",
        "mpi4py and numpy: cg's solver, one Allreduce per iteration",
        size=20_000,
        iterations=2_000,
        spin_iterations=300,
        # The wheel's MPICH build links libmpi.so.12, MPICH's standard ABI name, which
        # Debian's MPICH does not ship (it has libmpich.so.12 only).
        libraries=frozenset({"openmpi"}),
    ),
)
KERNEL_NAMES = {k.name: k for k in KERNELS}
