"""The agent's heartbeats: its liveness for the scheduler, and its lease's renewal.

Every ``heartbeat_interval`` wall seconds the agent publishes
``Heartbeat(seq, running)`` on its events topic, the first one at once. Its
acknowledgement by the broker renews the agent's lease and its parts'
(``nodeagent.survival.lease``): the lease is the time since the broker last
heard this agent. The drain loop asks :meth:`Heartbeats.due` at every turn
and wakes at :attr:`Heartbeats.next_at` at the latest.
"""

from __future__ import annotations

import asyncio
import logging

from broker.bus import Bus, BusError
from broker.codec import encode
from broker.messages import Heartbeat
from nodeagent.agent.parts import Counters, PartTable
from nodeagent.agent.tasks import Tasks
from nodeagent.survival.lease import AgentLease

log = logging.getLogger(__name__)


class Heartbeats:
    """One agent's heartbeats on ``topic``, listing ``parts``; see the module docstring."""

    def __init__(
        self,
        *,
        bus: Bus,
        topic: str,
        agent_id: str,
        interval: float,
        parts: PartTable,
        lease: AgentLease,
        tasks: Tasks,
        counters: Counters,
    ) -> None:
        self._bus = bus
        self._topic = topic
        self._agent_id = agent_id
        self._interval = interval
        self._parts = parts
        self._lease = lease
        self._tasks = tasks
        self._counters = counters
        self._seq = 0
        self._task: asyncio.Task[None] | None = None
        #: When the next heartbeat is due (the drain loop's monotonic clock).
        self.next_at = 0.0

    def soon(self, now: float) -> None:
        """Send the next heartbeat at the loop's next turn (at start, after a reconnection)."""
        self.next_at = now

    def due(self, now: float) -> None:
        if now >= self.next_at:
            self._send()
            # From now, not from the missed slot: a stalled loop sends one beat, not a burst.
            self.next_at = now + self._interval

    def cancel(self) -> None:
        """Stop a beat still in flight (the agent is leaving)."""
        if self._task is not None:
            self._task.cancel()

    async def last(self) -> None:
        """One more beat, awaited: the agent leaves its parts, whose lease then runs
        from the broker's acknowledgement of it."""
        self.cancel()
        beat = Heartbeat(agent_id=self._agent_id, seq=self._seq, running=self._parts.running())
        self._seq += 1
        await self._beat(beat)

    def _send(self) -> None:
        """Send a heartbeat without waiting for it: its acknowledgement renews the lease.

        The publish runs in a task of its own, so a broker outage (the bus waits
        to reconnect) stalls neither the loop nor the lease's clock; a beat still
        in flight when the next is due is not doubled.
        """
        if self._task is not None and not self._task.done():
            return
        beat = Heartbeat(agent_id=self._agent_id, seq=self._seq, running=self._parts.running())
        self._seq += 1
        self._task = self._tasks.start(self._beat(beat), "heartbeat")

    async def _beat(self, beat: Heartbeat) -> None:
        try:
            await self._bus.publish(self._topic, encode(beat), qos=1, retain=False)
        except BusError as exc:
            # The broker stayed away past the bus's bound: no renewal (the lease runs
            # out on its own); the next beat tries again.
            log.warning("agent %s: heartbeat %d not sent: %s", self._agent_id, beat.seq, exc)
            return
        self._counters.heartbeats += 1
        self._lease.renew(part.launch.lease_file for part in self._parts.values())
