"""The job process: the sleep workload follows the execution model.

In-process tests run ``SleepJob`` on the memory broker and a manual clock
(``tests.nodeagent.clock``): what they check of time is exact, whatever the
machine's load. The model checks run the real ``python -m nodeagent.job``
under a real agent, on the wall clock; they check the reports against the
model's line, which a loaded machine cannot bend (see :data:`REPORT_SKEW`),
never how long the run took.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import NamedTuple

import pytest

from broker.bus import Bus
from broker.codec import encode
from broker.memory import MemoryBroker
from broker.messages import (
    CancelPart,
    Message,
    PartFinished,
    PartProgress,
    PartStarted,
    ResizePart,
)
from model.execution import ExecutionModel
from nodeagent.job.sleep_job import JobSettings, SleepJob, main
from nodeagent.launch.contract import EXIT_CANCELLED, EXIT_DONE, EXIT_LOST, Launch, LaunchError
from tests.builders import spec
from tests.nodeagent.clock import ManualClock
from tests.nodeagent.harness import HANG, TOPICS, UNLIMITED, Scheduler, running_agent, start

REPORT_SKEW = 0.25
"""Wall seconds a report's ``at`` may lag the instant its ``done`` was computed for.

The job process reads the two clocks microseconds apart, but a loaded machine
can preempt it in between for a scheduling period or a few. A quarter of a
second bounds that generously and stays well under the distances checked (a
report a second into the run, or one after a resize), so a wrong rate or time
scale still fails.
"""


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


@dataclass
class InProcess:
    """A ``SleepJob`` running on a memory broker, seen as its agent would see it."""

    sleeper: SleepJob
    clock: ManualClock
    agent: Bus
    events: Scheduler
    task: asyncio.Task[int]

    async def report(self, index: int) -> PartProgress:
        """The job's ``index``-th report (from 0), once it has arrived."""
        await self.events.expect(PartProgress, lambda _: len(self.reports) > index)
        return self.reports[index]

    @property
    def reports(self) -> list[PartProgress]:
        return self.events.all(PartProgress)

    async def control(self, message: Message | bytes) -> None:
        payload = message if isinstance(message, bytes) else encode(message)
        await self.agent.publish(TOPICS.job_control(self.sleeper.launch.job_id), payload)

    async def exit_code(self) -> int:
        async with asyncio.timeout(HANG):
            return await self.task


@asynccontextmanager
async def sleep_job(
    the_launch: Launch,
    clock: ManualClock,
    settings: JobSettings | None = None,
    *,
    retained: bytes | None = None,
) -> AsyncIterator[InProcess]:
    """Run ``the_launch`` in process on ``clock``; a job still running at the end is a
    failed test, and is cancelled."""
    broker = MemoryBroker()
    async with (
        broker.client("agent") as agent,
        broker.client("watch") as watch,
        broker.client("job") as bus,
    ):
        if retained is not None:
            await agent.publish(TOPICS.job_control(the_launch.job_id), retained, retain=True)
        await watch.subscribe(TOPICS.agent_events(the_launch.agent))
        events = Scheduler(watch, the_launch.agent)
        sleeper = SleepJob(
            the_launch, bus, settings=settings, clock=clock.wall, monotonic=clock.monotonic
        )
        async with asyncio.TaskGroup() as tg:
            reader = tg.create_task(events.read(), name="test-job-events")
            task = tg.create_task(sleeper.run(), name="test-job")
            try:
                yield InProcess(sleeper, clock, agent, events, task)
            finally:
                task.cancel()
                reader.cancel()


# -- in process, on a manual clock ----------------------------------------------------


async def test_sleep_job_does_its_work_and_reports_start_and_end() -> None:
    # 100 units at rate 1 and 1000x: 0.1 s. The clock ticks 1/1024 s per reading, so
    # the job sees the end at the first reading at or past it.
    clock = ManualClock(tick=1 / 1024)
    async with sleep_job(launch(work=100.0), clock, JobSettings(step=0.001)) as run:
        assert await run.exit_code() == EXIT_DONE
        end = await run.report(1)
    first = run.reports[0]
    assert [(p.done, p.rate) for p in run.reports] == [(0.0, 1.0), (100.0, 1.0)]
    # Dated at the work's completion (0.1 s after its start), not at the reading that
    # noticed it up to a tick later: the run the agent measures ends with the work.
    assert end.at - first.at == pytest.approx(0.1, abs=1e-6)  # an epoch float's ulp


async def test_work_counts_from_the_agents_start_time() -> None:
    # Started (by the agent) 1/8 s before the job's first reading: 12.5 of its 25
    # units (at 100x) are done already, and the rest take another 1/8 s.
    clock = ManualClock()
    started = clock.now - 1 / 8
    async with sleep_job(launch(work=25.0, time_scale=100.0, start_at=started), clock) as run:
        first = await run.report(0)
        assert (first.done, first.at) == (12.5, clock.now)
        clock.advance(1 / 8)
        assert await run.exit_code() == EXIT_DONE
        end = await run.report(1)
    assert (end.done, end.at - started) == (25.0, 1 / 4)


async def test_zero_work_finishes_at_once() -> None:
    async with sleep_job(launch(work=0.0), ManualClock()) as run:
        assert await run.exit_code() == EXIT_DONE
        await run.report(1)
    assert [p.done for p in run.reports] == [0.0, 0.0]


async def test_progress_reports_are_coalesced() -> None:
    # 0.75 s of work read in steps of 1/64 s (one clock reading per step): 48 steps,
    # but a report only every 1/8 s, and the start and the end.
    clock = ManualClock(tick=1 / 64)
    settings = JobSettings(step=0.001, report_every=1 / 8)
    async with sleep_job(launch(work=75.0, time_scale=100.0), clock, settings) as run:
        assert await run.exit_code() == EXIT_DONE
        await run.report(6)
    assert [p.done for p in run.reports] == [0.0, 12.5, 25.0, 37.5, 50.0, 62.5, 75.0]
    start = run.reports[0].at
    assert [p.at - start for p in run.reports] == [k / 8 for k in range(7)]


async def test_resize_changes_the_rate_for_the_remaining_work() -> None:
    # 25 units at rate 1 (100x, 1/4 s), then the other 75 at rate 0.5 (1.5 s). No
    # periodic reports: each report here answers a resize, or is the end.
    clock = ManualClock()
    the_launch = launch(procs=2, cpus=2, work=100.0, time_scale=100.0)
    async with sleep_job(the_launch, clock, JobSettings(report_every=1e6)) as run:
        first = await run.report(0)
        clock.advance(1 / 4)
        await run.control(ResizePart(job_id="j1", cpus=1, pace=1.0))
        resized = await run.report(1)
        assert (run.sleeper.rate, run.sleeper.cpus) == (0.5, 1)
        clock.advance(1.5 - 1 / 16)
        await run.control(ResizePart(job_id="j1", cpus=1, pace=1.0))  # a report, not the end
        before_end = await run.report(2)
        clock.advance(1 / 16)
        assert await run.exit_code() == EXIT_DONE
        end = await run.report(3)
    assert (resized.done, resized.rate, resized.at - first.at) == (25.0, 0.5, 1 / 4)
    assert before_end.done == 100.0 - 50.0 / 16
    assert (end.done, end.at - first.at) == (100.0, 1.75)


async def test_a_resize_retained_before_the_start_applies() -> None:
    clock = ManualClock()
    resize = encode(ResizePart(job_id="j1", cpus=1, pace=2.0))
    async with sleep_job(launch(work=100.0), clock, retained=resize) as run:
        applied = await run.report(1)
        assert (run.sleeper.cpus, run.sleeper.pace) == (1, 2.0)
        clock.advance(1 / 8)  # past the 0.1 s the work takes
        assert await run.exit_code() == EXIT_DONE
        await run.report(2)
    assert applied.done == 0.0
    assert applied.rate == 1.0  # MPL 2 at u = 1 halves it, pace 2 doubles it


async def test_cancel_part_on_the_control_topic_stops_the_job() -> None:
    clock = ManualClock()
    async with sleep_job(launch(work=1e6, time_scale=1.0), clock) as run:
        await run.report(0)  # subscribed: a command now reaches it
        clock.advance(0.5)
        await run.control(CancelPart(job_id="j1"))
        assert await run.exit_code() == EXIT_CANCELLED
        last = await run.report(1)
    assert run.sleeper.done == last.done == 0.5  # it reported how far it got


async def test_commands_of_another_attempt_are_ignored() -> None:
    clock = ManualClock()
    async with sleep_job(launch(work=1e6, time_scale=1.0, attempt=2), clock) as run:
        await run.report(0)
        await run.control(ResizePart(job_id="j1", cpus=1, pace=2.0, attempt=3))  # a later start's
        await run.control(CancelPart(job_id="j1", attempt=1))  # the stale start's
        await run.control(ResizePart(job_id="j1", cpus=1, attempt=2))  # its own
        # Handled in order: the first two were ignored, or this report would differ.
        applied = await run.report(1)
        assert (applied.rate, run.sleeper.pace) == (0.5, 1.0)
        assert not run.task.done()
        await run.control(CancelPart(job_id="j1"))  # attempt 0: whichever start runs
        assert await run.exit_code() == EXIT_CANCELLED
        await run.report(2)
    assert {p.attempt for p in run.reports} == {2}
    assert run.sleeper.bad_messages == 0


async def test_bad_control_messages_are_counted_and_ignored() -> None:
    clock = ManualClock()
    async with sleep_job(launch(work=250.0), clock) as run:
        await run.report(0)
        await run.control(b"\xc1")
        await run.control(ResizePart(job_id="j1", cpus=8))  # MPL 0.25
        await run.control(ResizePart(job_id="other", cpus=1))
        await run.agent.publish(TOPICS.job_control("j1"), b"", retain=True)  # a cleared retain
        # Handled in order: once this one is applied, the bad ones were refused.
        await run.control(ResizePart(job_id="j1", cpus=1))
        await run.report(1)
        assert run.sleeper.bad_messages == 3
        clock.advance(0.5)  # 250 units at rate 0.5 and 1000x
        assert await run.exit_code() == EXIT_DONE
        await run.report(2)
    assert [p.rate for p in run.reports] == [1.0, 0.5, 0.5]
    assert run.sleeper.cpus == 1


async def test_cancel_method_is_what_sigterm_calls() -> None:
    async with sleep_job(launch(work=1e6, time_scale=1.0), ManualClock()) as run:
        await run.report(0)
        run.sleeper.cancel()
        assert await run.exit_code() == EXIT_CANCELLED


# -- the process --------------------------------------------------------------------


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
    async with asyncio.timeout(HANG):
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
    async with asyncio.timeout(HANG):
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


def test_an_unknown_workload_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = launch().argv()
    argv[argv.index("--workload=sleep")] = "--workload=gpu"
    assert main(["--pipe", *argv]) == 2
    assert "workload 'gpu' is not available" in capsys.readouterr().err


def test_an_mpi_part_without_its_parameters_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = launch().argv()
    argv[argv.index("--workload=sleep")] = "--workload=mpi"
    assert main(["--pipe", *argv]) == 2
    assert "the mpi workload needs its parameters" in capsys.readouterr().err
    with pytest.raises(LaunchError):
        launch(workload="mpi")


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


def off_the_line(report: PartProgress, origin: float, done: float, speed: float) -> float:
    """Wall seconds ``report`` lies off the line through (``origin``, ``done``) of slope
    ``speed`` (work units per wall second): how late its ``at`` is for its ``done``."""
    return (report.at - origin) - (report.done - done) / speed


class Case(NamedTuple):
    procs: int
    cpus: int
    pace: float
    ref_speed: float
    cpu_util: float
    time_scale: float


MODEL_CASES = [
    pytest.param(Case(2, 2, 2.0, 1.0, 1.0, 100.0), id="fast-machine-mpl1"),
    pytest.param(Case(4, 2, 1.0, 1.0, 0.5, 100.0), id="mpl2-u0.5"),
    pytest.param(Case(3, 2, 1.5, 3.0, 1.0, 100.0), id="mpl1.5-slow-vs-ref"),
]


@pytest.mark.parametrize("case", MODEL_CASES)
async def test_progress_follows_the_execution_model(case: Case) -> None:
    # A part of a minute's work: its first report (the process is up) and the next
    # one, a second later, lie on the model's line from PartStarted: the work counts
    # from the agent's start, at the model's rate times the time scale. The cancel's
    # report lies on it too. How long the process took to start does not matter.
    procs, cpus, pace, ref_speed, cpu_util, time_scale = case
    rate = ExecutionModel().rate(
        procs=procs, cpus=cpus, speed=pace, ref_speed=ref_speed, cpu_util=cpu_util
    )
    speed = rate * time_scale
    job = spec(
        "m", procs, work=60 * speed, walltime=UNLIMITED, cpu_util=cpu_util, ref_speed=ref_speed
    )
    async with running_agent(cpus=8) as run:
        await run.scheduler.send(start(job, cpus=cpus, pace=pace, time_scale=time_scale))
        started = await run.scheduler.expect(PartStarted)
        await run.scheduler.expect(PartProgress, lambda _: len(run.scheduler.all(PartProgress)) > 1)
        await run.scheduler.send(CancelPart(job_id="m"))
        finished = await run.scheduler.expect(PartFinished)
    assert finished.reason == "cancelled"
    progress = run.scheduler.all(PartProgress)
    assert len(progress) >= 3
    assert all(p.rate == pytest.approx(rate) for p in progress)
    for p in progress:
        assert abs(off_the_line(p, started.at, 0.0, speed)) <= REPORT_SKEW, (p, started)


async def test_a_part_ends_no_sooner_than_the_model_says() -> None:
    # 50 units at rate 1 and 100x: 0.5 s from PartStarted, the process's start-up
    # included (it may take longer than the run on a loaded machine: the part then
    # ends as soon as it is up). How much later it ends is the machine's business.
    async with running_agent() as run:
        await run.scheduler.send(
            start(spec("e", 2, work=50.0, walltime=UNLIMITED), time_scale=100.0)
        )
        started = await run.scheduler.expect(PartStarted)
        finished = await run.scheduler.expect(PartFinished)
    assert (finished.reason, finished.exit_code) == ("done", 0)
    progress = run.scheduler.all(PartProgress)
    end = progress[-1]
    assert end.done == 50.0
    assert end.at - started.at >= 0.5 - REPORT_SKEW
    assert finished.at >= end.at
    for p in progress:
        if p.done < 50.0:  # a report at the end is capped at the work, off the line
            assert abs(off_the_line(p, started.at, 0.0, 100.0)) <= REPORT_SKEW, (p, started)


async def test_resize_to_mpl_2_halves_the_rate_of_the_remaining_work() -> None:
    job = spec("r", 2, work=1e6, walltime=UNLIMITED, malleable=True)
    async with running_agent(cpus=4) as run:
        await run.scheduler.send(start(job, cpus=2, time_scale=100.0))
        started = await run.scheduler.expect(PartStarted)
        first = await run.scheduler.expect(PartProgress)  # the process is up
        await run.scheduler.send(ResizePart(job_id="r", cpus=1, pace=1.0))
        resized = await run.scheduler.expect(PartProgress, lambda p: p.rate == 0.5)
        assert run.agent.stats().cpus_busy == 1
        # The periodic report, a second after the resize's.
        later = await run.scheduler.expect(PartProgress, lambda p: p.done > resized.done)
        await run.scheduler.send(CancelPart(job_id="r"))
        await run.scheduler.expect(PartFinished)
    assert first.rate == 1.0
    assert later.rate == 0.5
    # Before the resize: rate 1 at 100x from the start; after it: rate 0.5, half as fast.
    assert abs(off_the_line(resized, started.at, 0.0, 100.0)) <= REPORT_SKEW
    assert abs(off_the_line(later, resized.at, resized.done, 50.0)) <= REPORT_SKEW


async def test_a_run_shorter_than_the_start_up_ends_when_its_work_was_done() -> None:
    # Started 1/4 s before the job's first reading, with 1/8 s of work (12.5 units at
    # 100x): the work was complete 1/8 s ago. The last report says so, not "now".
    clock = ManualClock()
    started = clock.now - 1 / 4
    async with sleep_job(launch(work=12.5, time_scale=100.0, start_at=started), clock) as run:
        assert await run.exit_code() == EXIT_DONE
        end = await run.report(1)
    assert (end.done, end.at - started) == (12.5, 1 / 8)
