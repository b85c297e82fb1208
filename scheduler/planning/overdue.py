"""When a running job that outlived its estimate is planned to give its CPUs back.

Every policy that plans with estimates (EASY and Flexible backfilling's
shadow time, DPSA's reservation, conservative backfilling's profile, EG-EDF's
and Tabu search's plans) asks the same question of each running job: when
will its CPUs be free again? While the job is within its estimate the answer
is its expected end, ``RunningJob.est_end`` (the user's wall time through the
execution model). This module answers it for a job still running past that
instant, the *overdue* job, and it is the only place that does.

The rule (the doubling rule). A job overdue by ``d = now - est_end`` seconds
is planned to end at ``est_end + 2**k`` for the smallest ``k >= 0`` that puts
that instant after ``now``: its allowance past the estimate starts at one
second and doubles each time the job outlives it (1 s, 2 s, 4 s, ...). So
an overdue job is planned to end within as long again as it has already
overrun, and that instant stays put between two doublings.

Why not "now", the rule before it. Planning an overdue job's CPUs free at
``now`` put EASY's reservation (and Flexible's, which is EASY's) at ``now``
whenever the free CPUs and the overdue job's together covered the job at
the head, at every event, though the overdue job's CPUs were not free: the
reserved CPUs sat idle, and no backfill candidate could end before a shadow
time of ``now``, so only the CPUs beyond the reservation's were used. On
SDSC DataStar (the first 15,000 jobs) one 128-CPU job that asked for 1,200 s
and ran 76 days pinned a 1,280-CPU reservation at ``now`` for 22
days, with 1,152 of the 1,664 CPUs idle and 800 jobs queued
(``docs/results/SDSC-DS-2004-2.1-cln/``). A promise at ``now`` that the
CPUs cannot keep is made again, broken, at every event; the EG-EDF paper's
Flexible backfilling (sec. 4) has "the reservation for the first queued job
... maintained through events", which needs a start time the plan believes.
The paper itself is silent on jobs that outlive their estimates: its
experiments had exact ones (sec. 5: "precise job execution time was
known"), and it expects "local change or limited rescheduling" to be needed
otherwise. With exact estimates no job is ever overdue, so this rule changes
nothing there.

Why a finite instant, and why doubling. A job that never gives its CPUs back
in the plan would leave every planner without a place for a job that needs
them (conservative's profile and EG-EDF's timelines assume every CPU is free
after the last booking). The allowance grows with the evidence, in the
spirit of Tsafrir, Etsion and Feitelson, "Backfilling using system-generated
predictions rather than user runtime estimates" (IEEE TPDS, 2007), who
replace a prediction a job has outlived by a later one rather than let it
lapse; the doubling is our choice. Most overruns in the Parallel Workloads
Archive traces are short (the median is 9 to 47 s per trace), and those are
planned to end seconds away, close to the old rule;
a job 76 days over is planned to hold its CPUs for up to as long again, so a
reservation that needs them lies far enough ahead that the jobs it waits for
can backfill, and a reservation that does not need them is planned on the
other CPUs. Because the instant only moves at a doubling, a reservation that
waits for an overdue job stays put between doublings, as a promise should.

A job exactly at its expected end (``est_end == now``) is not overdue: it is
planned to end now, as it was.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence

from model.machine import Part
from scheduler.core.snapshot import RunningJob


def planned_end(est_end: float, now: float) -> float:
    """When a running job expected to end at ``est_end`` is planned to end, seen at ``now``."""
    if est_end >= now:
        return est_end
    # The smallest power of two above the overrun: frexp's exponent (d = m * 2**e with
    # 0.5 <= m < 1, so 2**e > d), at least 2**0. The loop only guards float rounding.
    exp = max(math.frexp(now - est_end)[1], 0)
    end = est_end + math.ldexp(1.0, exp)
    while end <= now:
        exp += 1
        end = est_end + math.ldexp(1.0, exp)
    return end


def in_planned_order(now: float, running: Sequence[RunningJob]) -> Sequence[RunningJob]:
    """``running`` (sorted by ``est_end``, as the snapshot's is) sorted by planned end.

    The same sequence when no job is overdue, the usual case: overdue jobs
    have the earliest ``est_end``, so a look at the first one tells. Ties keep
    their order (start order).
    """
    if not running or running[0].est_end >= now:
        return running
    # The overdue jobs are a prefix (the earliest ``est_end``), usually a few of a
    # long list: plan only them, then slot each into the rest by bisection, before
    # any job of the same end (the order a stable sort of the whole would give).
    k = 1
    n = len(running)
    while k < n and running[k].est_end < now:
        k += 1
    rest = running[k:]
    out = list(rest)
    planned = sorted((planned_end(r.est_end, now), i) for i, r in enumerate(running[:k]))
    for t, i in reversed(planned):
        out.insert(bisect_left(rest, t, key=_est_end), running[i])
    return out


def planned_releases(
    now: float, running: Sequence[RunningJob]
) -> list[tuple[float, tuple[Part, ...]]]:
    """Every running job's ``(planned end, parts)``, in time order (ties in start order)."""
    return [(planned_end(r.est_end, now), r.parts) for r in in_planned_order(now, running)]


def _est_end(run: RunningJob) -> float:
    return run.est_end
