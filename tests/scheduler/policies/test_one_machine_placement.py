"""A job that must run on one machine is never split, by any policy.

Every policy of the registry, through the core as the live scheduler drives
it: an MPI job (``Job.one_machine``, and the capabilities of a machine that
launches its library) waits for one machine with room even when spanning
two would start it sooner, is planned and reserved on one machine, and, wider
than every machine that could run it, is hidden from the policy and says why;
a plain job beside it still spans. The core refuses a policy that splits one.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from model.job import Job
from model.machine import Capability, Machine, Part
from scheduler.core.core import PolicyError, SchedulerCore
from scheduler.core.snapshot import Decisions, SnapshotView, Start
from scheduler.planning.prediction import predict
from scheduler.planning.wait_reasons import WaitWhy, wait_reasons
from scheduler.policies.registry import POLICIES, build_policy
from tests.builders import job

MPI = frozenset({Capability.COMMANDS, Capability.OPENMPI})
LEFT = Machine(id="left", cpus=4, capabilities=MPI)
RIGHT = Machine(id="right", cpus=4, capabilities=MPI)
#: Policies that never span machines whatever the placement rule (EG-EDF's model:
#: "parallel jobs are always executed on only one machine").
NEVER_SPAN = {"eg-edf", "eg-edf-tabu"}


def mpi(job_id: str, procs: int = 4, walltime: float = 10.0, *, malleable: bool = False) -> Job:
    return replace(
        job(job_id, procs, walltime=walltime, malleable=malleable), needs=MPI, one_machine=True
    )


def plain(job_id: str, procs: int = 4, walltime: float = 10.0) -> Job:
    return job(job_id, procs, walltime=walltime, malleable=False)


def core_of(policy: str, *machines: Machine) -> SchedulerCore:
    return SchedulerCore(policy=build_policy(policy), machines=machines or (LEFT, RIGHT))


def half_busy(core: SchedulerCore) -> None:
    """Two CPUs of each machine busy, ``left``'s until 100, ``right``'s until 200."""
    for name, machine, end in (("a", "left", 100.0), ("b", "right", 200.0)):
        held = plain(name, 2, walltime=end)
        core.resume_running(held, (Part(machine, 2),), 0.0, 0.0, end, 0.0, 0.0)


def reasons(core: SchedulerCore, now: float = 0.0) -> dict[str, tuple[WaitWhy, str]]:
    snapshot = core.snapshot(now)
    plan = predict(snapshot, core.policy)
    hidden = [j for j in core.queue if j not in snapshot.queue]
    return dict(wait_reasons(plan, snapshot, core.policy, hidden=hidden))


def test_registry_policies_are_the_ones_these_tests_know() -> None:
    assert set(POLICIES) >= NEVER_SPAN


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_an_mpi_job_waits_for_one_machine_though_two_halves_are_free_now(policy: str) -> None:
    core = core_of(policy)
    half_busy(core)
    core.submit(mpi("mpi"))
    assert core.schedule(0.0).starts == []
    # Planned, and any promise kept for it, whole on the machine that frees first.
    for r in core.reservations:
        assert (r.job.id, r.parts, r.start) == ("mpi", (Part("left", 4),), 100.0)
    planned = predict(core.snapshot(0.0), core.policy).queued["mpi"]
    assert (planned.parts, planned.start) == ((Part("left", 4),), 100.0)
    core.finished("a", 100.0)
    starts = [(s.job.id, s.parts) for s in core.schedule(100.0).starts]
    assert starts == [("mpi", (Part("left", 4),))]


@pytest.mark.parametrize("policy", sorted(set(POLICIES) - NEVER_SPAN))
def test_a_plain_job_of_the_same_width_still_spans_the_two_halves(policy: str) -> None:
    core = core_of(policy)
    half_busy(core)
    core.submit(plain("plain"))
    (start,) = core.schedule(0.0).starts
    assert sorted(start.parts, key=lambda p: p.machine) == [Part("left", 2), Part("right", 2)]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_no_start_of_a_queue_of_mpi_and_plain_jobs_splits_an_mpi_job(policy: str) -> None:
    core = core_of(policy)
    half_busy(core)
    for j in (mpi("m1", 3), plain("p1", 1), mpi("m2", 2), plain("p2", 3), mpi("m3", 1)):
        core.submit(j)
    now = 0.0
    for end, name in ((100.0, "a"), (200.0, "b")):
        for s in core.schedule(now).starts:
            assert len(s.parts) == 1 or not s.job.one_machine, (s.job.id, s.parts)
        now = end
        core.finished(name, now)
    for r in core.reservations:
        assert len(r.parts) == 1 or not r.job.one_machine


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_an_mpi_job_wider_than_every_machine_blocks_nothing_and_says_why(policy: str) -> None:
    core = core_of(policy)
    core.submit(mpi("wide", 8))
    core.submit(plain("behind", 2))
    assert [s.job.id for s in core.schedule(0.0).starts] == ["behind"]
    assert [j.id for j in core.snapshot(0.0).queue] == []  # hidden from the policy
    assert reasons(core)["wide"] == (
        WaitWhy.WIDER_THAN_ONLINE,
        "needs 8 CPUs on one machine that runs commands and openmpi; the largest online has 4",
    )
    # A machine that wide, and able, joins: the job is the policy's again, and runs there.
    core.machine_joined(Machine(id="big", cpus=8, capabilities=MPI))
    assert [(s.job.id, s.parts) for s in core.schedule(1.0).starts] == [("wide", (Part("big", 8),))]


def test_a_wide_enough_machine_without_the_library_is_the_capability_reason() -> None:
    core = core_of("fcfs", LEFT, RIGHT, Machine(id="big", cpus=8))
    core.submit(mpi("wide", 8))
    assert reasons(core)["wide"] == (
        WaitWhy.NO_CAPABLE_MACHINE,
        "needs 8 CPUs on one machine that runs commands and openmpi; the largest online has 4",
    )


def test_a_malleable_mpi_job_is_folded_onto_one_machine_not_spread_over_two() -> None:
    core = core_of("fcfs-malleable")
    core.submit(mpi("folded", 8, malleable=True))
    assert [j.id for j in core.snapshot(0.0).queue] == ["folded"]  # half of it fits one
    (start,) = core.schedule(0.0).starts
    assert start.parts == (Part("left", 4),)


class _Split:
    """A policy that spreads every job over the first two machines: a bug the core catches."""

    name = "split"

    def decide(self, snapshot: SnapshotView) -> Decisions:
        a, b = (m.id for m in snapshot.machines[:2])
        return Decisions(
            starts=[
                Start(j, (Part(a, j.procs // 2), Part(b, j.procs // 2))) for j in snapshot.queue
            ]
        )


def test_the_core_refuses_a_policy_that_splits_a_one_machine_job() -> None:
    core = SchedulerCore(policy=_Split(), machines=(LEFT, RIGHT))
    core.submit(mpi("mpi"))
    with pytest.raises(PolicyError, match="job 'mpi' must run on one machine; placed on 2"):
        core.schedule(0.0)
    assert [j.id for j in core.queue] == ["mpi"]  # nothing was booked
