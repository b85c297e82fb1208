"""A watcher that sees its own gaps and fills them from the scheduler.

Theory of operation. Each ``JobEvent`` carries its number in the stream it is
published on (``JobEvent.stream``: every job's events on ``events``, a user's
on ``users/<user>/events``), from 1 without gaps. A watcher remembers the
last number it printed (:class:`CatchUp`), starting from where the stream
stood when it began (asked once, ``EventsRequest`` past any number), so it
notices what it missed whichever jobs those were:

- an event numbered past the next one: the events between were lost on the
  way (a queue that overflowed, a connection the broker dropped);
- a reconnection (``LiveClient.reconnects``): a clean session hears nothing of
  what was published while it was away, even if no event follows.

Either way it asks the scheduler for its stream after the last number it
printed, in pages (``EventsRequest``), and prints what comes back, marked as
recovered, before going on; an event at or below the last number printed is
a repeat and is dropped. Numbers the journal does not hold (the scheduler
could not write them), and a scheduler that does not answer, are said in one
line each (:attr:`CatchUp.warnings`). After a reconnection the scheduler may
be reconnecting too (a broker restart drops every connection, and a request
published before the scheduler subscribes again reaches nobody), so a
request that got no answer is asked again at the watcher's next wake until
one comes, said once. Events without a number (an older
scheduler) fall back on their per-job ``seq`` (``accordion.client.replay.EventGaps``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accordion.client.live_client import LiveClient
from accordion.client.replay import EventGaps
from accordion.errors import LiveError
from broker.bus import BusError
from broker.messages import JobEvent

#: Events per ``EventsRequest`` while catching up (a reply stays well below a megabyte).
PAGE = 1000
#: Past any stream number: asks the scheduler only where its stream stands.
NOW = 2**62


@dataclass(frozen=True, slots=True)
class Seen:
    """An event to print; ``recovered``: asked for, not heard live."""

    event: JobEvent
    recovered: bool = False


@dataclass(slots=True)
class CatchUp:
    """What one watcher printed of its stream, and how it fills its gaps."""

    client: LiveClient
    #: The last stream number printed (None: not known yet).
    last: int | None = None
    reconnects: int = 0
    #: One line per gap that could not be filled, for the watcher to print.
    warnings: list[str] = field(default_factory=list)
    #: Events recovered, and numbers that could not be.
    recovered: int = 0
    unrecoverable: int = 0
    _jobs: EventGaps = field(default_factory=EventGaps)
    #: Why the stream up to where it stands now is still to be asked for (a
    #: reconnection whose request got no answer yet); None: nothing pending.
    _pending: str | None = None
    #: Whether the pending gap's failure was said already (said once, not every wake).
    _pending_said: bool = False

    async def start(self) -> None:
        """Where the stream stands now: what is published from here on is printed."""
        await self._learn_position()

    async def _learn_position(self, *, say: bool = True) -> bool:
        """Ask where the stream stands (:meth:`start`); whether the scheduler said.
        ``say``: warn if it did not."""
        try:
            reply = await self.client.events_since(NOW, limit=1)
        except (LiveError, BusError) as exc:
            if say:
                self.warnings.append(f"cannot tell where the event stream stands: {exc}")
            return False
        self.last = reply.last
        self.reconnects = self.client.reconnects
        return True

    async def take(self, event: JobEvent | None) -> list[Seen]:
        """What to print for ``event`` (None: nothing arrived), gaps filled first."""
        out: list[Seen] = []
        if self.client.reconnects != self.reconnects:
            self.reconnects = self.client.reconnects
            self._pending = "the connection was made again"
        if self._pending is not None:
            out += await self._fill(None, self._pending, retry=True)
        if event is None:
            return out
        if event.stream is None:
            return out + await self._by_job(event)
        if self.last is None:
            self.last = event.stream - 1  # the stream's position was never learnt
        if event.stream <= self.last:
            return out  # printed already (recovered, or a QoS 1 repeat)
        if event.stream > self.last + 1:
            out += await self._fill(event.stream - 1, "events were missed on the way")
        self.last = max(self.last, event.stream)
        self._jobs.seen(event)
        return [*out, Seen(event)]

    async def _fill(self, upto: int | None, why: str, *, retry: bool = False) -> list[Seen]:
        """Ask for the stream after the last number printed, up to ``upto`` (None: up to
        where it stands now), page by page. ``retry``: a request that gets no answer
        stays pending, to be asked again at the next :meth:`take`."""
        if self.last is None:
            # Nothing printed has a number yet: learning where the stream stands is all
            # there is to catch up on.
            if await self._learn_position(say=not self._pending_said):
                self._pending, self._pending_said = None, False
            else:
                self._pending_said = True
            return []
        first = self.last + 1
        got: list[Seen] = []
        try:
            while True:
                reply = await self.client.events_since(self.last, limit=PAGE)
                end = reply.last if upto is None else min(upto, reply.last)
                page = [e for e in reply.events if e.stream is not None and e.stream <= end]
                for event in page:
                    got.append(Seen(event, recovered=True))
                    self._jobs.seen(event)
                    self.last = max(self.last, event.stream or 0)
                if not reply.more or len(page) < len(reply.events) or self.last >= end:
                    break
        except (LiveError, BusError) as exc:
            self.recovered += len(got)
            if not retry:
                self.warnings.append(
                    f"events after #{self.last} were missed ({why}) and could not be asked "
                    f"for: {exc}"
                )
            elif not self._pending_said:
                self._pending_said = True
                self.warnings.append(
                    f"events after #{self.last} were missed ({why}) and could not be asked "
                    f"for yet: {exc}; asking again"
                )
            return got
        if self._pending_said:
            self.warnings.append(f"the events missed ({why}) were asked for again: caught up")
        self._pending, self._pending_said = None, False
        self._lost(first, end, got, why)
        self.last = max(self.last, end)
        self.recovered += len(got)
        return got

    def _lost(self, first: int, end: int, got: list[Seen], why: str) -> None:
        """Say which numbers from ``first`` to ``end`` the journal did not give."""
        have = {s.event.stream for s in got}
        missing = [n for n in range(first, end + 1) if n not in have]
        if missing:
            self.unrecoverable += len(missing)
            self.warnings.append(
                f"{len(missing)} event(s) between #{missing[0]} and #{missing[-1]} were missed "
                f"({why}) and the scheduler's journal does not hold them"
            )

    async def _by_job(self, event: JobEvent) -> list[Seen]:
        """An event without a stream number: fill by its job's ``seq``."""
        out: list[Seen] = []
        if self._jobs.missed(event):
            try:
                history = await self.client.history([event.job_id])
            except (LiveError, BusError) as exc:
                self.warnings.append(f"events of job {event.job_id} were missed: {exc}")
            else:
                out = [Seen(old, recovered=True) for old in self._jobs.fill(event, history)]
                self.recovered += len(out)
        self._jobs.seen(event)
        return [*out, Seen(event)]
