"""The node agent over the memory broker, with real job processes.

Durations (wall-time limits) are checked on a manual clock the agent reads;
everything else waits for the signal it expects (see ``harness``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from broker.codec import decode, encode
from broker.memory import MemoryBroker
from broker.messages import (
    AgentOffline,
    AgentOnline,
    CancelPart,
    Heartbeat,
    MachineSpec,
    PartFinished,
    PartProgress,
    PartStarted,
    ResizePart,
    StartPart,
)
from model.machine import Machine
from nodeagent.__main__ import main as cli_main
from nodeagent.agent.node_agent import AgentSettings, NodeAgent, agent_will
from nodeagent.launch.contract import EXIT_CANCELLED
from tests.builders import spec
from tests.nodeagent.clock import ManualClock
from tests.nodeagent.harness import (
    FAST,
    STOPPED,
    TOPICS,
    UNLIMITED,
    Running,
    Scheduler,
    agent_reaches,
    command_spawn,
    gone,
    running_agent,
    settled,
    start,
)


async def test_registers_retained_with_its_machine() -> None:
    async with running_agent(cpus=8, speed=2.5) as run:
        online = await run.scheduler.expect(AgentOnline)
        assert online.machine == MachineSpec(id="node1", cpus=8, speed=2.5)
        assert online.incarnation == run.agent.incarnation
        assert len(online.incarnation) == 32
        assert online.running == ()
        # A scheduler that connects later still learns of the agent: it is retained.
        async with run.broker.client("late") as late:
            await late.subscribe(TOPICS.agent_state("node1"))
            delivery = await anext(late.deliveries())
            assert delivery.retain
            assert decode(delivery.payload) == online


async def test_heartbeats_count_up_and_name_running_parts() -> None:
    async with running_agent() as run:
        await run.scheduler.expect(Heartbeat, lambda h: h.seq == 2)
        beats = run.scheduler.all(Heartbeat)[:3]
        assert [b.seq for b in beats] == [0, 1, 2]
        assert [b.agent_id for b in beats] == ["node1"] * 3
        assert all(b.running == () for b in beats)
        await run.scheduler.send(
            start(spec("long", 2, work=1e6, walltime=UNLIMITED), time_scale=1.0)
        )
        await run.scheduler.expect(PartStarted)
        beat = await run.scheduler.expect(
            Heartbeat, lambda h: [p.job_id for p in h.running] == ["long"]
        )
        assert beat.seq >= 3
        assert run.agent.stats().heartbeats >= 4


async def test_start_part_runs_a_process_and_reports_done() -> None:
    async with running_agent() as run:
        await run.scheduler.send(
            start(spec("j1", 2, work=10.0, walltime=UNLIMITED), time_scale=1000.0)
        )
        started = await run.scheduler.expect(PartStarted)
        finished = await run.scheduler.expect(PartFinished)
        assert started.job_id == "j1"
        assert started.agent_id == "node1"
        assert started.pid > 0
        assert finished == PartFinished(
            job_id="j1",
            agent_id="node1",
            exit_code=0,
            at=finished.at,
            reason="done",
            attempt=1,
            run_seconds=finished.run_seconds,
        )
        assert finished.at >= started.at
        # Its run, measured by the agent: at least its 10 units at 1000 units a second.
        assert finished.run_seconds is not None
        assert finished.run_seconds >= 10.0 / 1000.0
        # The job process itself reported its start and its end.
        progress = run.scheduler.all(PartProgress)
        assert [p.done for p in progress] == sorted(p.done for p in progress)
        assert progress[-1].done == 10.0
        assert progress[-1].rate == 1.0
        stats = run.agent.stats()
        assert stats.parts_started == 1
        assert stats.parts_finished["done"] == 1
        assert stats.cpus_busy == 0
        assert stats.parts_running == 0


async def test_duplicate_start_part_is_ignored() -> None:
    async with running_agent() as run:
        command = start(spec("dup", 2, work=300.0, walltime=UNLIMITED), time_scale=1000.0)
        await run.scheduler.send(command)
        await run.scheduler.send(command)  # a QoS 1 redelivery while it runs
        await run.scheduler.expect(PartFinished)
        await run.scheduler.send(command)  # and one after it finished
        await settled(run.scheduler)
        assert len(run.scheduler.all(PartStarted)) == 1
        assert len(run.scheduler.all(PartFinished, lambda f: f.job_id == "dup")) == 1
        assert run.agent.stats().parts_started == 1


async def test_cancel_part_terminates_and_reports_cancelled() -> None:
    async with running_agent() as run:
        await run.scheduler.send(start(spec("c1", 2, work=1e6, walltime=UNLIMITED), time_scale=1.0))
        await run.scheduler.expect(PartProgress)  # the process is up and working
        assert run.agent.stats().cpus_busy == 2
        await run.scheduler.send(CancelPart(job_id="c1"))
        finished = await run.scheduler.expect(PartFinished)
        assert finished.reason == "cancelled"
        assert finished.exit_code == EXIT_CANCELLED  # the job exits cleanly on SIGTERM
        last = run.scheduler.all(PartProgress)[-1]
        assert 0 < last.done < 1e6  # it reported how far it got
        assert run.agent.stats().cpus_busy == 0
        await run.scheduler.send(CancelPart(job_id="c1"))  # redelivered: nothing to do
        await run.scheduler.send(CancelPart(job_id="never-started"))
        await settled(run.scheduler)
        assert len(run.scheduler.all(PartFinished, lambda f: f.job_id == "c1")) == 1


async def test_a_process_ignoring_sigterm_is_killed_after_the_grace() -> None:
    settings = AgentSettings(heartbeat_interval=0.05, kill_grace=0.3, walltime_grace=0.5)
    stubborn = command_spawn(
        "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)",
    )
    async with running_agent(spawn=stubborn, settings=settings) as run:
        await run.scheduler.send(start(spec("s1", 2, work=1e6, walltime=UNLIMITED), time_scale=1.0))
        await run.scheduler.expect(PartStarted)
        await stubborn.ready()  # it ignores SIGTERM from now on
        await run.scheduler.send(CancelPart(job_id="s1"))
        finished = await run.scheduler.expect(PartFinished)
        assert finished.reason == "cancelled"
        assert finished.exit_code == -9


async def assert_limit_between(
    run: Running, command: Callable[[str], StartPart], low: float, high: float
) -> None:
    """The agent ends a part of ``command`` for its wall time after ``low`` s, by ``high`` s.

    Seconds on the agent's manual clock, from the part's start. Two parts of
    ``command`` start at the same instant, so with the same limit. At ``low``
    the first is cancelled: reported "cancelled", not "walltime", it had not
    been ended, and the agent had checked both limits at ``low`` (see
    ``agent_reaches``). At ``high`` the other is ended for its wall time.
    """
    assert run.clock is not None
    t0 = run.clock.now

    async def up(job_id: str) -> None:
        await run.scheduler.send(command(job_id))
        # Up, its SIGTERM handler installed: it will exit as the agent asks it to.
        await run.scheduler.expect(PartProgress, lambda p: p.job_id == job_id)

    await up("early")
    await up("late")
    await agent_reaches(run, t0 + low)
    await run.scheduler.send(CancelPart(job_id="early"))
    early = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "early")
    assert (early.reason, early.exit_code) == ("cancelled", EXIT_CANCELLED)
    await agent_reaches(run, t0 + high)
    late = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "late")
    assert (late.reason, late.exit_code) == ("walltime", EXIT_CANCELLED)
    started = run.scheduler.all(PartStarted, lambda s: s.job_id == "late")[0]
    assert (started.at, late.at) == (t0, t0 + high)  # the agent's clock, on the wire
    assert run.agent.stats().parts_finished["walltime"] == 1


async def test_walltime_limit_kills_the_part() -> None:
    # 1 unit of wall time at rate 1 and 10x is 0.1 s, plus the 0.5 s grace: 0.6 s.
    # The work (1e6 units, a day at 10x) never ends it first.
    def command(job_id: str) -> StartPart:
        return start(spec(job_id, 2, work=1e6, walltime=1.0), time_scale=10.0)

    async with running_agent(settings=STOPPED, clock=ManualClock()) as run:
        await assert_limit_between(run, command, 0.6 - 1 / 16, 0.6 + 1 / 16)


async def test_walltime_limit_follows_the_allocation_rate() -> None:
    # Shrunk to MPL 2 (u = 1) the part runs at half speed, so its limit doubles,
    # as the scheduler core's estimate does: 2 units at rate 0.5 and 10x = 0.4 s,
    # plus the grace: 0.9 s.
    def command(job_id: str) -> StartPart:
        job = spec(job_id, 2, work=1e6, walltime=2.0, malleable=True)
        return start(job, cpus=1, time_scale=10.0)

    async with running_agent(settings=STOPPED, clock=ManualClock()) as run:
        await assert_limit_between(run, command, 0.9 - 1 / 16, 0.9 + 1 / 16)


async def test_a_part_of_a_multi_part_job_runs_at_the_jobs_mpl() -> None:
    # One part of 2 CPUs of a job of 8 processes on 4 CPUs in all (MPL 2, u = 1):
    # the part advances at half speed, so its wall-time limit doubles as in the test
    # above; without job_cpus the part would be taken to run at MPL 1 (limit 0.7 s).
    def command(job_id: str) -> StartPart:
        job = spec(job_id, 8, work=1e6, walltime=2.0, malleable=True)
        return StartPart(job=job, cpus=2, pace=1.0, part=0, parts=2, time_scale=10.0, job_cpus=4)

    async with running_agent(settings=STOPPED, clock=ManualClock()) as run:
        await assert_limit_between(run, command, 0.9 - 1 / 16, 0.9 + 1 / 16)
        assert all(p.rate == pytest.approx(0.5) for p in run.scheduler.all(PartProgress))


async def test_crashing_process_is_reported_failed_with_its_exit_code() -> None:
    async with running_agent(spawn=command_spawn("-c", "import sys; sys.exit(3)")) as run:
        await run.scheduler.send(start(spec("crash", 2, work=10.0, walltime=UNLIMITED)))
        await run.scheduler.expect(PartStarted)
        finished = await run.scheduler.expect(PartFinished)
        assert finished.reason == "failed"
        assert finished.exit_code == 3
        assert run.agent.stats().parts_finished["failed"] == 1


async def test_an_mpi_job_without_parameters_runs_the_defaults() -> None:
    async with running_agent() as run:
        job = spec("mpi1", 2, work=1.0, walltime=1e9, workload="mpi")
        await run.scheduler.send(start(job))
        finished = await run.scheduler.expect(PartFinished)
        assert (finished.reason, finished.exit_code) == ("done", 0)
        last = run.scheduler.all(PartProgress, lambda p: p.job_id == "mpi1")[-1]
        assert last.iteration == 10  # MpiSpec's default


async def test_part_wider_than_the_free_cpus_is_refused() -> None:
    async with running_agent(cpus=4) as run:
        await run.scheduler.send(start(spec("big", 8, work=1.0, walltime=UNLIMITED)))
        refused = await run.scheduler.expect(PartFinished)
        assert (refused.job_id, refused.reason, refused.exit_code) == ("big", "failed", -1)
        # CPUs held by a running part are not free.
        await run.scheduler.send(start(spec("a", 3, work=1e6, walltime=UNLIMITED), time_scale=1.0))
        await run.scheduler.expect(PartStarted)
        await run.scheduler.send(start(spec("b", 2, work=1.0, walltime=UNLIMITED)))
        refused = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "b")
        assert refused.reason == "failed"
        # Neither was started, and the agent is still serving.
        assert [s.job_id for s in run.scheduler.all(PartStarted)] == ["a"]
        assert run.agent.stats().cpus_busy == 3


async def test_allocation_outside_mpl_bounds_is_refused() -> None:
    async with running_agent(cpus=8) as run:
        await run.scheduler.send(start(spec("x", 6, work=1.0, walltime=UNLIMITED), cpus=2))  # MPL 3
        refused = await run.scheduler.expect(PartFinished)
        assert (refused.reason, refused.exit_code) == ("failed", -1)


async def test_malformed_commands_are_counted_and_the_next_good_one_served() -> None:
    async with running_agent() as run:
        await run.scheduler.send_raw(b"\xc1 not msgpack")
        await run.scheduler.send_raw(encode(CancelPart(job_id="x"))[:-3] + b"\x00")
        # valid, but not a command
        await run.scheduler.send(Heartbeat(agent_id="node1", seq=0, running=()))
        await run.scheduler.send(start(spec("good", 2, work=10.0, walltime=UNLIMITED)))
        finished = await run.scheduler.expect(PartFinished)
        assert (finished.job_id, finished.reason) == ("good", "done")
        assert run.agent.stats().bad_messages == 3


async def test_resize_beyond_free_cpus_is_not_applied() -> None:
    async with running_agent(cpus=4) as run:
        job = spec("r", 4, work=1e6, walltime=UNLIMITED, malleable=True)
        await run.scheduler.send(start(job, cpus=2, time_scale=1.0))
        await run.scheduler.expect(PartStarted)
        await run.scheduler.send(
            start(spec("other", 2, work=1e6, walltime=UNLIMITED), time_scale=1.0)
        )
        await run.scheduler.expect(PartStarted, lambda s: s.job_id == "other")
        await run.scheduler.send(ResizePart(job_id="r", cpus=4))
        await settled(run.scheduler)
        assert run.agent.stats().bad_messages == 1
        assert run.agent.stats().cpus_busy == 4


async def test_a_stop_says_stopping_then_ends_its_parts_as_stopped() -> None:
    # No state directory: its parts cannot outlive it, so a stop ends them. It says
    # so first (the scheduler places nothing more here and charges no job for it).
    async with running_agent() as run:
        await run.scheduler.send(start(spec("s1", 2, work=1e6, walltime=UNLIMITED), time_scale=1.0))
        await run.scheduler.expect(PartProgress)
        run.agent.stop()
        await run.task
        assert run.agent.stopping == "end"
        finished = await run.scheduler.expect(PartFinished)
        stopping = await run.scheduler.expect(AgentOffline)
        assert finished.reason == "stopped"
        assert stopping == AgentOffline(
            agent_id="node1", incarnation=run.agent.incarnation, reason="stopping"
        )
        kinds = [type(m) for _, m in run.scheduler.seen]
        assert kinds.index(AgentOffline) < kinds.index(PartFinished)
        # No goodbye after it: it will be back. The retained state says it stopped.
        assert len(run.scheduler.all(AgentOffline)) == 1
        async with run.broker.client("late") as late:
            await late.subscribe(TOPICS.agent_state("node1"))
            assert decode((await anext(late.deliveries())).payload) == stopping


async def test_a_start_reaching_a_stopping_agent_is_refused_stopped() -> None:
    async with running_agent() as run:
        await run.scheduler.send(start(spec("s1", 2, work=1e6, walltime=UNLIMITED), time_scale=1.0))
        await run.scheduler.expect(PartProgress)
        run.agent.stop()
        await run.scheduler.expect(AgentOffline)
        await run.scheduler.send(
            start(spec("late", 2, work=1.0, walltime=UNLIMITED), time_scale=1.0)
        )
        refused = await run.scheduler.expect(PartFinished, lambda f: f.job_id == "late")
        assert (refused.reason, refused.exit_code) == ("stopped", -1)
        await run.task


async def test_draining_on_stop_runs_the_parts_to_their_end_then_says_goodbye() -> None:
    settings = AgentSettings(
        heartbeat_interval=0.05, kill_grace=1.0, walltime_grace=0.5, drain_on_stop=True
    )
    async with running_agent(settings=settings) as run:
        # 200 units at 1000x: about 0.2 s of wall time, longer than the stop's signal.
        await run.scheduler.send(
            start(spec("d1", 2, work=200.0, walltime=UNLIMITED), time_scale=1000.0)
        )
        await run.scheduler.expect(PartProgress)
        run.agent.stop()
        draining = await run.scheduler.expect(AgentOnline, lambda o: o.draining)
        assert [p.job_id for p in draining.running] == ["d1"]
        await run.task
        finished = await run.scheduler.expect(PartFinished)
        goodbye = await run.scheduler.expect(AgentOffline)
        assert (finished.reason, finished.exit_code) == ("done", 0)
        assert goodbye.reason == "goodbye"
        kinds = [type(m) for _, m in run.scheduler.seen]
        assert kinds.index(PartFinished) < kinds.index(AgentOffline)


async def test_a_second_stop_while_draining_ends_what_runs() -> None:
    settings = AgentSettings(
        heartbeat_interval=0.05, kill_grace=1.0, walltime_grace=0.5, drain_on_stop=True
    )
    async with running_agent(settings=settings) as run:
        await run.scheduler.send(start(spec("d1", 2, work=1e6, walltime=UNLIMITED), time_scale=1.0))
        await run.scheduler.expect(PartProgress)
        run.agent.stop()
        await run.scheduler.expect(AgentOnline, lambda o: o.draining)
        run.agent.stop()
        await run.task
        finished = await run.scheduler.expect(PartFinished)
        assert finished.reason == "stopped"
        assert [m.reason for m in run.scheduler.all(AgentOffline)] == ["stopping"]


async def test_will_announces_a_killed_agent_lost() -> None:
    broker = MemoryBroker()
    machine = Machine(id="node9", cpus=2)
    async with broker.client("scheduler") as watcher:
        await watcher.subscribe(TOPICS.agent_state("node9"))
        agent_bus = broker.client("agent-node9", will=agent_will(TOPICS, "node9", "inc1"))
        async with agent_bus:
            agent = NodeAgent(
                bus=agent_bus,
                topics=TOPICS,
                machine=machine,
                spawn=command_spawn("-c", "pass"),
                incarnation="inc1",
            )
            assert agent.will() == agent_will(TOPICS, "node9", "inc1")
            will_task = agent_bus.kill()
            assert will_task is not None
            await will_task
        offline = decode((await anext(watcher.deliveries())).payload)
        assert offline == AgentOffline(agent_id="node9", incarnation="inc1", reason="lost")


async def test_an_agent_that_dies_uncleanly_kills_its_parts() -> None:
    broker = MemoryBroker()
    async with broker.client("scheduler") as sched_bus:
        await sched_bus.subscribe(TOPICS.agent_events("node1"))
        scheduler = Scheduler(sched_bus, "node1")
        async with asyncio.TaskGroup() as tg:
            watcher = tg.create_task(scheduler.read(), name="test-scheduler-reader")
            async with broker.client("agent-node1") as bus:
                agent = NodeAgent(
                    bus=bus,
                    topics=TOPICS,
                    machine=Machine(id="node1", cpus=2),
                    # A process that would run on for a minute if nobody ended it.
                    spawn=command_spawn("-c", "import time; time.sleep(60)"),
                    settings=FAST,
                )
                running = tg.create_task(agent.run(), name="test-agent")
                await scheduler.expect(Heartbeat)
                await scheduler.send(
                    start(spec("orphan", 2, work=1e6, walltime=UNLIMITED), time_scale=1.0)
                )
                started = await scheduler.expect(PartStarted)
                running.cancel()  # as if its bus had failed
                with pytest.raises(asyncio.CancelledError):
                    await running
            await gone(started.pid)
            watcher.cancel()
        assert scheduler.all(PartFinished) == []


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--name=node 1", "--cpus=2"], id="name-not-an-id"),
        pytest.param(["--name=n1", "--cpus=0"], id="no-cpus"),
        pytest.param(["--name=n1", "--cpus=2", "--heartbeat=0"], id="no-heartbeat"),
    ],
)
def test_cli_refuses_a_bad_machine_before_connecting(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli_main(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err
