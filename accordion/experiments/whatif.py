"""What the live queue would do under other policies: its snapshot replayed in the twin.

``accordion whatif`` asks the scheduler for one snapshot (``SnapshotReply``:
the machines, the running jobs with the work done and their expected end, the
queue, the policy's reservations, the users' last run times), turns it into
a twin state (``twin.state.TwinState``) and replays it from *now* under each
policy asked for, with no job submitted after it. Every replay starts from
the same state; only the policy differs.

What the replays assume, since the real run times are not known yet
(:class:`RunTimes`):

``estimate`` (the default)
    Every job runs its wall-time estimate: a queued job its whole estimate,
    a running job the rest of it (its estimate less the work the scheduler
    believes done). A running job already past its estimate is taken to end
    when the overdue rule plans it (``scheduler.planning.overdue``).
``predicted``
    Every job runs its EASY++ prediction (``scheduler.core.run_history``:
    the average of its user's last two run times, capped by its request);
    a running job past its prediction runs to the end of its request, and
    past that too, the overdue rule.

The policies themselves plan with the users' estimates unless given
``--policy-opt predictor=last-two``. The live policy's reservations are kept
when the same policy is replayed (its promises hold), and dropped for any
other. The scheduler's per-user CPU limit holds in every replay. Cordoned
machines take part: they are expected back. The usage
history fair-share reads is not in the snapshot: fair-share and multi-factor
replay as if no one had used the cluster.

The numbers: each policy's mean wait, response and bounded slowdown of the
jobs queued at the snapshot (cluster seconds from their submission, so the
time they have already waited counts), and each of their predicted starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from accordion.errors import UserError
from broker.insight import SnapshotJob, SnapshotReply
from model.allocation import Allocation
from model.execution import DEFAULT_MODEL, ExecutionModel
from model.job import Job
from model.machine import Capability, Machine, Part
from model.metrics import DEFAULT_TAU
from scheduler.planning.overdue import planned_end
from scheduler.planning.placement import PlacementRule
from scheduler.policies.registry import build_policy_with
from twin.agents import Progress
from twin.simulate import simulate
from twin.state import RunningState, TwinState


class RunTimes(StrEnum):
    """What the replay assumes each job really runs (module docstring)."""

    ESTIMATE = "estimate"
    PREDICTED = "predicted"


@dataclass(frozen=True, slots=True, kw_only=True)
class WhatIf:
    """One policy's replay of the snapshot: the queued jobs' starts and ends, and the
    means over them."""

    spec: str
    starts: dict[str, float]
    ends: dict[str, float]
    wait_mean: float
    response_mean: float
    bounded_slowdown_mean: float
    #: When the last job of the snapshot ends, from its ``now``.
    makespan: float


def _job(spec: SnapshotJob, runtime: float) -> Job:
    return Job(
        id=spec.id,
        submit=spec.submit,
        procs=spec.procs,
        walltime=spec.walltime,
        runtime=runtime,
        user=spec.user,
        group=spec.group,
        deadline=spec.deadline,
        malleable=spec.malleable,
        cpu_util=spec.cpu_util,
        qos=spec.qos,
        ref_speed=spec.ref_speed,
        needs=capabilities(spec.needs),
        one_machine=spec.one_machine,
    )


def capabilities(names: Iterable[str]) -> frozenset[Capability]:
    """The core's capabilities of a snapshot's names; UserError for one this client does
    not know (a newer scheduler's: the twin could not honour it)."""
    try:
        return frozenset(Capability(name) for name in names)
    except ValueError as exc:
        raise UserError(
            f"the snapshot names a machine capability this client does not know ({exc}): "
            "update the client to the scheduler's version"
        ) from None


def _total(done: float, total: float, rate: float, now: float) -> float:
    """The whole run time of a job that has done ``done`` of a run assumed to take
    ``total``: that, or past it the overdue rule's end (``scheduler.planning.overdue``)."""
    if done < total:
        return total
    # Past it by (done - total) of work: at ``rate``, since that many seconds ago.
    end = planned_end(now - (done - total) / rate, now)
    return done + (end - now) * rate


def state_of(
    reply: SnapshotReply,
    runtimes: RunTimes = RunTimes.ESTIMATE,
    *,
    reservations: bool = True,
    execution: ExecutionModel = DEFAULT_MODEL,
) -> TwinState:
    """The twin state of a scheduler's snapshot, with the run times ``runtimes`` assumes;
    ``reservations``: keep the policy's promises (the same policy is replayed)."""
    now = reply.now
    machines = tuple(
        Machine(id=m.id, cpus=m.cpus, speed=m.speed, capabilities=capabilities(m.capabilities))
        for m in reply.machines
    )
    speeds = {m.id: m.speed for m in machines}
    predicted = runtimes is RunTimes.PREDICTED
    running: list[RunningState] = []
    for run in reply.running:
        spec = run.job
        parts = tuple(Part(p.machine, p.cpus) for p in run.parts)
        rate = Allocation.of(parts, speeds).rate(_job(spec, spec.walltime), execution)
        assumed = spec.walltime
        if predicted and spec.predicted is not None and run.done < spec.predicted:
            assumed = spec.predicted
        job = _job(spec, _total(run.done, assumed, rate, now))
        running.append(
            RunningState(
                job=job,
                parts=parts,
                start=run.start,
                est_end=run.est_end,
                est_done=run.done,
                changed=now,
                progress=Progress(start=run.start, since=now, done=run.done, first=parts),
            )
        )
    queue = tuple(
        _job(spec, spec.predicted if predicted and spec.predicted is not None else spec.walltime)
        for spec in reply.queue
    )
    return TwinState(
        now=now,
        machines=machines,
        running=tuple(sorted(running, key=lambda r: r.est_end)),
        queue=queue,
        reservations=tuple(
            (r.job_id, r.start, tuple(Part(p.machine, p.cpus) for p in r.parts))
            for r in reply.reservations
        )
        if reservations
        else (),
        history=tuple((h.user, h.runs) for h in reply.history),
    )


def what_if(
    reply: SnapshotReply,
    specs: Sequence[str],
    *,
    runtimes: RunTimes = RunTimes.ESTIMATE,
    options: Mapping[str, Mapping[str, str]] | None = None,
    placement: PlacementRule = PlacementRule.FASTEST,
    execution: ExecutionModel = DEFAULT_MODEL,
    tau: float = DEFAULT_TAU,
) -> list[WhatIf]:
    """Replay ``reply`` under each policy of ``specs`` (with its ``options``)."""
    queued = [j.id for j in reply.queue]
    answers: list[WhatIf] = []
    for spec in specs:
        policy = build_policy_with(spec, (options or {}).get(spec, {}), placement=placement)
        state = state_of(reply, runtimes, reservations=spec == reply.policy, execution=execution)
        result = simulate(
            (),
            machines=state.machines,
            policy=policy,
            execution=execution,
            resume=state,
            max_user_cpus=reply.max_user_cpus,
        )
        outcomes = {o.job.id: o for o in result.outcomes}
        mine = [outcomes[j] for j in queued if j in outcomes]
        waits = [o.wait for o in mine]
        responses = [o.response for o in mine]
        bounded = [max((o.wait + o.run) / max(o.run, tau), 1.0) for o in mine]
        last = max((o.end for o in result.outcomes), default=reply.now)
        answers.append(
            WhatIf(
                spec=spec,
                starts={o.job.id: o.start for o in mine},
                ends={o.job.id: o.end for o in mine},
                wait_mean=_mean(waits),
                response_mean=_mean(responses),
                bounded_slowdown_mean=_mean(bounded),
                makespan=last - reply.now,
            )
        )
    return answers


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
