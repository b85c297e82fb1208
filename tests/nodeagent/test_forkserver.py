"""The agent's warm launcher: forked job processes, their signals, exits and the server's death.

Real processes: a real fork server forks the real job module. A job's relay
pipes are held by the test, which reads the job's frames: its first
``PartProgress`` publish is its readiness signal (``nodeagent.job``), so no
test waits for a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.codec import decode
from broker.messages import PartProgress
from nodeagent.launch.contract import EXIT_CANCELLED, EXIT_DONE, EXIT_LOST, EXIT_USAGE, Launch
from nodeagent.launch.forkserver import ForkedProcess, ForkServer, ForkServerError
from nodeagent.launch.frames import PUBLISH, read_frame
from nodeagent.launch.relay import PipeStreams, pipe_streams
from tests.nodeagent.harness import HANG

LONG = 3600.0  # work units: a job that runs until the test ends it


def launch(job_id: str, work: float = LONG, **kw: object) -> Launch:
    return Launch(agent="a1", job_id=job_id, procs=1, cpus=1, pace=1.0, work=work, **kw)  # type: ignore[arg-type]


@dataclass
class Job:
    process: ForkedProcess
    streams: PipeStreams

    async def progress(self) -> PartProgress:
        """The job's next PartProgress (the first one: it is up and handles SIGTERM)."""
        while True:
            frame = await read_frame(self.streams.reader)
            assert frame is not None, "the job closed its relay pipe"
            if frame.op == PUBLISH:
                message = decode(frame.payload)
                assert isinstance(message, PartProgress)
                return message

    def close(self) -> None:
        self.streams.close()


async def start(server: ForkServer, job: Launch, *extra: str) -> Job:
    down_r, down_w = os.pipe2(os.O_CLOEXEC)
    up_r, up_w = os.pipe2(os.O_CLOEXEC)
    try:
        process = await server.launch(["--pipe", *job.argv(), *extra], down_r, up_w)
    except BaseException:
        os.close(down_w)
        os.close(up_r)
        raise
    finally:
        os.close(down_r)
        os.close(up_w)
    return Job(process, await pipe_streams(up_r, down_w))


@asynccontextmanager
async def fork_server() -> AsyncIterator[ForkServer]:
    async with ForkServer() as server:
        yield server


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


async def test_a_forked_job_runs_its_work_and_exits_with_its_code() -> None:
    async with fork_server() as server:
        job = await start(server, launch("done", work=0.05))
        first = await job.progress()
        assert first.job_id == "done"
        assert first.done < 0.05
        assert await job.process.wait() == EXIT_DONE
        # Its run is counted from its fork: the launch is not part of it.
        assert job.process.started_at <= first.at
        job.close()
        usage = await start(server, launch("usage"), "--workload=nothing")
        assert await usage.process.wait() == EXIT_USAGE
        usage.close()
        assert server.stats.restarts == 0


async def test_a_forked_job_shows_its_own_command_line() -> None:
    async with fork_server() as server:
        job = await start(server, launch("titled"))
        await job.progress()
        cmdline = Path(f"/proc/{job.process.pid}/cmdline").read_bytes()
        assert b"nodeagent.job" in cmdline
        assert b"--job-id=titled" in cmdline
        job.process.kill()
        await job.process.wait()
        job.close()


async def test_terminate_and_kill_reach_a_forked_job() -> None:
    async with fork_server() as server:
        term = await start(server, launch("term"))
        kill = await start(server, launch("kill"))
        await term.progress()
        await kill.progress()
        term.process.terminate()
        kill.process.kill()
        assert await term.process.wait() == EXIT_CANCELLED
        assert await kill.process.wait() == -signal.SIGKILL
        # Gone: a signal now is refused, never sent to a recycled pid.
        with pytest.raises(ProcessLookupError):
            kill.process.kill()
        term.close()
        kill.close()


async def test_a_job_whose_agent_end_closes_stops_itself() -> None:
    # What a SIGKILLed agent looks like from its job: its stdin reaches EOF.
    async with fork_server() as server:
        job = await start(server, launch("orphan"))
        await job.progress()
        job.close()
        assert await job.process.wait() == EXIT_LOST


async def test_many_launches_each_get_their_own_process() -> None:
    async with fork_server() as server:
        jobs = await asyncio.gather(*(start(server, launch(f"m{i}")) for i in range(64)))
        for job in jobs:
            await job.progress()
        assert len({job.process.pid for job in jobs}) == 64
        assert server.stats.launches == 0  # observed by the spawn strategy, not the server
        for job in jobs:
            job.process.kill()
        assert {await job.process.wait() for job in jobs} == {-signal.SIGKILL}
        for job in jobs:
            job.close()


async def test_a_dead_fork_server_takes_its_jobs_and_the_next_launch_starts_a_new_one() -> None:
    async with fork_server() as server:
        jobs = [await start(server, launch(f"crash{i}")) for i in range(3)]
        for job in jobs:
            await job.progress()
        first = server.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        # Defined: every job of the dead server is killed and reported EXIT_LOST
        # (the agent reports "fenced", the scheduler requeues), none is left running.
        for job in jobs:
            assert await job.process.wait() == EXIT_LOST
            assert not alive(job.process.pid)
            job.close()
        assert server.stats.restarts == 1
        again = await start(server, launch("after", work=0.01))
        assert server.pid not in (None, first)
        assert await again.process.wait() == EXIT_DONE
        again.close()


async def test_closing_the_server_leaves_no_job_behind() -> None:
    server = ForkServer()
    await server.start()
    job = await start(server, launch("left"))
    await job.progress()
    pid = server.pid
    await server.close()
    assert await job.process.wait() == EXIT_LOST
    assert not alive(job.process.pid)
    assert pid is not None
    assert not alive(pid)
    with pytest.raises(ForkServerError):
        await start(server, launch("late"))
    job.close()
    assert server.stats.restarts == 0


async def test_launches_forked_together_hold_none_of_each_others_pipes() -> None:
    """Launches sent at once are forked as one batch; a child must not inherit the
    relay pipes of the launches after it. Else a quick job's stdout shows no end of
    stream while a long sibling lives, and its agent waits for that sibling (seen in
    a replay: parts reported done seconds late, after a wall-time kill)."""
    async with fork_server() as server:
        jobs = await asyncio.gather(
            *(start(server, launch(f"b{i}", work=LONG if i % 2 else 0.0)) for i in range(8))
        )
        try:
            for job in jobs[::2]:  # no work: done at once
                assert await job.process.wait() == EXIT_DONE
                async with asyncio.timeout(HANG):
                    while await read_frame(job.streams.reader) is not None:
                        pass  # to the end of its stream, which its exit closed
            assert all(job.process.returncode is None for job in jobs[1::2])
        finally:
            for job in jobs:
                with contextlib.suppress(ProcessLookupError):
                    job.process.kill()
                await job.process.wait()
                job.close()


@pytest.mark.parametrize(("opened", "expected"), [(True, EXIT_USAGE), (False, EXIT_LOST)])
def test_a_child_runs_only_once_its_server_opened_the_gate(opened: bool, expected: int) -> None:
    """A fork server that dies between a fork and its pid file must leave no job running
    unrecorded: its child reads end-of-file on the gate instead of a byte, and exits
    ``EXIT_LOST`` without running the job (here, a job that would exit ``EXIT_USAGE``
    on its bogus argument had it run)."""
    from nodeagent.launch.launcher import GATE_OPEN, _child

    gate, gate_w = os.pipe()
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child never returns)
        _child(["--no-such-option"], (stdin_r, stdout_w), 0.0, (gate_w, stdin_w, stdout_r), gate)
    for fd in (gate, stdin_r, stdout_w):
        os.close(fd)
    if opened:
        os.write(gate_w, GATE_OPEN)
    os.close(gate_w)  # the server's death closes it the same way
    _, status = os.waitpid(pid, 0)
    for fd in (stdin_w, stdout_r):
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == expected
