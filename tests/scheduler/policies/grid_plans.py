"""Grids of a few machines as the schedule-based policies' tests build them.

EG-EDF's and the Tabu search's tests (``test_eg_edf*.py``, ``test_tabu.py``)
hand-make snapshots of two or three machines with running jobs and the plan
of a previous decision (its reservations), with ``tests.builders``; here are
their usual grid and the readers of a decision's plan.
"""

from __future__ import annotations

import math

from model.machine import Machine
from scheduler.core.snapshot import Decisions

GRID = [
    Machine(id="fast", cpus=4, speed=2.0),
    Machine(id="big", cpus=8),
    Machine(id="small", cpus=2),
]
"""Three machines of different CPUs and speeds: the hand-made tests' usual grid."""


def plan_of(d: Decisions) -> dict[str, tuple[str, float]]:
    """job id -> (machine, start) of every start (at "now") and reservation."""
    out = {s.job.id: (s.parts[0].machine, math.nan) for s in d.starts}
    out.update({r.job.id: (r.parts[0].machine, r.start) for r in d.reservations})
    return out


def order_on(d: Decisions, machine: str) -> list[tuple[str, float]]:
    return [(r.job.id, r.start) for r in d.reservations if r.parts[0].machine == machine]
