"""Fair-share priority with usage decay.

Source: "Scheduling Algorithms", the fair-share section and its worked example
with users jack and jill on a four-node cluster.

Theory of operation. Every user (or group, ``by="group"``) owns a share ``S``
of the cluster, a fraction in ``[0, 1]``. Their recent use of the cluster is

    U = sum_{k=0}^{window-1} D^k * u(today - k)
    u(d) = CPU-seconds used in period d / (total CPUs * period length)

so a period in which they held the whole cluster counts 1, and older periods
count less by the decay factor ``D``; periods older than the window do not
count at all. Every job of theirs gets the priority

    P = S - U

and the queue is sorted by decreasing ``P``. Defaults are the text's: ``D =
0.7``, a window of 7 periods, and a period of one day. The period is not a
field: it is the ledger's (``snapshot.usage.period``, 86400 s in the core by
default), so the periods summed here are the ones the core charged.

Choices, each stated because the text leaves it open or contradicts itself:

* The text's formula line reads ``U = S * (u(today) + D * u(today - 1) +
  ...)``, but its worked example does not scale by ``S`` (jill, ``S = 0.75``,
  after one six-hour job on the whole cluster: ``0.75 - U(24/96) = 0.5``).
  We follow the worked example; ``scale_usage_by_share=True`` gives the
  formula line (and the text's "100 % of the cluster today" illustration:
  penalty 0.75, then 0.525, then 0.3675).
* Usage is the ledger's charged CPU-seconds (``scheduler.core.usage``: charged when
  a job leaves the CPUs or is resized) plus the use so far of the running
  jobs, from ``max(start, charged_from)`` to now, so a long job counts before
  it ends and nothing is counted twice.
* "Today" is the period holding the instant just before ``now``: index
  ``ceil(now / period) - 1``. A period is ``(d * period, (d + 1) * period]``
  seen from the clock, which is the ledger's ``[start, end)`` seen from the
  usage: at the instant a day ends it is still "today" (the next period has
  no elapsed time yet), so the worked example's last line, evaluated when
  jack's job ends at 24 h, reads ``0 / 0`` as in the text; one instant later
  the day is "yesterday" and decays by ``D``.
* Names not listed in ``shares`` split what the listed shares leave of 1
  equally among themselves: every unlisted user (or group) seen so far, in the
  queue, among the running jobs or in the ledger, gets
  ``max(0, 1 - sum(listed shares)) / (number of unlisted names seen)``. With
  no ``shares`` at all every name seen gets an equal share.
* Ties in ``P`` go to the higher share (the text: "give the top priority to
  the user with the highest share"), then the earlier submit time, then
  arrival order. Priorities are compared rounded to 1e-9, so float noise in a
  decayed sum cannot beat the stated tie-break.
* With no CPUs in the cluster (``total_cpus == 0``, before any agent has
  registered) usage is taken as 0: ``P = S``.

Cost: ``order`` runs at every scheduling event with queues of thousands of
jobs and hundreds of users (done naively, it made EASY seven times slower on
KTH-SP2), so it does only what the queue's order depends on. ``U`` is
computed for the names that have a job in the queue, not for every name ever
seen (those are only counted, for the unlisted share); a name's decayed
ledger sum is remembered by the ledger until the name is charged again; the
use so far of a running job that began in the current period is added to it
analytically (``(now - begin) * cpus``, today's weight being 1); and names
are sorted, not jobs (each name's queued jobs are a list in the core's queue
index). With the core's index and ledger, each queued name's standing is
also kept between events (``fairshare_rank``): only the names touched since
the last event (queued, started, ended, charged) and the names with running
jobs are worked out again, with the same arithmetic, so the floats are the
ones the reference gives bit for bit. What is left per event is a few
dictionary look-ups per touched or running name, the sort of the names and
the concatenation of their lists: on KTH-SP2 about 1.9 times plain EASY in
instructions, 2.0 to 2.3 times in CPU seconds (the target is 2: ``bench.replay``).
The reference
(:meth:`_queue_table`) may differ from the full :meth:`FairShare.standings`
in the last bits of a float (the running use is added after the decayed sum,
not before); priorities are compared rounded to 1e-9, and on KTH-SP2 the
twin's schedule is the same job by job as before this was done.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Literal

from model.job import Job
from scheduler.core.queue_index import QueueIndex
from scheduler.core.snapshot import RunningJob, SnapshotView
from scheduler.core.usage import UsageLedger, decayed_sum
from scheduler.priority.fairshare_live import running_use
from scheduler.priority.fairshare_rank import entries, merge_ties, order_by_rank
from scheduler.priority.fairshare_state import day_of

DEFAULT_DECAY = 0.7
"""The text's decay factor ``D``."""
DEFAULT_WINDOW = 7
"""The text's window: "we're going to consider jobs over the past seven days"."""

_TIE_DIGITS = 9
"""Priorities equal to this many decimals are a tie (see the module docstring)."""
_SHARE_SLACK = 1e-9
"""Shares written as decimals (0.1 + 0.2 + 0.7) may sum to 1 plus float noise."""


@dataclass(frozen=True, slots=True)
class Standing:
    """One user's (or group's) fair-share state at a snapshot: ``priority = share - usage``."""

    share: float
    usage: float
    priority: float


@dataclass(frozen=True, slots=True, kw_only=True)
class FairShare:
    """Fair-share with usage decay; a priority source (see the module docstring).

    ``shares`` is a tuple of ``(name, share)`` pairs (a tuple so the source
    stays frozen and hashable), e.g. ``(("jack", 0.25), ("jill", 0.75))``;
    names not listed split ``1 - sum(shares)`` equally among the unlisted
    names seen so far (queue, running jobs, ledger). ``by`` picks whose share
    a job draws on: its user's or its group's (account's).
    ``scale_usage_by_share`` multiplies ``U`` by ``S`` as the text's formula
    line does; off by default, following the text's worked example.
    """

    name: str = "fairshare"
    shares: tuple[tuple[str, float], ...] = ()
    by: Literal["user", "group"] = "user"
    decay: float = DEFAULT_DECAY
    window: int = DEFAULT_WINDOW
    scale_usage_by_share: bool = False
    # Derived from ``shares`` once (order runs at every event): the listed shares by
    # name, and what they leave of 1 for the unlisted names.
    _listed: dict[str, float] = field(init=False, repr=False, compare=False)
    _left: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.by not in ("user", "group"):
            raise ValueError(f"fair-share 'by' must be 'user' or 'group', got {self.by!r}")
        if not (0.0 <= self.decay <= 1.0):
            raise ValueError(f"fair-share decay must be in [0, 1], got {self.decay!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f"fair-share window must be >= 1 period, got {self.window!r}")
        seen: set[str] = set()
        for name, share in self.shares:
            if not name:
                raise ValueError("fair-share: a share needs a non-empty name")
            if name in seen:
                raise ValueError(f"fair-share: {name!r} is given a share twice")
            seen.add(name)
            if not (0.0 <= share <= 1.0):
                raise ValueError(f"fair-share: share of {name!r} must be in [0, 1], got {share!r}")
        total = math.fsum(share for _, share in self.shares)
        if total > 1.0 + _SHARE_SLACK:
            raise ValueError(
                f"fair-share: shares are fractions of the cluster, they sum to {total}"
            )
        object.__setattr__(self, "_listed", dict(self.shares))
        object.__setattr__(self, "_left", max(0.0, 1.0 - total))

    def account(self, job: Job) -> str:
        """The name whose share ``job`` draws on: its user, or its group with ``by="group"``."""
        return job.user if self.by == "user" else job.group

    def standings(self, snapshot: SnapshotView) -> dict[str, Standing]:
        """Share, decayed usage and priority of every listed name and every name seen.

        Listed names come first in ``shares`` order, then the others in the
        order they were seen (ledger, running jobs, queue), so a status display
        shows a stable table.
        """
        kind = self.by
        account = self.account
        usage = snapshot.usage
        period = usage.period
        now = snapshot.now
        # See the module docstring: the period of the instant just before now.
        today = math.ceil(now / period) - 1

        charged = usage.names(kind)
        seen: dict[str, None] = dict.fromkeys(charged)

        # Running jobs' use since the ledger last charged them, per name and period
        # (``fairshare_live.running_use``). Use before the window is cut off there, so a
        # month-long job costs a week of splits.
        mine: dict[str, list[RunningJob]] = {}
        for run in snapshot.running:
            who = account(run.job)
            seen.setdefault(who)
            mine.setdefault(who, []).append(run)
        live: dict[str, dict[int, float]] = {}
        day = day_of(today, self.window, period)
        for who, runs in mine.items():
            today_use, _, older = running_use(runs, now, day, True)
            if older is None and today_use <= 0.0:
                continue  # nothing used since its last charge (or no CPUs)
            per = {} if older is None else older
            per[today] = per.get(today, 0.0) + today_use
            live[who] = per
        for job in snapshot.queue:
            seen.setdefault(account(job))

        listed = dict(self.shares)
        unlisted = [n for n in seen if n not in listed]
        other_share = self._other_share(len(unlisted))
        return {
            who: self._standing(snapshot, who, listed.get(who, other_share), live, today)
            for who in [*listed, *unlisted]
        }

    def queue_standings(self, snapshot: SnapshotView) -> dict[str, Standing]:
        """:meth:`standings` of the names that have a job in the queue, and no others.

        The same numbers, computed the same way; what it saves is the decayed
        sum of every other name ever seen, which is most of them on a trace.
        """
        return {
            who: Standing(share=share, usage=share - priority, priority=priority)
            for who, (priority, share) in self.queue_table(snapshot).items()
        }

    def queue_table(self, snapshot: SnapshotView) -> dict[str, tuple[float, float]]:
        """``(P, S)`` of each name with a queued job: the hot path of :meth:`order`
        (and of multi-factor's, which reads it without building another table)."""
        index = snapshot.by_account
        usage = snapshot.usage
        if index is not None and isinstance(usage, UsageLedger):
            # The core's own index and ledger: the standings kept between events.
            lists, runs, log = index.views(self.by)
            return {
                e[3][2]: (e[1], e[2])
                for e in entries(self, snapshot, index, usage, lists, runs, log)
            }
        return self._queue_table(snapshot)

    def _queue_table(self, snapshot: SnapshotView) -> dict[str, tuple[float, float]]:
        """:meth:`queue_table` computed from scratch at this event: the reference the
        kept standings (``fairshare_rank``) must equal bit for bit, and the path of
        snapshots without the core's index or ledger."""
        kind = self.by
        usage = snapshot.usage
        period = usage.period
        now = snapshot.now
        today = math.ceil(now / period) - 1
        window = self.window
        decay = self.decay
        by_name = snapshot.by_account
        # Each wanted name's running jobs by id, and the names seen that the ledger
        # has not: with the core's index the ledger knows every running name (the
        # core noted it at the start), so only queued names can be new to it.
        runs: Mapping[str, Mapping[str, RunningJob]]
        if by_name is not None:
            # The index's own views (no copy); nothing below changes them.
            wanted: Collection[str] = by_name.names(kind)
            runs = by_name.running_by_name(kind)
            candidates: Collection[str] = wanted
        else:
            account = attrgetter(kind)
            wanted = {account(j) for j in snapshot.queue}
            grouped: dict[str, dict[str, RunningJob]] = {}
            for run in snapshot.running:
                grouped.setdefault(account(run.job), {})[run.job.id] = run
            runs = grouped
            candidates = wanted | grouped.keys()
        # The ledger's remembered decayed sums, looked up per name below; a name
        # missing from them is asked of the ledger (or, for any other usage view,
        # of the view), which remembers it.
        if isinstance(usage, UsageLedger):
            known: Collection[str] = usage.known(kind)
            sums = usage.decayed_table(kind, today, window, decay)
            fresh = len([w for w in candidates if w not in known])
        else:
            known = {w for w in candidates if usage.knows(kind, w)}
            sums = {}
            fresh = len(candidates) - len(known)
        listed = self._listed
        seen_listed = (
            sum(1 for n in listed if n in candidates or usage.knows(kind, n)) if listed else 0
        )
        other_share = self._other_share(usage.count(kind) + fresh - seen_listed)
        capacity = snapshot.total_cpus * period
        day = day_of(today, window, period)
        scale = self.scale_usage_by_share
        out: dict[str, tuple[float, float]] = {}
        for who in wanted:
            # Running use of ``who``: inside today's period, for a run that began today,
            # it is ``(now - begin) * cpus``, summed in ``today_use`` and added to the
            # ledger's remembered decayed sum (today's weight is D**0 = 1) with no
            # per-period list. Only runs that began before today go period by period.
            today_use = 0.0
            older: dict[int, float] | None = None
            mine = runs.get(who)
            if mine:
                today_use, _, older = running_use(mine.values(), now, day, True)
            share = listed.get(who, other_share) if listed else other_share
            used = 0.0
            if capacity > 0:
                if older is None:
                    # A name never charged sums to 0.0 from the ledger, as in _standing.
                    raw = sums.get(who)
                    if raw is None:
                        raw = (
                            usage.decayed(kind, who, today, window, decay) if who in known else 0.0
                        )
                    raw += today_use
                else:
                    older[today] = older.get(today, 0.0) + today_use
                    charged = usage.recent(kind, who, today, window)
                    for k in range(window):
                        charged[k] += older.get(today - k, 0.0)
                    raw = decayed_sum(charged, decay)
                used = raw / capacity
            if scale:
                used *= share
            out[who] = (share - used, share)
        return out

    def _other_share(self, unlisted: int) -> float:
        """The share of each of ``unlisted`` names seen but not listed."""
        if not self.shares:
            return 1.0 / unlisted if unlisted else 0.0
        return self._left / unlisted if unlisted else 0.0

    def _standing(
        self,
        snapshot: SnapshotView,
        who: str,
        share: float,
        live: dict[str, dict[int, float]],
        today: int,
    ) -> Standing:
        """One name's standing: ``U`` summed period by period, newest first."""
        usage = snapshot.usage
        kind = self.by
        capacity = snapshot.total_cpus * usage.period
        in_ledger = usage.knows(kind, who)
        use = live.get(who)
        used = 0.0
        if capacity > 0 and (in_ledger or use is not None):
            window = self.window
            if use is None:
                raw = usage.decayed(kind, who, today, window, self.decay)
            else:
                charged = usage.recent(kind, who, today, window) if in_ledger else [0.0] * window
                for k in range(window):
                    charged[k] += use.get(today - k, 0.0)
                raw = decayed_sum(charged, self.decay)
            # One division at the end keeps whole-period sums exact (24/96 is 0.25).
            used = raw / capacity
        if self.scale_usage_by_share:
            used *= share
        return Standing(share=share, usage=used, priority=share - used)

    def priorities(self, snapshot: SnapshotView) -> dict[str, float]:
        """``P = S - U`` by user (or group), for every listed name and every name seen."""
        return {who: s.priority for who, s in self.standings(snapshot).items()}

    def queue_priorities(self, snapshot: SnapshotView) -> dict[str, float]:
        """``P = S - U`` of the names with a job in the queue (see :meth:`queue_standings`)."""
        return {who: p for who, (p, _) in self.queue_table(snapshot).items()}

    def order(self, snapshot: SnapshotView) -> Sequence[Job]:
        """The queue by decreasing ``P``; ties: higher share, earlier submit, arrival order."""
        queue = snapshot.queue
        if len(queue) < 2:
            return queue
        index = snapshot.by_account
        if index is not None and index.submit_sorted(self.by):
            usage = snapshot.usage
            if isinstance(usage, UsageLedger):
                # The core's index and ledger: ranks from the standings kept
                # between events (``fairshare_rank``).
                return order_by_rank(self, snapshot, index, usage)
            return self._order_by_name(snapshot, index)
        # One key per name, not per job: the per-job part is submit and position.
        rank = {
            who: (-round(p, _TIE_DIGITS), -share)
            for who, (p, share) in self.queue_table(snapshot).items()
        }
        account = attrgetter(self.by)
        keys = [(rank[account(job)], job.submit, i) for i, job in enumerate(queue)]
        keys.sort()
        return [queue[k[2]] for k in keys]

    def _order_by_name(self, snapshot: SnapshotView, index: QueueIndex) -> list[Job]:
        """:meth:`order` from the core's per-name queue: the same order, built by
        sorting names, not jobs.

        The per-job sort key is ``(rank of the name, submit, position)``, and each
        name's list is already in submit-then-position order (``submit_sorted``),
        so the order is the names' lists one after the other by rank; names of
        equal rank have their lists merged by ``(submit, position)`` (a sort of
        their concatenation: the lists are short, and a sort runs in C).
        """
        # Every name's list, read once per event (no call per name).
        lists = index.lists(self.by)
        if len(lists) == 1:
            # One name waiting: the order is its list, whatever its priority.
            (only,) = lists.values()
            return list(only)
        # (rank, name): the name only makes the sort total; tied names' lists are
        # merged by (submit, arrival), which no two jobs share, so their order
        # among themselves does not show.
        keys = [
            (-round(p, _TIE_DIGITS), -share, who)
            for who, (p, share) in self.queue_table(snapshot).items()
        ]
        keys.sort()
        return merge_ties(keys, lists, index)
