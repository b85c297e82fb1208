"""Booking many reservations on an availability profile in one sweep.

Conservative backfilling (``scheduler.policies.conservative``) re-books every
promise at every event. Booking them one by one on a
:class:`~scheduler.planning.profile.Profile` costs two list inserts per booking; these
functions instead merge all the bookings' steps with the profile's
breakpoints in one sort and one sweep, and build the new breakpoint lists,
equal neighbours merged: the same canonical profile as booking one by one.
They return None, changing nothing, when the bookings do not fit together
(some instant would have fewer than zero CPUs free) or name a machine the
profile does not have. The profile's own lists are only read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from model.machine import Part

Booking = tuple[float, float, tuple[Part, ...]]
"""``(start, end, parts)``: ``parts`` held over ``[start, end)``."""


def sweep_many(
    times: Sequence[float],
    cols: Sequence[Sequence[int]],
    pos: Mapping[str, int],
    bookings: Sequence[Booking],
) -> tuple[list[float], list[list[int]]] | None:
    """The breakpoints and per-machine columns with every booking held; None if
    they do not fit. ``pos`` maps a machine id to its column."""
    now = times[0]
    events: list[tuple[float, int, int]] = []
    for start, end, parts in bookings:
        if not end > start:
            continue
        if start < now:
            raise ValueError(f"booking at {start} is before the profile's start {now}")
        for p in parts:
            k = pos.get(p.machine)
            if k is None:
                return None
            events.append((start, k, -p.cpus))
            events.append((end, k, p.cpus))
    events.sort()
    width = len(cols)
    new_times: list[float] = []
    new_cols: list[list[int]] = [[] for _ in cols]
    shift = [0] * width
    inf = math.inf
    n = len(times)
    ne = len(events)
    i = j = 0
    base = 0
    while i < n or j < ne:
        ta = times[i] if i < n else inf
        tb = events[j][0] if j < ne else inf
        t = ta if ta <= tb else tb
        if ta == t:
            base = i
            i += 1
        while j < ne and events[j][0] == t:
            shift[events[j][1]] += events[j][2]
            j += 1
        values = [cols[k][base] + shift[k] for k in range(width)]
        if min(values) < 0:
            return None
        if new_times and all(new_cols[k][-1] == values[k] for k in range(width)):
            continue  # equal neighbours merge
        new_times.append(t)
        for k in range(width):
            new_cols[k].append(values[k])
    return new_times, new_cols


def sweep_one(
    times: Sequence[float], col: Sequence[int], only: str, bookings: Sequence[Booking]
) -> tuple[list[float], list[int]] | None:
    """:func:`sweep_many` on one machine (``only``): the profile as a dict of
    steps (time -> change), the bookings' steps added in, then one running sum
    in time order."""
    now = times[0]
    steps: dict[float, int] = {now: col[0]}
    prev = col[0]
    for i in range(1, len(times)):
        v = col[i]
        steps[times[i]] = v - prev
        prev = v
    get = steps.get
    for start, end, parts in bookings:
        if not end > start:
            continue
        if start < now:
            raise ValueError(f"booking at {start} is before the profile's start {now}")
        c = 0
        for p in parts:
            if p.machine != only:
                return None
            c += p.cpus
        steps[start] = get(start, 0) - c
        steps[end] = get(end, 0) + c
    new_times: list[float] = []
    new_col: list[int] = []
    level = 0
    for t in sorted(steps):
        step = steps[t]
        if step == 0 and new_times:
            continue  # e.g. one booking's end meeting another's start: no breakpoint
        level += step
        if level < 0:
            return None
        new_times.append(t)
        new_col.append(level)
    return new_times, new_col
