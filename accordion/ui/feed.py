"""The page's view of the cluster: one watching client, kept up to date, versioned.

Theory of operation. A :class:`ClusterFeed` owns a
:class:`~accordion.gantt.live.LiveTimeline` and feeds it from one
:class:`~accordion.client.live_client.LiveClient` opened with
``watch=True`` under the page's login: the job events the login may read,
and the cluster summary the scheduler publishes whenever the cluster
changes. Each time something arrives the feed keeps reading for a moment
(``settle`` seconds of quiet, at most ``batch`` seconds in all), so a burst
of events costs one status request, not one each; then it asks for the
status (the paged one, through the client like ``accordion status``), bumps
:attr:`version` and wakes every waiting page. With nothing arriving it asks
every ``refresh`` seconds anyway, so the "now" line and the running bars
move on.

An event whose job's earlier events were not seen (the feed started late,
the watch queue overflowed, the broker restarted), or of a job neither a
status nor an event has shown yet, makes it ask the scheduler for that
job's history first (the scheduler answers from its journal), and the
event is drawn only if the history holds it: on a broker without logins
anyone may publish on the events topic, and an event
the scheduler never journalled (a forged one, a job that does not exist, a
sequence number far ahead) is dropped and counted in :attr:`unconfirmed`.
An event that follows the ones seen is taken as it comes: telling a forged
one of those apart is the broker's ACL's work (``broker.auth``).

A request that fails (the scheduler down or slow) leaves the last view
standing with :attr:`error` saying why, and is tried again at the next
change or refresh; the page shows both. The first view also reads the
history of the jobs already running, so their resizes before the feed
started are drawn too.
"""

from __future__ import annotations

import asyncio
import logging
import time

from accordion.client.live_client import LiveClient
from accordion.errors import LiveError
from accordion.gantt.live import LiveTimeline
from broker.bus import BusError
from broker.messages import JobEvent

log = logging.getLogger(__name__)


class ClusterFeed:
    """The latest view of the cluster (module docstring)."""

    def __init__(
        self,
        client: LiveClient,
        *,
        keep: int = 10_000,
        refresh: float = 5.0,
        settle: float = 0.05,
        batch: float = 0.5,
    ) -> None:
        if not (refresh > 0 and settle > 0 and batch >= settle):
            raise ValueError("refresh and settle must be > 0, batch >= settle")
        self._client = client
        self.timeline = LiveTimeline(keep=keep)
        self._refresh = refresh
        self._settle = settle
        self._batch = batch
        #: Bumped at every new view; a page waits for a version past the one it drew.
        self.version = 0
        #: Why the last request failed, or None.
        self.error: str | None = None
        #: Events dropped because the scheduler's history did not hold them (forged).
        self.unconfirmed = 0
        self._changed = asyncio.Condition()

    async def wait_past(self, version: int, timeout: float) -> int:
        """The version once it is past ``version`` (or after ``timeout`` seconds)."""
        async with self._changed:
            try:
                async with asyncio.timeout(timeout):
                    await self._changed.wait_for(lambda: self.version > version)
            except TimeoutError:
                pass
            return self.version

    async def run(self) -> None:
        """Watch until cancelled (or the connection is closed for good: BusError)."""
        client = self._client
        await self._update(first=True)
        while True:
            item = await client.next_watched(timeout=self._refresh)
            if item is not None:
                await self._take(item)
                until = time.monotonic() + self._batch
                while (left := until - time.monotonic()) > 0:
                    more = await client.next_watched(timeout=min(self._settle, left))
                    if more is None:
                        break
                    await self._take(more)
            await self._update()

    async def _take(self, item: object) -> None:
        if not isinstance(item, JobEvent):
            return  # the cluster summary: only says that something changed
        timeline = self.timeline
        if timeline.missed(item) or not timeline.knows(item.job_id):
            try:
                history = await self._client.history([item.job_id])
            except (LiveError, BusError) as exc:
                # The next event or status tells again; nothing is drawn from a guess.
                log.info("history of job %s not read: %s", item.job_id, exc)
                return
            for old in history:
                timeline.event(old)
            if not any(old.seq == item.seq and old.event is item.event for old in history):
                self.unconfirmed += 1
                log.warning("dropped an event the scheduler's history does not hold: %s", item)
                return
        timeline.event(item)

    async def _update(self, *, first: bool = False) -> None:
        try:
            reply = await self._client.status()
            if first and reply.running:
                # Jobs that started before the feed: their resizes so far.
                for event in await self._client.history([j.id for j in reply.running]):
                    self.timeline.event(event)
        except (LiveError, BusError) as exc:
            self.error = str(exc)
        else:
            self.timeline.status(reply)
            self.error = None
        async with self._changed:
            self.version += 1
            self._changed.notify_all()
