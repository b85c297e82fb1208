"""The job process: the sleep workload follows the execution model in real time.

In-process tests run ``SleepJob`` on the memory broker; the model checks run
the real ``python -m nodeagent.job`` under a real agent. Tolerance of every
timing check: 10 % of the expected wall time plus 50 ms (timer granularity,
the event loop's scheduling and the relay's latency). This is a model check,
not a performance assertion: expected times come from the model's rate and
the time scale, and each case takes about a second.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import NamedTuple

import pytest

from broker.codec import decode, encode
from broker.memory import MemoryBroker
from broker.messages import CancelPart, PartFinished, PartProgress, PartStarted, ResizePart
from model.execution import ExecutionModel
from nodeagent.job import EXIT_CANCELLED, EXIT_DONE, EXIT_LOST, JobSettings, SleepJob, main
from nodeagent.spawn import Launch, LaunchError
from tests.nodeagent.harness import TOPICS, job, running_agent, start


def within(measured: float, expected: float) -> bool:
    return abs(measured - expected) <= 0.10 * expected + 0.05


def launch(**overrides: object) -> Launch:
    fields: dict[str, object] = {
        "agent": "node1",
        "job_id": "j1",
        "procs": 2,
        "cpus": 2,
        "pace": 1.0,
        "work": 100.0,
        "time_scale": 1000.0,
        "root": TOPICS.root,
    }
    fields.update(overrides)
    return Launch(**fields)  # type: ignore[arg-type]


async def run_in_process(
    the_launch: Launch, settings: JobSettings | None = None, *, retained: bytes | None = None
) -> tuple[int, list[PartProgress], SleepJob]:
    broker = MemoryBroker()
    if retained is not None:
        async with broker.client("agent") as agent:
            await agent.publish(TOPICS.job_control("j1"), retained, retain=True)
    async with broker.client("watch") as watch, broker.client("job") as bus:
        await watch.subscribe(TOPICS.agent_events("node1"))
        sleeper = SleepJob(the_launch, bus, settings=settings)
        code = await sleeper.run()
        progress: list[PartProgress] = []
        while not watch._inbox.empty():
            message = decode((await anext(watch.deliveries())).payload)
            assert isinstance(message, PartProgress)
            progress.append(message)
    return code, progress, sleeper


# -- in process -----------------------------------------------------------------------


async def test_sleep_job_does_its_work_and_reports_start_and_end() -> None:
    code, progress, _ = await run_in_process(launch(work=100.0, time_scale=1000.0))
    assert code == EXIT_DONE
    assert [p.done for p in progress] == [0.0, 100.0]
    assert {p.rate for p in progress} == {1.0}
    assert within(progress[-1].at - progress[0].at, 0.1)


async def test_work_counts_from_the_agents_start_time() -> None:
    # Started (by the agent) 50 ms ago: 5 of the 10 units are done already.
    started = time.time() - 0.05
    code, progress, _ = await run_in_process(launch(work=10.0, time_scale=100.0, start_at=started))
    assert code == EXIT_DONE
    assert 4.0 <= progress[0].done <= 7.0
    assert progress[-1].done == 10.0
    assert within(progress[-1].at - started, 0.1)


async def test_zero_work_finishes_at_once() -> None:
    code, progress, _ = await run_in_process(launch(work=0.0))
    assert code == EXIT_DONE
    assert [p.done for p in progress] == [0.0, 0.0]


async def test_progress_reports_are_coalesced() -> None:
    # 0.6 s of work in 10 ms steps: 60 steps, but a report only every 0.1 s.
    settings = JobSettings(step=0.01, report_every=0.1)
    code, progress, _ = await run_in_process(launch(work=60.0, time_scale=100.0), settings)
    assert code == EXIT_DONE
    assert 6 <= len(progress) <= 9
    dones = [p.done for p in progress]
    assert dones == sorted(dones)
    assert dones[-1] == 60.0


async def test_resize_changes_the_rate_for_the_remaining_work() -> None:
    broker = MemoryBroker()
    async with broker.client("agent") as agent, broker.client("job") as bus:
        sleeper = SleepJob(launch(procs=2, cpus=2, work=100.0, time_scale=100.0), bus)
        async with asyncio.TaskGroup() as tg:
            running = tg.create_task(sleeper.run(), name="test-job")
            await asyncio.sleep(0.3)
            resize = ResizePart(job_id="j1", cpus=1, pace=1.0)
            await agent.publish(TOPICS.job_control("j1"), encode(resize))
            await asyncio.sleep(0.1)
            assert (sleeper.rate, sleeper.cpus) == (0.5, 1)
            done_at_resize = sleeper.done
        assert running.result() == EXIT_DONE
    # 30 units at rate 1, then the other 70 at rate 0.5: 0.3 s + 1.4 s.
    assert 25.0 <= done_at_resize <= 40.0


async def test_a_resize_retained_before_the_start_applies() -> None:
    resize = encode(ResizePart(job_id="j1", cpus=1, pace=2.0))
    code, progress, sleeper = await run_in_process(launch(time_scale=1000.0), retained=resize)
    assert code == EXIT_DONE
    assert (sleeper.cpus, sleeper.pace) == (1, 2.0)
    assert progress[-1].rate == 1.0  # MPL 2 at u = 1 halves it, pace 2 doubles it


async def test_cancel_part_on_the_control_topic_stops_the_job() -> None:
    broker = MemoryBroker()
    async with broker.client("agent") as agent, broker.client("job") as bus:
        sleeper = SleepJob(launch(work=1e6, time_scale=1.0), bus)
        async with asyncio.TaskGroup() as tg:
            running = tg.create_task(sleeper.run(), name="test-job")
            await asyncio.sleep(0.1)
            await agent.publish(TOPICS.job_control("j1"), encode(CancelPart(job_id="j1")))
        assert running.result() == EXIT_CANCELLED
        assert 0 < sleeper.done < 1.0


async def test_bad_control_messages_are_counted_and_ignored() -> None:
    broker = MemoryBroker()
    async with broker.client("agent") as agent, broker.client("job") as bus:
        sleeper = SleepJob(launch(work=200.0, time_scale=1000.0), bus)
        async with asyncio.TaskGroup() as tg:
            running = tg.create_task(sleeper.run(), name="test-job")
            await asyncio.sleep(0.02)
            control = TOPICS.job_control("j1")
            await agent.publish(control, b"\xc1")
            await agent.publish(control, encode(ResizePart(job_id="j1", cpus=8)))  # MPL 0.25
            await agent.publish(control, encode(ResizePart(job_id="other", cpus=1)))
            await agent.publish(control, b"", retain=True)  # a cleared retained message
        assert running.result() == EXIT_DONE
        assert sleeper.bad_messages == 3
        assert sleeper.cpus == 2


async def test_cancel_method_is_what_sigterm_calls() -> None:
    broker = MemoryBroker()
    async with broker.client("job") as bus:
        sleeper = SleepJob(launch(work=1e6, time_scale=1.0), bus)
        async with asyncio.TaskGroup() as tg:
            running = tg.create_task(sleeper.run(), name="test-job")
            await asyncio.sleep(0.05)
            sleeper.cancel()
        assert running.result() == EXIT_CANCELLED


async def test_job_exits_when_its_agent_closes_the_pipe() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodeagent.job",
        "--pipe",
        *launch(work=1e6, time_scale=1.0).argv(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None
    process.stdin.close()
    async with asyncio.timeout(10):
        _, err = await process.communicate()
    assert process.returncode == EXIT_LOST
    assert b"the agent closed the pipe" in err


async def test_pipe_mode_refuses_a_stdout_that_is_not_a_pipe() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodeagent.job",
        "--pipe",
        *launch(work=1e6, time_scale=1.0).argv(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(10):
        _, err = await process.communicate()
    assert process.returncode == EXIT_LOST
    assert b"--pipe needs pipes on stdin and stdout" in err


# -- the command line ---------------------------------------------------------------


def test_launch_round_trips_through_the_command_line() -> None:
    import argparse

    original = launch(pace=0.1 + 0.2, ref_speed=3.0, cpu_util=0.3, work=1 / 3, time_scale=7.5)
    parser = argparse.ArgumentParser()
    Launch.add_arguments(parser)
    assert Launch.from_args(parser.parse_args(original.argv())) == original


def test_only_the_sleep_workload_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--pipe", *launch(workload="mpi").argv()]) == 2
    assert "workload 'mpi' is not available" in capsys.readouterr().err


def test_an_allocation_outside_the_mpl_bounds_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = launch().argv()
    argv[argv.index("--cpus=2")] = "--cpus=3"
    assert main(["--pipe", *argv]) == 2
    assert "ceil(p/2) <= cpus <= p" in capsys.readouterr().err
    with pytest.raises(LaunchError):
        launch(cpus=3)


# -- the model check, through a real agent and real processes -------------------------


class Case(NamedTuple):
    procs: int
    cpus: int
    pace: float
    ref_speed: float
    cpu_util: float
    work: float
    time_scale: float


MODEL_CASES = [
    pytest.param(Case(2, 2, 2.0, 1.0, 1.0, 360.0, 100.0), id="fast-machine-mpl1"),
    pytest.param(Case(4, 2, 1.0, 1.0, 0.5, 120.0, 100.0), id="mpl2-u0.5"),
    pytest.param(Case(3, 2, 1.5, 3.0, 1.0, 60.0, 100.0), id="mpl1.5-slow-vs-ref"),
]


@pytest.mark.parametrize("case", MODEL_CASES)
async def test_run_time_follows_the_execution_model(case: Case) -> None:
    # Expected 1.8 s: longer than a job process takes to start (0.2 to 0.5 s, over
    # 1 s on a loaded machine), which the part's clock includes, as the
    # scheduler's does (it starts at PartStarted).
    procs, cpus, pace, ref_speed, cpu_util, work, time_scale = case
    rate = ExecutionModel().rate(
        procs=procs, cpus=cpus, speed=pace, ref_speed=ref_speed, cpu_util=cpu_util
    )
    expected = work / (rate * time_scale)
    spec = job("m", procs=procs, work=work, walltime=1e6, cpu_util=cpu_util, ref_speed=ref_speed)
    async with running_agent(cpus=8) as run:
        await run.scheduler.send(start(spec, cpus=cpus, pace=pace, time_scale=time_scale))
        started = await run.scheduler.expect(PartStarted)
        finished = await run.scheduler.expect(PartFinished)
    assert finished.reason == "done"
    progress = run.scheduler.all(PartProgress)
    assert progress[0].at - started.at < expected, "the process took longer to start than its run"
    assert progress[-1].done == work
    assert all(p.rate == pytest.approx(rate) for p in progress)
    # The part ends when the model says, seen from the scheduler...
    assert within(progress[-1].at - started.at, expected), (progress[-1].at - started.at, expected)
    assert within(finished.at - started.at, expected)
    # ...and every report in between lies on the model's line.
    for p in progress[:-1]:
        assert within(p.at - started.at, p.done / (rate * time_scale)), p


async def test_resize_to_mpl_2_doubles_the_time_of_the_remaining_work() -> None:
    spec = job("r", procs=2, work=200.0, walltime=1e6, malleable=True)
    async with running_agent(cpus=4) as run:
        await run.scheduler.send(start(spec, cpus=2, time_scale=100.0))  # 2 s at rate 1
        started = await run.scheduler.expect(PartStarted)
        first = await run.scheduler.expect(PartProgress)  # the process is up
        await asyncio.sleep(0.1)
        await run.scheduler.send(ResizePart(job_id="r", cpus=1, pace=1.0))
        resized = await run.scheduler.expect(PartProgress, lambda p: p.rate == 0.5)
        assert run.agent.stats().cpus_busy == 1
        await run.scheduler.expect(PartFinished)
    last = run.scheduler.all(PartProgress)[-1]
    assert first.rate == 1.0
    assert last.done == 200.0
    assert resized.done < 200.0
    # Before the resize: rate 1 at 100x; after it: the rest at rate 0.5, twice as long.
    assert within(resized.at - started.at, resized.done / 100.0)
    assert within(last.at - resized.at, (200.0 - resized.done) / 50.0)
