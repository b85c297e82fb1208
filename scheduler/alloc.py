"""Small helpers policies share to book CPUs on a scratch copy of the free map."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from model.machine import Part


def take(free: MutableMapping[str, int], parts: tuple[Part, ...]) -> None:
    """Book ``parts`` out of ``free`` (a policy's scratch copy, never the core's)."""
    for p in parts:
        free[p.machine] -= p.cpus


def give(free: MutableMapping[str, int], parts: tuple[Part, ...]) -> None:
    """Return ``parts`` to ``free``."""
    for p in parts:
        free[p.machine] += p.cpus


def pace(parts: tuple[Part, ...], speeds: Mapping[str, float]) -> float:
    """The speed of an allocation: its slowest machine's."""
    if len(parts) == 1:
        return speeds[parts[0].machine]
    return min(speeds[p.machine] for p in parts)
