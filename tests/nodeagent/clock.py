"""A clock the node-agent tests move by hand, so no test depends on the machine's load.

The agent (``NodeAgent(clock=, monotonic=)``) and the sleep workload
(``SleepJob(clock=, monotonic=)``) read the time only through the callables
they are given. Given :meth:`ManualClock.wall` and
:meth:`ManualClock.monotonic`, every duration they compute is one the test
chose: a wall-time limit, the work done by a resize, the instant the work
ends. Their waits stay real (``asyncio.timeout``), but only decide how soon
they notice that the clock moved, never what they compute from it.

Two ways to move it:

- stopped (``tick=0``): time stands until the test calls :meth:`advance`, then
  jumps; a test waits for the signal the jump causes (a report, a heartbeat);
- ticking: every monotonic reading first moves the clock by ``tick``, so a
  loop that reads the clock once per pass sees time go by one step per pass,
  whatever the machine's load. Wall readings read without moving it, so a
  report's ``at`` is the instant of the reading before it.

Readings are on one line: wall and monotonic time are the same number.
"""

from __future__ import annotations

import math
import time


class ManualClock:
    """Time that moves only when the test (or ``tick``) moves it."""

    def __init__(self, start: float | None = None, *, tick: float = 0.0) -> None:
        if not (tick >= 0 and math.isfinite(tick)):
            raise ValueError(f"tick must be a finite number >= 0, got {tick!r}")
        # Near the real time by default: a job process measures how long ago its
        # agent started it (PartStarted.at) on its own wall clock. Whole seconds, so
        # that adding binary fractions (1/8, 1/64) stays exact.
        self.now = float(math.floor(time.time())) if start is None else float(start)
        self.tick = tick

    def wall(self) -> float:
        """Seconds since the epoch (the ``clock`` callable)."""
        return self.now

    def monotonic(self) -> float:
        """The same instant (the ``monotonic`` callable); moves first by ``tick``."""
        self.now += self.tick
        return self.now

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds``; the new time."""
        return self.move_to(self.now + seconds)

    def move_to(self, at: float) -> float:
        """Move forward to ``at`` exactly; the new time."""
        if not at >= self.now:
            raise ValueError(f"a clock cannot go back (from {self.now!r} to {at!r})")
        self.now = at
        return self.now
