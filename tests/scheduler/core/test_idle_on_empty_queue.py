"""Policies that say ``idle_on_empty_queue`` keep the promise, and the core then skips them.

The promise (``scheduler.core.snapshot.Policy``) is checked against each policy's own
``decide``: whole replays of random jobs on random clusters run through a
wrapper that does not make the promise, so the core calls it at every event,
and at every event with an empty queue the real policy must return nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from model.job import Job
from model.machine import Machine
from scheduler.core.core import SchedulerCore
from scheduler.core.snapshot import Decisions, Policy, Snapshot
from scheduler.policies.easy import EasyBackfill
from scheduler.policies.fcfs import Fcfs
from scheduler.policies.fifo_backfill import FifoBackfill
from scheduler.priority.fairshare import FairShare
from scheduler.priority.multifactor import MultiFactor
from tests.builders import job
from tests.scheduler.policies.properties import clusters
from twin.simulate import simulate

IDLE_POLICIES = [
    EasyBackfill(),
    EasyBackfill(priority=FairShare()),
    EasyBackfill(priority=MultiFactor()),
    Fcfs(),
    FifoBackfill(),
]


@dataclass
class Checked:
    """Calls ``inner`` at every event (no promise of its own) and checks the promise."""

    inner: Policy
    name: str = "checked"
    empty_seen: int = 0

    def decide(self, snapshot: Snapshot) -> Decisions:
        decisions = self.inner.decide(snapshot)
        if not snapshot.queue:
            self.empty_seen += 1
            assert decisions == Decisions(), f"{self.inner.name} decided on an empty queue"
        return decisions


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[Machine], list[Job]]:
    machines = draw(clusters())
    widest = max(m.cpus for m in machines)
    jobs = []
    t = 0.0
    for i in range(draw(st.integers(1, 25))):
        t += draw(st.sampled_from([0.0, 1.0, 5.0, 40.0]))
        walltime = draw(st.sampled_from([2.0, 10.0, 30.0]))
        jobs.append(
            job(
                f"j{i}",
                submit=t,
                procs=draw(st.integers(1, widest)),
                walltime=walltime,
                runtime=draw(st.sampled_from([0.5, 1.0])) * walltime,
                user=draw(st.sampled_from(["a", "b", "c"])),
            )
        )
    return machines, jobs


@settings(max_examples=60, deadline=None)
@given(workloads(), st.sampled_from(IDLE_POLICIES))
def test_an_idle_policy_decides_nothing_on_an_empty_queue(
    work: tuple[list[Machine], list[Job]], policy: Policy
) -> None:
    assert getattr(policy, "idle_on_empty_queue", False)
    machines, jobs = work
    checked = Checked(policy)
    plain = simulate(jobs, machines=machines, policy=policy)
    seen = simulate(jobs, machines=machines, policy=checked)
    # Skipping the call changed nothing: the same schedule with and without it.
    assert [(o.job.id, o.start, o.end, o.parts) for o in plain.outcomes] == [
        (o.job.id, o.start, o.end, o.parts) for o in seen.outcomes
    ]


def test_the_promise_is_checked_on_empty_queues_at_all() -> None:
    # The property above is hollow unless replays do reach empty queues.
    machines = [Machine(id="m0", cpus=4)]
    jobs = [job(f"j{i}", 2, walltime=5.0, submit=10.0 * i) for i in range(3)]
    checked = Checked(EasyBackfill())
    simulate(jobs, machines=machines, policy=checked)
    assert checked.empty_seen >= 3


@dataclass
class Counting:
    """A policy that promises idleness and counts its calls."""

    name: str = "counting"
    idle_on_empty_queue: bool = True
    calls: int = 0

    def decide(self, snapshot: Snapshot) -> Decisions:
        self.calls += 1
        return EasyBackfill().decide(snapshot)


def test_the_core_does_not_call_an_idle_policy_on_an_empty_queue() -> None:
    policy = Counting()
    core = SchedulerCore(policy=policy, machines=[Machine(id="m0", cpus=4)])
    core.schedule(0.0)
    assert policy.calls == 0
    core.submit(job("a", 8 // 2, walltime=5.0))
    core.submit(job("b", 4, walltime=5.0))
    decisions = core.schedule(1.0)
    assert policy.calls == 1
    assert [s.job.id for s in decisions.starts] == ["a"]
    assert [r.job.id for r in core.reservations] == ["b"]
    core.finished("a", 2.0)
    core.schedule(2.0)  # b starts; its promise is dropped
    assert core.queue == []
    assert policy.calls == 2
    assert core.schedule(3.0) == Decisions()
    assert policy.calls == 2
    assert core.reservations == []
