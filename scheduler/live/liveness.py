"""When each agent's silence or hold next needs a look: a heap of deadlines.

Theory of operation
-------------------
The periodic liveness check (``scheduler.live.agents.check_liveness``) must not
walk every agent on every tick, and a heartbeat must not cost more than setting
one time stamp (``Agent.last_heartbeat``). So the heap is *lazy*: it holds at
most one entry per agent, ``(due, order, agent)``, where ``due`` is the earliest
cluster time at which the agent could need a move (suspect, lost, or its hold
ended), worked out from what was known when the entry was pushed. A heartbeat
only moves the time stamp forward, never the entry; when an entry falls due,
:meth:`Deadlines.due` hands the agent to the check, which reads the agent's
real state and time stamp, acts if it must, and pushes the agent's next
deadline (:meth:`Deadlines.watch`). An agent heartbeating steadily is so looked
at about once per suspect limit, whatever the number of agents: the check costs
O(agents due x log agents), and a heartbeat O(1).

Moving a deadline later (a heartbeat, the scheduler reconnecting) is what the
lazy entry absorbs; moving one *earlier* would not be noticed, so every move
of an agent and its first registration call :meth:`Deadlines.watch`
(``Context.watch``, from ``scheduler.live.coupling.agent_moved``), which adds
an entry if the agent has none or its entry is later than asked. ``order``
is the agent's registration rank, so that agents due in the same check are
handled in the order the agents table lists them, as a walk of it would.
"""

from __future__ import annotations

import heapq


class Deadlines:
    """At most one pending deadline per agent (see the module docstring)."""

    __slots__ = ("_due", "_heap", "_order")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        #: The due time of each agent's entry in the heap.
        self._due: dict[str, float] = {}
        self._order: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._due)

    def watch(self, agent: str, due: float) -> None:
        """Look at ``agent`` again no later than ``due`` (cluster seconds)."""
        order = self._order.setdefault(agent, len(self._order))
        known = self._due.get(agent)
        if known is not None and known <= due:
            return  # its entry comes first already; a later look is taken from there
        # An earlier deadline: a second entry, the later one is skipped when it comes.
        self._due[agent] = due
        heapq.heappush(self._heap, (due, order, agent))

    def due(self, now: float) -> list[str]:
        """The agents whose deadline has come (``due <= now``), in registration order,
        each taken off the heap (the caller watches again those that need it)."""
        heap, pending = self._heap, self._due
        out: list[tuple[int, str]] = []
        while heap and heap[0][0] <= now:
            due, order, agent = heapq.heappop(heap)
            if pending.get(agent) != due:
                continue  # superseded by an earlier entry, already taken
            del pending[agent]
            out.append((order, agent))
        out.sort()
        return [agent for _order, agent in out]

    def next_due(self) -> float | None:
        """The earliest deadline pending (tests and logs), if any."""
        while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None
