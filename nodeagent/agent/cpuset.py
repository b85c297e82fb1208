"""The agent's real CPUs: which host cores it owns, which a part holds, where ranks go.

Theory of operation. An agent owns a CPU set of the host (its own affinity
by default, or ``--cpuset 0-1``) and declares ``machine.cpus`` CPUs to the
scheduler. Declared CPUs are *slots* ``0 .. cpus-1``; slot ``s`` is host core
``cpuset[s % len(cpuset)]``. When the machine declares no more CPUs than the
set holds, every slot is its own core and packing is physical; when it
declares more, the agent is *emulated* (two slots may share a core) and says
so in its registration: timings measured there are not a real machine's.

A part holds a tuple of slots (:class:`SlotPool`: lowest free first; a
shrink gives back its highest). Its ranks are placed round-robin over them
(:func:`placement`): rank ``i`` on ``slots[i % len(slots)]``, so with at most
two ranks per slot (MPL <= 2, which the execution model enforces) a shrunk
part puts two ranks on a core and an expanded one puts one. The agent pins
with ``os.sched_setaffinity``: the part's leader to all its cores (so a rank
forked before the agent found it inherits the part's cores), each rank to
its own. Rank pids come from ``/proc/<leader>/task/<leader>/children`` (the
leader forks its ranks from its main thread, before anything else).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


class CpusetError(ValueError):
    """A CPU list that cannot be read, or names CPUs the agent may not use."""


def parse_cpuset(text: str) -> tuple[int, ...]:
    """``"0-1,3"`` as ``(0, 1, 3)``: the kernel's list format (``Cpus_allowed_list``)."""
    cpus: set[int] = set()
    try:
        for item in text.split(","):
            first, dash, last = item.strip().partition("-")
            lo = int(first)
            hi = int(last) if dash else lo
            if lo < 0 or hi < lo:
                raise ValueError(item)
            cpus.update(range(lo, hi + 1))
    except ValueError:
        raise CpusetError(f"CPU list {text!r}: expected e.g. 0-3 or 0,2,4-5") from None
    return tuple(sorted(cpus))


def format_cpuset(cpus: Iterable[int]) -> str:
    """The kernel's list format of ``cpus`` (``(0, 1, 3)`` as ``"0-1,3"``)."""
    out: list[str] = []
    run: list[int] = []
    for cpu in sorted(set(cpus)):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [cpu]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


def own_cpuset() -> tuple[int, ...]:
    """The CPUs this process may run on (its affinity)."""
    return tuple(sorted(os.sched_getaffinity(0)))


def checked_cpuset(cpus: Sequence[int]) -> tuple[int, ...]:
    """``cpus`` if this process may use every one of them; else CpusetError."""
    allowed = set(os.sched_getaffinity(0))
    outside = sorted(set(cpus) - allowed)
    if not cpus:
        raise CpusetError("an empty CPU set")
    if outside:
        raise CpusetError(
            f"CPUs {format_cpuset(outside)} are not in this process's affinity "
            f"{format_cpuset(allowed)}"
        )
    return tuple(sorted(set(cpus)))


@dataclass(slots=True)
class SlotPool:
    """The declared CPUs (slots) of a machine over its real cores."""

    cores: tuple[int, ...]
    slots: int
    _free: set[int] = field(init=False)

    def __post_init__(self) -> None:
        if not self.cores or self.slots < 1:
            raise CpusetError("a machine needs at least one core and one declared CPU")
        self._free = set(range(self.slots))

    @property
    def emulated(self) -> bool:
        """More declared CPUs than real cores: packing is not physical."""
        return self.slots > len(self.cores)

    def core(self, slot: int) -> int:
        return self.cores[slot % len(self.cores)]

    def cores_of(self, slots: Iterable[int]) -> set[int]:
        return {self.core(s) for s in slots}

    def take(self, count: int) -> tuple[int, ...]:
        """``count`` free slots, lowest first (as many as are free if fewer)."""
        taken = tuple(sorted(self._free)[:count])
        self._free.difference_update(taken)
        return taken

    def give(self, slots: Iterable[int]) -> None:
        self._free.update(slots)

    def claim(self, slots: Iterable[int]) -> tuple[int, ...]:
        """Take exactly ``slots`` (an adopted part's: ``nodeagent.survival.adoption``); raises
        :class:`CpusetError` if any is not a free slot of this pool."""
        wanted = set(slots)
        if not wanted <= self._free:
            raise CpusetError(f"slots {sorted(wanted - self._free)} are not free")
        self._free.difference_update(wanted)
        return tuple(sorted(wanted))

    def resize(self, slots: tuple[int, ...], count: int) -> tuple[int, ...]:
        """``slots`` grown or shrunk to ``count`` (a shrink gives back its highest)."""
        if count <= len(slots):
            kept = tuple(sorted(slots)[:count])
            self.give(set(slots) - set(kept))
            return kept
        return tuple(sorted(slots + self.take(count - len(slots))))


def placement(ranks: int, slots: Sequence[int]) -> list[int]:
    """The slot of each rank: round-robin, so at most ``ceil(ranks / len(slots))`` per slot."""
    if not slots:
        return []
    ordered = sorted(slots)
    return [ordered[i % len(ordered)] for i in range(ranks)]


def children(pid: int) -> list[int]:
    """The children ``pid``'s main thread forked (empty if it is gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            return [int(c) for c in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


def pin(pid: int, cores: Iterable[int]) -> bool:
    """Restrict ``pid`` to ``cores``; False if it is gone already or may not be pinned.

    A process that exited (its pid possibly reused by someone else's) or a core
    outside what the kernel allows it is not the agent's bug: logged, not raised.
    """
    try:
        os.sched_setaffinity(pid, set(cores))
    except ProcessLookupError:
        return False
    except OSError as exc:
        log.warning("cannot pin pid %d to cores %s: %s", pid, format_cpuset(cores), exc)
        return False
    return True


def allowed_list(pid: int) -> str | None:
    """``Cpus_allowed_list`` of ``pid`` from ``/proc`` (None if it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    return line.split(":", 1)[1].strip()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def pin_part(pool: SlotPool, slots: Sequence[int], leader: int, ranks: Sequence[int]) -> None:
    """Pin a part: its leader to all its cores, each rank to its own (:func:`placement`)."""
    pin(leader, pool.cores_of(slots))
    for pid, slot in zip(ranks, placement(len(ranks), slots), strict=True):
        pin(pid, {pool.core(slot)})


async def find_ranks(leader: int, count: int, *, patience: float) -> tuple[int, ...]:
    """The pids of the ``count`` ranks ``leader`` forks, once all exist (or what is found).

    Polled from ``/proc`` (1 ms, doubling up to 20 ms): a leader forks its ranks
    first thing, so they usually appear within its interpreter's start-up.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    delay = 0.001
    while True:
        found = children(leader)
        if len(found) >= count or loop.time() + delay > deadline:
            return tuple(found[:count])
        await asyncio.sleep(delay)
        delay = min(2 * delay, 0.02)
