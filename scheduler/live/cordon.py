"""A SUSPECT agent is cordoned: the policy sees none of its CPUs free, so no new part goes there.

Slurm's DRAIN without the admin: an agent whose heartbeats stopped for a
while (``scheduler.live.agent_lifecycle``: ONLINE -> SUSPECT) may be frozen, cut
off or dying. Its running parts stay where they are (it is not LOST yet, and
fencing bounds what a LOST agent's parts may do), but starting new work there
would only lose it again. :class:`CordonedCore` hides the free CPUs of the
cordoned machines from the policy's snapshot; the agents' handlers
(``scheduler.live.agents``) cordon on SUSPECT and lift it on the next heartbeat or
when the agent leaves. The machine stays in the cluster: its CPUs still count
for what a job may ask, and a job already running there keeps them.

Only the live scheduler cordons (the twin has no heartbeats), so this is a
subclass of the core the actor builds, not a change of the core.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Snapshot


class CordonedCore(SchedulerCore):
    """A :class:`SchedulerCore` whose policy sees no free CPU on ``cordoned`` machines.

    ``cordoned`` is shared with the caller (``Context.cordoned``), who edits it.
    """

    def __init__(self, *, cordoned: set[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cordoned = cordoned

    def snapshot(self, now: float) -> Snapshot:
        snap = super().snapshot(now)
        if not self.cordoned:
            return snap
        free = {m: 0 if m in self.cordoned else n for m, n in snap.free.items()}
        return replace(snap, free=free)
