"""EASY++'s run-time predictor (``scheduler.core.run_history``) and how the core plans with it."""

from __future__ import annotations

import pytest

from model.job import Job
from model.machine import Machine
from scheduler.core.core import SchedulerCore
from scheduler.core.job_lifecycle import JobState
from scheduler.core.run_history import Predictor, RunHistory
from scheduler.policies.easy import EasyBackfill
from scheduler.policies.registry import build_policy_with
from tests.builders import job
from twin.simulate import simulate


def test_the_prediction_is_the_average_of_the_last_two_capped_by_the_request() -> None:
    history = RunHistory()
    j = job("x", 1, runtime=50.0, walltime=1000.0, user="ann")
    assert history.prediction(j) == 1000.0  # no history: the request
    history.record("ann", 10.0, 100.0)
    assert history.prediction(j) == 100.0  # one job: its run time
    history.record("ann", 20.0, 300.0)
    assert history.prediction(j) == 200.0
    history.record("ann", 30.0, 500.0)  # the oldest drops out
    assert history.last("ann") == (500.0, 300.0)
    assert history.prediction(j) == 400.0
    assert history.prediction(job("y", 1, runtime=5.0, walltime=250.0, user="ann")) == 250.0
    assert history.prediction(job("z", 1, runtime=5.0, walltime=250.0, user="bob")) == 250.0


def test_last_is_by_end_time_whatever_the_order_reported() -> None:
    history = RunHistory()
    history.record("ann", 30.0, 3.0)
    history.record("ann", 10.0, 1.0)
    history.record("ann", 20.0, 2.0)
    assert history.last("ann") == (3.0, 2.0)


def test_a_run_of_nothing_plans_one_second() -> None:
    history = RunHistory()
    history.record("ann", 1.0, 0.0)
    history.record("ann", 2.0, 0.0)
    assert history.prediction(job("x", 1, runtime=5.0, walltime=60.0, user="ann")) == 1.0


def test_the_policy_option_switches_the_core_to_predictions() -> None:
    policy = build_policy_with("easy", {"predictor": "last-two"})
    assert isinstance(policy, EasyBackfill)
    assert policy.predictor is Predictor.LAST_TWO
    core = SchedulerCore(policy=policy, machines=[Machine(id="m", cpus=4)])
    assert core.predicts
    assert core.history is not None
    plain = SchedulerCore(policy=EasyBackfill(), machines=[Machine(id="m", cpus=4)])
    assert not plain.predicts
    assert plain.history is None


def test_the_queue_plans_with_the_prediction_and_the_book_keeps_the_request() -> None:
    core = SchedulerCore(
        policy=EasyBackfill(predictor=Predictor.LAST_TWO), machines=[Machine(id="m", cpus=4)]
    )
    for i, run in enumerate((100.0, 300.0)):
        core.submit(job(f"old{i}", 4, runtime=run, submit=0.0, walltime=1000.0, user="ann"))
        core.schedule(i * 1000.0)
        core.finished(f"old{i}", i * 1000.0 + run)
    new = job("new", 4, runtime=50.0, submit=2000.0, walltime=1000.0, user="ann")
    core.submit(new)
    assert core.job("new") is new
    (queued,) = core.queue
    assert queued.walltime == 200.0
    assert queued.id == "new"
    assert core.submit(new).duplicate  # idempotent against the job as submitted
    core.schedule(2000.0)
    (run,) = core.running
    assert run.est_end == 2200.0


def test_a_run_past_its_prediction_is_expected_to_end_with_its_request() -> None:
    core = SchedulerCore(
        policy=EasyBackfill(predictor=Predictor.LAST_TWO), machines=[Machine(id="m", cpus=4)]
    )
    core.submit(job("old", 4, runtime=100.0, walltime=500.0, user="ann"))
    core.schedule(0.0)
    core.finished("old", 100.0)
    core.submit(job("long", 4, runtime=900.0, submit=100.0, walltime=1000.0, user="ann"))
    core.schedule(100.0)
    (run,) = core.running
    assert run.est_end == 200.0  # predicted: 100 s, like the last one
    core.submit(job("next", 4, runtime=10.0, submit=300.0, walltime=50.0, user="bob"))
    core.schedule(300.0)
    # Outlived: corrected to the end of its request (started at 100, asked 1000).
    assert run.est_end == pytest.approx(1100.0)
    (reservation,) = core.reservations
    assert reservation.start == pytest.approx(1100.0)


def test_the_twin_writes_the_jobs_as_submitted() -> None:
    jobs = [
        Job(id=f"j{i}", submit=10.0 * i, procs=2, runtime=30.0, walltime=600.0, user="ann")
        for i in range(6)
    ]
    result = simulate(
        jobs,
        machines=[Machine(id="m", cpus=4)],
        policy=EasyBackfill(predictor=Predictor.LAST_TWO),
    )
    assert {o.job.walltime for o in result.outcomes} == {600.0}
    assert all(o.job in jobs for o in result.outcomes)


def test_a_restart_rebuilds_the_history_from_finished_jobs() -> None:
    core = SchedulerCore(
        policy=EasyBackfill(predictor=Predictor.LAST_TWO), machines=[Machine(id="m", cpus=4)]
    )
    done = job("done", 1, runtime=40.0, walltime=100.0, user="ann")
    core.restore_final(done, JobState.FINISHED, start=10.0, end=50.0, parts=())
    core.restore_queued(job("q", 1, runtime=5.0, submit=60.0, walltime=100.0, user="ann"))
    (queued,) = core.queue
    assert queued.walltime == 40.0
