"""Each queued job's priority, factor by factor: what ``accordion priority`` shows.

Slurm's ``sprio`` shows a pending job's priority as the weighted sum it is
made of; this is the same for our priority sources, read-only: it asks each
source the numbers its order is made of, through the methods it already has
(the reference computations its kept orders are checked against), and
changes no state a later decision reads. The factors are the weighted
shares of the priority, so they add up to it:

* multi-factor: ``age``, ``fairshare``, ``size`` and ``qos``, each the factor
  times its weight (``scheduler.priority.multifactor``); an emergency job
  (QoS at the emergency level) ranks first whatever its sum;
* fair-share: ``fairshare``, the user's (or group's) ``P = S - U``
  (``scheduler.priority.fairshare``);
* Flexible backfilling's score: ``age`` (aging), ``deadline`` and ``wait``
  (wait minimisation), sec. 3.1 of the EG-EDF paper
  (``scheduler.priority.flexible_score``);
* FIFO, and a policy without a priority source (EG-EDF orders by its plan):
  an order, no priority.

The rank is the job's place in the source's order (1 first), which is the
order the policy reads; the priority explains it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from model.job import Job
from scheduler.core.snapshot import SnapshotView
from scheduler.priority import PrioritySource
from scheduler.priority.fairshare import FairShare
from scheduler.priority.flexible_score import FlexiblePriority
from scheduler.priority.multifactor import MultiFactor


@dataclass(frozen=True, slots=True)
class JobPriority:
    """One queued job's ``rank`` (1 first), ``priority`` (None for an order only) and the
    weighted ``factors`` that sum to it, as ``(name, value)`` pairs."""

    job: Job
    rank: int
    priority: float | None
    factors: tuple[tuple[str, float], ...] = ()


def explain(source: PrioritySource | None, snapshot: SnapshotView) -> list[JobPriority]:
    """Every queued job of ``snapshot`` by ``source``'s order, with its factors
    (module docstring); ``source`` None: the queue in arrival order."""
    order: Sequence[Job] = snapshot.queue if source is None else source.order(snapshot)
    if isinstance(source, MultiFactor):
        table = source.factors(snapshot)
        rows = []
        for rank, job in enumerate(order, 1):
            f = table[job.id]
            factors = (
                ("age", source.weight_age * f.age),
                ("fairshare", source.weight_fairshare * f.fairshare),
                ("size", source.weight_size * f.size),
                ("qos", source.weight_qos * f.qos),
            )
            rows.append(JobPriority(job, rank, f.priority, factors))
        return rows
    if isinstance(source, FairShare):
        standing = source.queue_priorities(snapshot)
        return [
            JobPriority(job, rank, p, (("fairshare", p),))
            for rank, job in enumerate(order, 1)
            for p in (standing[source.account(job)],)
        ]
    if isinstance(source, FlexiblePriority):
        scores = source.scores(snapshot)
        return [
            JobPriority(
                job,
                rank,
                s.priority,
                (("age", s.aging), ("deadline", s.deadline), ("wait", s.wait)),
            )
            for rank, job in enumerate(order, 1)
            for s in (scores[job.id],)
        ]
    return [JobPriority(job, rank, None) for rank, job in enumerate(order, 1)]
