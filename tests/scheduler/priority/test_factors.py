"""Each queued job's priority factor by factor (``scheduler.priority.factors``)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from model.machine import Machine
from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Decisions, Policy, SnapshotView
from scheduler.policies.registry import build_policy
from scheduler.priority import PrioritySource
from scheduler.priority.factors import explain
from scheduler.priority.fairshare import FairShare
from scheduler.priority.fifo import Fifo
from scheduler.priority.flexible_score import FlexiblePriority
from scheduler.priority.multifactor import MultiFactor
from tests.builders import job
from tests.scheduler.planning.test_prediction import _random_jobs
from twin.simulate import simulate


def busy_core(source: PrioritySource) -> SchedulerCore:
    """A core whose cluster is full, with a queue of four users' jobs and some usage."""
    core = SchedulerCore(policy=build_policy("easy"), machines=[Machine(id="m", cpus=4)])
    core.submit(job("past", 4, runtime=100.0, user="ann"))
    core.schedule(0.0)
    core.finished("past", 100.0)
    core.submit(job("hog", 4, runtime=1000.0, submit=100.0, user="bob"))
    core.schedule(100.0)
    for i, user in enumerate(["ann", "bob", "cid", "ann", "dee"]):
        core.submit(job(f"q{i}", 1 + i % 3, runtime=50.0, submit=200.0 + i, user=user))
    core.schedule(300.0)
    return core


@pytest.mark.parametrize(
    "source",
    [MultiFactor(), FairShare(), FlexiblePriority(), Fifo()],
    ids=["multifactor", "fairshare", "flexible", "fifo"],
)
def test_rows_follow_the_sources_order_and_factors_sum_to_the_priority(
    source: PrioritySource,
) -> None:
    core = busy_core(source)
    snapshot = core.snapshot(300.0)
    rows = explain(source, snapshot)
    assert [r.job.id for r in rows] == [j.id for j in source.order(snapshot)]
    assert [r.rank for r in rows] == list(range(1, len(rows) + 1))
    for r in rows:
        if isinstance(source, Fifo):
            assert r.priority is None
            assert r.factors == ()
        else:
            assert r.priority is not None
            assert sum(v for _, v in r.factors) == pytest.approx(r.priority, abs=1e-9)


def test_multifactor_names_sprios_factors_and_fair_share_favours_the_idle() -> None:
    source = MultiFactor()
    rows = explain(source, busy_core(source).snapshot(300.0))
    assert {name for r in rows for name, _ in r.factors} == {"age", "fairshare", "size", "qos"}
    fairshare = {r.job.user: dict(r.factors)["fairshare"] for r in rows}
    # bob holds the whole cluster and ann used it before: cid and dee rank on fair-share.
    assert fairshare["cid"] > fairshare["ann"]
    assert fairshare["cid"] > fairshare["bob"]


@dataclass
class Explaining:
    """A policy that asks for the factors at every decision, as a status request would."""

    inner: Policy
    name: str = "explaining"

    def decide(self, snapshot: SnapshotView) -> Decisions:
        explain(getattr(self.inner, "priority", None), snapshot)
        return self.inner.decide(snapshot)


@pytest.mark.parametrize("spec", ["easy:multifactor", "easy:fairshare", "flexible"])
def test_asking_for_the_factors_changes_no_schedule(spec: str) -> None:
    machines = [Machine(id="m", cpus=16)]
    jobs = _random_jobs(3, 300, 16)
    plain = simulate(jobs, machines=machines, policy=build_policy(spec))
    asked = simulate(jobs, machines=machines, policy=Explaining(build_policy(spec)))
    assert [(o.job.id, o.start) for o in plain.outcomes] == [
        (o.job.id, o.start) for o in asked.outcomes
    ]
