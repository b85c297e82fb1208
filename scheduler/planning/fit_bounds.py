"""Lower bounds on earliest fits, kept while a profile only loses CPUs.

Laying a long queue onto an availability profile (the prediction, conservative
backfilling's newcomers) books one job after another; between two searches
nothing is given back, so the free CPUs at every instant only go down. Then a
search that found the first instant where a job of ``c`` CPUs and length
``d`` *could* fit is ``t`` has shown, for the rest of the laying, that no job
at least as wide and as long can fit before ``t``: a later search for such a
job may start at ``t`` instead of at ``now``. The jobs of a deep queue look
alike (a few widths, a few requested times), so each search is a few steps
from its bound instead of a walk over every breakpoint before it.

:class:`FitBounds` keeps, per key (a width, or a width and a reference speed),
the bounds by length: lengths ascending, and the instants before which
nothing that long fits, ascending too (a longer length whose bound is no
later than a shorter one's says nothing more, and is dropped). A search
asks :meth:`FitBounds.start` for the bound of the longest length not above
its own.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Hashable

Known = tuple[list[float], list[float]]
"""Lengths ascending, and for each the instant before which nothing that long fits."""


class FitBounds:
    """Per key, "nothing this long fits from the floor until ``t``" (module docstring).

    The floor is the ``not_before`` of the searches: a bound says nothing about the
    instants before the search that found it started. Searches from ``now`` (the
    prediction, conservative backfilling) keep it there; a laying in order
    (FCFS) raises it job after job, which leaves every bound true.
    """

    __slots__ = ("_floor", "_known")

    def __init__(self) -> None:
        self._known: dict[Hashable, Known] = {}
        self._floor = -math.inf

    def __bool__(self) -> bool:
        return bool(self._known)

    def clear(self) -> None:
        """Forget every bound: the profile gained CPUs somewhere."""
        self._known.clear()

    def start(self, key: Hashable, length: float, not_before: float) -> float:
        """Where a search from ``not_before`` for ``key`` and ``length`` may start: no
        earlier than ``not_before``, nor than what is known to fail from there.

        After this call :meth:`record` may be told what the search finds.
        """
        floor = self._floor
        if not_before != floor:
            if not_before < floor:
                self._known.clear()  # nothing is known of the instants before the floor
            self._floor = not_before
        known = self._known.get(key)
        if known is None:
            return not_before
        lengths, times = known
        k = bisect_right(lengths, length) - 1
        return times[k] if k >= 0 and times[k] > not_before else not_before

    def record(self, key: Hashable, length: float, t: float) -> None:
        """Nothing of ``key`` at least ``length`` long fits from the floor until ``t``."""
        known = self._known.get(key)
        if known is None:
            known = self._known[key] = ([], [])
        bound(known, length, t)


def bound(known: Known, d: float, t: float) -> None:
    """Nothing ``d`` long (or longer) fits before ``t``: keep it among ``known``'s bounds,
    dropping those it beats (longer durations whose bound is no later)."""
    ds, ts = known
    k = bisect_right(ds, d)
    if k > 0 and ts[k - 1] >= t:
        return  # a shorter duration's bound says as much already
    if k > 0 and ds[k - 1] == d:
        k -= 1
        ts[k] = t
    else:
        ds.insert(k, d)
        ts.insert(k, t)
    stop = k + 1
    while stop < len(ds) and ts[stop] <= t:
        stop += 1
    del ds[k + 1 : stop]
    del ts[k + 1 : stop]
