"""What fair-share keeps between events about one core's queue (``fairshare_rank``).

The kept entries of queued names, the names with running jobs, and the stamp
they were computed under; the live names' last entries and the parts of their
use that do not move with the clock (``fairshare_live``). One
:class:`NameRanks` per source and core, on the core's
:class:`~scheduler.core.queue_index.QueueIndex` (``memos``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from scheduler.core.usage import UsageLedger

if TYPE_CHECKING:  # fairshare.py imports fairshare_rank, which imports this module
    from scheduler.priority.fairshare import FairShare

TIE_DIGITS = 9
"""As in ``fairshare.py``: priorities equal to this many decimals are a tie."""

Mode = Literal["exact", "floor", "rank"]
"""What ``fairshare_rank.entries`` may give for a live name: its exact entry; with
"floor", an older one when both are below 0 (``fairshare_live.add_live``); with
"rank", an older one that ranks last either way (``fairshare_live.live_entries``).
"""

Entry = tuple[float, float, float, tuple[float, float, str]]
"""A name's ``(raw decayed sum, P, S, rank key)``; the rank key sorts names."""


OlderParts = tuple[int, "list[float] | None", float, float, float]
"""``(today, charged, today_start, next_start, window_start)``: see
``fairshare_live.older_parts``."""

Day = tuple[float, float, float, float]
"""``(today's start, the next period's start, the window's start, the period)``: the
bounds ``fairshare_live.running_use`` reads."""


def day_of(today: int, window: int, period: float) -> Day:
    """The :data:`Day` of period ``today`` and a window of ``window`` periods."""
    return (today * period, (today + 1) * period, (today - window + 1) * period, period)


class NameRanks:
    """One source's kept standings on one core (see the module docstring)."""

    __slots__ = (
        "capacity",
        "day",
        "day_index",
        "entries",
        "fresh",
        "last",
        "ledger",
        "ledger_log",
        "ledger_read",
        "live",
        "log",
        "older",
        "other",
        "owner",
        "period",
        "read",
        "today",
    )

    def __init__(self, owner: FairShare, ledger: UsageLedger) -> None:
        self.owner = owner
        self.ledger = ledger
        self.period = ledger.period
        # The stamp every kept entry was computed under; any change drops them all.
        self.today = 0
        self.capacity = -1.0
        #: The bounds of period ``day_index`` (``day_of``), worked out once a day.
        self.day_index = 0
        self.day = day_of(0, owner.window, self.period)
        self.other = -1.0
        #: Queued names without running use: their entries, all up to date.
        self.entries: dict[str, Entry] = {}
        #: Queued names with running jobs (recomputed at every event).
        self.live: set[str] = set()
        #: Live names with a run that began before today: what of their use does not
        #: move with the clock (``fairshare_live.older_parts``), until they are touched.
        self.older: dict[str, OlderParts] = {}
        #: Live names' entries as last computed (for the "floor" and "rank" modes).
        self.last: dict[str, Entry] = {}
        #: Queued names the ledger does not know (they count for the unlisted share).
        self.fresh: set[str] = set()
        # The index's and the ledger's touched-name lists, and how far each was read.
        self.log: Sequence[str] = ()
        self.read = 0
        self.ledger_log: Sequence[str] = ()
        self.ledger_read = 0
