"""Why a queued job waits (``scheduler.planning.wait_reasons``): one case per reason."""

from __future__ import annotations

from model.job import Job
from model.machine import Machine
from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Policy
from scheduler.planning.prediction import predict
from scheduler.planning.wait_reasons import Wait, WaitWhy, wait_reasons
from scheduler.policies.conservative import ConservativeBackfill
from scheduler.policies.easy import EasyBackfill
from scheduler.policies.fcfs import Fcfs
from tests.builders import job


def reasons_of(
    policy: Policy,
    machines: list[Machine],
    jobs: list[Job],
    *,
    cordoned: frozenset[str] = frozenset(),
    held: str | None = None,
) -> dict[str, Wait]:
    core = SchedulerCore(policy=policy, machines=machines, cordoned=cordoned)
    for j in jobs:
        core.submit(j)
    core.schedule(0.0)
    snap = core.snapshot(0.0)
    plan = predict(snap, policy, cordoned=cordoned)
    return wait_reasons(plan, snap, policy, cordoned=cordoned, held=held)


def test_easy_the_head_waits_for_cpus_and_the_rest_for_it() -> None:
    # 4 CPUs; a holds 2 for 10 s. b (4) is the head, reserved at 10. c (2 CPUs, 20 s)
    # fits now but would run past b's reservation; d (4) waits behind b and c.
    jobs = [
        job("a", 2, runtime=10.0),
        job("b", 4, runtime=5.0),
        job("c", 2, runtime=20.0),
        job("d", 4, runtime=5.0),
    ]
    reasons = reasons_of(EasyBackfill(), [Machine(id="m", cpus=4)], jobs)
    assert reasons["b"] == Wait(WaitWhy.RESOURCES, "its reservation at t=10 s")
    assert reasons["c"] == Wait(
        WaitWhy.RESERVATION, "starting now would delay job b's reservation at t=10 s"
    )
    assert reasons["d"] == Wait(WaitWhy.PRIORITY, "behind 2 higher-priority jobs")
    assert "a" not in reasons  # running


def test_conservative_priority_or_cpus_by_when_it_would_start_alone() -> None:
    # a holds 3 of 4 CPUs for 10 s; b (4) is reserved at 10; e (1 CPU, 5 s) starts in
    # the hole at once. c (1 CPU, 30 s) alone would start at 5, when e ends, but b's
    # reservation puts it at 15: it waits behind b. f (1 CPU, 5 s) alone would start
    # at 5 too, and is planned there: it waits for CPUs.
    jobs = [
        job("a", 3, runtime=10.0),
        job("b", 4, runtime=5.0),
        job("c", 1, runtime=30.0),
        job("e", 1, runtime=5.0),
        job("f", 1, runtime=5.0),
    ]
    reasons = reasons_of(ConservativeBackfill(), [Machine(id="m", cpus=4)], jobs)
    assert "e" not in reasons
    assert reasons["b"] == Wait(WaitWhy.RESOURCES, "its reservation at t=10 s")
    assert reasons["c"] == Wait(WaitWhy.PRIORITY, "behind 1 higher-priority job")
    assert reasons["f"] == Wait(WaitWhy.RESOURCES, "its reservation at t=5 s")


def test_fcfs_a_job_that_fits_waits_behind_the_head() -> None:
    jobs = [job("a", 3, runtime=10.0), job("b", 4, runtime=5.0), job("c", 1, runtime=1.0)]
    reasons = reasons_of(Fcfs(), [Machine(id="m", cpus=4)], jobs)
    assert reasons["b"].why is WaitWhy.RESOURCES
    assert reasons["c"] == Wait(WaitWhy.PRIORITY, "behind 1 higher-priority job")


def test_held_overrides_everything() -> None:
    jobs = [job("a", 4, runtime=10.0), job("b", 4, runtime=5.0), job("c", 1, runtime=1.0)]
    reasons = reasons_of(EasyBackfill(), [Machine(id="m", cpus=4)], jobs, held="reconciling")
    assert reasons == {
        "b": Wait(WaitWhy.HELD, "reconciling"),
        "c": Wait(WaitWhy.HELD, "reconciling"),
    }


def test_a_job_wider_than_the_machines_online_says_so() -> None:
    machines = [Machine(id="m", cpus=4)]
    policy = EasyBackfill()
    core = SchedulerCore(policy=policy, machines=machines)
    core.submit(job("a", 2, runtime=10.0))
    core.submit(job("wide", 8, runtime=10.0), capacity=8)  # the cluster as configured is wider
    core.schedule(0.0)
    snap = core.snapshot(0.0)
    assert [j.id for j in snap.queue] == []
    hidden = [j for j in core.queue if j not in snap.queue]
    plan = predict(snap, policy)
    reasons = wait_reasons(plan, snap, policy, hidden=hidden)
    assert reasons == {"wide": Wait(WaitWhy.WIDER_THAN_ONLINE, "needs 8 CPUs; 4 online")}


def test_a_job_that_fits_only_on_cordoned_machines() -> None:
    machines = [Machine(id="a", cpus=4), Machine(id="b", cpus=4)]
    jobs = [job("x", 2, runtime=10.0), job("wide", 6, runtime=5.0), job("now", 3, runtime=5.0)]
    reasons = reasons_of(EasyBackfill(), machines, jobs, cordoned=frozenset({"b"}))
    assert reasons["wide"] == Wait(WaitWhy.CORDONED, "fits only with cordoned machines: b")
    assert reasons["now"] == Wait(WaitWhy.CORDONED, "would start now on cordoned machines: b")
