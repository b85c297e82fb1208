"""Multi-factor priority: age, fair-share, size and QoS, weighted and summed.

Source: "Scheduling Algorithms", section "Multi-factor prioritization", in the
shape of Slurm's priority/multifactor plugin. Of the text's factors, those a
priority can express are here: job age ("increasing its priority over
time"), the fair-share of the section before it, job size ("on the largest
supercomputing clusters in the world, there's usually an effort to favor very
large jobs"), and QoS with emergency runs ("give emergency jobs the highest
possible priority"). Licences, GPUs and affinities are placement constraints,
not priorities.

Theory of operation. Each waiting job gets

    priority = w_age * age + w_fairshare * fairshare + w_size * size + w_qos * qos

with every factor in ``[0, 1]``:

* ``age = min((now - submit) / max_age, 1)``, ``max_age`` 7 days by default
  (Slurm's ``PriorityMaxAge``); a job is never younger than 0;
* ``fairshare`` = the :class:`~scheduler.priority.fairshare.FairShare`
  priority ``P = S - U`` of the job's user (or group) clipped to ``[0, 1]``:
  a user over their share counts 0 (``P <= S <= 1`` always, so the clip only
  acts below);
* ``size = procs / total_cpus`` (big jobs first, as big machines want), or
  with ``favor_small=True``, ``1 - (procs - 1) / total_cpus`` (a one-process
  job gets 1); 0 when the cluster has no CPUs;
* ``qos = job.qos / max_qos`` clipped to ``[0, 1]``, where ``max_qos`` is the
  field if set, else the largest QoS among the queue's non-emergency jobs (at
  least 1). Emergency jobs are left out of that maximum so that one tornado
  forecast in the queue does not flatten everyone else's QoS factor.

The default weights (age 1000, fair-share 10000, size 1000, QoS 10000) are
Slurm-like values we chose, not the text's: the text gives no numbers. They
make fair-share and QoS dominate and let age and size break near-ties, so
the priority is in ``[0, 22000]``.

Emergency jobs: with ``emergency_qos`` set, a job whose QoS is at least that
sorts before every other job, whatever its priority (the text's "highest
possible priority"); among themselves they sort like the rest.

Ties: equal priority (compared rounded to 1e-9) goes to the earlier submit
time, then to arrival order.

Cost: with the core's queue index and ledger, the order is kept between events
(``multifactor_rank``): while every queued job's age is inside ``[0, 1]``
(every job of the traces), a job's priority is ``w_age / max_age * now`` plus
a clock-free part, so the queue is kept sorted by that part, and an event only
inserts, removes or moves the jobs it touched (a name whose fair-share factor
moved moves its jobs); neighbours too close to be ordered without the clock
are re-sorted by the key below at every event. The order is the reference's
job for job. Otherwise (a job past ``max_age`` or not yet submitted, an
emergency QoS, ``favor_small``, no index) every job's key is computed at the
event, a handful of arithmetic operations per job, the fair-share standings
once per call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import NamedTuple

from model.job import Job
from scheduler.core.snapshot import SnapshotView
from scheduler.core.usage import UsageLedger
from scheduler.priority.fairshare import FairShare
from scheduler.priority.multifactor_rank import clock_free_order

DEFAULT_MAX_AGE = 7 * 86400.0
"""Seconds after which age stops adding priority (Slurm's ``PriorityMaxAge`` default)."""

_TIE_SCALE = 1e9
"""Priorities equal in units of 1e-9 are a tie (float noise must not reorder them).
A key is ``round(priority * _TIE_SCALE)``, an int: the same bucketing as
``round(priority, 9)`` but three times cheaper, and it is taken per job per event."""


_qos = attrgetter("qos")


class Factors(NamedTuple):
    """One job's factors (each in ``[0, 1]``), its weighted ``priority`` and emergency flag.

    A named tuple rather than a frozen dataclass: one is built per queued job at
    every event, and a tuple is several times cheaper to build.
    """

    age: float
    fairshare: float
    size: float
    qos: float
    priority: float
    emergency: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class MultiFactor:
    """Weighted sum of age, fair-share, size and QoS factors (see the module docstring)."""

    name: str = "multifactor"
    fairshare: FairShare = field(default_factory=FairShare)
    weight_age: float = 1000.0
    weight_fairshare: float = 10000.0
    weight_size: float = 1000.0
    weight_qos: float = 10000.0
    max_age: float = DEFAULT_MAX_AGE
    favor_small: bool = False
    max_qos: int | None = None
    emergency_qos: int | None = None

    def __post_init__(self) -> None:
        for label, weight in (
            ("weight_age", self.weight_age),
            ("weight_fairshare", self.weight_fairshare),
            ("weight_size", self.weight_size),
            ("weight_qos", self.weight_qos),
        ):
            if not (weight >= 0 and math.isfinite(weight)):
                raise ValueError(
                    f"multi-factor: {label} must be a finite value >= 0, got {weight!r}"
                )
        if not (self.max_age > 0 and math.isfinite(self.max_age)):
            raise ValueError(
                f"multi-factor: max_age must be a finite time > 0, got {self.max_age!r}"
            )
        if self.max_qos is not None and self.max_qos < 1:
            raise ValueError(f"multi-factor: max_qos must be >= 1, got {self.max_qos!r}")

    def factors(self, snapshot: SnapshotView) -> dict[str, Factors]:
        """Every queued job's factors and priority, by job id."""
        return {job.id: f for job, f in zip(snapshot.queue, self._rows(snapshot), strict=True)}

    def _rows(self, snapshot: SnapshotView) -> list[Factors]:
        """The factors of the queue's jobs, in queue order."""
        rows: list[Factors] = []
        self._each(snapshot, rows, None)
        return rows

    def _each(
        self,
        snapshot: SnapshotView,
        rows: list[Factors] | None,
        keys: list[tuple[bool, int, float, int]] | None,
        plain: list[tuple[int, float, int]] | None = None,
    ) -> None:
        """Every queued job's factors into ``rows``, or its sort key into ``keys`` (or
        into ``plain``, without the emergency flag, when no job can be one).

        The hot path of :meth:`order` (a few thousand jobs at every event): plain
        arithmetic and one tuple per job, no per-job function calls. One loop
        fills either list so that the order and the factors shown come from the
        same arithmetic.
        """
        queue = snapshot.queue
        if not queue:
            return
        fair = self.fairshare.queue_table(snapshot)
        account = attrgetter(self.fairshare.by)
        now = snapshot.now
        total = snapshot.total_cpus
        max_age = self.max_age
        emergency_qos = self.emergency_qos
        max_qos = self.max_qos
        highest = max(map(_qos, queue))
        if max_qos is None:
            if emergency_qos is None:
                max_qos = highest if highest > 1 else 1
            else:
                max_qos = max(max((j.qos for j in queue if j.qos < emergency_qos), default=1), 1)
        w_age, w_fs = self.weight_age, self.weight_fairshare
        w_size, w_qos = self.weight_size, self.weight_qos
        favor_small = self.favor_small
        if plain is not None and emergency_qos is None and not favor_small and total > 0:
            # The fair-share factor clipped and weighted once per name, not per job.
            weighted = {
                who: w_fs * (1.0 if p > 1.0 else (0.0 if p < 0.0 else p))
                for who, (p, _) in fair.items()
            }
            # No job is an emergency here: ``plain`` keys leave that constant out.
            # With no QoS above 0 in the queue (every job of a trace) every QoS term
            # is ``w_qos * 0.0 == 0.0``, and adding 0.0 changes no sum: it is left out.
            self._plain_keys(
                queue, plain, account, weighted, now, total, max_qos, has_qos=highest > 0
            )
            return
        # Fair-share is per user (or group): clip once per name, not once per job.
        fs_of = {who: min(max(p, 0.0), 1.0) for who, (p, _) in fair.items()}
        # Conditional expressions, not min/max calls: the clips below are
        # min(max(x, 0.0), 1.0) written out, which is most of this loop's cost.
        for i, job in enumerate(queue):
            age = (now - job.submit) / max_age
            age = 1.0 if age > 1.0 else (0.0 if age < 0.0 else age)
            fs = fs_of[account(job)]
            if total <= 0:
                size = 0.0
            elif favor_small:
                size = 1.0 - (job.procs - 1) / total
                size = 1.0 if size > 1.0 else (0.0 if size < 0.0 else size)
            else:
                size = job.procs / total
                size = 1.0 if size > 1.0 else size
            qos = job.qos / max_qos
            qos = 1.0 if qos > 1.0 else (0.0 if qos < 0.0 else qos)
            priority = w_age * age + w_fs * fs + w_size * size + w_qos * qos
            emergency = emergency_qos is not None and job.qos >= emergency_qos
            if keys is not None:
                keys.append((not emergency, -round(priority * _TIE_SCALE), job.submit, i))
            else:
                assert rows is not None
                rows.append(Factors(age, fs, size, qos, priority, emergency))

    def _plain_keys(  # noqa: PLR0917 - the hot loop's inputs, passed once per event
        self,
        queue: Sequence[Job],
        keys: list[tuple[int, float, int]],
        account: Callable[[Job], str],
        weighted_fs: dict[str, float],
        now: float,
        total: int,
        max_qos: int,
        *,
        has_qos: bool = True,
    ) -> None:
        """:meth:`_each`'s sort keys in the common case (no emergency QoS, big jobs
        favoured, CPUs in the cluster): the same arithmetic in the same order, with
        the branches that cannot apply taken out of the per-job loop."""
        max_age = self.max_age
        w_age, w_size, w_qos = self.weight_age, self.weight_size, self.weight_qos
        append = keys.append
        scale = _TIE_SCALE
        round_ = round
        if not has_qos:
            for i, job in enumerate(queue):
                age = (now - job.submit) / max_age
                age = 1.0 if age > 1.0 else (0.0 if age < 0.0 else age)
                size = job.procs / total
                priority = (
                    w_age * age + weighted_fs[account(job)] + w_size * (1.0 if size > 1.0 else size)
                )
                append((-round_(priority * scale), job.submit, i))
            return
        for i, job in enumerate(queue):
            age = (now - job.submit) / max_age
            age = 1.0 if age > 1.0 else (0.0 if age < 0.0 else age)
            size = job.procs / total
            qos = job.qos / max_qos
            qos = 1.0 if qos > 1.0 else (0.0 if qos < 0.0 else qos)
            priority = (
                w_age * age
                + weighted_fs[account(job)]
                + w_size * (1.0 if size > 1.0 else size)
                + w_qos * qos
            )
            append((-round_(priority * scale), job.submit, i))

    def priorities(self, snapshot: SnapshotView) -> dict[str, float]:
        """Every queued job's weighted priority, by job id."""
        return {job_id: f.priority for job_id, f in self.factors(snapshot).items()}

    def order(self, snapshot: SnapshotView) -> Sequence[Job]:
        """Emergency jobs first, then by decreasing priority; ties: submit, arrival order."""
        queue = snapshot.queue
        if len(queue) < 2:
            return queue
        index = snapshot.by_account
        usage = snapshot.usage
        if index is not None and isinstance(usage, UsageLedger):
            # The core's index and ledger: the order kept between events
            # (``multifactor_rank``), unless this event is one it does not handle.
            kept = clock_free_order(self, snapshot, index, usage)
            if kept is not None:
                return kept
        keys: list[tuple[bool, int, float, int]] = []
        plain: list[tuple[int, float, int]] = []
        self._each(snapshot, None, keys, plain)
        if plain:
            plain.sort()
            return [queue[k[2]] for k in plain]
        keys.sort()
        return [queue[k[3]] for k in keys]
