"""How an agent launches a command job's MPI program: the launcher and its ranks' yielding.

A command job submitted with ``--mpi LIBRARY`` (``CommandSpec.mpi``) runs its
program as one MPI job of ``procs`` ranks, as ``srun`` would: its first part
runs the library's launcher (Debian's ``mpirun.openmpi`` or
``mpiexec.mpich``) in front of the program. A batch script runs once as it
is, and finds the same launcher in ``ACCORDION_MPIRUN`` for its own MPI
steps. Three settings make the ranks the runtime's to place:

- ``--bind-to none``: the launcher's own binding would move ranks onto cores
  the part does not hold; with none, every rank starts with the part's mask
  and the agent pins each to its slot (``nodeagent.agent.commands``, by the
  rank numbers in its environment, ``nodeagent.launch.mpi_ranks``);
- ``--oversubscribe`` (Open MPI): at MPL 2 a part may hold half as many cores
  as ranks, which Open MPI would otherwise refuse as too few slots;
- yielding: a rank waiting in MPI spins by default, so two ranks folded onto a
  core cost each other a scheduler tick per blocking call. Open MPI yields with
  its ``mpi_yield_when_idle`` switch; MPICH has none, so its ranks preload the
  yield shim (``examples/mpi/yield_shim.c``, the FCFS-malleable paper's "self
  co-scheduling", built at set-up), found in the agent's shim directory.

Open MPI refuses to run as root unless told (``--allow-run-as-root``): it is
told when the command runs as root, as a local cluster started by root does.
The agent says in its registration which libraries it can launch
(:func:`mpi_libraries`, ``AgentOnline.mpi``), by the same tests a launch
makes, and the scheduler places an MPI job only on one machine whose agent
names its library. A job whose parts span machines would need the launcher
to reach the other parts' agents (Open MPI's ``plm_rsh_agent``); that is not
built, so such a part, which the scheduler never makes, is still refused with
that reason: a second line of defence against a scheduler that did.
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from broker.vocabulary import MpiLibrary

LAUNCHERS = {MpiLibrary.OPENMPI: "mpirun.openmpi", MpiLibrary.MPICH: "mpiexec.mpich"}
SHIM = "libaccordion_yield.so"
DEFAULT_SHIMS = Path(__file__).resolve().parents[2] / "examples" / "mpi" / "build"
"""Where ``scripts/setup`` builds the shim, one directory per library (``make -C examples/mpi``)."""


class MpiUnavailableError(Exception):
    """This agent's host cannot launch the job's MPI (the reason is the user's to read)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MpiLaunch:
    """A part's MPI launch: the launcher's command line before the program, and the
    variables every rank needs in its environment."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]

    @property
    def shell_words(self) -> str:
        """The launcher as a batch script runs it (``$ACCORDION_MPIRUN ./app``)."""
        return shlex.join(self.argv)


def mpi_libraries(shims: Path = DEFAULT_SHIMS) -> tuple[MpiLibrary, ...]:
    """The libraries whose programs this host can launch: :func:`mpi_launch` would not
    refuse them for a launcher or a shim it lacks."""
    return tuple(lib for lib in MpiLibrary if _missing(lib, shims) is None)


def _missing(library: MpiLibrary, shims: Path) -> str | None:
    """Why ``library`` cannot run on this host, for its user; None if it can."""
    if shutil.which(LAUNCHERS[library]) is None:
        return f"{library.value} is not installed on this agent's host ({LAUNCHERS[library]})"
    if library is MpiLibrary.MPICH and not (shims / library.value / SHIM).is_file():
        return (
            f"{library.value}: the yield shim {shims / library.value / SHIM} is not built on "
            "this agent's host (scripts/setup builds it)"
        )
    return None


def mpi_launch(
    library: MpiLibrary,
    *,
    ranks: int,
    machines: int,
    as_root: bool,
    shims: Path = DEFAULT_SHIMS,
) -> MpiLaunch:
    """The launch of ``ranks`` ranks with ``library`` on this host (module docstring);
    MpiUnavailableError if it cannot run here."""
    if machines > 1:
        raise MpiUnavailableError(
            f"an MPI job across {machines} machines: launching ranks on other agents is "
            "not built, and the scheduler keeps an MPI job on one machine"
        )
    missing = _missing(library, shims)
    if missing is not None:
        raise MpiUnavailableError(missing)
    launcher = shutil.which(LAUNCHERS[library])
    assert launcher is not None  # _missing looked it up
    if library is MpiLibrary.OPENMPI:
        argv = [launcher, "--bind-to", "none", "--oversubscribe", "-np", str(ranks)]
        if as_root:
            argv.insert(1, "--allow-run-as-root")
        return MpiLaunch(argv=tuple(argv), env=(("OMPI_MCA_mpi_yield_when_idle", "1"),))
    shim = shims / library.value / SHIM
    argv = [launcher, "-n", str(ranks), "-bind-to", "none"]
    argv += ["-genv", "LD_PRELOAD", str(shim), "-genv", "ACCORDION_MPI_YIELD", "1"]
    return MpiLaunch(argv=tuple(argv), env=())
