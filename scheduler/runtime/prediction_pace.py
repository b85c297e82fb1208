"""When the scheduler actor runs a prediction pass (``scheduler.live.insight``).

A pass is due after something changed the plan (or every ``refresh`` seconds
while jobs wait), and no sooner after the last one than ``interval`` wall
seconds or :data:`PASS_SHARE` times that pass's own wall time, whichever is
longer: so passes take at most a tenth of the actor's time however long the
queue. Times are the actor's loop clock; this module keeps none of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: The next pass waits at least this many times the last one's wall time.
PASS_SHARE: Final = 10.0


@dataclass(slots=True)
class PredictionPace:
    """The pacing of prediction passes (``interval`` 0 or less: never)."""

    interval: float
    refresh: float
    #: Something changed the plan since the last pass.
    stale: bool = False
    #: Loop time the last pass started, and how long it took (wall seconds).
    last: float = -float("inf")
    seconds: float = 0.0

    def due(self, at: float, *, queued: bool, predicted: bool) -> bool:
        """Whether a pass runs at loop time ``at``: jobs are ``queued``, or an earlier
        pass ``predicted`` some that its next must clear."""
        if self.interval <= 0 or not (queued or predicted):
            return False
        since = at - self.last
        if since < self.interval or since < PASS_SHARE * self.seconds:
            return False
        return self.stale or (queued and since >= self.refresh)

    def ran(self, at: float, seconds: float) -> None:
        """A pass started at loop time ``at`` and took ``seconds``."""
        self.stale = False
        self.last = at
        self.seconds = seconds
