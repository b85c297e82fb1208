"""A SIGKILLed agent's parts outlive it within their lease; a restarted agent adopts them.

Real ``python -m nodeagent`` processes on the session's Mosquitto, real job
processes and ranks. Every wait is on a signal: a message, a pidfd, a file.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.request
from pathlib import Path
from uuid import uuid4

import pytest

from broker.local import free_port
from broker.messages import (
    AgentOffline,
    AgentOnline,
    Heartbeat,
    PartFinished,
    PartProgress,
    PartStarted,
)
from broker.topics import Topics
from nodeagent.agent.cpuset import allowed_list
from nodeagent.survival.state import start_time
from tests.integration.conftest import BrokerEndpoint
from tests.nodeagent.harness import HANG
from tests.nodeagent.real_agents import agent_process, alive, kill, mpi_part, sleep_part, watching
from tests.nodeagent.test_forkserver_agent_kill import gone, ranks_of

pytestmark = pytest.mark.integration


async def test_sigkilled_agent_restarted_adopts_sleep_and_mpi_parts(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    topics = Topics(f"adopt-{uuid4().hex[:6]}/v1")
    state, log = tmp_path / "state", tmp_path / "agent.log"
    async with watching(mosquitto, topics) as scheduler:
        agent = await agent_process(mosquitto, topics, state, log)
        try:
            first = await scheduler.expect(AgentOnline)
            assert first.adopts
            await scheduler.send(sleep_part("s", work=8.0))
            await scheduler.send(mpi_part("m", iterations=150))
            sleeper = await scheduler.expect(PartStarted, lambda p: p.job_id == "s")
            leader = await scheduler.expect(PartStarted, lambda p: p.job_id == "m")
            await scheduler.expect(PartProgress, lambda p: p.job_id == "s")
            await scheduler.expect(PartProgress, lambda p: p.job_id == "m")
            ranks = await ranks_of(leader.pid, 2)
            pinned = {pid: allowed_list(pid) for pid in ranks}
            born = {pid: start_time(pid) for pid in (sleeper.pid, leader.pid, *ranks)}
            await kill(agent)
            will = await scheduler.expect(AgentOffline)
            assert (will.reason, will.incarnation) == ("lost", first.incarnation)
            agent = await agent_process(mosquitto, topics, state, log)
            second = await scheduler.expect(
                AgentOnline, lambda o: o.incarnation != first.incarnation
            )
            # Listed as running from the first announcement, same attempts.
            assert {(p.job_id, p.attempt) for p in second.running} == {("s", 1), ("m", 1)}
            # The same processes (pid and start time): adopted, not started again.
            for pid, when in born.items():
                assert await alive(pid), pid
                assert start_time(pid) == when
            await scheduler.expect(
                Heartbeat,
                lambda b: {p.job_id for p in b.running} == {"s", "m"},
            )
            # The ranks are re-pinned to the same cores.
            for pid, cores in pinned.items():
                assert allowed_list(pid) == cores
            done_s = await scheduler.expect(PartFinished, lambda f: f.job_id == "s")
            done_m = await scheduler.expect(PartFinished, lambda f: f.job_id == "m")
            assert (done_s.reason, done_s.exit_code, done_s.attempt) == ("done", 0, 1)
            assert (done_m.reason, done_m.exit_code, done_m.attempt) == ("done", 0, 1)
            # Run time from the original fork, not from the adoption: at least the
            # modelled 8 s of the sleep part, which began before the kill.
            assert done_s.run_seconds is not None
            assert done_s.run_seconds >= 8.0
            await gone(sleeper.pid)
            await gone(leader.pid)
            # Once each: no second start, no second end.
            assert [p.job_id for p in scheduler.all(PartStarted)] == ["s", "m"]
            assert sorted(f.job_id for f in scheduler.all(PartFinished)) == ["m", "s"]
            # Records are removed with their parts.
            assert sorted(p.name for p in (state / "parts").iterdir()) == []
        finally:
            await kill(agent)


async def test_agent_not_restarted_parts_stop_by_their_lease(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    topics = Topics(f"adopt-{uuid4().hex[:6]}/v1")
    state, log = tmp_path / "state", tmp_path / "agent.log"
    async with watching(mosquitto, topics) as scheduler:
        agent = await agent_process(mosquitto, topics, state, log, "--lease=1.5")
        try:
            await scheduler.expect(AgentOnline)
            await scheduler.send(sleep_part("s", work=3600.0))
            await scheduler.send(mpi_part("m", iterations=100_000))
            sleeper = await scheduler.expect(PartStarted, lambda p: p.job_id == "s")
            leader = await scheduler.expect(PartStarted, lambda p: p.job_id == "m")
            await scheduler.expect(PartProgress, lambda p: p.job_id == "m")
            ranks = await ranks_of(leader.pid, 2)
            lease = (state / "parts" / "s@1.lease").stat().st_mtime
            await kill(agent)
            await gone(sleeper.pid)
            await gone(leader.pid)
            for rank in ranks:
                await gone(rank)
            # Not renewed by anybody since the kill: the bound is the lease from there.
            assert (state / "parts" / "s@1.lease").stat().st_mtime <= lease + 1.5
            # The next incarnation finds them gone and reports them for a requeue.
            agent = await agent_process(mosquitto, topics, state, log, "--lease=1.5")
            lost = [
                await scheduler.expect(PartFinished, lambda f, j=j: f.job_id == j)  # type: ignore[misc]
                for j in ("s", "m")
            ]
            assert {(f.reason, f.attempt) for f in lost} == {("fenced", 1)}
            # A new start of the same job id and attempt (a fresh scheduler) runs.
            await scheduler.send(sleep_part("s", work=0.1))
            again = await scheduler.expect(
                PartFinished, lambda f: f.job_id == "s" and f.reason == "done"
            )
            assert again.exit_code == 0
        finally:
            await kill(agent)


async def test_no_adopt_agent_kills_what_it_finds(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    """A part left by an adopting agent, found by a ``--no-adopt`` one: killed before
    it registers, reported ``fenced``, its files removed."""
    topics = Topics(f"adopt-{uuid4().hex[:6]}/v1")
    state, log = tmp_path / "state", tmp_path / "agent.log"
    async with watching(mosquitto, topics) as scheduler:
        agent = await agent_process(mosquitto, topics, state, log)
        try:
            first = await scheduler.expect(AgentOnline)
            await scheduler.send(sleep_part("s", work=3600.0))
            sleeper = await scheduler.expect(PartStarted)
            await scheduler.expect(PartProgress)
            await kill(agent)
            agent = await agent_process(mosquitto, topics, state, log, "--no-adopt")
            second = await scheduler.expect(
                AgentOnline, lambda o: o.incarnation != first.incarnation
            )
            assert second.running == ()
            assert not second.adopts
            await gone(sleeper.pid)  # killed before the registration
            lost = await scheduler.expect(PartFinished)
            assert (lost.job_id, lost.reason) == ("s", "fenced")
            assert list((state / "parts").iterdir()) == []
        finally:
            await kill(agent)


async def test_reused_pid_and_garbage_records_are_refused(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    """A record naming a live unrelated process (its pid reused) is never adopted nor
    signalled; garbage records are refused and counted; the agent goes on. Parts with
    a pid file (something may have run) are reported ``fenced``; one without (never
    forked) is dropped unreported, its start to be sent again."""
    topics = Topics(f"adopt-{uuid4().hex[:6]}/v1")
    state, log = tmp_path / "state", tmp_path / "agent.log"
    parts = state / "parts"
    parts.mkdir(parents=True, mode=0o700)
    state.chmod(0o700)
    bystander = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; sys.stdin.read()", stdin=asyncio.subprocess.PIPE
    )
    try:
        born = start_time(bystander.pid)
        assert born is not None
        record = {
            "version": 1,
            "job_id": "victim",
            "attempt": 1,
            "cpus": 1,
            "slots": [0],
            "argv": [
                "--agent=a1",
                "--job-id=victim",
                "--procs=1",
                "--cpus=1",
                "--pace=1.0",
                "--work=10.0",
                f"--root={topics.root}",
                "--lease-file=/nonexistent",
                "--lease=8.0",
                f"--relay-socket={state / 'relay.sock'}",
            ],
            "budget": 10.0,
            "rate": 1.0,
            "changed": 0.0,
        }
        (parts / "victim@1.json").write_text(json.dumps(record))
        # The pid is the bystander's, but the start time is not: a reused pid.
        (parts / "victim@1.pid").write_text(f"{bystander.pid} {born - 1} 1.0 1.0\n")
        (parts / "junk@1.json").write_bytes(b"\x00garbage{")
        (parts / "junk@1.pid").write_text("not a pid file")
        (parts / "other@2.json").write_text(json.dumps({**record, "job_id": "victim"}))
        (parts / "..@1.json").write_text("{}")
        async with watching(mosquitto, topics) as scheduler:
            agent = await agent_process(mosquitto, topics, state, log)
            try:
                online = await scheduler.expect(AgentOnline)
                assert online.running == ()
                reported = [
                    await scheduler.expect(PartFinished, lambda f, j=j: f.job_id == j)  # type: ignore[misc]
                    for j in ("victim", "junk")
                ]
                assert {f.reason for f in reported} == {"fenced"}
                assert bystander.returncode is None
                assert await alive(bystander.pid)
                # The agent goes on: a part runs.
                await scheduler.send(sleep_part("ok", work=0.1))
                done = await scheduler.expect(PartFinished, lambda f: f.job_id == "ok")
                assert done.reason == "done"
                assert "other" not in {f.job_id for f in scheduler.all(PartFinished)}
            finally:
                await kill(agent)
        text = log.read_text()
        assert "refused" in text
        assert "3 bad record(s)" in text
        assert sorted(p.name for p in parts.iterdir()) == []
        assert await alive(bystander.pid)
    finally:
        bystander.kill()
        await bystander.wait()


async def test_forged_rejoin_is_refused_and_counted(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    """A process that is not the adopted part's says HELLO with its key: refused; the
    real part rejoins and finishes."""
    from nodeagent.launch.frames import HELLO, WELCOME, Frame, read_frame

    topics = Topics(f"adopt-{uuid4().hex[:6]}/v1")
    state, log = tmp_path / "state", tmp_path / "agent.log"
    async with watching(mosquitto, topics) as scheduler:
        agent = await agent_process(mosquitto, topics, state, log)
        try:
            first = await scheduler.expect(AgentOnline)
            await scheduler.send(sleep_part("s", work=6.0))
            await scheduler.expect(PartStarted)
            await scheduler.expect(PartProgress)
            await kill(agent)
            port = free_port()
            agent = await agent_process(
                mosquitto, topics, state, log, f"--metrics-port={port}", "--metrics-addr=127.0.0.1"
            )
            await scheduler.expect(AgentOnline, lambda o: o.incarnation != first.incarnation)
            reader, writer = await asyncio.open_unix_connection(str(state / "relay.sock"))
            writer.write(Frame(HELLO, "s@1").pack())
            await writer.drain()
            async with asyncio.timeout(HANG):
                answer = await read_frame(reader)
            assert answer is not None
            assert answer.op == WELCOME
            assert answer.topic == ""
            writer.close()
            done = await scheduler.expect(PartFinished, lambda f: f.job_id == "s")
            assert (done.reason, done.exit_code) == ("done", 0)
            metrics = await asyncio.to_thread(_scrape, port)
            assert (
                'accordion_agent_relay_dropped_total{agent="a1",reason="rejoin_refused"} 1.0'
                in metrics
            )
            assert 'accordion_agent_rejoins_total{agent="a1"} 1.0' in metrics
            assert 'accordion_agent_parts_adopted_total{agent="a1"} 1.0' in metrics
        finally:
            await kill(agent)
    assert "connection refused" in log.read_text()


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body: bytes = response.read()
    return body.decode()


async def test_part_finishing_while_agent_is_down_is_reported_by_the_next(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    """The work ends while no agent runs: the job keeps its last frames and its exit
    code until it rejoins, and the new incarnation reports it done."""
    topics = Topics(f"adopt-{uuid4().hex[:6]}/v1")
    state, log = tmp_path / "state", tmp_path / "agent.log"
    async with watching(mosquitto, topics) as scheduler:
        agent = await agent_process(mosquitto, topics, state, log)
        try:
            first = await scheduler.expect(AgentOnline)
            await scheduler.send(sleep_part("s", work=1.0))
            started = await scheduler.expect(PartStarted)
            await scheduler.expect(PartProgress)
            await kill(agent)
            # The work is over (1 s of it) while no agent runs: the job waits to say so.
            await _work_over(started.at + 1.0)
            assert await alive(started.pid)
            agent = await agent_process(mosquitto, topics, state, log)
            await scheduler.expect(AgentOnline, lambda o: o.incarnation != first.incarnation)
            done = await scheduler.expect(PartFinished)
            assert (done.job_id, done.reason, done.exit_code) == ("s", "done", 0)
            await gone(started.pid)
        finally:
            await kill(agent)


async def _work_over(at: float) -> None:
    """Until the wall clock passes ``at`` (the job's own account of its end): the
    condition under test, not a synchronisation with anything that reports (the test
    holds whichever of the two comes first)."""
    while (left := at - time.time()) > 0:
        await asyncio.sleep(left)
