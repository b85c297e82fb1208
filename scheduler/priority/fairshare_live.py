"""Fair-share's use so far of the queued names with running jobs, at every event.

A running job has used CPUs since the ledger last charged it; how much is one
formula, :func:`running_use`, which every path of fair-share reads (the
reference :meth:`FairShare.queue_table
<scheduler.priority.fairshare.FairShare.queue_table>`, the full standings, and
the kept standings here). A name with running jobs has a use that grows with
the clock, so its ``P`` is worked out again at every event (``fairshare_rank``),
with the reference's arithmetic: the floats must not move. What does not move
is kept: for a run begun before today, its use in the periods before today
(:func:`older_parts`); and a name's last entry, which a caller may take instead
of a new one where that cannot change what it reads (``floor``: a ``P`` below 0
stays below 0; ``rank``: a name that ranks last stays last), since a live
name's use only grows and float sums and products of non-negative terms are
monotone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from scheduler.core.snapshot import RunningJob
from scheduler.core.usage import UsageLedger, split_periods
from scheduler.priority.fairshare_state import (
    TIE_DIGITS,
    Day,
    Entry,
    Mode,
    NameRanks,
    OlderParts,
    day_of,
)

if TYPE_CHECKING:  # fairshare.py imports fairshare_rank, which imports this module
    from scheduler.priority.fairshare import FairShare


def running_use(
    runs: Iterable[RunningJob], now: float, day: Day, split: bool
) -> tuple[float, float | None, dict[int, float] | None]:
    """The use of ``runs`` (one name's running jobs) not yet charged to the ledger,
    inside the window of ``day`` (:func:`day_of`): each run's CPUs times the seconds
    from ``max(start, charged_from, window start)`` to ``now``.

    Returns ``(today_use, older_today, older)``:

    - ``today_use``: the use of the runs that began in today's period,
      ``(now - begin) * cpus`` summed in run order;
    - of the runs that began before today, with ``split``: ``older``, their use
      per period (``split_periods``), summed per period in run order, and
      ``older_today`` None; without: ``older`` None and ``older_today`` their use
      today, ``(min(now, next period's start) - today's start) * cpus`` summed in
      run order, which is what ``split_periods``' last piece is (the piece before
      it ends on today's start exactly). Both are None when no run began before
      today.
    """
    today_start, next_start, window_start, period = day
    today_use = 0.0
    older_today: float | None = None
    older: dict[int, float] | None = None
    for run in runs:
        cpus = run.cpus
        if cpus <= 0:
            continue
        # max(start, charged_from, window_start), written out: it runs per job.
        begin = run.charged_from
        begin = run.start if run.start > begin else begin
        begin = window_start if window_start > begin else begin
        if now <= begin:
            continue
        if begin >= today_start:
            today_use += (now - begin) * cpus
        elif split:
            if older is None:
                older = {}
            for index, seconds in split_periods(begin, now, period):
                older[index] = older.get(index, 0.0) + seconds * cpus
        else:
            upto = now if now <= next_start else next_start
            use = (upto - today_start) * cpus
            # 0.0 + use is use: the first run's use alone, as a sum from 0.0 gives.
            older_today = use if older_today is None else older_today + use
    return today_use, older_today, older


def live_entries(  # noqa: PLR0917 - a hot helper; keywords would cost per call
    memo: NameRanks,
    fs: FairShare,
    ledger: UsageLedger,
    out: list[Entry],
    runs: Mapping[str, Mapping[str, RunningJob]],
    now: float,
    today: int,
    capacity: float,
    other_share: float,
    sums: Mapping[str, float],
    mode: Mode,
) -> None:
    """:func:`add_live` of every live name, but one that must still rank last.

    A live name untouched since its last computation can only have lost priority
    (its use grows; float sums and products of non-negative terms are monotone),
    so its rank key can only have grown. If its last key is above every other
    name's key now (rank and share, strictly), its key now is too: it ranks last
    whatever its ``P`` is, and :func:`order_by_rank` may sort its last entry
    instead of a new one. The name with the highest last key is the only
    candidate; this holds only in the "rank" mode (fair-share's own order), never
    for :meth:`FairShare.queue_table`, which shows ``P``."""
    live = memo.live
    floor = mode == "floor"
    if mode != "rank" or len(out) + len(live) < 2:
        add_live(memo, fs, ledger, out, runs, now, today, capacity, other_share, sums, floor, live)
        return
    last = memo.last
    candidate = None
    best: Entry | None = None
    for who in live:
        previous = last.get(who)
        if previous is not None and (best is None or previous[3] > best[3]):
            candidate, best = who, previous
    if best is None:
        add_live(memo, fs, ledger, out, runs, now, today, capacity, other_share, sums, floor, live)
        return
    others = [w for w in live if w != candidate]
    add_live(memo, fs, ledger, out, runs, now, today, capacity, other_share, sums, floor, others)
    rank, share, key0 = best[3]
    for entry in out:
        key = entry[3]
        if key[0] > rank or (key[0] == rank and key[1] >= share):
            add_live(
                memo, fs, ledger, out, runs, now, today, capacity, other_share, sums, floor, [key0]
            )
            return
    out.append(best)


def add_live(  # noqa: PLR0917 - a hot helper; keywords would cost per call
    memo: NameRanks,
    fs: FairShare,
    ledger: UsageLedger,
    out: list[Entry],
    runs: Mapping[str, Mapping[str, RunningJob]],
    now: float,
    today: int,
    capacity: float,
    other_share: float,
    sums: Mapping[str, float],
    floor: bool,
    names: Iterable[str],
) -> None:
    """The entries of the queued names with running jobs, appended to ``out``: the
    reference path's arithmetic, name by name (the floats must not move).

    A run that began today adds ``(now - begin) * cpus`` to the name's remembered
    decayed sum (today's weight is 1); a name with a run that began before today
    adds up only today's use again (:func:`older_parts`), or goes period by
    period (:func:`with_runs`) in float corner cases.

    With ``floor``, a name whose ``P`` was below 0 at its last computation gets
    that entry again: untouched since (the same runs, charges and stamp), its use
    has only grown, and float sums and products of non-negative terms are
    monotone, so its ``P`` is still below 0; a caller that clips ``P`` at 0
    (multi-factor) sees the same factor without the work."""
    period = memo.period
    today_start = today * period
    if memo.day_index != today:
        memo.day = day_of(today, fs.window, period)
        memo.day_index = today
    day = memo.day
    listed = fs._listed
    scale = fs.scale_usage_by_share
    last = memo.last
    for who in names:
        if floor:
            previous = last.get(who)
            if previous is not None and previous[1] < 0.0:
                out.append(previous)
                continue
        mine = runs[who]
        today_use, older_today, _ = running_use(mine.values(), now, day, False)
        if older_today is not None:
            parts = memo.older.get(who)
            if parts is None or parts[0] != today:
                parts = memo.older[who] = older_parts(fs, ledger, who, mine, now, today)
            if parts[1] is None or not now > today_start:
                entry = with_runs(fs, ledger, who, mine, now, today, capacity, other_share, sums)
            else:
                entry = from_parts(
                    fs, ledger, parts, who, today_use, older_today, capacity, other_share
                )
            last[who] = entry
            out.append(entry)
            continue
        share = listed.get(who, other_share) if listed else other_share
        used = 0.0
        raw = 0.0
        if capacity > 0:
            # A name never charged sums to 0.0, as in the reference path.
            summed = sums.get(who)
            if summed is None:
                summed = (
                    ledger.decayed(fs.by, who, today, fs.window, fs.decay)
                    if ledger.knows(fs.by, who)
                    else 0.0
                )
            raw = summed + today_use
            used = raw / capacity
        if scale:
            used *= share
        p = share - used
        entry = last[who] = (raw, p, share, (-round(p, TIE_DIGITS), -share, who))
        out.append(entry)


def with_runs(  # noqa: PLR0917 - a hot helper; keywords would cost per call
    fs: FairShare,
    ledger: UsageLedger,
    who: str,
    mine: Mapping[str, RunningJob],
    now: float,
    today: int,
    capacity: float,
    other_share: float,
    sums: Mapping[str, float],
) -> Entry:
    """The entry of a name with running jobs: :meth:`FairShare.queue_table`'s
    arithmetic for one name, unchanged (the floats must not move)."""
    kind = fs.by
    window = fs.window
    day = day_of(today, window, ledger.period)
    today_use, _, older = running_use(mine.values(), now, day, True)
    listed = fs._listed
    share = listed.get(who, other_share) if listed else other_share
    used = 0.0
    raw = 0.0
    if capacity > 0:
        if older is None:
            # A name never charged sums to 0.0, as in the reference path.
            summed = sums.get(who)
            if summed is None:
                summed = (
                    ledger.decayed(kind, who, today, window, fs.decay)
                    if ledger.knows(kind, who)
                    else 0.0
                )
            raw = summed + today_use
        else:
            older[today] = older.get(today, 0.0) + today_use
            charged = ledger.recent(kind, who, today, window)
            # decayed_sum(charged, decay) with the ledger's ``decay**k`` worked out
            # once: the same products added in the same order, so the same float.
            weights = ledger.weights(window, fs.decay)
            for k in range(window):
                raw += weights[k] * (charged[k] + older.get(today - k, 0.0))
        used = raw / capacity
    if fs.scale_usage_by_share:
        used *= share
    p = share - used
    return (raw, p, share, (-round(p, TIE_DIGITS), -share, who))


def older_parts(  # noqa: PLR0917 - one call per name and day
    fs: FairShare,
    ledger: UsageLedger,
    who: str,
    mine: Mapping[str, RunningJob],
    now: float,
    today: int,
) -> OlderParts:
    """What of the use of ``who`` (a name with a run begun before today) does not move
    with the clock while the day, its runs and its charges stay the same: the
    reference's per-period sums for the periods before today, added to the charges,
    ``charged[k] + older[today - k]`` for ``k >= 1`` (index 0 holds today's charge
    alone). A run begun before today adds ``min(now, next_start) - today_start``
    seconds to today, which is what the reference's ``split_periods`` gives for any
    ``now`` in ``(today_start, next_start]``; if it does not give that here (float
    corner cases at a period's edge) the name takes the reference path (``None``)."""
    window = fs.window
    day = today_start, next_start, window_start, _ = day_of(today, window, ledger.period)
    older: dict[int, float] = {}
    for run in mine.values():
        # The run's own pieces, by the one formula: None if it began today.
        _, _, pieces = running_use((run,), now, day, True)
        if pieces is None:
            continue
        # Its last piece starts at the boundary the piece before it ended on, which
        # is ``today * period`` when it is today's and not the only one.
        *before, last = pieces
        today_piece = (min(now, next_start) - today_start) * run.cpus
        if not before or last != today or pieces[today] != today_piece:
            return (today, None, today_start, next_start, window_start)
        for index in before:
            older[index] = older.get(index, 0.0) + pieces[index]
    charged = ledger.recent(fs.by, who, today, window)
    for k in range(1, window):
        charged[k] += older.get(today - k, 0.0)
    return (today, charged, today_start, next_start, window_start)


def from_parts(  # noqa: PLR0917 - a hot helper; keywords would cost per call
    fs: FairShare,
    ledger: UsageLedger,
    parts: OlderParts,
    who: str,
    today_use: float,
    older_today: float,
    capacity: float,
    other_share: float,
) -> Entry:
    """:func:`with_runs` for a name whose :func:`older_parts` are kept: only today's
    use (:func:`running_use` without ``split``: the same pieces, added in the same
    order) is added to them."""
    kept = parts[1]
    assert kept is not None
    listed = fs._listed
    share = listed.get(who, other_share) if listed else other_share
    used = 0.0
    raw = 0.0
    if capacity > 0:
        weights = ledger.weights(fs.window, fs.decay)
        # The reference's charged[0] += older[today] + today_use, then its sum
        # 0.0 + w0 * c0 + w1 * c1 + ... (0.0 + x is x: the first term alone).
        raw = weights[0] * (kept[0] + (older_today + today_use))
        for k in range(1, len(kept)):
            raw += weights[k] * kept[k]
        used = raw / capacity
    if fs.scale_usage_by_share:
        used *= share
    p = share - used
    return (raw, p, share, (-round(p, TIE_DIGITS), -share, who))
