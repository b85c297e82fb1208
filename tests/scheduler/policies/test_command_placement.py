"""A job that needs a capability goes, and is planned, only where machines have it.

Every policy of the registry, through the core as the twin and the live
scheduler drive it: a command job (``Job.needs``: a machine that runs commands)
skips the first fit that runs none, a job that needs nothing goes anywhere;
predicted starts and reservations of a command job are on capable machines
only; and a command job no machine online can run is hidden from the policy,
blocks no job behind it and waits with the reason ``no_capable_machine``.
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

CMD = frozenset({Capability.COMMANDS})
#: First in the placement order (the faster), and runs no commands.
FAST = Machine(id="fast", cpus=4, speed=2.0)
ABLE = Machine(id="able", cpus=4, speed=1.0, capabilities=CMD)


def command(job_id: str, procs: int = 2, walltime: float = 100.0) -> Job:
    return replace(job(job_id, procs, walltime=walltime, malleable=False), needs=CMD)


def plain(job_id: str, procs: int = 2, walltime: float = 100.0) -> Job:
    return job(job_id, procs, walltime=walltime, malleable=False)


def core_of(policy: str, *machines: Machine) -> SchedulerCore:
    return SchedulerCore(policy=build_policy(policy), machines=machines or (FAST, ABLE))


def hold(core: SchedulerCore, held: Job, machine: str, end: float) -> None:
    """``held`` runs on all of ``machine`` from 0 until ``end``."""
    core.resume_running(held, (Part(machine, held.procs),), 0.0, 0.0, end, 0.0, 0.0)


def machines_of(parts: tuple[Part, ...]) -> set[str]:
    return {p.machine for p in parts}


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_command_job_skips_the_first_fit_and_a_plain_job_goes_anywhere(policy: str) -> None:
    core = core_of(policy)
    for j in (command("cmd"), plain("sleep")):
        core.submit(j)
    starts = {s.job.id: s.parts for s in core.schedule(0.0).starts}
    assert machines_of(starts["cmd"]) == {"able"}
    assert machines_of(starts["sleep"]) == {"fast"}


BACKFILLING = ("conservative", "dpsa-n", "dpsa-p", "dpsa-w", "easy", "fifo-backfill", "flexible")


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_command_job_backfills_onto_capable_machines_only(policy: str) -> None:
    """The head (8 CPUs) waits for the whole cluster at t=50; behind it a short command
    job and a short plain job fit now: the command job only on the capable machine."""
    core = core_of(policy)
    hold(core, plain("r", 2, walltime=50.0), "able", 50.0)
    for j in (plain("head", 8), command("cmd", walltime=10.0), plain("p", walltime=10.0)):
        core.submit(j)
    starts = {s.job.id: s.parts for s in core.schedule(0.0).starts}
    if "cmd" in starts or policy in BACKFILLING:
        assert machines_of(starts["cmd"]) == {"able"}


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_command_job_is_planned_and_reserved_on_capable_machines_only(policy: str) -> None:
    """The incapable machine frees first (t=10), the capable one at t=1000: the command
    job is planned there, at 1000, and so is any reservation the policy keeps for it."""
    core = core_of(policy)
    hold(core, plain("short", 4, walltime=10.0), "fast", 10.0)
    hold(core, plain("long", 4, walltime=1000.0), "able", 1000.0)
    core.submit(command("cmd"))
    assert core.schedule(0.0).starts == []
    for r in core.reservations:
        assert (r.job.id, machines_of(r.parts), r.start) == ("cmd", {"able"}, 1000.0)
    planned = predict(core.snapshot(0.0), core.policy).queued["cmd"]
    assert (machines_of(planned.parts), planned.start) == ({"able"}, 1000.0)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_command_job_no_machine_can_run_blocks_nothing_and_says_why(policy: str) -> None:
    core = core_of(policy, FAST)
    core.submit(command("cmd"))
    core.submit(plain("behind"))
    started = [s.job.id for s in core.schedule(0.0).starts]
    assert started == ["behind"]
    snapshot = core.snapshot(0.0)
    assert [j.id for j in snapshot.queue] == []  # hidden from the policy
    why = wait_reasons(predict(snapshot, core.policy), snapshot, core.policy, hidden=core.queue)
    assert why["cmd"].why is WaitWhy.NO_CAPABLE_MACHINE
    assert why["cmd"].detail == "needs machines that run commands; none of the 1 online does"
    # A machine that runs commands joins: the job is the policy's again, and starts there.
    core.machine_joined(ABLE)
    assert [(s.job.id, machines_of(s.parts)) for s in core.schedule(1.0).starts] == [
        ("cmd", {"able"})
    ]


def test_too_few_capable_cpus_is_the_capability_reason_and_too_few_in_all_is_width() -> None:
    core = core_of("fcfs", Machine(id="big", cpus=8), replace(ABLE, cpus=2))
    core.submit(command("cmd", 4))
    # Wider than the machines online, not than the cluster as configured: they wait.
    core.submit(command("huge", 16), capacity=32)
    core.submit(plain("wide", 16), capacity=32)
    snapshot = core.snapshot(0.0)
    why = wait_reasons(predict(snapshot, core.policy), snapshot, core.policy, hidden=core.queue)
    assert why["cmd"] == (
        WaitWhy.NO_CAPABLE_MACHINE,
        "needs 4 CPUs on machines that run commands; 2 online",
    )
    assert why["huge"].why is WaitWhy.NO_CAPABLE_MACHINE
    assert why["wide"] == (WaitWhy.WIDER_THAN_ONLINE, "needs 16 CPUs; 10 online")


def test_when_every_machine_runs_commands_a_command_job_too_wide_is_just_too_wide() -> None:
    core = core_of("fcfs", ABLE)
    core.submit(command("cmd", 8), capacity=8)
    snapshot = core.snapshot(0.0)
    why = wait_reasons(predict(snapshot, core.policy), snapshot, core.policy, hidden=core.queue)
    assert why["cmd"] == (WaitWhy.WIDER_THAN_ONLINE, "needs 8 CPUs; 4 online")


def test_capable_machines_all_cordoned_is_the_cordoned_reason() -> None:
    cordoned = {"able"}
    core = SchedulerCore(policy=build_policy("easy"), machines=(FAST, ABLE), cordoned=cordoned)
    core.submit(command("cmd"))
    assert core.schedule(0.0).starts == []
    snapshot = core.snapshot(0.0)
    plan = predict(snapshot, core.policy, cordoned=cordoned)
    assert "cmd" not in plan.queued
    why = wait_reasons(plan, snapshot, core.policy, cordoned=cordoned)
    assert why["cmd"].why is WaitWhy.CORDONED


class _Anywhere:
    """A policy that puts every job on the first machine: a bug the core must catch."""

    name = "anywhere"

    def decide(self, snapshot: SnapshotView) -> Decisions:
        first = snapshot.machines[0].id
        return Decisions(starts=[Start(j, (Part(first, j.procs),)) for j in snapshot.queue[:1]])


def test_the_core_refuses_a_command_job_on_a_machine_without_commands() -> None:
    core = SchedulerCore(policy=_Anywhere(), machines=(FAST, ABLE))
    core.submit(command("cmd"))
    with pytest.raises(PolicyError, match="job 'cmd' placed on 'fast', which lacks commands"):
        core.schedule(0.0)
    assert core.state_of("cmd") is not None
    assert [j.id for j in core.queue] == ["cmd"]  # nothing was booked


def test_a_machine_that_stops_running_commands_loses_its_promises_not_its_jobs() -> None:
    core = core_of("conservative")
    hold(core, command("running", 4, walltime=50.0), "able", 50.0)
    hold(core, plain("busy", 4, walltime=50.0), "fast", 50.0)
    core.submit(command("next"))
    core.submit(plain("other", 4))
    core.schedule(0.0)
    promised = {r.job.id: machines_of(r.parts) for r in core.reservations}
    assert promised["next"] == {"able"}
    core.machine_changed("able", frozenset())
    assert "next" not in {r.job.id for r in core.reservations}
    assert core.running_job("running") is not None  # it goes on where it is
    assert core.schedule(1.0).starts == []
    assert [j.id for j in core.snapshot(1.0).queue] == ["other"]  # "next" hidden now
    core.machine_changed("able", CMD)
    assert "next" in {j.id for j in core.snapshot(2.0).queue}
