"""The agent's outbox: its reports go out in order per topic without stalling the actor.

Theory of operation. The drain loop used to await every report's QoS 1
acknowledgement before it read the next command, so a burst of starts cost
two broker round trips per part, one part after another. Now the loop posts a
message here and goes on at once; one writer task per topic publishes that
topic's messages one after another, each once the previous one is
acknowledged. Different topics are written concurrently.

What stays guaranteed:

- *Order per topic*, as posted: a part's ``PartStarted`` before its
  ``PartFinished`` (the agent's events topic), the clear of a job's retained
  control message before a resize forwarded on it (the job's control topic).
  This is what MQTT itself promises a subscriber of one client's topic.
- *Before a job subscribes*: :meth:`Outbox.post` returns a future that
  resolves once the broker acknowledged that message. A part's process is
  forked at once, but its frames are relayed (its subscription to its control
  topic with them) only once that topic's clear is acknowledged
  (``nodeagent.agent.runs``), so a stale retained resize cannot reach it.
- *Before the goodbye*: the writers are the agent's helper tasks
  (``nodeagent.agent.tasks``), all finished before it says goodbye.

A publish that fails (``BusError``: the broker stayed away past the bus's
bound) fails the futures still waiting on that topic and ends its writer task
with the error, which ends the agent's tasks: the unclean end the agent
always had when its connection was lost (the broker publishes its will).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

from broker.bus import Bus
from nodeagent.agent.tasks import Tasks


@dataclass(frozen=True, slots=True)
class _Item:
    payload: bytes
    retain: bool
    done: asyncio.Future[None]


def _retrieved(future: asyncio.Future[None]) -> None:
    """Nobody may wait on a report's future: its failure is the writer's to raise."""
    if not future.cancelled():
        future.exception()


class Outbox:
    """Ordered, non-blocking publication (QoS 1) over one bus; see the module docstring."""

    def __init__(self, bus: Bus, tasks: Tasks) -> None:
        self._bus = bus
        #: Where the writers run: the agent's helper tasks, open while it runs.
        self._tasks = tasks
        self._queues: dict[str, deque[_Item]] = {}
        #: Messages acknowledged, for the agent's exporter and tests.
        self.published = 0

    @property
    def pending(self) -> int:
        """Messages posted and not yet acknowledged."""
        return sum(len(q) for q in self._queues.values())

    def post(self, topic: str, payload: bytes, *, retain: bool = False) -> asyncio.Future[None]:
        """Queue one message for ``topic``; the future resolves once it is acknowledged."""
        if not self._tasks.open:
            raise RuntimeError("the outbox publishes from its agent's tasks: run() first")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.add_done_callback(_retrieved)
        queue = self._queues.get(topic)
        if queue is None:
            queue = self._queues[topic] = deque()
            self._tasks.start(self._write(topic, queue), f"out-{topic}")
        queue.append(_Item(payload, retain, done))
        return done

    async def _write(self, topic: str, queue: deque[_Item]) -> None:
        try:
            while queue:
                item = queue[0]
                await self._bus.publish(topic, item.payload, qos=1, retain=item.retain)
                queue.popleft()
                self.published += 1
                if not item.done.done():
                    item.done.set_result(None)
        except BaseException as exc:
            for item in queue:
                if not item.done.done():
                    if isinstance(exc, Exception):
                        item.done.set_exception(exc)
                    else:
                        item.done.cancel()
            raise
        finally:
            # Emptied (or failed): the next post to this topic starts a new writer.
            del self._queues[topic]
