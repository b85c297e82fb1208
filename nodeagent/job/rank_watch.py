"""Which rank of a command's MPI program ended first, as its supervisor sees it.

An MPI launcher ends a job when one rank fails, and says which only in its
own words on the job's stderr; its exit status is that rank's (Open MPI,
MPICH) or the signal's. The supervisor names the rank itself: it finds the
ranks in its tree (``nodeagent.launch.mpi_ranks``), holds a pidfd on each
rank's first process (readable once that process has exited, whoever its
parent is), and notes the first to end. When the program fails, that is the
rank that failed (the others are ended by the launcher after it); when it
succeeds, the order means nothing and is not said. The first end is known
only if every rank was watched before any ended: a rank that ended before it
was found (a crash at once) leaves the order unknown, and nothing is said
rather than the name of a rank the launcher ended afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from nodeagent.launch.jobtree import JobTree
from nodeagent.launch.mpi_ranks import RankProcesses, rank_numbers, ranks_among


class RankWatch:
    """The ``count`` ranks in ``tree``, each watched for its end once found."""

    def __init__(self, tree: JobTree, count: int, loop: asyncio.AbstractEventLoop) -> None:
        self._tree = tree
        self._count = count
        self._loop = loop
        self._fds: dict[int, int] = {}  # local rank -> pidfd
        self._seen: set[int] = set()
        self._ended_first: int | None = None
        self._unknown = False

    @property
    def complete(self) -> bool:
        """Whether every rank is watched (or the order is known to be lost)."""
        return len(self._seen) >= self._count or self._unknown

    @property
    def first(self) -> int | None:
        """The first rank (its number in the job) to end, if that is known."""
        return None if self._unknown else self._ended_first

    def look(self) -> None:
        """Watch the ranks that exist now and are not watched yet (cheap once all are)."""
        if self.complete or self._ended_first is not None:
            return
        for local, rank in ranks_among(self._tree.pids()).items():
            if local not in self._seen:
                self._watch(local, rank)

    def _watch(self, local: int, rank: RankProcesses) -> None:
        try:
            fd = os.pidfd_open(rank.root)
        except ProcessLookupError:
            self._unknown = True  # ended before it was watched: the order is lost
            return
        if rank_numbers(rank.root) != (rank.rank, rank.local):
            os.close(fd)  # ended (or its pid reused) meanwhile: the order is lost
            self._unknown = True
            return
        self._seen.add(local)
        self._fds[local] = fd
        self._loop.add_reader(fd, self._ended, local, rank.rank)

    def _ended(self, local: int, rank: int) -> None:
        if self._ended_first is None:
            if len(self._seen) < self._count:
                self._unknown = True  # others were not watched yet: they may have ended
            self._ended_first = rank
        self._forget(local)

    def _forget(self, local: int) -> None:
        fd = self._fds.pop(local, None)
        if fd is not None:
            self._loop.remove_reader(fd)
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        for local in list(self._fds):
            self._forget(local)
