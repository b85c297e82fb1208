"""Build a :class:`~scheduler.core.snapshot.Snapshot` through its slot setters.

The core builds one snapshot per scheduling event, hundreds of thousands in a
trace replay. A frozen dataclass's own ``__init__`` sets each of its fields
through ``object.__setattr__``, which was a tenth of a replay's time; setting
the slots through their descriptors builds the same immutable value for less
(the SWF reader builds its jobs the same way). The field list is checked at
import, so a field added to ``Snapshot`` cannot be silently left unset.

:func:`refresh_snapshot` goes one step further for the core's own snapshot:
most fields are the core's containers, the same objects at every event, so
the core keeps one snapshot and sets only the fields that change (the time,
the queue view, the promises, the index). That is sound because no policy
keeps a snapshot past its ``decide`` call: a snapshot's containers are the
core's live ones, so one kept would be stale anyway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields

from model.job import Job
from model.machine import Machine
from scheduler.core.queue_index import QueueIndex
from scheduler.core.snapshot import Reservation, RunningJob, Snapshot, UsageView

_FIELDS = (
    "now",
    "machines",
    "free",
    "running",
    "queue",
    "usage",
    "total_cpus",
    "speeds",
    "reservations",
    "by_account",
)
if tuple(f.name for f in fields(Snapshot)) != _FIELDS:
    raise RuntimeError("snapshot_slots sets Snapshot's fields one by one: they changed")
_new = object.__new__
(
    _set_now,
    _set_machines,
    _set_free,
    _set_running,
    _set_queue,
    _set_usage,
    _set_total_cpus,
    _set_speeds,
    _set_reservations,
    _set_by_account,
) = (getattr(Snapshot, name).__set__ for name in _FIELDS)


def make_snapshot(  # noqa: PLR0917 - one argument per field, in the fields' order
    now: float,
    machines: Sequence[Machine],
    free: Mapping[str, int],
    running: Sequence[RunningJob],
    queue: Sequence[Job],
    usage: UsageView,
    total_cpus: int,
    speeds: Mapping[str, float],
    reservations: Mapping[str, Reservation],
    by_account: QueueIndex | None,
) -> Snapshot:
    """``Snapshot(now=now, machines=machines, ...)``, built through the slots."""
    snap: Snapshot = _new(Snapshot)
    _set_now(snap, now)
    _set_machines(snap, machines)
    _set_free(snap, free)
    _set_running(snap, running)
    _set_queue(snap, queue)
    _set_usage(snap, usage)
    _set_total_cpus(snap, total_cpus)
    _set_speeds(snap, speeds)
    _set_reservations(snap, reservations)
    _set_by_account(snap, by_account)
    return snap


def refresh_snapshot(
    snap: Snapshot,
    now: float,
    queue: Sequence[Job],
    reservations: Mapping[str, Reservation],
    by_account: QueueIndex | None,
) -> None:
    """Set the fields of ``snap`` that change between two events (module docstring)."""
    _set_now(snap, now)
    _set_queue(snap, queue)
    _set_reservations(snap, reservations)
    _set_by_account(snap, by_account)
