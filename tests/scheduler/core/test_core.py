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


def test_snapshot_is_the_value_its_constructor_builds() -> None:
    # The core fills Snapshot's slots itself (speed); it must be the same value.
    c = core(cpus=4)
    c.submit(job("a", 4, runtime=100.0))
    c.schedule(0.0)
    c.submit(job("b", 4, runtime=100.0, submit=1.0))
    snap = c.snapshot(2.0)
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
    with pytest.raises(AttributeError):
        snap.now = 3.0  # type: ignore[misc]
