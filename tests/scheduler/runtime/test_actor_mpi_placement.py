"""MPI jobs go whole to one agent that launches their library, in the live actor.

Fake agents over the memory bus, each registering with commands on and the MPI
libraries it says it can launch (``AgentOnline.mpi``). An MPI job lands on an
agent with its library even when another that runs commands comes first in
the placement order; it is never split over two agents, though a plain job of
the same width is; one wider than every agent with its library waits, saying
so, without blocking the jobs behind it, until one wide enough registers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from broker.command_spec import CommandSpec
from broker.messages import JobSpec
from broker.vocabulary import CommandUsers, MpiLibrary, WaitReason
from tests.builders import spec
from tests.scheduler.runtime.harness import SETTINGS, TOPICS, Cluster, eventually
from tests.scheduler.runtime.test_actor_command_placement import status, waits_for

ON = CommandUsers.AGENT
OPENMPI = (MpiLibrary.OPENMPI,)


def mpi_job(job_id: str, procs: int, library: MpiLibrary = MpiLibrary.OPENMPI) -> JobSpec:
    return JobSpec(
        id=job_id,
        procs=procs,
        walltime=100.0,
        work=100.0,
        workload="command",
        user="ann",
        command=CommandSpec(argv=("./app",), chdir="/home/ann", mpi=library),
    )


@pytest.fixture
async def fcfs(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(
        tmp_path / "journal.sqlite",
        policy="fcfs",
        settings=replace(SETTINGS, predict_interval=0.001),
    )
    await c.client.start(TOPICS.events)
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


async def test_an_mpi_job_lands_only_on_an_agent_with_its_library(fcfs: Cluster) -> None:
    # The faster agent comes first in the placement order, and has no MPI.
    fast = await fcfs.agent("fast", 4, speed=2.0, commands=ON)
    able = await fcfs.agent("able", 4, commands=ON, mpi=OPENMPI)
    await fcfs.client.submit(mpi_job("mpi", 2))
    await eventually(lambda: able.started("mpi"))
    assert not fast.started("mpi")
    (start,) = able.starts()
    assert [h.machine for h in start.hosts] == ["able"]
    # The status says what each machine can do, as sinfo lists node features.
    machines = {m.id: m.capabilities for m in (await status(fcfs)).machines}
    assert machines == {"able": ("commands", "openmpi"), "fast": ("commands",)}


async def test_an_mpi_job_is_not_split_where_a_plain_one_is(fcfs: Cluster) -> None:
    a1 = await fcfs.agent("a1", 2, commands=ON, mpi=OPENMPI)
    a2 = await fcfs.agent("a2", 2, commands=ON, mpi=OPENMPI)
    await fcfs.client.submit(mpi_job("mpi", 4), spec("plain", 4))
    # Wider than either agent: hidden from FCFS, so the plain job behind it starts,
    # over both agents.
    await eventually(lambda: a1.started("plain") and a2.started("plain"))
    row = await waits_for(fcfs, "mpi", WaitReason.WIDER_THAN_ONLINE)
    assert row.reason_detail == (
        "needs 4 CPUs on one machine that runs commands and openmpi; the largest online has 2"
    )
    assert not any(a.started("mpi") for a in (a1, a2))
    big = await fcfs.agent("big", 4, commands=ON, mpi=OPENMPI)
    await eventually(lambda: big.started("mpi"))
    assert not any(a.started("mpi") for a in (a1, a2))


async def test_an_mpi_job_whose_library_no_agent_has_waits_blocking_nothing(
    fcfs: Cluster,
) -> None:
    able = await fcfs.agent("able", 4, commands=ON, mpi=OPENMPI)
    reply = await fcfs.client.submit(mpi_job("mpich", 2, MpiLibrary.MPICH), spec("behind", 2))
    assert [r.accepted for r in reply.results] == [True, True]
    await eventually(lambda: able.started("behind"))
    row = await waits_for(fcfs, "mpich", WaitReason.NO_CAPABLE_MACHINE)
    assert (
        row.reason_detail == "needs machines that run commands and mpich; none of the 1 online does"
    )
    both = await fcfs.agent("both", 2, commands=ON, mpi=(MpiLibrary.MPICH, MpiLibrary.OPENMPI))
    await eventually(lambda: both.started("mpich"))
    assert not able.started("mpich")
