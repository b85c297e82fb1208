"""Cluster descriptions: the machines a replay or a demo runs on.

Two sources. A TOML cluster file lists machine kinds (CPU count, benchmark
speed, how many, labels)::

    name = "demo"            # optional, default: the file's stem
    reference_speed = 1.0    # optional, default 1.0: the speed trace run times are measured at

    [[machine]]
    name = "fast"            # with count > 1: fast-0, fast-1, ...
    cpus = 16
    speed = 2.0              # optional, default 1.0; "auto": measured (see below)
    count = 2                # optional, default 1
    labels = ["gpu"]         # optional

``speed = "auto"`` asks for the machine's measured benchmark speed: the
caller passes ``auto_speed`` (the CLI runs ``nodeagent.job.kernel``'s benchmark
once, on this host, so the twin and the agents it starts plan with the same
number); without it, "auto" is an error.

Or an SWF header: the homogeneous machine the trace was logged on
(``cluster_from_header``).

Every fault is a ``ClusterError`` naming the file and the machine entry or key,
so that a typo is found from the message alone; unknown keys are errors too,
since a misspelt optional key would otherwise silently take its default.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeGuard

from model import Machine
from model.machine import MachineError
from workload.swf import SwfError, SwfHeader

__all__ = [
    "ClusterError",
    "ClusterSpec",
    "cluster_from_header",
    "load_cluster",
    "parse_cluster",
]

_TOP_KEYS: Final = frozenset({"name", "reference_speed", "machine"})
_MACHINE_KEYS: Final = frozenset({"name", "cpus", "speed", "count", "labels"})


class ClusterError(ValueError):
    """A cluster description that cannot be used (the message names file and entry)."""


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """A named set of machines; ``reference_speed`` is the speed job run times refer to."""

    name: str
    reference_speed: float
    machines: tuple[Machine, ...]

    def __post_init__(self) -> None:
        if not self.machines:
            raise ClusterError(f"cluster {self.name!r}: no machines")
        if not (self.reference_speed > 0 and math.isfinite(self.reference_speed)):
            raise ClusterError(
                f"cluster {self.name!r}: reference_speed must be > 0, got {self.reference_speed!r}"
            )
        dup = sorted(i for i, n in Counter(m.id for m in self.machines).items() if n > 1)
        if dup:
            raise ClusterError(f"cluster {self.name!r}: duplicate machine names {dup}")

    @property
    def total_cpus(self) -> int:
        """CPUs of all machines together."""
        return sum(m.cpus for m in self.machines)

    @property
    def speeds(self) -> dict[str, float]:
        """Machine id -> speed."""
        return {m.id: m.speed for m in self.machines}


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def load_cluster(
    path: str | os.PathLike[str], *, auto_speed: Callable[[], float] | None = None
) -> ClusterSpec:
    """Read a TOML cluster file (see the module docstring for its layout)."""
    source = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ClusterError(f"{source}: no such cluster file") from None
    except OSError as exc:
        raise ClusterError(f"{source}: cannot read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ClusterError(f"{source}: not valid TOML: {exc}") from exc
    return parse_cluster(data, source=source, default_name=Path(path).stem, auto_speed=auto_speed)


def parse_cluster(
    data: Mapping[str, object],
    *,
    source: str = "<cluster>",
    default_name: str = "cluster",
    auto_speed: Callable[[], float] | None = None,
) -> ClusterSpec:
    """Build a cluster from already-parsed TOML data; ``source`` names it in errors."""
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ClusterError(
            f"{source}: unknown key(s) {', '.join(unknown)} "
            f"(expected {', '.join(sorted(_TOP_KEYS))})"
        )
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise ClusterError(f"{source}: name must be a non-empty string, got {name!r}")
    ref = data.get("reference_speed", 1.0)
    if not _is_number(ref) or not (ref > 0 and math.isfinite(ref)):
        raise ClusterError(f"{source}: reference_speed must be a number > 0, got {ref!r}")
    entries = data.get("machine")
    if entries is None:
        raise ClusterError(f"{source}: no [[machine]] entries")
    if not isinstance(entries, list) or not entries:
        raise ClusterError(f"{source}: machine must be a non-empty array of tables ([[machine]])")
    machines: list[Machine] = []
    where: dict[str, str] = {}
    for index, entry in enumerate(entries, start=1):
        for machine in _machines(entry, f"{source}: machine #{index}", auto_speed):
            if machine.id in where:
                raise ClusterError(
                    f"{source}: machine #{index}: name {machine.id!r} already used by "
                    f"{where[machine.id]}"
                )
            where[machine.id] = f"machine #{index}"
            machines.append(machine)
    return ClusterSpec(name=name, reference_speed=float(ref), machines=tuple(machines))


def _machines(
    entry: object, where: str, auto_speed: Callable[[], float] | None = None
) -> list[Machine]:
    if not isinstance(entry, dict):
        raise ClusterError(f"{where}: expected a table, got {entry!r}")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ClusterError(f"{where}: name must be a non-empty string, got {name!r}")
    where = f"{where} ({name!r})"
    unknown = sorted(set(entry) - _MACHINE_KEYS)
    if unknown:
        raise ClusterError(
            f"{where}: unknown key(s) {', '.join(unknown)} "
            f"(expected {', '.join(sorted(_MACHINE_KEYS))})"
        )
    if "cpus" not in entry:
        raise ClusterError(f"{where}: cpus is required")
    cpus = entry["cpus"]
    if not _is_int(cpus) or cpus < 1:
        raise ClusterError(f"{where}: cpus must be an integer >= 1, got {cpus!r}")
    speed = entry.get("speed", 1.0)
    if speed == "auto":
        if auto_speed is None:
            raise ClusterError(f"{where}: speed 'auto' is measured only by the live commands")
        speed = auto_speed()
    if not _is_number(speed) or not (speed > 0 and math.isfinite(speed)):
        raise ClusterError(f"{where}: speed must be a number > 0, got {speed!r}")
    count = entry.get("count", 1)
    if not _is_int(count) or count < 1:
        raise ClusterError(f"{where}: count must be an integer >= 1, got {count!r}")
    labels = entry.get("labels", [])
    if not isinstance(labels, list) or not all(isinstance(x, str) and x for x in labels):
        raise ClusterError(f"{where}: labels must be a list of non-empty strings, got {labels!r}")
    ids = [name] if count == 1 else [f"{name}-{i}" for i in range(count)]
    try:
        return [Machine(id=i, cpus=cpus, speed=float(speed), labels=tuple(labels)) for i in ids]
    except MachineError as exc:  # the checks above should make this unreachable
        raise ClusterError(f"{where}: {exc}") from exc


def cluster_from_header(
    header: SwfHeader | Mapping[str, str], nodes: bool = False, *, name: str | None = None
) -> ClusterSpec:
    """The homogeneous machine an SWF trace was logged on, at reference speed 1.

    One machine with ``MaxProcs`` CPUs (``MaxNodes`` when the header has no
    ``MaxProcs``, as in the Lublin model files). With ``nodes=True``, instead
    ``MaxNodes`` machines of ``MaxProcs / MaxNodes`` CPUs each (an error when
    that does not divide). Machines are named ``node``, or ``node-0``,
    ``node-1``, ...; the cluster is named ``name``, else the header's
    ``Installation``, else ``swf``. Raises ``ClusterError`` when neither count
    is in the header.
    """
    head = SwfHeader.from_mapping(header)
    base = "node"
    try:
        procs = head.max_procs
        node_count = head.max_nodes
    except SwfError as exc:
        raise ClusterError(str(exc)) from exc
    if procs is not None and procs < 1:
        procs = None
    if node_count is not None and node_count < 1:
        node_count = None
    total = procs if procs is not None else node_count
    if total is None:
        raise ClusterError(f"{head.source}: header has neither MaxProcs nor MaxNodes")
    if not nodes:
        machines: tuple[Machine, ...] = (Machine(id=base, cpus=total),)
    else:
        if node_count is None:
            raise ClusterError(f"{head.source}: nodes=True needs MaxNodes in the header")
        if total % node_count:
            raise ClusterError(
                f"{head.source}: MaxProcs {total} is not a multiple of MaxNodes {node_count}"
            )
        per_node = total // node_count
        machines = tuple(Machine(id=f"{base}-{i}", cpus=per_node) for i in range(node_count))
    return ClusterSpec(
        name=name or head.installation or "swf", reference_speed=1.0, machines=machines
    )
