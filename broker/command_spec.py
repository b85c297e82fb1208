"""A user's own command as a job carries it on the wire, and where its output goes.

``accordion submit -- CMD ARGS...`` and ``accordion batch SCRIPT`` send a
:class:`CommandSpec` in ``JobSpec.command`` (``JobSpec.workload ==
"command"``): the program and its arguments, or a batch script's text and
its arguments, the working directory on the agents' hosts, and the patterns
of its stdout and stderr files. Each part of the job learns from its
``StartPart.hosts`` (:class:`HostSlots`) where all parts run and how many of
the job's processes each holds, which is what a hostfile for MPI says.

Bounds, stated so a typo or a hostile client cannot make an agent write or
exec something absurd: at most :data:`MAX_ARGS` arguments of at most
:data:`MAX_ARG` characters each (no NUL: ``execve`` could not pass one), a
script of at most :data:`MAX_SCRIPT` characters that starts with ``#!``
(as ``sbatch`` requires: the agent execs it), paths of at most
:data:`MAX_PATH` characters (Linux's ``PATH_MAX``), the working directory
absolute. Output patterns know ``%j`` (job id), ``%u`` (the job's user),
``%x`` (job name), ``%N`` (the machine), ``%n`` (the part's number) and
``%%``, as ``sbatch`` writes them; any other ``%`` is refused on decode.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Final

import msgspec

from broker.vocabulary import MpiLibrary

MAX_ARGS: Final = 1024
MAX_ARG: Final = 4096
MAX_SCRIPT: Final = 1 << 20
MAX_PATH: Final = 4096
DEFAULT_OUTPUT: Final = "accordion-%j.out"
"""Where a command job's stdout (and stderr, unless told otherwise) goes, relative to
its working directory: sbatch's ``slurm-%j.out`` under our name."""

#: ``%j`` job id, ``%u`` user, ``%x`` job name, ``%N`` machine, ``%n`` part number.
PATTERN_KEYS: Final = frozenset("juxNn")
_PLACEHOLDER = re.compile(r"%(.)", re.DOTALL)

Arg = Annotated[str, msgspec.Meta(max_length=MAX_ARG, pattern=r"^[^\x00]*$")]
AbsolutePath = Annotated[
    str, msgspec.Meta(min_length=1, max_length=MAX_PATH, pattern=r"^/[^\x00]*$")
]
PathPattern = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PATH, pattern=r"^[^\x00]+$")]


class PatternError(ValueError):
    """An output pattern with a placeholder this version does not know."""


def check_pattern(pattern: str) -> str:
    """``pattern`` if every ``%`` in it starts a known placeholder; else PatternError."""
    i = 0
    while (i := pattern.find("%", i)) >= 0:
        key = pattern[i + 1 : i + 2]
        if key != "%" and key not in PATTERN_KEYS:
            shown = f"%{key}" if key else "a lone % at the end"
            raise PatternError(
                f"output pattern {pattern!r}: {shown} is not one of "
                "%j (job id), %u (user), %x (job name), %N (machine), %n (part), %%"
            )
        i += 2
    return pattern


def expand_pattern(pattern: str, values: Mapping[str, str]) -> str:
    """``pattern`` with each placeholder replaced by ``values[key]`` (``%%`` by ``%``)."""
    check_pattern(pattern)

    def one(match: re.Match[str]) -> str:
        key = match.group(1)
        return "%" if key == "%" else values[key]

    return _PLACEHOLDER.sub(one, pattern)


class CommandSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """A user's command: ``argv`` (the program, then its arguments), or a batch
    ``script``'s text with ``argv`` as the script's arguments.

    ``chdir`` is the working directory on the agents' hosts (the client's own by
    default, as ``sbatch``'s). ``output`` and ``error`` are the stdout and stderr
    files, relative to ``chdir`` unless absolute; ``error`` None sends stderr to
    ``output`` too. ``name`` is the job's name (``-J``), for ``%x`` and the job's
    environment. ``mpi`` launches ``argv`` as an MPI program with that library,
    one rank per process of the job (as ``srun`` launches one), on one
    machine whose agent has that library (``AgentOnline.mpi``); a batch
    ``script`` runs once, and starts its MPI program itself with the launcher
    its environment names (``ACCORDION_MPIRUN``).
    """

    argv: Annotated[tuple[Arg, ...], msgspec.Meta(max_length=MAX_ARGS)] = ()
    script: Annotated[str, msgspec.Meta(min_length=2, max_length=MAX_SCRIPT)] | None = None
    chdir: AbsolutePath
    output: PathPattern = DEFAULT_OUTPUT
    error: PathPattern | None = None
    name: (
        Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[^\x00/]+$")] | None
    ) = None
    mpi: MpiLibrary | None = None

    def __post_init__(self) -> None:
        if self.script is None and not self.argv:
            raise ValueError("a command needs a program to run (argv) or a script")
        if self.script is not None:
            if not self.script.startswith("#!"):
                raise ValueError("a batch script must start with a #! line (the agent execs it)")
            if "\x00" in self.script:
                raise ValueError("a batch script cannot hold a NUL character")
        elif not self.argv[0]:
            raise ValueError("the program to run (argv[0]) is empty")
        try:
            check_pattern(self.output)
            if self.error is not None:
                check_pattern(self.error)
        except PatternError as exc:
            raise ValueError(str(exc)) from None


class HostSlots(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One part of a job as its processes see it: its machine and how many of the
    job's processes it holds (a hostfile's ``host slots=N``, Open MPI's format)."""

    machine: Annotated[
        str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:@-]+$")
    ]
    slots: Annotated[int, msgspec.Meta(ge=1, le=1_048_576)]
