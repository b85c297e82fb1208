"""Fair-share's hot path: each queued name's ``(P, S)`` and rank, kept between events.

:class:`~scheduler.priority.fairshare.FairShare` orders the queue at every
scheduling event, and between two events most queued names' standing has not
moved: a name with no running job and no charge since the last event has the
same share, the same remembered decayed sum and the same capacity, so the same
``P`` (recomputing it at every event made fair-share cost twice plain EASY on
a trace replay). This module keeps, per core and per source, each queued name's entry
(``fairshare_state``) and works out again only

* the names touched since the last event: the queue index lists each name
  whose queued or running jobs changed (:meth:`QueueIndex.touched
  <scheduler.core.queue_index.QueueIndex.touched>`), and the ledger each name
  charged or first known (:meth:`UsageLedger.standing_view
  <scheduler.core.usage.UsageLedger.standing_view>`);
* the names with running jobs, whose use grows with ``now``
  (``fairshare_live``, with the reference's arithmetic);
* every name when the day, the capacity or the unlisted names' share moved,
  or when a touched list was started afresh.

A kept entry is a pure function of (raw decayed sum, share, capacity, the
source's fields), none of which moved for an untouched name under the same
stamp, so it is exactly what working it out again would give: nothing is
approximated. :meth:`FairShare.queue_table`'s reference path stays as it was
(``FairShare._queue_table``), and the tests compare the two bit for bit over
random event sequences (``tests/scheduler/priority/test_fairshare_rank.py``).

Where the state lives: on the core's :class:`~scheduler.core.queue_index.QueueIndex`
(``QueueIndex.memos``), which belongs to one core, keyed by the source and
checked against the source and the ledger it was computed from. Two replays,
or two cores sharing one policy object, never see each other's entries; a
restored core builds a new index and starts empty. A snapshot without the
core's index or ledger (a filtered queue, a hand-built snapshot) takes the
reference path.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from model.job import Job
from scheduler.core.queue_index import QueueIndex
from scheduler.core.snapshot import RunningJob, SnapshotView
from scheduler.core.usage import UsageLedger
from scheduler.priority.fairshare_live import add_live, live_entries
from scheduler.priority.fairshare_state import TIE_DIGITS, Entry, Mode, NameRanks

if TYPE_CHECKING:  # fairshare.py imports this module
    from scheduler.priority.fairshare import FairShare

_MEMOS = 8
"""Sources' kept standings one index holds before it starts afresh (one is usual)."""


def entries(  # noqa: PLR0917 - the hot path, written out (module docstring)
    fs: FairShare,
    snapshot: SnapshotView,
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
                live_entries(
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
        add_live(memo, fs, ledger, out, runs, now, today, capacity, other_share, sums, False, live)
    return out


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
    return (raw, p, share, (-round(p, TIE_DIGITS), -share, who))


def order_by_rank(
    fs: FairShare, snapshot: SnapshotView, index: QueueIndex, ledger: UsageLedger
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
            return merge_ties(keys, lists, index)
        previous = key
    for key in keys:
        out += lists[key[2]]
    return out


def merge_ties(
    keys: list[tuple[float, float, str]], lists: Mapping[str, Sequence[Job]], index: QueueIndex
) -> list[Job]:
    """The names' lists one after the other in the order of ``keys`` (sorted
    ``(rank, share, name)``), the lists of tied names merged by ``(submit,
    arrival)``, which no two jobs share (:func:`order_by_rank`, and
    ``FairShare._order_by_name`` without the kept standings)."""
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
