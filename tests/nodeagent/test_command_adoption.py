"""A command job outlives a SIGKILLed agent and is adopted; what nobody adopts is ended.

Real ``python -m nodeagent --allow-commands`` processes on the session's
Mosquitto. A restarted agent adopts a running command's supervisor as it
adopts any part, and reports the command's exit status when it ends. A part
whose agent is not restarted in time stops by its lease, its command's whole
tree with it (a daemon in a session of its own included), and the agent's
next incarnation removes its cgroup; and a supervisor that
is SIGKILLed leaves nothing behind: its agent ends what is left.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from broker.command_spec import CommandSpec
from broker.messages import (
    AgentOffline,
    AgentOnline,
    CancelPart,
    JobSpec,
    PartFinished,
    PartStarted,
    ResizePart,
    StartPart,
)
from broker.mqtt import MqttBus, MqttSettings
from broker.topics import Topics
from broker.vocabulary import MpiLibrary
from nodeagent.launch.jobtree import cgroup2_mount, cgroup_base, own_cgroup
from tests.integration.conftest import BrokerEndpoint
from tests.nodeagent.commands_harness import alive, command_job, file_says
from tests.nodeagent.harness import Scheduler
from tests.nodeagent.test_forkserver_agent_kill import gone
from tests.nodeagent.test_mpi_commands import CG, CORES, on_cores, ranks_when

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
ME = pwd.getpwuid(os.geteuid()).pw_name


async def start_agent(
    endpoint: BrokerEndpoint, topics: Topics, folder: Path, *extra: str, name: str = "c1"
) -> asyncio.subprocess.Process:
    user_map = folder / "users.map"
    user_map.write_text(f"{ME} {ME}\n")
    user_map.chmod(0o644)
    with (folder / "agent.log").open("ab") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "nodeagent",
            f"--host={endpoint.host}",
            f"--port={endpoint.port}",
            f"--root={topics.root}",
            f"--name={name}",
            "--cpus=2",
            "--heartbeat=0.2",
            "--kill-grace=1",
            f"--state-dir={folder / 'state'}",
            "--lease=20",
            "--allow-commands",
            f"--user-map={user_map}",
            f"--jobs-dir={folder / 'jobs'}",
            *extra,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )


@asynccontextmanager
async def watching(
    endpoint: BrokerEndpoint, topics: Topics, name: str = "c1"
) -> AsyncIterator[Scheduler]:
    settings = MqttSettings(endpoint.host, endpoint.port)
    async with MqttBus(settings, f"sched-{uuid.uuid4().hex[:6]}") as bus, asyncio.TaskGroup() as tg:
        await bus.subscribe(topics.agent_state(name))
        await bus.subscribe(topics.agent_events(name))
        scheduler = Scheduler(bus, name, topics)
        reader = tg.create_task(scheduler.read(), name="test-command-adoption")
        try:
            yield scheduler
        finally:
            reader.cancel()


def command(job_id: str, script: str, folder: Path) -> StartPart:
    spec = JobSpec(
        id=job_id,
        procs=1,
        walltime=1e6,
        work=1e6,
        workload="command",
        user=ME,
        owner=ME,
        command=CommandSpec(argv=("sh", "-c", script), chdir=str(folder)),
    )
    return StartPart(job=spec, cpus=1, time_scale=1.0)


async def kill(agent: asyncio.subprocess.Process) -> None:
    if agent.returncode is None:
        agent.send_signal(signal.SIGKILL)
    await agent.wait()


async def stop(agent: asyncio.subprocess.Process) -> None:
    """A test's end: the agent's clean stop (which removes its cgroups), else its KILL."""
    if agent.returncode is None:
        agent.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(agent.wait(), 60)
        except TimeoutError:
            await kill(agent)


async def test_a_restarted_agent_adopts_a_running_command_and_reports_its_exit(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    topics = Topics(f"cadopt-{uuid.uuid4().hex[:6]}/v1")
    gate = tmp_path / "go"
    script = f"echo started; while [ ! -e {gate} ]; do sleep 0.05; done; echo ended; exit 7"
    async with watching(mosquitto, topics) as scheduler:
        agent = await start_agent(mosquitto, topics, tmp_path)
        try:
            first = await scheduler.expect(AgentOnline)
            await scheduler.send(command("a1", script, tmp_path))
            started = await scheduler.expect(PartStarted, lambda p: p.job_id == "a1")
            await file_says(tmp_path / "accordion-a1.out", what="started")
            await kill(agent)
            await scheduler.expect(AgentOffline)
            assert alive(started.pid)  # the supervisor outlives its agent
            agent = await start_agent(mosquitto, topics, tmp_path)
            second = await scheduler.expect(
                AgentOnline, lambda o: o.incarnation != first.incarnation
            )
            assert [p.job_id for p in second.running] == ["a1"]
            gate.write_text("go")
            ended = await scheduler.expect(PartFinished, lambda f: f.job_id == "a1")
            assert (ended.reason, ended.exit_status, ended.attempt) == ("failed", 7, 1)
            assert (tmp_path / "accordion-a1.out").read_text() == "started\nended\n"
            await gone(started.pid)
            assert sorted(p.name for p in (tmp_path / "state" / "parts").iterdir()) == []
        finally:
            await stop(agent)


async def test_a_command_nobody_adopts_stops_by_its_lease_with_its_whole_tree(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    topics = Topics(f"cadopt-{uuid.uuid4().hex[:6]}/v1")
    name = f"l-{uuid.uuid4().hex[:6]}"  # its own cgroups' parent, whatever other tests left
    marks = tmp_path / "daemon"
    script = (
        f"setsid sh -c 'trap \"\" TERM HUP; echo $$ > {marks}; exec sleep 1000' & "
        "while :; do sleep 0.05; done"
    )
    async with watching(mosquitto, topics, name) as scheduler:
        agent = await start_agent(mosquitto, topics, tmp_path, "--lease=1.5", name=name)
        try:
            await scheduler.expect(AgentOnline)
            await scheduler.send(command("l1", script, tmp_path))
            started = await scheduler.expect(PartStarted, lambda p: p.job_id == "l1")
            daemon = int((await file_says(marks, what="\n")).strip())
            await kill(agent)
            await gone(started.pid)
            await gone(daemon)
            # The agent's next incarnation settles the part: fenced, its cgroup removed;
            # its clean stop removes the cgroups' parent. Nothing is left on the host.
            agent = await start_agent(mosquitto, topics, tmp_path, name=name)
            fenced = await scheduler.expect(PartFinished, lambda f: f.job_id == "l1")
            assert fenced.reason == "fenced", fenced
            mount, own = cgroup2_mount(), own_cgroup()
            parent = None if mount is None or own is None else mount / own.lstrip("/")
            if parent is not None:
                assert not (parent / f"accordion-{name}" / "l1@1").exists()
            agent.send_signal(signal.SIGTERM)
            assert await agent.wait() == 0
            if parent is not None:
                assert not (parent / f"accordion-{name}").exists()
        finally:
            await stop(agent)


def cgroups_here() -> bool:
    base, _ = cgroup_base(f"accordion-probe-{os.getpid()}")
    if base is None:
        return False
    base.rmdir()
    return True


@pytest.mark.skipif(
    not cgroups_here(),
    reason="without a cgroup, what a SIGKILLed supervisor left is re-parented to init "
    "(the subreaper walk's stated limit)",
)
async def test_a_sigkilled_supervisor_leaves_nothing_behind(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    topics = Topics(f"cadopt-{uuid.uuid4().hex[:6]}/v1")
    marks = tmp_path / "daemon"
    script = (
        f"setsid sh -c 'trap \"\" TERM HUP; echo $$ > {marks}; exec sleep 1000' & "
        "while :; do sleep 0.05; done"
    )
    async with watching(mosquitto, topics) as scheduler:
        agent = await start_agent(mosquitto, topics, tmp_path)
        try:
            await scheduler.expect(AgentOnline)
            await scheduler.send(command("k1", script, tmp_path))
            started = await scheduler.expect(PartStarted, lambda p: p.job_id == "k1")
            daemon = int((await file_says(marks, what="\n")).strip())
            os.kill(started.pid, signal.SIGKILL)
            ended = await scheduler.expect(PartFinished, lambda f: f.job_id == "k1")
            assert ended.reason == "failed"
            await gone(daemon)  # its agent killed what the supervisor left (its cgroup)
        finally:
            await stop(agent)


@pytest.mark.skipif(
    shutil.which("mpirun.openmpi") is None or not CG.is_file() or len(CORES) < 2,
    reason="needs Debian's Open MPI, examples/mpi built (scripts/setup) and two cores",
)
async def test_a_restarted_agent_adopts_mpi_ranks_and_repins_them_at_a_resize(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    topics = Topics(f"cadopt-{uuid.uuid4().hex[:6]}/v1")
    argv = [str(CG), "-n", "20000", "-i", "100000000"]
    spec = command_job("mpi1", argv, tmp_path, procs=2, owner=ME, mpi=MpiLibrary.OPENMPI)
    a, b = str(CORES[0]), str(CORES[1])
    async with watching(mosquitto, topics) as scheduler:
        agent = await start_agent(mosquitto, topics, tmp_path)
        try:
            first = await scheduler.expect(AgentOnline)
            await scheduler.send(StartPart(job=spec, cpus=2, time_scale=1.0))
            started = await scheduler.expect(PartStarted, lambda p: p.job_id == "mpi1")
            ranks = await ranks_when(started.pid, on_cores(a, b))
            await kill(agent)
            await scheduler.expect(AgentOffline)
            agent = await start_agent(mosquitto, topics, tmp_path)
            second = await scheduler.expect(
                AgentOnline, lambda o: o.incarnation != first.incarnation
            )
            assert [p.job_id for p in second.running] == ["mpi1"]
            # The ranks ran on through the restart, on their cores; the new incarnation
            # folds them at a resize as its predecessor would have.
            await scheduler.send(ResizePart(job_id="mpi1", cpus=1, job_cpus=1, attempt=1))
            folded = await ranks_when(started.pid, on_cores(a, a))
            assert {r.root for r in folded.values()} == {r.root for r in ranks.values()}
            await scheduler.send(CancelPart(job_id="mpi1", attempt=1))
            ended = await scheduler.expect(PartFinished, lambda f: f.job_id == "mpi1")
            assert ended.reason == "cancelled", ended
            for rank in ranks.values():
                await gone(rank.root)
        finally:
            await stop(agent)
