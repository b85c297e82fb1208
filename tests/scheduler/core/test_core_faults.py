"""The core's fault rules, sans-I/O: a machine lost, jobs requeued or failed, restore."""

from __future__ import annotations

import pytest

from model.machine import Machine, Part
from scheduler.core.core import Accepted, Left, SchedulerCore
from scheduler.core.job_lifecycle import JobState
from scheduler.core.snapshot import Policy
from scheduler.policies.easy import EasyBackfill
from scheduler.policies.fcfs import Fcfs
from tests.builders import job


def core(*machines: tuple[str, int], policy: Policy | None = None, **kw: int) -> SchedulerCore:
    return SchedulerCore(
        policy=policy or Fcfs(),
        machines=[
            Machine(id=m, cpus=c, speed=float(len(machines) - i))
            for i, (m, c) in enumerate(machines)
        ],
        **kw,  # type: ignore[arg-type]
    )


def test_a_lost_machine_requeues_its_jobs_at_their_place() -> None:
    c = core(("m1", 4), ("m2", 4))
    c.submit(job("a", 4, runtime=10, submit=0))
    c.schedule(0.0)
    c.submit(job("b", 4, runtime=10, submit=1))
    c.submit(job("c", 8, runtime=10, submit=2))
    c.submit(job("d", 2, runtime=10, submit=3))
    c.schedule(1.0)  # b on m2; c and d wait behind c (FCFS)
    assert [r.job.id for r in c.running] == ["a", "b"]
    left = c.machine_left("m1", 5.0)
    assert [(x.job.id, x.state, x.start, x.end, x.parts) for x in left] == [
        ("a", JobState.QUEUED, 0.0, 5.0, (Part("m1", 4),))
    ]
    assert [j.id for j in c.queue] == ["a", "c", "d"]
    assert (c.total_cpus, [m.id for m in c.machines]) == (4, ["m2"])
    assert c.state_of("a") is JobState.QUEUED
    assert c.requeues("a") == 1
    # Usage was charged for the run that was lost.
    assert c.usage.cpu_seconds("user", "nobody", 0) == 20.0


def test_the_third_loss_fails_the_job() -> None:
    c = core(("m1", 4), ("m2", 4), ("m3", 4))
    c.submit(job("a", 4, runtime=10))
    states = []
    for i, machine in enumerate(("m1", "m2", "m3")):
        c.schedule(float(i))
        assert [p.machine for p in c.running[0].parts] == [machine]
        states.append(c.machine_left(machine, float(i) + 0.5)[0].state)
    assert states == [JobState.QUEUED, JobState.QUEUED, JobState.FAILED]
    assert c.state_of("a") is JobState.FAILED
    assert c.queue == []


def test_max_requeues_zero_fails_at_once() -> None:
    c = core(("m1", 4), max_requeues=0)
    c.submit(job("a", runtime=10))
    c.schedule(0.0)
    assert c.machine_left("m1", 1.0)[0].state is JobState.FAILED
    with pytest.raises(ValueError, match="max_requeues"):
        core(("m1", 4), max_requeues=-1)


def test_a_job_spanning_machines_frees_its_other_parts() -> None:
    c = core(("m1", 2), ("m2", 2))
    c.submit(job("wide", 4, runtime=10))
    c.schedule(0.0)
    assert c.free("m2") == 0
    (left,) = c.machine_left("m1", 1.0)
    assert set(left.parts) == {Part("m1", 2), Part("m2", 2)}
    assert c.free("m2") == 2
    assert c.running == []


def test_a_job_too_wide_for_what_is_left_waits_hidden() -> None:
    c = core(("m1", 4), ("m2", 4))
    c.submit(job("wide", 8, runtime=10))
    c.schedule(0.0)
    c.machine_left("m2", 1.0)  # wide is requeued, and needs 8 of the 4 left
    c.submit(job("small", 2, runtime=10, submit=2))
    assert c.snapshot(2.0).queue == [job("small", 2, runtime=10, submit=2)]
    started = c.schedule(2.0).starts
    assert [s.job.id for s in started] == ["small"]  # FCFS is not blocked by the hidden job
    c.machine_joined(Machine(id="m3", cpus=8))
    assert [j.id for j in c.snapshot(3.0).queue] == ["wide"]


def test_reservations_on_a_lost_machine_are_dropped() -> None:
    c = core(("m1", 4), ("m2", 4), policy=EasyBackfill())
    c.submit(job("a", 4, runtime=10))
    c.submit(job("b", 4, runtime=10))
    c.submit(job("c", 8, runtime=10))
    c.schedule(0.0)
    assert [r.job.id for r in c.reservations] == ["c"]
    c.machine_left("m2", 1.0)
    assert c.reservations == []
    with pytest.raises(KeyError, match="m2"):
        c.machine_left("m2", 1.0)


def test_restore_rebuilds_queue_history_and_pending_jobs() -> None:
    c = SchedulerCore(policy=Fcfs(), machines=[])
    c.restore_final(
        job("done", 2, runtime=10), JobState.FINISHED, start=0.0, end=10.0, parts=(Part("m1", 2),)
    )
    c.restore_pending(job("run", 4, runtime=100), (Part("m1", 4),), 5.0, requeues=1)
    c.restore_queued(job("q1", 4, runtime=10, submit=1))
    c.restore_queued(job("q2", runtime=10, submit=2), requeues=2)
    # Ids stay taken, whatever their state.
    assert c.submit(job("done", 2, runtime=10)) == Accepted("done", duplicate=True)
    assert c.usage.cpu_seconds("user", "nobody", 0) == 20.0
    assert [j.id for j in c.queue] == ["q1", "q2"]
    assert c.state_of("run") is JobState.RUNNING
    assert list(c.pending) == ["run"]
    assert (c.requeues("run"), c.requeues("q2")) == (1, 2)
    # No machine yet: the policy sees nothing it could start.
    assert c.schedule(6.0).starts == []
    c.machine_joined(Machine(id="m1", cpus=4))
    run = c.restore_running("run", 10.0)
    assert (run.start, run.est_end, run.cpus, run.charged_from) == (5.0, 105.0, 4, 5.0)
    assert c.free("m1") == 0
    assert c.pending == {}
    left = c.finished("run", 50.0)
    assert (left.start, left.end, left.state) == (5.0, 50.0, JobState.FINISHED)
    assert [s.job.id for s in c.schedule(50.0).starts] == ["q1"]


def test_a_pending_job_can_be_lost_cancelled_or_finished() -> None:
    c = SchedulerCore(policy=Fcfs(), machines=[])
    for jid in ("lost", "cancelled", "finished", "failed"):
        c.restore_pending(job(jid, runtime=10), (Part("m", 1),), 0.0)
    assert c.job_lost("lost", 1.0).state is JobState.QUEUED
    assert [j.id for j in c.queue] == ["lost"]
    cancelled = c.cancel("cancelled", 2.0)
    assert isinstance(cancelled, Left)
    assert cancelled.state is JobState.CANCELLED
    assert c.finished("finished", 3.0).state is JobState.FINISHED
    assert c.finished("failed", 3.0, failed=True).state is JobState.FAILED
    assert c.pending == {}
    with pytest.raises(KeyError):
        c.job_lost("finished", 4.0)


def test_restoring_on_a_machine_too_small_is_refused_and_takes_nothing() -> None:
    c = SchedulerCore(policy=Fcfs(), machines=[Machine(id="a", cpus=4), Machine(id="m", cpus=2)])
    c.restore_pending(job("run", 8, runtime=10), (Part("a", 4), Part("m", 4)), 0.0)
    with pytest.raises(ValueError, match="cannot restore job 'run'"):
        c.restore_running("run", 1.0)
    assert list(c.pending) == ["run"]
    assert (c.free("a"), c.free("m")) == (4, 2)
    # Lost instead: requeued, and hidden while wider than the cluster (6 CPUs).
    assert c.job_lost("run", 1.0).state is JobState.QUEUED
    assert c.snapshot(1.0).queue == []
    assert c.schedule(1.0).starts == []
    with pytest.raises(ValueError, match="already known"):
        c.restore_queued(job("run", 4, runtime=10))
