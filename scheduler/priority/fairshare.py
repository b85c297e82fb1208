"""Fair-share priority with usage decay.

Source: "Scheduling Algorithms" (``../shared/papers/scheduling-algorithms-fifo-
backfill-fairshare-multifactor.md``), the fair-share section and its worked
example with users jack and jill on a four-node cluster.

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
* Usage is the ledger's charged CPU-seconds (``scheduler.usage``: charged when
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
jobs and hundreds of users, so ``U`` is computed once per name per call (at
most ``window`` ledger look-ups each, none for a name the ledger never charged
and that has nothing running), and the sort is one pass with a cached key.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from model.job import Job
from scheduler.snapshot import Snapshot
from scheduler.usage import split_periods

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

    def account(self, job: Job) -> str:
        """The name whose share ``job`` draws on: its user, or its group with ``by="group"``."""
        return job.user if self.by == "user" else job.group

    def standings(self, snapshot: Snapshot) -> dict[str, Standing]:
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
        oldest = today - self.window + 1

        charged = usage.names(kind)
        in_ledger = set(charged)
        seen: dict[str, None] = dict.fromkeys(charged)

        # Running jobs' use since the ledger last charged them, per name and period.
        # Use before the window is cut off here, so a month-long job costs a week of splits.
        live: dict[str, dict[int, float]] = {}
        window_start = oldest * period
        for run in snapshot.running:
            who = account(run.job)
            seen.setdefault(who)
            begin = max(run.start, run.charged_from, window_start)
            if now <= begin or run.cpus <= 0:
                continue
            per = live.setdefault(who, {})
            for index, seconds in split_periods(begin, now, period):
                per[index] = per.get(index, 0.0) + seconds * run.cpus
        for job in snapshot.queue:
            seen.setdefault(account(job))

        listed = dict(self.shares)
        unlisted = [n for n in seen if n not in listed]
        left = max(0.0, 1.0 - math.fsum(listed.values()))
        other_share = left / len(unlisted) if unlisted else 0.0

        capacity = snapshot.total_cpus * period
        weights = [self.decay**k for k in range(self.window)]
        out: dict[str, Standing] = {}
        for who in [*listed, *unlisted]:
            share = listed.get(who, other_share)
            running_use = live.get(who)
            used = 0.0
            if capacity > 0 and (who in in_ledger or running_use is not None):
                raw = 0.0
                for k, weight in enumerate(weights):
                    index = today - k
                    cpu_seconds = usage.cpu_seconds(kind, who, index) if who in in_ledger else 0.0
                    if running_use is not None:
                        cpu_seconds += running_use.get(index, 0.0)
                    raw += weight * cpu_seconds
                # One division at the end keeps whole-period sums exact (24/96 is 0.25).
                used = raw / capacity
            if self.scale_usage_by_share:
                used *= share
            out[who] = Standing(share=share, usage=used, priority=share - used)
        return out

    def priorities(self, snapshot: Snapshot) -> dict[str, float]:
        """``P = S - U`` by user (or group), for every listed name and every name seen."""
        return {who: s.priority for who, s in self.standings(snapshot).items()}

    def order(self, snapshot: Snapshot) -> Sequence[Job]:
        """The queue by decreasing ``P``; ties: higher share, earlier submit, arrival order."""
        queue = snapshot.queue
        if len(queue) < 2:
            return queue
        table = self.standings(snapshot)
        # One key per name, not per job: the per-job part is submit and position.
        rank = {who: (-round(s.priority, _TIE_DIGITS), -s.share) for who, s in table.items()}
        account = self.account
        ranked = sorted(
            range(len(queue)),
            key=lambda i: (*rank[account(queue[i])], queue[i].submit, i),
        )
        return [queue[i] for i in ranked]
