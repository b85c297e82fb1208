"""Command jobs go only to agents that run commands, in the live actor.

Fake agents over the memory bus, each registering with commands on or off
(``AgentOnline.commands``). A command job lands on an agent that runs commands
even when another comes first in the placement order; with none online it is
accepted and waits, with the reason ``no_capable_machine``, without blocking
the jobs behind it, until one registers. An agent that comes back as a new
process with commands off (its parts requeued, or adopted) gets no command job
after that, and loses the reservation one held there.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from broker.command_spec import CommandSpec
from broker.messages import JobSpec, JobStatus, RunningPart, StatusReply, StatusRequest
from broker.vocabulary import CommandUsers, WaitReason
from tests.builders import spec
from tests.scheduler.runtime.harness import SETTINGS, TOPICS, Cluster, FakeAgent, eventually

ON = CommandUsers.AGENT
OFF = CommandUsers.OFF
NONE_ONLINE = "needs machines that run commands; none of the {n} online does"


def command(job_id: str, procs: int = 1) -> JobSpec:
    return JobSpec(
        id=job_id,
        procs=procs,
        walltime=100.0,
        work=100.0,
        workload="command",
        user="ann",
        command=CommandSpec(argv=("./app",), chdir="/home/ann"),
    )


async def started(path: Path, policy: str) -> Cluster:
    c = Cluster(path, policy=policy, settings=replace(SETTINGS, predict_interval=0.001))
    await c.client.start(TOPICS.events)
    await c.start()
    return c


@pytest.fixture
async def easy(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = await started(tmp_path / "journal.sqlite", "easy")
    try:
        yield c
    finally:
        await c.stop()


@pytest.fixture
async def fcfs(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = await started(tmp_path / "journal.sqlite", "fcfs")
    try:
        yield c
    finally:
        await c.stop()


async def status(c: Cluster) -> StatusReply:
    rid = c.client.request_id()
    await c.client.send(StatusRequest(request_id=rid, reply_to=c.client.name))
    return await c.client.inbox.expect(StatusReply, lambda r: r.request_id == rid)


async def waits_for(c: Cluster, job_id: str, reason: WaitReason) -> JobStatus:
    """``job_id``'s status row once a prediction pass gives it ``reason``."""
    assert c.actor is not None
    async with asyncio.timeout(5.0):
        while True:
            await c.settle()
            c.actor.tick()  # a pass runs after a batch: make one
            row = next((j for j in (await status(c)).queue if j.id == job_id), None)
            if row is not None and row.reason is reason:
                return row


def started_on(agents: list[FakeAgent], job_id: str) -> list[str]:
    return [a.id for a in agents if a.started(job_id)]


async def test_a_command_job_skips_the_first_fit_that_runs_no_commands(easy: Cluster) -> None:
    # The faster agent comes first in the placement order, and runs no commands.
    fast = await easy.agent("fast", 4, speed=2.0, commands=OFF)
    slow = await easy.agent("slow", 4, commands=ON)
    await easy.client.submit(command("cmd"), spec("sleep", 1))
    await eventually(lambda: slow.started("cmd") and fast.started("sleep"))
    assert started_on([fast, slow], "cmd") == ["slow"]
    assert started_on([fast, slow], "sleep") == ["fast"]
    await slow.finish("cmd")
    await eventually(lambda: easy.state("cmd") == "finished")


async def test_with_no_agent_running_commands_it_waits_blocking_nothing_then_runs(
    fcfs: Cluster,
) -> None:
    off = await fcfs.agent("off", 4, commands=OFF)
    reply = await fcfs.client.submit(command("cmd", 2), spec("behind", 2))
    # Accepted: agents that run commands may come later.
    assert [r.accepted for r in reply.results] == [True, True]
    # FCFS, yet the job behind it starts: a job no machine can run holds nothing up.
    await eventually(lambda: off.started("behind"))
    row = await waits_for(fcfs, "cmd", WaitReason.NO_CAPABLE_MACHINE)
    assert row.reason_detail == NONE_ONLINE.format(n=1)
    assert row.predicted_start is None
    assert not off.started("cmd")
    assert fcfs.state("cmd") == "queued"
    on = await fcfs.agent("on", 2, commands=ON)
    await eventually(lambda: on.started("cmd"))
    assert not off.started("cmd")


async def test_agents_that_run_commands_but_are_too_small_say_so(fcfs: Cluster) -> None:
    await fcfs.agent("big", 8, commands=OFF)
    small = await fcfs.agent("small", 2, commands=ON)
    await fcfs.client.submit(command("wide", 4))
    row = await waits_for(fcfs, "wide", WaitReason.NO_CAPABLE_MACHINE)
    assert row.reason_detail == "needs 4 CPUs on machines that run commands; 2 online"
    assert fcfs.state("wide") == "queued"
    assert not small.started("wide")


async def test_a_new_incarnation_with_commands_off_gets_no_command_job(easy: Cluster) -> None:
    """Its parts are lost (it adopts nothing): the command jobs go back to the queue and
    wait for a machine that runs commands, none placed on it or on the other agent."""
    off = await easy.agent("off", 2, commands=OFF)
    a1 = await easy.agent("a1", 2, commands=ON)
    await easy.client.submit(command("first", 2), command("next", 2))
    await eventually(lambda: a1.started("first"))
    await waits_for(easy, "next", WaitReason.RESOURCES)  # reserved at first's end, on a1
    a1.runs_commands = OFF
    a1.running.clear()
    a1.incarnation = "i2"
    await a1.announce()
    await eventually(lambda: easy.state("first") == "queued")
    for job_id in ("first", "next"):
        row = await waits_for(easy, job_id, WaitReason.NO_CAPABLE_MACHINE)
        assert row.reason_detail == NONE_ONLINE.format(n=2)
    # A sleep job still runs on it: only command jobs need the capability.
    await easy.client.submit(spec("sleep", 2))
    await eventually(lambda: a1.started("sleep") or off.started("sleep"))
    assert len(a1.starts()) + len(off.starts()) == 2  # "first" once, and "sleep"
    assert easy.state("next") == "queued"


async def test_an_adopting_incarnation_with_commands_off_keeps_its_part_and_loses_the_rest(
    easy: Cluster,
) -> None:
    """It adopts the command job it runs (that part goes on to its end), but the
    reservation of the one queued behind it is dropped and nothing more goes there,
    until an incarnation with commands on comes back."""
    await easy.agent("off", 2, commands=OFF)
    a1 = await easy.agent("a1", 2, commands=ON, lease=8.0, adopts=True)
    await easy.client.submit(command("first", 2), command("next", 2))
    await eventually(lambda: a1.started("first"))
    await waits_for(easy, "next", WaitReason.RESOURCES)
    assert easy.actor is not None
    assert [r.job.id for r in easy.actor.core.reservations] == ["next"]
    part = a1.part("first")
    a1.runs_commands = OFF
    a1.incarnation = "i2"
    await a1.announce([part])
    await eventually(lambda: easy.agent_state("a1") == "online" and a1.incarnation == "i2")
    row = await waits_for(easy, "next", WaitReason.NO_CAPABLE_MACHINE)
    assert row.reason_detail == NONE_ONLINE.format(n=2)
    assert easy.actor.core.reservations == []
    assert easy.state("first") == "running"  # adopted: it runs on where it is
    await a1.finish("first")
    await eventually(lambda: easy.state("first") == "finished")
    await waits_for(easy, "next", WaitReason.NO_CAPABLE_MACHINE)
    assert len(a1.starts()) == 1
    # Back with commands on (adopting nothing): the command job goes there.
    a1.runs_commands = ON
    a1.incarnation = "i3"
    await a1.announce(list[RunningPart]())
    await eventually(lambda: a1.started("next"))
