"""Counters whose totals the journal keeps: a Prometheus counter plus a plain tally.

The scheduler's counters that no job row can tell (rejections, bad messages,
agent losses, resizes ...) survive a restart by being journaled with every
batch that changed them (``scheduler.runtime.exporter`` says which). Reading their
values back out of client_python at every batch (``Counter.collect()``) cost
about 150 µs a batch here, as much as a batch's own work; so each such
counter is wrapped in a :class:`JournaledCounter`: call sites use it as they
would the counter (``labels(...).inc(n)``, or ``inc(n)`` without labels), and
every increment also goes to one :class:`Tally`, a plain dict of totals with
the set of keys changed since the journal last took them. A batch that
counted nothing then costs an empty-set check.
"""

from __future__ import annotations

from collections.abc import Collection

from prometheus_client import Counter

from scheduler.runtime.journal import TotalKey

Labels = tuple[tuple[str, str], ...]


class Tally:
    """Every journaled counter's totals, and which changed since :meth:`take_changed`."""

    def __init__(self) -> None:
        self._values: dict[TotalKey, float] = {}
        self._changed: set[TotalKey] = set()

    def register(self, key: TotalKey) -> None:
        """A series that exists (at zero until counted)."""
        self._values.setdefault(key, 0.0)

    def add(self, key: TotalKey, amount: float) -> None:
        self._values[key] = self._values.get(key, 0.0) + amount
        self._changed.add(key)

    def totals(self) -> dict[TotalKey, int]:
        """Every total now."""
        return {key: int(n) for key, n in self._values.items()}

    def take_changed(self) -> dict[TotalKey, int]:
        """The totals changed since the last call (what to journal now)."""
        if not self._changed:
            return {}
        out = {key: int(self._values[key]) for key in self._changed}
        self._changed.clear()
        return out


class _Child:
    __slots__ = ("_counter", "_key", "_tally")

    def __init__(self, counter: Counter, key: TotalKey | None, tally: Tally) -> None:
        self._counter = counter
        self._key = key
        self._tally = tally

    def inc(self, amount: float = 1) -> None:
        self._counter.inc(amount)  # first: it refuses a negative amount
        if self._key is not None:
            self._tally.add(self._key, amount)


class JournaledCounter:
    """A counter family whose increments are also tallied for the journal.

    ``untallied`` label sets are counted by Prometheus only (their totals come
    from elsewhere, e.g. accepted submissions from the job rows). Label names
    other than the counter's raise client_python's ``ValueError``.
    """

    def __init__(
        self, counter: Counter, tally: Tally, *, untallied: Collection[Labels] = ()
    ) -> None:
        self.counter = counter
        self.name = next(iter(counter.describe())).name
        self._tally = tally
        self._untallied = frozenset(untallied)
        self._children: dict[Labels, _Child] = {}
        self._plain: _Child | None = None

    def labels(self, **labels: str) -> _Child:
        key = tuple(sorted(labels.items()))
        child = self._children.get(key)
        if child is None:
            total = None if key in self._untallied else (self.name, key)
            child = _Child(self.counter.labels(**labels), total, self._tally)
            if total is not None:
                self._tally.register(total)
            self._children[key] = child
        return child

    def inc(self, amount: float = 1) -> None:
        """For a counter without labels."""
        if self._plain is None:
            self.counter.inc(0)  # raises ValueError for a counter with labels
            self._plain = _Child(self.counter, (self.name, ()), self._tally)
            self._tally.register((self.name, ()))
        self._plain.inc(amount)
