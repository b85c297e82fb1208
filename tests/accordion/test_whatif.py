"""The what-if (``accordion.experiments.whatif``): a scheduler's snapshot replayed in the twin."""

from __future__ import annotations

import pytest

from accordion.errors import UserError
from accordion.experiments.whatif import RunTimes, state_of, what_if
from broker.insight import (
    SnapshotJob,
    SnapshotMachine,
    SnapshotReply,
    SnapshotReservation,
    SnapshotRun,
)
from broker.messages import PartSpec
from model.allocation import Allocation
from model.execution import DEFAULT_MODEL
from model.job import Job
from model.machine import Machine, Part
from scheduler.policies.registry import build_policy
from tests.scheduler.planning.test_prediction import _random_jobs
from twin.simulate import SimulationResult, simulate
from twin.state import TwinState


def snapshot_of(state: TwinState, policy: str, max_user_cpus: int | None = None) -> SnapshotReply:
    """What a live scheduler would answer in ``state`` (the twin's, at a cut)."""
    speeds = {m.id: m.speed for m in state.machines}

    def spec(job: Job) -> SnapshotJob:
        return SnapshotJob(
            id=job.id,
            user=job.user,
            group=job.group,
            procs=job.procs,
            walltime=job.walltime,
            submit=job.submit,
            malleable=job.malleable,
        )

    def parts(ps: tuple[Part, ...]) -> tuple[PartSpec, ...]:
        return tuple(PartSpec(machine=p.machine, cpus=p.cpus) for p in ps)

    running = []
    for r in state.running:
        rate = Allocation.of(r.parts, speeds).rate(r.job, DEFAULT_MODEL)
        running.append(
            SnapshotRun(
                job=spec(r.job),
                start=r.start,
                parts=parts(r.parts),
                done=r.est_done + (state.now - r.changed) * rate,
                est_end=r.est_end,
            )
        )
    return SnapshotReply(
        request_id="-",
        now=state.now,
        policy=policy,
        machines=tuple(SnapshotMachine(m.id, m.cpus, m.speed) for m in state.machines),
        running=tuple(running),
        queue=tuple(spec(j) for j in state.queue),
        reservations=tuple(
            SnapshotReservation(job_id, start, parts(ps))
            for job_id, start, ps in state.reservations
        ),
        max_user_cpus=max_user_cpus,
    )


@pytest.mark.parametrize("spec", ["easy", "conservative", "fcfs"])
def test_with_exact_estimates_the_what_if_of_the_live_policy_is_what_happens(spec: str) -> None:
    machines = [Machine(id="a", cpus=16, speed=1.0), Machine(id="b", cpus=8, speed=2.0)]
    jobs = [
        Job(id=j.id, submit=j.submit, procs=j.procs, runtime=j.walltime, walltime=j.walltime)
        for j in _random_jobs(5, 120, 16)
    ]
    cut = jobs[60].submit
    # Only the jobs submitted by the cut: a snapshot knows no later arrival.
    known = [j for j in jobs if j.submit <= cut]
    real = {
        o.job.id: o.start
        for o in simulate(known, machines=machines, policy=build_policy(spec)).outcomes
    }
    cut_run = simulate(known, machines=machines, policy=build_policy(spec), stop_at=cut)
    assert cut_run.state is not None
    reply = snapshot_of(cut_run.state, spec)
    assert reply.queue, "the cut should leave jobs waiting"
    (answer,) = what_if(reply, [spec])
    for job in reply.queue:
        assert answer.starts[job.id] == pytest.approx(real[job.id]), job.id


def test_the_per_user_cpu_limit_holds_in_the_replay() -> None:
    # The live scheduler's limit is in its snapshot: the replay holds back the same
    # jobs, so with exact estimates it still predicts what happens.
    machines = [Machine(id="a", cpus=16, speed=1.0), Machine(id="b", cpus=8, speed=2.0)]
    jobs = [
        Job(
            id=j.id,
            submit=j.submit,
            procs=j.procs,
            runtime=j.walltime,
            walltime=j.walltime,
            user=j.user,
        )
        for j in _random_jobs(5, 120, 16)
    ]
    cut = jobs[60].submit
    known = [j for j in jobs if j.submit <= cut]

    def run(limit: int | None, stop_at: float | None = None) -> SimulationResult:
        return simulate(
            known,
            machines=machines,
            policy=build_policy("easy"),
            max_user_cpus=limit,
            stop_at=stop_at,
        )

    real = {o.job.id: o.start for o in run(16).outcomes}
    unlimited = {o.job.id: o.start for o in run(None).outcomes}
    assert real != unlimited, "the limit should hold some job back"
    state = run(16, cut).state
    assert state is not None
    reply = snapshot_of(state, "easy", max_user_cpus=16)
    (answer,) = what_if(reply, ["easy"])
    for job in reply.queue:
        assert answer.starts[job.id] == pytest.approx(real[job.id]), job.id


def test_other_policies_replay_the_same_state_side_by_side() -> None:
    reply = SnapshotReply(
        request_id="-",
        now=100.0,
        policy="easy",
        machines=(SnapshotMachine("m", 4, 1.0),),
        running=(
            SnapshotRun(
                job=SnapshotJob("run", "ann", "g", 3, 200.0, 0.0),
                start=50.0,
                parts=(PartSpec("m", 3),),
                done=50.0,
                est_end=250.0,
            ),
        ),
        queue=(
            SnapshotJob("wide", "bob", "g", 4, 100.0, 60.0),
            SnapshotJob("narrow", "cid", "g", 1, 1000.0, 70.0, predicted=10.0),
        ),
        reservations=(SnapshotReservation("wide", 250.0, (PartSpec("m", 4),)),),
    )
    easy, fcfs = what_if(reply, ["easy", "fcfs"])
    # EASY backfills the narrow job now only if it ends by the reservation: it does not.
    assert easy.starts == {"wide": 250.0, "narrow": 350.0}
    assert fcfs.starts == {"wide": 250.0, "narrow": 350.0}
    (predicted,) = what_if(reply, ["easy"], runtimes=RunTimes.PREDICTED)
    assert predicted.ends["narrow"] == predicted.starts["narrow"] + 10.0
    # Waits count from submission: wide waited 40 s already.
    assert easy.wait_mean == pytest.approx(((250 - 60) + (350 - 70)) / 2)


def test_a_running_job_past_its_estimate_ends_by_the_overdue_rule() -> None:
    reply = SnapshotReply(
        request_id="-",
        now=1000.0,
        policy="fcfs",
        machines=(SnapshotMachine("m", 2, 1.0),),
        running=(
            SnapshotRun(
                job=SnapshotJob("late", "ann", "g", 2, 100.0, 0.0),
                start=0.0,
                parts=(PartSpec("m", 2),),
                done=1000.0,
                est_end=100.0,
            ),
        ),
        queue=(SnapshotJob("next", "bob", "g", 2, 10.0, 500.0),),
    )
    state = state_of(reply)
    (late,) = state.running
    assert late.job.runtime == 100.0 + 1024.0  # 900 s over: the allowance is 1,024 s
    (answer,) = what_if(reply, ["fcfs"])
    assert answer.starts["next"] == 1124.0


def test_a_command_job_is_replayed_on_the_machines_that_run_commands_only() -> None:
    # The faster machine runs no commands: the replay must not put the command job
    # there (it would end at 50, not 100), as the live scheduler would not.
    reply = SnapshotReply(
        request_id="-",
        now=0.0,
        policy="fcfs",
        machines=(
            SnapshotMachine("fast", 4, 2.0),
            SnapshotMachine("able", 4, 1.0, capabilities=("commands",)),
        ),
        running=(),
        queue=(
            SnapshotJob(
                id="cmd",
                user="u",
                group="g",
                procs=2,
                walltime=100.0,
                submit=0.0,
                needs=("commands",),
            ),
            SnapshotJob(id="plain", user="u", group="g", procs=2, walltime=100.0, submit=0.0),
        ),
        reservations=(),
    )
    (answer,) = what_if(reply, ["fcfs"])
    assert (answer.starts["cmd"], answer.ends["cmd"]) == (0.0, 100.0)
    assert (answer.starts["plain"], answer.ends["plain"]) == (0.0, 50.0)
    unknown = SnapshotReply(
        request_id="-",
        now=0.0,
        policy="fcfs",
        machines=(SnapshotMachine("gpu", 4, 1.0, capabilities=("gpus",)),),
        running=(),
        queue=(),
        reservations=(),
    )
    with pytest.raises(UserError, match="capability this client does not know"):
        what_if(unknown, ["fcfs"])


def test_another_policy_may_start_a_queued_job_at_the_snapshot_instant() -> None:
    # FCFS holds the small job behind the wide head until the running job ends at 100;
    # EASY backfills it at once: its replay decides at the snapshot's instant first.
    def queued(job_id: str, procs: int, walltime: float) -> SnapshotJob:
        return SnapshotJob(
            id=job_id, user="u", group="g", procs=procs, walltime=walltime, submit=0.0
        )

    reply = SnapshotReply(
        request_id="-",
        now=10.0,
        policy="fcfs",
        machines=(SnapshotMachine("m", 8, 1.0),),
        running=(
            SnapshotRun(
                job=queued("run", 4, 100.0),
                start=0.0,
                parts=(PartSpec(machine="m", cpus=4),),
                done=10.0,
                est_end=100.0,
            ),
        ),
        queue=(queued("head", 8, 50.0), queued("small", 2, 20.0)),
        reservations=(),
    )
    fcfs, easy = what_if(reply, ["fcfs", "easy"])
    assert fcfs.starts == {"head": 100.0, "small": 150.0}
    assert easy.starts == {"head": 100.0, "small": 10.0}


def test_an_mpi_job_is_replayed_whole_on_one_machine() -> None:
    # Two half-free machines would start it at once across both; on one it waits for
    # a running job to end (at its estimate, 100), as the scheduler would place it.
    def job(job_id: str, procs: int, *, one: bool = False) -> SnapshotJob:
        return SnapshotJob(
            id=job_id,
            user="u",
            group="g",
            procs=procs,
            walltime=100.0,
            submit=0.0,
            one_machine=one,
        )

    def run(job_id: str, machine: str) -> SnapshotRun:
        return SnapshotRun(
            job=job(job_id, 2),
            start=0.0,
            parts=(PartSpec(machine=machine, cpus=2),),
            done=0.0,
            est_end=100.0,
        )

    reply = SnapshotReply(
        request_id="-",
        now=0.0,
        policy="fcfs",
        machines=(SnapshotMachine("a", 4, 1.0), SnapshotMachine("b", 4, 1.0)),
        running=(run("ra", "a"), run("rb", "b")),
        queue=(job("mpi", 4, one=True),),
        reservations=(),
    )
    (answer,) = what_if(reply, ["fcfs"])
    assert answer.starts == {"mpi": 100.0}
    spanning = SnapshotReply(
        request_id="-",
        now=0.0,
        policy="fcfs",
        machines=reply.machines,
        running=reply.running,
        queue=(job("plain", 4),),
        reservations=(),
    )
    (answer,) = what_if(spanning, ["fcfs"])
    assert answer.starts == {"plain": 0.0}
