"""Conservative backfilling: a reservation for every waiting job.

Mu'alem and Feitelson, "Utilization, predictability, workloads, and user
runtime estimates in scheduling the IBM SP2 with backfilling", IEEE TPDS
12(6):529-543, 2001: small jobs "move ahead only if they do not delay any job
in the queue". Every job holds a reservation at the earliest time the
availability profile has its CPUs free for its whole estimated run; when
jobs end before their estimates the schedule is compressed, each job moving
earlier if it can, never later. The DPSA paper (Grudenic and Bogunovic,
sec. II) names it beside EASY as the most widely used variant: "conservative
backfilling that create reservation for all the jobs in the system". EASY
(``scheduler.policies.easy``) protects only the top job; here a backfilled
job may delay nobody.

Reservations are promises kept across events: the core hands back the last
decision's reservations in ``snapshot.reservations``. At each decision

1. the profile (``scheduler.planning.profile``) is built from the running jobs'
   planned ends (their estimated ends; a job that outlived its estimate is
   planned by ``scheduler.planning.overdue``, the rule every planner shares);
2. every previous reservation of a still-queued job is booked at its old
   start (now, if that has passed) and parts, for its estimate on those
   parts. If they do not all fit (a running job outlived its planned end and
   holds CPUs they were promised), they are booked one by one in priority
   order and a promise that no longer fits is re-placed at its earliest fit
   in step 3: the only way a reservation moves later;
3. in priority order, each job that had one is compressed: its booking is
   released, its earliest fit before the old start is searched and booked,
   else the old one is kept. Its old slot is still free, so a search that
   finds nothing earlier keeps the promise even where the placement rule,
   asked afresh, would pick other machines for a later slot;
4. in priority order, every job without a reservation gets its earliest fit
   around what is booked.

A job whose reservation is at ``now`` starts if its CPUs are really free (a
job planned to end exactly now may not have ended yet); every other job is
returned as a reservation. With exact estimates no reservation ever moves later and every
job starts at or before its first reservation (property tests). A job the
placement rule can never place (``single`` and a job wider than every
machine) gets no reservation and holds nothing back.

On heterogeneous machines a job's estimate is its wall time scaled to the pace
of the parts the placement rule picks at its reserved start. Durations assume
MPL 1 (the job on ``procs`` CPUs), as the core's estimate of a started job does.

Cost: re-planning every queued job at every event is ``O(queue x
breakpoints)`` in the worst case. The profile books all promises in one
sweep and rules out, with one C-level ``max`` or one scan that releases
nothing, the many jobs of a busy queue that cannot move: on the Parallel
Workloads Archive traces a decision costs about ten microseconds per queued job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from model.allocation import pace
from model.job import Job
from scheduler.core.run_history import Predictor
from scheduler.core.snapshot import Decisions, Reservation, SnapshotView, Start
from scheduler.planning.overdue import planned_releases
from scheduler.planning.placement import Placement
from scheduler.planning.prediction import PlanRule
from scheduler.planning.profile import Profile
from scheduler.planning.profile_batch import Booking
from scheduler.planning.scratch import take
from scheduler.priority import PrioritySource
from scheduler.priority.fifo import Fifo


@dataclass(frozen=True, slots=True, kw_only=True)
class ConservativeBackfill:
    priority: PrioritySource = field(default_factory=Fifo)
    placement: Placement = field(default_factory=Placement)
    #: The run time it plans with: the user's estimate, or EASY++'s prediction
    #: (``last-two``; the core applies it, ``scheduler.core.run_history``).
    predictor: Predictor = Predictor.ESTIMATE
    name: str = "conservative"

    @property
    def plan_rule(self) -> PlanRule:
        """What its predicted starts are (``scheduler.planning.prediction``)."""
        return PlanRule.RESERVATIONS

    def decide(self, snapshot: SnapshotView) -> Decisions:
        order = self.priority.order(snapshot)
        if not order:
            return Decisions()
        now = snapshot.now
        machines = snapshot.machines
        speeds = snapshot.speeds
        placement = self.placement
        previous = snapshot.reservations
        profile = Profile(
            now=now,
            machines=machines,
            free=snapshot.free,
            ends=planned_releases(now, snapshot.running),
        )

        # job id -> (start, end, parts) of its booking in ``profile``.
        booked: dict[str, Booking] = {}

        # 2. Book every promise first, so compressing one job can never take
        # CPUs another job was promised. A promise whose start has passed (no
        # event fell on it) is kept from now on.
        promised = [j for j in order if j.id in previous] if previous else []
        for job in promised:
            old = previous[job.id]
            start = old.start if old.start > now else now
            booked[job.id] = (start, start + job.estimate_on(pace(old.parts, speeds)), old.parts)
        if not profile.reserve_all(list(booked.values())):
            # Some promises collide with what is running now. One by one in priority
            # order, so the higher-priority promises are the ones kept.
            booked.clear()
            for job in promised:
                old = previous[job.id]
                start = old.start if old.start > now else now
                end = start + job.estimate_on(pace(old.parts, speeds))
                if profile.fits(start, end, old.parts):
                    profile.reserve(start, end, old.parts)
                    booked[job.id] = (start, end, old.parts)

        def earliest(job: Job) -> Booking | None:
            """``job`` at its earliest fit, booked there."""
            return profile.book_earliest(
                job,
                job.procs,
                placement=placement,
                machines=machines,
                speeds=speeds,
                not_before=now,
            )

        # 3. Compress, in priority order.
        for job in promised:
            held = booked.get(job.id)
            if held is not None:
                # Only strictly earlier: its old slot is still free, so a search that
                # finds nothing earlier keeps the promise (even where the placement
                # rule, asked afresh, would have picked other machines later).
                moved = profile.move_earlier(
                    job,
                    held,
                    placement=placement,
                    machines=machines,
                    speeds=speeds,
                    not_before=now,
                )
                if moved is not None:
                    booked[job.id] = moved
                continue
            # The promise no longer fits: a running job outlived its planned end and
            # still holds the CPUs (or a machine left). Re-place the job at its
            # earliest fit; this is the only way a reservation moves later.
            new = earliest(job)
            if new is not None:
                booked[job.id] = new

        # 4. Newcomers fill what is left, in priority order.
        for job in order:
            if job.id in previous:
                continue
            new = earliest(job)
            if new is None:
                continue  # never fits on these machines: no reservation, blocks nothing
            booked[job.id] = new

        free = dict(snapshot.free)
        starts: list[Start] = []
        reservations: list[Reservation] = []
        for job in order:
            held = booked.get(job.id)
            if held is None:
                continue
            start, _, parts = held
            if start == now and all(free[p.machine] >= p.cpus for p in parts):
                take(free, parts)
                starts.append(Start(job, parts))
                continue
            # A reservation at ``now`` whose CPUs are still held (by a job planned to
            # end exactly now) waits for that job's end, like any other reservation.
            kept = previous.get(job.id)
            if kept is not None and kept.start == start and kept.parts == parts and kept.job is job:
                reservations.append(kept)  # unchanged: no new object per job per event
            else:
                reservations.append(Reservation(job, start, parts))
        return Decisions(starts=starts, reservations=reservations)
