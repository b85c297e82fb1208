"""Flexible backfilling: EASY backfilling in the order of a priority recomputed at every event.

Source: the EG-EDF paper (Klusacek, Rudova, Baraglia, Pasquali and Capannini),
section 3.1 and the set-up of section 4. At every scheduling event (job
submission and completion) the priority ``P(J) = Aging + Deadline +
WaitMinimization`` of every queued job is recomputed from zero
(``scheduler.priority.flexible_score``, defaults agefactor 0.01, k 2.0, Max 20.0,
Min 0.1, boostvalue 2.0), the queue is sorted by it, "and the backfilling
procedure starts": this is :class:`~scheduler.policies.easy.EasyBackfill`
with that priority source, by composition (one reservation, for the first
job that does not fit; later jobs backfill if they do not delay it).

Placement: "each job is scheduled on the first most powerful available
machine", which is the ``fastest`` rule (``scheduler.planning.placement``): the
fastest machine that fits. Where no single machine of the fastest speed
level fits, ``fastest`` spans machines of that level rather than falling back
to one slower machine; the paper never spans ("parallel jobs are always
executed on only one machine", sec. 4), which is the ``single`` rule, a
field away. On a trace's one-partition cluster the two are the same.

The reservation across events. Section 4: "job priorities are updated at each
job submission or ending event and the reservation for the first queued job
is maintained through events". EASY keeps a reservation through events only
while the same job stays at the head (``scheduler.planning.easy_shadow.shadow_for``
reuses the previous promise, read from ``snapshot.reservations``, when the
new computation would start the job later and the promised CPUs are still
free then). Under a priority that is re-sorted at every event the head can
change, and plain EASY would then drop the old head's reservation and give
a new one to the job now first. We read "maintained" as the stronger
promise: with ``keep_reservation=True`` (default) the job holding the
reservation stays first in the order until it starts, so a job that
overtakes it in priority may start now or backfill, but cannot take its
reservation away. ``keep_reservation=False`` gives the weaker reading (the
reservation goes to whichever job is first at each event).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from model.job import Job
from scheduler.core.snapshot import Decisions, SnapshotView
from scheduler.planning.placement import Placement, PlacementRule
from scheduler.planning.prediction import PlanRule
from scheduler.policies.easy import EasyBackfill
from scheduler.priority.flexible_score import (
    AGE_FACTOR,
    BOOST_VALUE,
    MAX_SCORE,
    MIN_SCORE,
    FlexiblePriority,
    K,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlexibleBackfill:
    """EASY backfilling over :class:`FlexiblePriority` (see the module docstring)."""

    #: The score's constants, the paper's by default (``scheduler.priority.flexible_score``).
    age_factor: float = AGE_FACTOR
    k: float = K
    max_score: float = MAX_SCORE
    min_score: float = MIN_SCORE
    boost_value: float = BOOST_VALUE
    placement: Placement = field(default_factory=lambda: Placement(rule=PlacementRule.FASTEST))
    keep_reservation: bool = True
    name: str = "flexible"
    priority: FlexiblePriority = field(init=False, repr=False, compare=False)
    _easy: EasyBackfill = field(init=False, repr=False, compare=False)

    @property
    def plan_rule(self) -> PlanRule:
        """What its predicted starts are (``scheduler.planning.prediction``)."""
        return PlanRule.BACKFILL

    def __post_init__(self) -> None:
        # The score checks its constants (a bad one is a one-line ValueError).
        score = FlexiblePriority(
            age_factor=self.age_factor,
            k=self.k,
            max_score=self.max_score,
            min_score=self.min_score,
            boost_value=self.boost_value,
        )
        object.__setattr__(self, "priority", score)
        # Built once: decide() runs at every event of a trace replay.
        order = (
            _ReservedFirst(inner=self.priority, name=self.priority.name)
            if self.keep_reservation
            else self.priority
        )
        easy = EasyBackfill(priority=order, placement=self.placement, name=self.name)
        object.__setattr__(self, "_easy", easy)

    def decide(self, snapshot: SnapshotView) -> Decisions:
        return self._easy.decide(snapshot)


@dataclass(frozen=True, slots=True, kw_only=True)
class _ReservedFirst:
    """``inner``'s order with the job holding last event's reservation moved to the front."""

    inner: FlexiblePriority
    name: str

    def order(self, snapshot: SnapshotView) -> Sequence[Job]:
        ranked = self.inner.order(snapshot)
        reserved = snapshot.reservations
        if not reserved or len(ranked) < 2:
            return ranked
        for i, job in enumerate(ranked):
            # EASY gives at most one reservation; should there be several, the
            # highest-priority holder is the one kept first.
            if job.id in reserved:
                return ranked if i == 0 else [job, *ranked[:i], *ranked[i + 1 :]]
        return ranked
