"""The usage ledger behind fair-share: CPU-seconds per user and group per period.

Usage is charged when a job leaves the CPUs (finished, failed, cancelled),
split over the accounting periods its run overlapped, so a decayed sum over
periods (``scheduler.priority.fairshare``) can weigh recent use more than old
use. Running jobs are not in the ledger; the fair-share source adds their use
so far from the snapshot, so a long job counts before it ends.

Most policies never read the ledger, yet every job start notes its names and
every end charges it. So ``note`` and ``charge`` only append the event to a
list, and the first read after them folds the list into the tables in the
order it was written: a read sees exactly what charging at once would have
given, and a replay that never reads pays a list append per event. The list
is folded at ``_FOLD_AT`` entries too, so a live scheduler whose policy never
reads the ledger does not grow it without bound. The bound is set above the
notes and charges of a whole trace (two per job: CTC-SP2 writes 155,000), so a
replay under a policy that never reads folds nothing at all; at about 100
bytes an entry it holds at most some 26 MB.

Folding also lists the names charged or first known, per kind, in order
(``standing_view`` hands the list out with the decayed sums): fair-share keeps
each name's standing between events and works out again only the names
listed since it last read (``scheduler.priority.fairshare_rank``). The list is
started afresh at ``_TOUCHED_AT`` names, which a reader notices by identity.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, KeysView, Mapping, Sequence

_TABLES = 8
"""Tables of decayed sums kept (one per day and parameter set) before starting afresh."""
_TOUCHED_AT = 1 << 12
"""Names a touched list holds before a new one is started (standing_view)."""
_FOLD_AT = 1 << 18
"""Unread notes and charges kept before they are folded in anyway (module docstring)."""


class UsageLedger:
    """CPU-seconds charged per ``(kind, name, period)``; ``kind`` is ``"user"`` or ``"group"``."""

    def __init__(self, period: float = 86400.0, *, fold_at: int = _FOLD_AT) -> None:
        if not (period > 0 and math.isfinite(period)):
            raise ValueError(f"usage period must be > 0 seconds, got {period!r}")
        if fold_at < 1:
            raise ValueError(f"fold_at must be >= 1 entry, got {fold_at!r}")
        self._period = period
        self._fold_at = fold_at
        # CPU-seconds per kind, name and period index: per name a small dict, so a
        # decayed sum looks periods up by int, not by a (kind, name, index) tuple.
        self._charged: dict[str, dict[str, dict[int, float]]] = {"user": {}, "group": {}}
        self._names: dict[str, dict[str, None]] = {"user": {}, "group": {}}
        # Decayed sums already worked out: per kind, one table per (last, count, decay);
        # a charge drops its names from every table (module docstring of decayed).
        self._memo: dict[str, dict[tuple[int, int, float], dict[str, float]]] = {
            "user": {},
            "group": {},
        }
        # ``decay**k`` for k < count, by (count, decay): a handful of parameter sets.
        self._weights: dict[tuple[int, float], list[float]] = {}
        # Notes and charges not yet folded in, as (user, group, start, end, cpus);
        # a note is a charge of nothing (module docstring).
        self._unfolded: list[tuple[str, str, float, float, int]] = []
        # Per kind, the names charged or first known, in order (see standing_view).
        self._touched: dict[str, list[str]] = {"user": [], "group": []}

    @property
    def period(self) -> float:
        return self._period

    def note(self, *, user: str, group: str) -> None:
        """Know ``user`` and ``group`` (a job of theirs took CPUs), charging nothing yet."""
        unfolded = self._unfolded
        unfolded.append((user, group, 0.0, 0.0, 0))
        if len(unfolded) >= self._fold_at:
            self._fold()

    def charge(self, *, user: str, group: str, start: float, end: float, cpus: int) -> None:
        """Charge ``cpus`` CPUs held from ``start`` to ``end``."""
        unfolded = self._unfolded
        unfolded.append((user, group, start, end, cpus))
        if len(unfolded) >= self._fold_at:
            self._fold()

    def add_period(self, kind: str, name: str, period_index: int, cpu_seconds: float) -> None:
        """Add ``cpu_seconds`` already split to period ``period_index`` to one user's or
        group's use, and know ``name`` (even when it is 0): what a restart charges for
        jobs that are no longer in the journal (``scheduler.runtime.journal_archive``
        kept their sums). Applied at once, after the notes and charges written before
        it, so a read sees the same as if those jobs had been charged here in order."""
        if self._unfolded:
            self._fold()
        names = self._names[kind]
        if name in names and cpu_seconds <= 0:
            return  # as a note of a name already known: nothing is news
        names.setdefault(name, None)
        touched = self._touched
        touched[kind].append(name)
        if len(touched[kind]) >= _TOUCHED_AT:
            # Both afresh, as _apply does: a reader of either kind looks at every name.
            touched["user"] = []
            touched["group"] = []
        if cpu_seconds <= 0:
            return
        for table in self._memo[kind].values():
            table.pop(name, None)
        per = self._charged[kind].get(name)
        if per is None:
            per = self._charged[kind][name] = {}
        per[period_index] = per.get(period_index, 0.0) + cpu_seconds

    def _fold(self) -> None:
        """Apply the notes and charges written since the last read, in order."""
        unfolded, self._unfolded = self._unfolded, []
        for user, group, start, end, cpus in unfolded:
            self._apply(user, group, start, end, cpus)

    def _apply(self, user: str, group: str, start: float, end: float, cpus: int) -> None:
        users = self._names["user"]
        groups = self._names["group"]
        touched = self._touched
        if cpus <= 0:
            # A note (or a charge of no CPUs): only a name first known is news to the
            # readers of the touched names (they count the names seen).
            if user in users and group in groups:
                return
            users[user] = None
            groups.setdefault(group, None)
        else:
            users.setdefault(user, None)
            groups.setdefault(group, None)
        # Written out (it runs once per job that ends): the names touched, then a new
        # list once the bound is reached (standing_view's docstring).
        touched["user"].append(user)
        touched["group"].append(group)
        if len(touched["user"]) >= _TOUCHED_AT:
            touched["user"] = []
            touched["group"] = []
        if end <= start or cpus <= 0:
            return
        for table in self._memo["user"].values():
            table.pop(user, None)
        for table in self._memo["group"].values():
            table.pop(group, None)
        period = self._period
        mine = self._charged["user"].get(user)
        if mine is None:
            mine = self._charged["user"][user] = {}
        theirs = self._charged["group"].get(group)
        if theirs is None:
            theirs = self._charged["group"][group] = {}
        index = math.floor(start / period)
        if end <= (index + 1) * period:
            # Inside one period (most jobs): split_periods' one piece, without the list.
            # (0.0 + amount on a first charge, as the defaultdict(float) before it.)
            amount = (end - start) * cpus
            mine[index] = mine.get(index, 0.0) + amount
            theirs[index] = theirs.get(index, 0.0) + amount
            return
        for index, seconds in split_periods(start, end, period):
            amount = seconds * cpus
            mine[index] = mine.get(index, 0.0) + amount
            theirs[index] = theirs.get(index, 0.0) + amount

    def cpu_seconds(self, kind: str, name: str, period_index: int) -> float:
        """CPU-seconds charged to ``name`` (a user or group) in period ``period_index``."""
        if self._unfolded:
            self._fold()
        per = self._charged[kind].get(name)
        return per.get(period_index, 0.0) if per is not None else 0.0

    def decayed(self, kind: str, name: str, last: int, count: int, decay: float) -> float:
        """:func:`decayed_sum` of :meth:`recent`, remembered until ``name`` is charged again.

        Fair-share asks this of every queued name at every event, and most of
        them have not been charged since the last time.
        """
        if self._unfolded:
            self._fold()
        table = self._table(kind, last, count, decay)
        value = table.get(name)
        if value is None:
            # decayed_sum(self.recent(...), decay) with the weights ``decay**k`` worked
            # out once: the same products added in the same order, so the same float.
            weights = self.weights(count, decay)
            value = 0.0
            per = self._charged[kind].get(name)
            if per is not None:
                get = per.get
                for k in range(count):
                    value += weights[k] * get(last - k, 0.0)
            else:
                # Never charged: every term is w * 0.0, and 0.0 + 0.0 is 0.0.
                value = 0.0
            table[name] = value
        return value

    def decayed_table(self, kind: str, last: int, count: int, decay: float) -> Mapping[str, float]:
        """The :meth:`decayed` sums already worked out for these arguments, by name
        (read-only; a name not in it is asked of :meth:`decayed`). Fair-share reads
        it once per event and looks its queued names up in it, instead of calling
        :meth:`decayed` per name. Tables of other days are dropped as they pile up."""
        if self._unfolded:
            self._fold()
        return self._table(kind, last, count, decay)

    def standing_view(
        self, kind: str, last: int, count: int, decay: float
    ) -> tuple[KeysView[str], int, Mapping[str, float], Sequence[str]]:
        """:meth:`known`, :meth:`count`, :meth:`decayed_table` and the names touched,
        in one call, folding once: fair-share reads them all at every event.

        The names touched are those charged or first known, oldest first, so a
        reader that remembers how far it read knows whose decayed sums may have
        moved. The list only grows until it holds ``_TOUCHED_AT`` names; then a
        new one is started, and a reader holding the old one (it compares
        identity) must look at every name again."""
        if self._unfolded:
            self._fold()
        names = self._names[kind]
        return (
            names.keys(),
            len(names),
            self._table(kind, last, count, decay),
            self._touched[kind],
        )

    def weights(self, count: int, decay: float) -> list[float]:
        """``[decay**k for k < count]``, worked out once per parameter set: the very
        floats :func:`decayed_sum` multiplies by (do not change the list)."""
        weights = self._weights.get((count, decay))
        if weights is None:
            weights = self._weights[count, decay] = [decay**k for k in range(count)]
        return weights

    def _table(self, kind: str, last: int, count: int, decay: float) -> dict[str, float]:
        tables = self._memo[kind]
        key = (last, count, decay)
        table = tables.get(key)
        if table is None:
            if len(tables) >= _TABLES:
                tables.clear()
            table = tables[key] = {}
        return table

    def decayed_known(
        self, kind: str, names: Iterable[str], last: int, count: int, decay: float
    ) -> dict[str, float]:
        """:meth:`decayed` of each of ``names`` the ledger knows (the others are left out)."""
        if self._unfolded:
            self._fold()
        known = self._names[kind]
        return {
            name: self.decayed(kind, name, last, count, decay) for name in names if name in known
        }

    def recent(self, kind: str, name: str, last: int, count: int) -> list[float]:
        """CPU-seconds of ``name`` in periods ``last``, ``last - 1``, ... (``count`` of them)."""
        if self._unfolded:
            self._fold()
        per = self._charged[kind].get(name)
        if per is None:
            return [0.0] * count
        get = per.get
        return [get(last - k, 0.0) for k in range(count)]

    def knows(self, kind: str, name: str) -> bool:
        """Whether ``name`` (a user or group) was ever charged or noted."""
        if self._unfolded:
            self._fold()
        return name in self._names[kind]

    def known(self, kind: str) -> KeysView[str]:
        """The users or groups ever charged or noted (a live read-only view)."""
        if self._unfolded:
            self._fold()
        return self._names[kind].keys()

    def count(self, kind: str) -> int:
        """How many users or groups were ever charged or noted."""
        if self._unfolded:
            self._fold()
        return len(self._names[kind])

    def names(self, kind: str) -> list[str]:
        """Every user or group ever charged or noted, in first-seen order."""
        if self._unfolded:
            self._fold()
        return list(self._names[kind])


def split_periods(start: float, end: float, period: float) -> list[tuple[int, float]]:
    """``[(period index, seconds inside it)]`` for the interval ``[start, end)``."""
    out: list[tuple[int, float]] = []
    index = math.floor(start / period)
    t = start
    while t < end:
        boundary = (index + 1) * period
        upto = min(end, boundary)
        out.append((index, upto - t))
        t = upto
        index += 1
    return out


def decayed_sum(values: list[float], decay: float) -> float:
    """``sum(decay**k * values[k])``, newest first, added in that order (so a cached
    sum and a fresh one are the same float)."""
    raw = 0.0
    for k, value in enumerate(values):
        raw += decay**k * value
    return raw
