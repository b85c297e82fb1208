"""A twin run's state at an instant: cut a replay there, and go on from it.

Theory of operation. What the rest of a replay depends on, once every event
of an instant has been handled and the policy has decided, is:

* the machines, and the queue in arrival order;
* each running job: its parts, its start, the core's estimate of it (work
  done by its last change, when that was, its expected end, which a
  run-time prediction may have corrected) and, on the modelled agents' side,
  the work it has really done by its last start or resize, on which parts it
  started and its CPU segments since (``twin.agents.Progress``);
* the reservations the policy promised (EASY keeps its head's, conservative
  every job's), and the instants a reservation falls due with no event then;
* each user's last run times, for a policy that predicts with them.

:class:`TwinState` holds exactly that; :func:`capture` takes it from a core
and its agents, :func:`restore` puts it into a new core and agents, and
``twin.simulate.simulate`` does both (``stop_at`` and ``resume``). A replay
cut at ``t`` and resumed with the jobs submitted after ``t`` gives, job by job,
the rest of the replay it was cut from (a test, on KTH-SP2). What the state
leaves out, and so what a resumed replay may do differently: the usage
ledger (fair-share and multi-factor start with no past use), a prediction
made at a queued job's submission (EASY++ predicts again from the history
at the resume) and the order of two ends at the very same instant.

``accordion whatif`` builds one from a live scheduler's snapshot
(``accordion.experiments.whatif``), with run times it assumes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from model.job import Job
from model.machine import Machine, Part
from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Reservation
from twin.agents import ModelledAgents, Progress


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningState:
    """One running job (module docstring); ``job.runtime`` is what it really runs."""

    job: Job
    parts: tuple[Part, ...]
    start: float
    est_end: float
    est_done: float
    changed: float
    progress: Progress


@dataclass(frozen=True, slots=True, kw_only=True)
class TwinState:
    """A replay's state at ``now`` (module docstring)."""

    now: float
    machines: tuple[Machine, ...]
    #: In the core's order: by expected end, ties in start order.
    running: tuple[RunningState, ...]
    #: In arrival order.
    queue: tuple[Job, ...]
    #: ``(job id, start, parts)`` of each queued job's reservation.
    reservations: tuple[tuple[str, float, tuple[Part, ...]], ...] = ()
    #: Instants a reservation falls due with no event then (``twin.simulate``'s wakes).
    wakes: tuple[float, ...] = ()
    #: Each user's last run times, the latest first.
    history: tuple[tuple[str, tuple[float, ...]], ...] = ()


def capture(
    core: SchedulerCore, agents: ModelledAgents, now: float, wakes: Sequence[float] = ()
) -> TwinState:
    """The state of ``core`` and ``agents`` at ``now``, after its decision."""
    running = tuple(
        RunningState(
            job=core.job(r.job.id) or r.job,
            parts=r.parts,
            start=r.start,
            est_end=r.est_end,
            est_done=r.est_done,
            changed=r.changed,
            progress=agents.progress(r.job.id),
        )
        for r in core.running
    )
    history = core.history
    return TwinState(
        now=now,
        machines=tuple(core.machines),
        running=running,
        queue=tuple(core.job(j.id) or j for j in core.queue),
        reservations=tuple((r.job.id, r.start, r.parts) for r in core.reservations),
        wakes=tuple(sorted(wakes)),
        history=()
        if history is None
        else tuple((user, history.last(user)) for user in history.users()),
    )


def restore(
    state: TwinState, core: SchedulerCore, agents: ModelledAgents
) -> list[tuple[float, int]]:
    """Put ``state`` into a new ``core`` (built on ``state.machines``) and its ``agents``;
    returns each running job's end and its version, in ``state.running``'s order, for
    the caller's events."""
    now = state.now
    history = core.history
    if history is not None:
        for user, runs in state.history:
            # Only the order of ends matters to the history: the latest first.
            for age, took in enumerate(reversed(runs)):
                history.record(user, now - len(runs) + age, took)
    ends: list[tuple[float, int]] = []
    for r in state.running:
        core.resume_running(r.job, r.parts, r.start, now, r.est_end, r.est_done, r.changed)
        ends.append(agents.resume(r.job, r.parts, r.progress))
    for job in state.queue:
        core.submit(job)
    queued = {j.id: j for j in core.queue}
    core.resume_reservations(
        Reservation(queued[job_id], start, parts)
        for job_id, start, parts in state.reservations
        if job_id in queued
    )
    return ends
