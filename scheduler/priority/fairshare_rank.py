"""Fair-share's hot path: each queued name's ``(P, S)`` and rank, kept between events.

:class:`~scheduler.priority.fairshare.FairShare` orders the queue at every
scheduling event, and between two events most queued names' standing has not
moved: a name with no running job and no charge since the last event has the
same share, the same remembered decayed sum and the same capacity, so the same
``P`` (issue 7: recomputing it at every event made fair-share cost twice plain
EASY). This module keeps, per core and per source, what each name's ``P`` was
computed from, and recomputes only

* names with running jobs (their use so far grows with ``now``), with the
  same arithmetic as :meth:`FairShare.queue_table`'s reference path, so the
  floats are the same;
* names whose decayed ledger sum differs from the one their ``P`` was
  computed from (the ledger drops a charged name from its remembered sums, and
  the sum worked out afresh is compared by value, so a charge is never missed);
* names not seen at the last event;
* every name when the day, the capacity or the unlisted names' share changed.

A name's kept entry is a pure function of (raw decayed sum, share, capacity),
and the last two are checked at every event, so a kept entry is exactly what
recomputing it would give: nothing is approximated.

Where the state lives: on the core's :class:`~scheduler.queue_index.QueueIndex`
(``QueueIndex.memos``), which belongs to one core, keyed by the source and
checked against the ledger it was computed from. Two replays, or two cores
sharing one policy object, never see each other's entries; a restored core
builds a new index and starts empty. A snapshot without an index (a filtered
queue, a hand-built snapshot) takes the from-scratch path in ``fairshare.py``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from model.job import Job
from scheduler.queue_index import QueueIndex
from scheduler.snapshot import RunningJob, Snapshot
from scheduler.usage import UsageLedger, split_periods

if TYPE_CHECKING:  # fairshare.py imports this module
    from scheduler.priority.fairshare import FairShare

_TIE_DIGITS = 9
"""As in ``fairshare.py``: priorities equal to this many decimals are a tie."""

Mode = Literal["exact", "floor", "rank"]
"""What :func:`entries` may return for a live name: its exact entry; with "floor",
an older one when both are below 0 (:func:`_add_live`); with "rank", an older one
that ranks last either way (:func:`_live_entries`)."""
_MEMOS = 8
"""Sources' kept standings one index holds before it starts afresh (one is usual)."""

Entry = tuple[float, float, float, tuple[float, float, str]]
"""A name's ``(raw decayed sum, P, S, rank key)``; the rank key sorts names."""


OlderParts = tuple[int, "list[float] | None", float, float, float]
"""``(today, charged, today_start, next_start, window_start)`` of :func:`_older_parts`."""


class NameRanks:
    """One source's kept standings on one core (see the module docstring)."""

    __slots__ = (
        "capacity",
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
        self.other = -1.0
        #: Queued names without running use: their entries, all up to date.
        self.entries: dict[str, Entry] = {}
        #: Queued names with running jobs (recomputed at every event).
        self.live: set[str] = set()
        #: Live names with a run that began before today: what of their use does not
        #: move with the clock (see _older_parts), until they are touched.
        self.older: dict[str, OlderParts] = {}
        #: Live names' entries as last computed (for ``floor``; see _add_live).
        self.last: dict[str, Entry] = {}
        #: Queued names the ledger does not know (they count for the unlisted share).
        self.fresh: set[str] = set()
        # The index's and the ledger's touched-name lists, and how far each was read.
        self.log: Sequence[str] = ()
        self.read = 0
        self.ledger_log: Sequence[str] = ()
        self.ledger_read = 0


def entries(  # noqa: PLR0917 - the hot path, written out (module docstring)
    fs: FairShare,
    snapshot: Snapshot,
    index: QueueIndex,
    ledger: UsageLedger,
    lists: Mapping[str, Sequence[Job]],
    runs: Mapping[str, Mapping[str, RunningJob]],
    log: Sequence[str],
    *,
    mode: Mode = "exact",
) -> list[Entry]:
    """Every queued name's entry (see :data:`Entry`), in no particular order.

    The same numbers as :meth:`FairShare.queue_table`'s reference path, bit for
    bit: names with running jobs go through the same arithmetic at every call,
    and the other names' entries are recomputed only when the index or the
    ledger says the name was touched, or the stamp moved. ``lists``, ``runs``
    and ``log`` are ``index.views(fs.by)``. ``mode``: see :data:`Mode`.
    """
    memo = index.memos.get(id(fs))
    # Identity checks: an id is reused only after its object is gone, and a memo
    # holds its owner, so a memo found under id(fs) whose owner is fs is fs's.
    if not (isinstance(memo, NameRanks) and memo.owner is fs and memo.ledger is ledger):
        memo = _new_memo(fs, index, ledger)
    kind = fs.by
    period = memo.period
    now = snapshot.now
    # See fairshare.py's module docstring: the period of the instant just before now.
    today = math.ceil(now / period) - 1
    # One call for the names known, their count, the remembered decayed sums and
    # the names charged (the ledger folds its unread charges first).
    known, count, sums, ledger_log = ledger.standing_view(kind, today, fs.window, fs.decay)
    capacity = snapshot.total_cpus * period
    kept = memo.entries
    live = memo.live
    if (
        memo.log is log
        and memo.ledger_log is ledger_log
        and memo.today == today
        and memo.capacity == capacity
    ):
        # Only the names touched since the last call can have moved (module docstring).
        read, ledger_read = memo.read, memo.ledger_read
        todo: list[str] = []
        fresh = memo.fresh
        if len(log) > read or len(ledger_log) > ledger_read:
            memo.read = len(log)
            memo.ledger_read = len(ledger_log)
            older = memo.older
            last = memo.last
            # A set: a start touches its name twice (queue, running), an end twice
            # (running, charge); each name is looked at once.
            for who in {*log[read:], *ledger_log[ledger_read:]}:
                kept.pop(who, None)
                older.pop(who, None)
                last.pop(who, None)
                if who in lists:
                    if who in runs:
                        live.add(who)
                    else:
                        live.discard(who)
                        todo.append(who)
                    if who in known:
                        fresh.discard(who)
                    else:
                        fresh.add(who)
                else:
                    live.discard(who)
                    fresh.discard(who)
        if fs._listed:
            other_share = _other(fs, lists, known, count + len(fresh))
        else:
            # _other without listed names, written out: it runs at every event.
            seen = count + len(fresh)
            other_share = 1.0 / seen if seen else 0.0
        if other_share == memo.other:
            out = list(kept.values())
            for who in todo:
                if who not in kept:  # a name touched twice is computed once
                    raw = sums.get(who)
                    if raw is None:
                        raw = (
                            ledger.decayed(kind, who, today, fs.window, fs.decay)
                            if who in known
                            else 0.0
                        )
                    entry = kept[who] = _entry(fs, who, raw, capacity, other_share)
                    out.append(entry)
            if live:
                _live_entries(
                    memo, fs, ledger, out, runs, now, today, capacity, other_share, sums, mode
                )
            return out
    # Everything again: the first call, a new day, machines came or went, a name
    # first seen moved the unlisted share, or a touched list was started afresh.
    memo.log = log
    memo.read = len(log)
    memo.ledger_log = ledger_log
    memo.ledger_read = len(ledger_log)
    kept.clear()
    live.clear()
    memo.older.clear()
    memo.last.clear()
    fresh = memo.fresh
    fresh.clear()
    fresh.update(w for w in lists if w not in known)
    other_share = _other(fs, lists, known, count + len(fresh))
    memo.today = today
    memo.capacity = capacity
    memo.other = other_share
    out = []
    for who in lists:
        if who in runs:
            live.add(who)
            continue
        # A name never charged sums to 0.0, as in the reference path.
        raw = sums.get(who)
        if raw is None:
            raw = ledger.decayed(kind, who, today, fs.window, fs.decay) if who in known else 0.0
        entry = kept[who] = _entry(fs, who, raw, capacity, other_share)
        out.append(entry)
    if live:
        _add_live(memo, fs, ledger, out, runs, now, today, capacity, other_share, sums, False, live)
    return out


def _live_entries(  # noqa: PLR0917 - a hot helper; keywords would cost per call
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
    """:func:`_add_live` of every live name, but one that must still rank last.

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
        _add_live(memo, fs, ledger, out, runs, now, today, capacity, other_share, sums, floor, live)
        return
    last = memo.last
    candidate = None
    best: Entry | None = None
    for who in live:
        previous = last.get(who)
        if previous is not None and (best is None or previous[3] > best[3]):
            candidate, best = who, previous
    if best is None:
        _add_live(memo, fs, ledger, out, runs, now, today, capacity, other_share, sums, floor, live)
        return
    others = [w for w in live if w != candidate]
    _add_live(memo, fs, ledger, out, runs, now, today, capacity, other_share, sums, floor, others)
    rank, share, key0 = best[3]
    for entry in out:
        key = entry[3]
        if key[0] > rank or (key[0] == rank and key[1] >= share):
            _add_live(
                memo, fs, ledger, out, runs, now, today, capacity, other_share, sums, floor, [key0]
            )
            return
    out.append(best)


def _add_live(  # noqa: PLR0917 - a hot helper; keywords would cost per call
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
    adds up only today's use again (:func:`_older_parts`), or goes period by
    period (:func:`_with_runs`) in float corner cases.

    With ``floor``, a name whose ``P`` was below 0 at its last computation gets
    that entry again: untouched since (the same runs, charges and stamp), its use
    has only grown, and float sums and products of non-negative terms are
    monotone, so its ``P`` is still below 0; a caller that clips ``P`` at 0
    (multi-factor) sees the same factor without the work."""
    period = memo.period
    today_start = today * period
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
        today_use = 0.0
        older = False
        for run in mine.values():
            cpus = run.cpus
            if cpus <= 0:
                continue
            # max(start, charged_from), written out: it runs per job. The window's
            # start is below today's, so it clips only runs that began before today.
            begin = run.charged_from
            begin = run.start if run.start > begin else begin
            if begin < today_start:
                older = True
                break
            if now <= begin:
                continue
            today_use += (now - begin) * cpus
        if older:
            parts = memo.older.get(who)
            if parts is None or parts[0] != today:
                parts = memo.older[who] = _older_parts(fs, ledger, who, mine, now, today)
            if parts[1] is None or not now > today_start:
                entry = _with_runs(fs, ledger, who, mine, now, today, capacity, other_share, sums)
            else:
                entry = _from_parts(fs, ledger, parts, who, mine, now, today, capacity, other_share)
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
        entry = last[who] = (raw, p, share, (-round(p, _TIE_DIGITS), -share, who))
        out.append(entry)


def _other(
    fs: FairShare, lists: Mapping[str, Sequence[Job]], known: Collection[str], seen: int
) -> float:
    """The unlisted names' share, ``seen`` names (listed or not) having been seen: the
    ledger's names and the queued names it does not know."""
    listed = fs._listed
    if listed:
        seen -= sum(1 for n in listed if n in lists or n in known)
        return fs._other_share(seen)
    return 1.0 / seen if seen else 0.0


def _new_memo(fs: FairShare, index: QueueIndex, ledger: UsageLedger) -> NameRanks:
    memos = index.memos
    if len(memos) >= _MEMOS:
        # Sources built afresh per call would pile up entries: start again.
        memos.clear()
    memo = memos[id(fs)] = NameRanks(fs, ledger)
    return memo


def _entry(fs: FairShare, who: str, raw: float, capacity: float, other_share: float) -> Entry:
    """The entry of a name with no running use: the reference path's arithmetic with
    no running use to add (``raw + 0.0`` is ``raw``)."""
    listed = fs._listed
    share = listed.get(who, other_share) if listed else other_share
    used = raw / capacity if capacity > 0 else 0.0
    if fs.scale_usage_by_share:
        used *= share
    p = share - used
    return (raw, p, share, (-round(p, _TIE_DIGITS), -share, who))


def _with_runs(  # noqa: PLR0917 - a hot helper; keywords would cost per call
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
    period = ledger.period
    window = fs.window
    window_start = (today - window + 1) * period
    today_start = today * period
    today_use = 0.0
    older: dict[int, float] | None = None
    for run in mine.values():
        cpus = run.cpus
        if cpus <= 0:
            continue
        begin = run.charged_from
        begin = run.start if run.start > begin else begin
        begin = window_start if window_start > begin else begin
        if now <= begin:
            continue
        if begin >= today_start:
            today_use += (now - begin) * cpus
        else:
            if older is None:
                older = {}
            for index, seconds in split_periods(begin, now, period):
                older[index] = older.get(index, 0.0) + seconds * cpus
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
    return (raw, p, share, (-round(p, _TIE_DIGITS), -share, who))


def _older_parts(  # noqa: PLR0917 - one call per name and day
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
    period = ledger.period
    window = fs.window
    window_start = (today - window + 1) * period
    today_start = today * period
    next_start = (today + 1) * period
    older: dict[int, float] = {}
    for run in mine.values():
        cpus = run.cpus
        if cpus <= 0:
            continue
        begin = run.charged_from
        begin = run.start if run.start > begin else begin
        begin = window_start if window_start > begin else begin
        if now <= begin or begin >= today_start:
            continue
        pieces = split_periods(begin, now, period)
        last, seconds = pieces[-1]
        # The last piece starts at the boundary the piece before it ended on, which
        # is ``today * period`` when it is today's and not the only one.
        if len(pieces) < 2 or last != today or seconds != min(now, next_start) - today_start:
            return (today, None, today_start, next_start, window_start)
        for index, seconds in pieces[:-1]:
            older[index] = older.get(index, 0.0) + seconds * cpus
    charged = ledger.recent(fs.by, who, today, window)
    for k in range(1, window):
        charged[k] += older.get(today - k, 0.0)
    return (today, charged, today_start, next_start, window_start)


def _from_parts(  # noqa: PLR0917 - a hot helper; keywords would cost per call
    fs: FairShare,
    ledger: UsageLedger,
    parts: OlderParts,
    who: str,
    mine: Mapping[str, RunningJob],
    now: float,
    today: int,
    capacity: float,
    other_share: float,
) -> Entry:
    """:func:`_with_runs` for a name whose :func:`_older_parts` are kept: only today's
    use is added up again (the same pieces, added in the same order)."""
    _, kept, today_start, next_start, window_start = parts
    assert kept is not None
    today_use = 0.0
    older_today = 0.0
    for run in mine.values():
        cpus = run.cpus
        if cpus <= 0:
            continue
        begin = run.charged_from
        begin = run.start if run.start > begin else begin
        begin = window_start if window_start > begin else begin
        if now <= begin:
            continue
        if begin >= today_start:
            today_use += (now - begin) * cpus
        else:
            # split_periods' last piece: from today's start to min(now, next start).
            upto = now if now <= next_start else next_start
            older_today += (upto - today_start) * cpus
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
    return (raw, p, share, (-round(p, _TIE_DIGITS), -share, who))


def order_by_rank(
    fs: FairShare, snapshot: Snapshot, index: QueueIndex, ledger: UsageLedger
) -> list[Job]:
    """The queue ordered by the names' ranks (``P`` to 1e-9, then share): each
    name's list (already in submit-then-arrival order) one after the other; names
    of equal rank have their lists merged by submit, then arrival (see
    ``FairShare._order_by_name``)."""
    lists, runs, log = index.views(fs.by)
    if len(lists) == 1:
        # One name waiting: the order is its list, whatever its priority.
        (only,) = lists.values()
        return list(only)
    keys = [e[3] for e in entries(fs, snapshot, index, ledger, lists, runs, log, mode="rank")]
    keys.sort()
    out: list[Job] = []
    previous = keys[0]
    for key in keys[1:]:
        if key[0] == previous[0] and key[1] == previous[1]:
            # A tie (rare on traces: a few hundred events of KTH-SP2's 44,000).
            return _merge_ties(keys, lists, index)
        previous = key
    for key in keys:
        out += lists[key[2]]
    return out


def _merge_ties(
    keys: list[tuple[float, float, str]], lists: Mapping[str, Sequence[Job]], index: QueueIndex
) -> list[Job]:
    """:func:`order_by_rank`'s concatenation when some names tie: the tied names'
    lists are merged by ``(submit, arrival)``, which no two jobs share."""
    out: list[Job] = []
    arrival = index.arrival
    k = 0
    n = len(keys)
    while k < n:
        first, second, who = keys[k]
        tied = k + 1
        while tied < n and keys[tied][0] == first and keys[tied][1] == second:
            tied += 1
        if tied == k + 1:
            out += lists[who]
        else:
            merged = [j for key in keys[k:tied] for j in lists[key[2]]]
            merged.sort(key=lambda j: (j.submit, arrival(j.id)))
            out += merged
        k = tied
    return out
