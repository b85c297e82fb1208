"""The ranks of a user's MPI program among the processes of its command part.

An MPI launcher starts each rank with its numbers in its environment: Open
MPI sets ``OMPI_COMM_WORLD_RANK`` and ``OMPI_COMM_WORLD_LOCAL_RANK``, MPICH's
Hydra ``PMI_RANK`` and ``MPI_LOCALRANKID``. The environment a process was
started with is in ``/proc/<pid>/environ``, readable by its own account and by
root (so by the agent, and by the part's supervisor), and what a rank starts
(a shell's program, a wrapper's child) inherits it. So every process of a
part's tree belongs to exactly one rank, or to none (the launcher, its
daemons, the supervisor): that is how the agent pins each rank to its slot
(``nodeagent.agent.mpi_pinning``) and how the supervisor tells which rank
ended first (``nodeagent.job.command``), with any MPI and without touching the
program.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nodeagent.launch.jobtree import parent

#: (global rank, local rank) variable pairs, by launcher.
RANK_VARIABLES = (
    (b"OMPI_COMM_WORLD_RANK", b"OMPI_COMM_WORLD_LOCAL_RANK"),
    (b"PMI_RANK", b"MPI_LOCALRANKID"),
)
MAX_ENVIRON = 1 << 20
"""Bytes of an environment read at most: the job's is built by its agent, and small."""


@dataclass(frozen=True, slots=True)
class RankProcesses:
    """One rank's processes on this part: ``root`` is the one its launcher started."""

    rank: int
    local: int
    root: int
    pids: frozenset[int]


def rank_numbers(pid: int) -> tuple[int, int] | None:
    """``(rank, local rank)`` of the process ``pid`` was started as; None if it is no
    rank's (or gone, or not readable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read(MAX_ENVIRON)
    except OSError:  # gone, or not ours to read
        return None
    env: dict[bytes, bytes] = {}
    for item in data.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            env[name] = value
    for global_name, local_name in RANK_VARIABLES:
        try:
            return int(env[global_name]), int(env[local_name])
        except (KeyError, ValueError):
            continue
    return None


def ranks_among(pids: Iterable[int]) -> dict[int, RankProcesses]:
    """The ranks found among ``pids`` (a part's tree), by local rank."""
    members: dict[int, set[int]] = {}
    numbers: dict[int, int] = {}
    for pid in pids:
        found = rank_numbers(pid)
        if found is None:
            continue
        rank, local = found
        numbers[local] = rank
        members.setdefault(local, set()).add(pid)
    ranks = {}
    for local, group in members.items():
        roots = sorted(p for p in group if parent(p) not in group)
        if roots:  # else all of it exited between the two reads
            ranks[local] = RankProcesses(numbers[local], local, roots[0], frozenset(group))
    return ranks
