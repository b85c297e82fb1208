"""The scheduler core as a state machine: submissions, decisions checked, lifecycle."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from model.job import Job, JobError
from model.machine import Machine, Part
from scheduler.core.core import Accepted, PolicyError, Rejected, SchedulerCore
from scheduler.core.job_lifecycle import IllegalTransitionError, JobState, transition
from scheduler.core.snapshot import Decisions, Snapshot, Start
from scheduler.policies.fcfs import Fcfs
from tests.builders import job


def core(policy: object = None, cpus: int = 8) -> SchedulerCore:
    return SchedulerCore(policy=policy or Fcfs(), machines=[Machine(id="m", cpus=cpus)])  # type: ignore[arg-type]


def test_duplicate_submission_makes_one_job() -> None:
    c = core()
    j = job("a", 2, runtime=10)
    assert c.submit(j) == Accepted("a")
    assert c.submit(j) == Accepted("a", duplicate=True)
    assert len(c.queue) == 1


def test_same_id_different_job_is_rejected() -> None:
    c = core()
    c.submit(job("a", 2, runtime=10))
    answer = c.submit(job("a", 3, runtime=10))
    assert isinstance(answer, Rejected)
    assert "already used" in answer.reason


def test_job_wider_than_the_cluster_is_rejected() -> None:
    answer = core(cpus=8).submit(job("w", 9, runtime=10))
    assert isinstance(answer, Rejected)
    assert "9 processes" in answer.reason
    assert "has 8" in answer.reason


@pytest.mark.parametrize(
    ("field", "value"),
    [("procs", 0), ("walltime", 0.0), ("submit", -1.0), ("cpu_util", 0.0), ("runtime", -5.0)],
)
def test_bad_jobs_are_refused_at_construction(field: str, value: object) -> None:
    kwargs: dict[str, object] = {"id": "x", "submit": 0.0, "procs": 1, "walltime": 1.0}
    kwargs[field] = value
    with pytest.raises(JobError, match=field):
        Job(**kwargs)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Greedy:
    """A broken policy that starts everything on one machine, fit or not."""

    name: str = "greedy"

    def decide(self, snapshot: Snapshot) -> Decisions:
        return Decisions(starts=[Start(j, (Part("m", j.procs),)) for j in snapshot.queue])


def test_over_booking_policy_is_caught() -> None:
    c = core(Greedy(), cpus=4)
    c.submit(job("a", 3, runtime=10))
    c.submit(job("b", 3, runtime=10))
    with pytest.raises(PolicyError, match="free"):
        c.schedule(0.0)


def test_finish_frees_cpus_and_charges_usage() -> None:
    c = core()
    c.submit(job("a", 4, runtime=10, user="ann"))
    c.schedule(0.0)
    assert c.free("m") == 4
    left = c.finished("a", 10.0)
    assert left.state is JobState.FINISHED
    assert c.free("m") == 8
    assert c.usage.cpu_seconds("user", "ann", 0) == 40.0


def test_cancel_queued_and_running() -> None:
    c = core(cpus=4)
    c.submit(job("run", 4, runtime=10))
    c.submit(job("wait", 4, runtime=10))
    c.schedule(0.0)
    assert c.cancel("wait", 1.0) is not None
    assert c.state_of("wait") is JobState.CANCELLED
    assert [j.id for j in c.queue] == []
    c.cancel("run", 2.0)
    assert c.free("m") == 4
    assert c.cancel("run", 3.0) is None


def test_lifecycle_table_refuses_illegal_moves() -> None:
    with pytest.raises(IllegalTransitionError):
        transition(JobState.FINISHED, JobState.RUNNING)
    assert transition(JobState.RUNNING, JobState.QUEUED) is JobState.QUEUED


def test_the_core_refreshes_one_snapshot_to_the_value_its_constructor_builds() -> None:
    # The core keeps one snapshot and rewrites it in place at every event (speed); at
    # each event it must be the value a new one would be.
    c = core(cpus=4)
    c.submit(job("a", 4, runtime=100.0))
    c.schedule(0.0)
    first = c.snapshot(0.5)
    c.submit(job("b", 4, runtime=100.0, submit=1.0))
    snap = c.snapshot(2.0)
    assert snap is first
    assert snap == Snapshot(
        now=2.0,
        machines=c.machines,
        free={"m": 0},
        running=c.running,
        queue=c.queue,
        usage=c.usage,
        total_cpus=4,
        speeds=c.speeds,
        reservations={},
        by_account=snap.by_account,
    )
    assert [j.id for j in snap.queue] == ["b"]


def test_the_policy_sees_no_free_cpu_on_a_cordoned_machine() -> None:
    # The caller's set, shared at construction and edited by the caller: the core reads
    # it at every event. The machines stay in the cluster and keep their running jobs.
    cordoned: set[str] = set()
    machines = [Machine(id="a", cpus=4), Machine(id="b", cpus=4)]
    c = SchedulerCore(policy=Fcfs(), machines=machines, cordoned=cordoned)
    c.submit(job("x", 2, runtime=100.0))
    c.schedule(0.0)
    (held,) = c.running[0].parts
    cordoned.add(held.machine)
    snap = c.snapshot(1.0)
    assert snap.free[held.machine] == 0
    assert c.free(held.machine) == 2
    assert snap.total_cpus == 8
    c.submit(job("y", 4, runtime=100.0, submit=1.0))
    c.submit(job("z", 2, runtime=100.0, submit=1.0))
    c.schedule(1.0)
    # y takes the other machine; z waits, though 2 CPUs are free on the cordoned one.
    assert sorted(r.job.id for r in c.running) == ["x", "y"]
    cordoned.clear()
    assert c.snapshot(2.0).free[held.machine] == 2
    c.schedule(2.0)
    assert c.running_job("z") is not None
    assert c.running_job("z").parts == (Part(held.machine, 2),)  # type: ignore[union-attr]
