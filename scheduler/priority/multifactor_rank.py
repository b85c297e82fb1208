"""Multi-factor's hot path: the queue kept in a clock-free order between events.

:meth:`MultiFactor.order <scheduler.priority.multifactor.MultiFactor.order>`
sorts the queue by ``priority = w_age * age + W[name] + Z`` at every event,
where ``age = (now - submit) / max_age`` (clipped to ``[0, 1]``), ``W[name]``
is the weighted, clipped fair-share of the job's name and ``Z`` the weighted
size. While a job's age is inside ``[0, 1]`` (every job of the traces, whose
queues never hold a job a week), its priority is ``a * now + K`` with
``a = w_age / max_age`` and the clock-free

    K = W[name] + Z - a * submit,

so all such jobs rise at the same rate and their order does not change with
the clock. This module keeps the queued jobs sorted by
``(-K, submit, arrival)`` and updates that order as things change, instead of
computing and sorting every job's key at every event:

* a job entering or leaving the queue is inserted or removed by bisection
  (the index's :meth:`~scheduler.core.queue_index.QueueIndex.job_log` says which);
* a name whose ``W`` moved (a name with running jobs, or charged) has its
  queued jobs moved; on the traces that is about one job per event, since a
  name over its share has ``W = 0`` however its use grows;
* a change of capacity rebuilds it.

Exactness. The reference compares priorities rounded to 1e-9
(``_TIE_SCALE``), with float noise of the order of 1e-11. Two jobs whose
``K`` differ by more than ``_CLOSE`` (1e-6 plus a margin for large weights)
are in the same order under the reference's keys at every clock: their
priorities differ by far more than a rounding bucket and the float noise. Any
run of jobs whose neighbouring ``K`` are closer than that (a *close* run, kept
as a set of pairs as jobs come and go) is re-sorted at every event by the
reference's own key, computed with the reference's own expression. So the
order given is the reference's order, job for job; ``bench/replay/schedule_hash.py``
checks it on the traces and a property test against the from-scratch order.

What is not handled here falls back to the reference at that event (and the
kept order stays up to date for the next): a job whose age is outside
``[0, 1]`` (older than ``max_age``, or submitted after ``now``), a QoS above 0
in the queue, an emergency QoS, ``favor_small``, a cluster with no CPUs.

The state lives on the core's :class:`~scheduler.core.queue_index.QueueIndex`
(``memos``, keyed by the source and checked against it and the ledger), as in
``fairshare_rank``.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from model.job import Job
from scheduler.core.queue_index import QueueIndex
from scheduler.core.snapshot import SnapshotView
from scheduler.core.usage import UsageLedger
from scheduler.priority.fairshare_rank import entries

if TYPE_CHECKING:  # multifactor.py imports this module
    from scheduler.priority.multifactor import MultiFactor

_TIE_SCALE = 1e9
"""As in ``multifactor.py``: priorities equal in units of 1e-9 are a tie."""
_CLOSE = 1e-6
"""Neighbours whose ``K`` differ by at most this (plus ``_CLOSE_REL`` of the
largest magnitude) are re-sorted by the reference's key at every event."""
_CLOSE_REL = 1e-12
_SUBMIT_BOUND = 1e10
"""Submit times beyond this many seconds from 0 make the float bound on ``a *
submit`` too loose for ``_CLOSE``: such a queue falls back to the reference."""
_MEMOS = 8

Key = tuple[float, float, int]
"""``(-K, submit, arrival)``: the kept order's sort key (arrival makes it total)."""


class ClockFreeOrder:
    """One multi-factor source's kept order on one core (module docstring)."""

    __slots__ = (
        "close",
        "delta",
        "info",
        "jobs",
        "keys",
        "ledger",
        "log",
        "max_qos",
        "mine",
        "odd",
        "owner",
        "qos",
        "read",
        "slope",
        "submits",
        "total",
        "weights",
    )

    def __init__(self, owner: MultiFactor, ledger: UsageLedger) -> None:
        self.owner = owner
        self.ledger = ledger
        self.total = -1
        self.log: Sequence[tuple[Job, bool]] = ()
        self.read = 0
        #: The kept order: sort keys and, in the same order, the jobs.
        self.keys: list[Key] = []
        self.jobs: list[Job] = []
        #: By arrival: (key, name, Z, Q): Z and Q the job's weighted size and QoS terms.
        self.info: dict[int, tuple[Key, str, float, float]] = {}
        #: Each name's kept jobs' arrivals, and the ``W`` their keys were made with.
        self.mine: dict[str, set[int]] = {}
        self.weights: dict[str, float] = {}
        #: Arrivals whose next neighbour in the kept order is close (module docstring).
        self.close: set[int] = set()
        #: (submit, arrival) of every kept job, sorted: the oldest and newest submit.
        self.submits: list[tuple[float, int]] = []
        #: Kept jobs the clock-free order cannot rank (submit too far out).
        self.odd = 0
        #: How many kept jobs have each QoS, and the QoS factor's divisor the Q terms
        #: were made with (the reference's: the field, else the queue's highest).
        self.qos: dict[int, int] = {}
        self.max_qos = 1
        w = owner.weight_age + owner.weight_fairshare + owner.weight_size
        slope = self.slope = owner.weight_age / owner.max_age
        self.delta = _CLOSE + _CLOSE_REL * (w + slope * _SUBMIT_BOUND)


def clock_free_order(
    mf: MultiFactor, snapshot: SnapshotView, index: QueueIndex, ledger: UsageLedger
) -> list[Job] | None:
    """The queue in the reference's order, from the kept order; None when this event
    must take the reference path (module docstring)."""
    fs = mf.fairshare
    total = snapshot.total_cpus
    if total <= 0 or mf.emergency_qos is not None or mf.favor_small:
        return None
    lists, runs, log = index.views(fs.by)
    # floor: W clips P at 0, so a name below 0 need not be worked out again.
    ents = entries(fs, snapshot, index, ledger, lists, runs, log, mode="floor")
    memos = index.memos
    memo = memos.get(id(mf))
    # Identity checks, as in fairshare_rank: a memo holds its owner.
    if not (isinstance(memo, ClockFreeOrder) and memo.owner is mf and memo.ledger is ledger):
        if len(memos) >= _MEMOS:
            memos.clear()
        memo = memos[id(mf)] = ClockFreeOrder(mf, ledger)
    w_fs = mf.weight_fairshare
    joblog = index.job_log()
    if memo.log is not joblog or memo.total != total:
        # W per name, as the reference computes it: w_fs * min(max(P, 0), 1).
        weights = {
            e[3][2]: w_fs * (1.0 if e[1] > 1.0 else (0.0 if e[1] < 0.0 else e[1])) for e in ents
        }
        _rebuild(memo, mf, index, lists, weights, total, joblog, memo.max_qos)
    else:
        kept = memo.weights
        for e in ents:
            p = e[1]
            # W as the reference computes it: w_fs * min(max(P, 0), 1).
            w = w_fs * (1.0 if p > 1.0 else (0.0 if p < 0.0 else p))
            who = e[3][2]
            if kept.get(who) != w:
                kept[who] = w
                # The name's kept jobs move (the ones entering below take the new W).
                mine = memo.mine.get(who)
                if mine:
                    for arrival in list(mine):
                        _move(memo, arrival, w)
        read = memo.read
        if len(joblog) > read:
            memo.read = len(joblog)
            arrival_of = index.arrival
            account = fs.by
            for job, entered in joblog[read:]:
                arrival = arrival_of(job.id)
                if entered:
                    who = job.user if account == "user" else job.group
                    _insert(memo, mf, job, who, kept.get(who, 0.0), arrival, total)
                else:
                    _remove(memo, arrival)
    # The QoS divisor, as the reference has it; when it moves, every Q term does.
    max_qos = mf.max_qos
    if max_qos is None:
        highest = max(memo.qos, default=0)
        max_qos = highest if highest > 1 else 1
    if max_qos != memo.max_qos:
        # Every queued name's W is up to date in memo.weights by now.
        _rebuild(memo, mf, index, lists, dict(memo.weights), total, joblog, max_qos)
    if memo.odd:
        return None
    submits = memo.submits
    if not submits:
        return []
    now = snapshot.now
    max_age = mf.max_age
    # (now - submit) / max_age falls as submit grows: if the oldest job's age is at
    # most 1 and the newest's at least 0, every job's is in [0, 1].
    if (now - submits[0][0]) / max_age > 1.0 or (now - submits[-1][0]) / max_age < 0.0:
        return None
    out = list(memo.jobs)
    if memo.close:
        _resort_close(memo, mf, out, now, total)
    return out


def _rebuild(  # noqa: PLR0917 - called on the first event and on a capacity change
    memo: ClockFreeOrder,
    mf: MultiFactor,
    index: QueueIndex,
    lists: Mapping[str, Sequence[Job]],
    weights: dict[str, float],
    total: int,
    joblog: Sequence[tuple[Job, bool]],
    max_qos: int,
) -> None:
    """The kept order built from the index's lists (all of it afresh)."""
    memo.total = total
    memo.max_qos = max_qos
    memo.qos = {}
    memo.log = joblog
    memo.read = len(joblog)
    memo.keys = []
    memo.jobs = []
    memo.info = {}
    memo.mine = {}
    memo.weights = dict(weights)
    memo.close = set()
    memo.submits = []
    memo.odd = 0
    arrival_of = index.arrival
    for who, jobs in lists.items():
        for job in jobs:
            _insert(memo, mf, job, who, weights[who], arrival_of(job.id), total)


def _insert(  # noqa: PLR0917 - a hot helper; keywords would cost per call
    memo: ClockFreeOrder,
    mf: MultiFactor,
    job: Job,
    who: str,
    w: float,
    arrival: int,
    total: int,
) -> None:
    """Put ``job`` (of ``who``, whose ``W`` is ``w``) in the kept order."""
    size = job.procs / total
    # The reference's size term, the same expression (so the same float).
    z = mf.weight_size * (1.0 if size > 1.0 else size)
    qos = job.qos
    factor = qos / memo.max_qos
    q = mf.weight_qos * (1.0 if factor > 1.0 else (0.0 if factor < 0.0 else factor))
    counts = memo.qos
    counts[qos] = counts.get(qos, 0) + 1
    submit = job.submit
    key = (-(w + z + q - memo.slope * submit), submit, arrival)
    keys = memo.keys
    at = bisect.bisect_left(keys, key)
    keys.insert(at, key)
    memo.jobs.insert(at, job)
    memo.info[arrival] = (key, who, z, q)
    memo.mine.setdefault(who, set()).add(arrival)
    bisect.insort(memo.submits, (submit, arrival))
    if abs(submit) > _SUBMIT_BOUND:
        memo.odd += 1
    _judge_neighbours(memo, at, arrival)


def _remove(memo: ClockFreeOrder, arrival: int) -> Job:
    """Take the job that arrived ``arrival``-th out of the kept order; returns it."""
    key, who, _, _ = memo.info.pop(arrival)
    keys = memo.keys
    at = bisect.bisect_left(keys, key)
    del keys[at]
    job = memo.jobs.pop(at)
    mine = memo.mine[who]
    mine.discard(arrival)
    if not mine:
        del memo.mine[who]
    submits = memo.submits
    del submits[bisect.bisect_left(submits, (job.submit, arrival))]
    counts = memo.qos
    left = counts[job.qos] - 1
    if left:
        counts[job.qos] = left
    else:
        del counts[job.qos]
    if abs(job.submit) > _SUBMIT_BOUND:
        memo.odd -= 1
    close = memo.close
    close.discard(arrival)
    if at > 0:
        before = keys[at - 1][2]
        close.discard(before)
        if at < len(keys) and _close(memo, before, keys[at][2]):
            close.add(before)
    return job


def _move(memo: ClockFreeOrder, arrival: int, w: float) -> None:
    """Give a kept job the key its name's new ``W`` makes: :func:`_remove` then
    :func:`_insert` of what changes (not its submit, QoS or name)."""
    info = memo.info
    key, who, z, q = info[arrival]
    keys = memo.keys
    jobs = memo.jobs
    close = memo.close
    at = bisect.bisect_left(keys, key)
    submit = key[1]
    new = (-(w + z + q - memo.slope * submit), submit, arrival)
    info[arrival] = (new, who, z, q)
    n = len(keys)
    if (at == 0 or keys[at - 1] < new) and (at + 1 == n or new < keys[at + 1]):
        # Still between the same neighbours (the usual small drift of a live name's
        # W): the key changes in place, and only its two pairs are looked at again.
        keys[at] = new
        if at > 0:
            before = keys[at - 1][2]
            if _close(memo, before, arrival):
                close.add(before)
            else:
                close.discard(before)
        if at + 1 < n and _close(memo, arrival, keys[at + 1][2]):
            close.add(arrival)
        else:
            close.discard(arrival)
        return
    del keys[at]
    job = jobs.pop(at)
    close.discard(arrival)
    if at > 0:
        before = keys[at - 1][2]
        close.discard(before)
        if at < len(keys) and _close(memo, before, keys[at][2]):
            close.add(before)
    at = bisect.bisect_left(keys, new)
    keys.insert(at, new)
    jobs.insert(at, job)
    _judge_neighbours(memo, at, arrival)


def _judge_neighbours(memo: ClockFreeOrder, at: int, arrival: int) -> None:
    """``arrival`` has just gone in at ``at``: whether it and the job now before it
    are each close to the job after them (``memo.close`` marks the first of a pair)."""
    keys = memo.keys
    close = memo.close
    if at > 0:
        before = keys[at - 1][2]
        close.discard(before)
        if _close(memo, before, arrival):
            close.add(before)
    if at + 1 < len(keys) and _close(memo, arrival, keys[at + 1][2]):
        close.add(arrival)


def _close(memo: ClockFreeOrder, first: int, second: int) -> bool:
    """Whether neighbours ``first`` then ``second`` (arrivals) may be ordered otherwise
    by the reference's key at some clock (module docstring)."""
    key, who, z, q = memo.info[first]
    other, other_who, other_z, other_q = memo.info[second]
    if other[0] - key[0] > memo.delta:
        return False
    # The same name, submit, size and QoS terms give the very same priority float at
    # every clock, so the reference orders them by arrival, as the kept order does.
    return not (who == other_who and key[1] == other[1] and z == other_z and q == other_q)


def _resort_close(
    memo: ClockFreeOrder, mf: MultiFactor, out: list[Job], now: float, total: int
) -> None:
    """Sort each close run of ``out`` by the reference's key at ``now``.

    A run is every job reachable from a close pair through neighbours at most
    ``delta`` apart, identical ones included: a job may be identical to its
    neighbour and still close to the job beyond it (whose key equals the
    neighbour's). A run of identical jobs alone is never close (no pair in it
    is), and needs no sorting: the reference orders them by arrival too."""
    keys = memo.keys
    info = memo.info
    delta = memo.delta
    last = len(keys) - 1
    runs: list[tuple[int, int]] = []
    for at in sorted(bisect.bisect_left(keys, info[a][0]) for a in memo.close):
        if runs and at <= runs[-1][1]:
            continue  # inside the run found before
        lo, hi = at, at + 1
        while lo > 0 and keys[lo][0] - keys[lo - 1][0] <= delta:
            lo -= 1
        while hi < last and keys[hi + 1][0] - keys[hi][0] <= delta:
            hi += 1
        runs.append((lo, hi))
    w_age, max_age = mf.weight_age, mf.max_age
    weights = memo.weights
    for lo, hi in runs:
        run = []
        for at in range(lo, hi + 1):
            key = keys[at]
            _, who, z, q = info[key[2]]
            # MultiFactor._plain_keys' expression, term for term (age is in [0, 1]);
            # a QoS term of 0.0 (the reference leaves it out) adds nothing.
            age = (now - key[1]) / max_age
            priority = w_age * age + weights[who] + z + q
            run.append((-round(priority * _TIE_SCALE), key[1], key[2], out[at]))
        run.sort()
        out[lo : hi + 1] = [r[3] for r in run]
