"""The agent's lease (``nodeagent.survival.lease``): the file, and a job process that stops by
itself when its agent can no longer renew it (fencing)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.bus import Will
from broker.codec import encode
from broker.memory import MemoryBroker, MemoryBus
from broker.messages import CancelPart, Message, PartFinished, PartStarted, ResizePart, StartPart
from nodeagent.agent.settings import AgentSettings
from nodeagent.job.sleep_job import SleepJob
from nodeagent.launch.contract import EXIT_CANCELLED, EXIT_LOST, Launch, LaunchError, lease_expired
from nodeagent.survival.lease import LeaseFile, start_fenced
from tests.builders import spec
from tests.nodeagent.clock import ManualClock
from tests.nodeagent.harness import HANG, TOPICS, UNLIMITED, command_spawn, running_agent


def launch(lease_file: Path | None, lease: float = 10.0, attempt: int = 2) -> Launch:
    return Launch(
        agent="node1",
        job_id="j1",
        procs=2,
        cpus=2,
        pace=1.0,
        work=1e6,
        time_scale=1.0,
        root=TOPICS.root,
        attempt=attempt,
        lease_file=None if lease_file is None else str(lease_file),
        lease=lease,
    )


def test_the_lease_file_ages_from_its_last_renewal(tmp_path: Path) -> None:
    lease = LeaseFile(str(tmp_path))
    lease.renew(now=1000.0)
    assert lease.age(now=1004.0) == pytest.approx(4.0)
    assert not lease_expired(str(lease.path), 5.0, now=1004.0)
    assert lease_expired(str(lease.path), 5.0, now=1006.0)
    lease.remove()
    assert lease_expired(str(lease.path), 5.0, now=1000.0), "a missing lease has lapsed"
    lease.remove()  # twice is fine


def test_a_lease_file_needs_a_positive_lease(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="lease"):
        launch(tmp_path / "lease", lease=0.0)


def test_the_launch_carries_attempt_and_lease_to_the_process(tmp_path: Path) -> None:
    argv = launch(tmp_path / "lease", lease=3.5).argv()
    assert "--attempt=2" in argv
    assert f"--lease-file={tmp_path / 'lease'}" in argv
    assert "--lease=3.5" in argv


async def test_a_job_whose_lease_lapsed_stops_unseen(tmp_path: Path) -> None:
    lease = LeaseFile(str(tmp_path))
    lease.renew(now=0.0)  # renewed last at the epoch: long lapsed
    broker = MemoryBroker()
    async with broker.client("job") as bus:
        code = await SleepJob(launch(lease.path), bus).run()
    assert code == EXIT_LOST


async def test_a_job_ignores_commands_of_another_attempt(tmp_path: Path) -> None:
    lease = LeaseFile(str(tmp_path))
    lease.renew()
    broker = MemoryBroker()
    control = TOPICS.job_control("j1")
    async with broker.client("agent") as agent, broker.client("job") as bus:
        job = SleepJob(launch(lease.path), bus)
        await bus.subscribe(control)
        # Attempt 1's resize would shrink it to 1 CPU, and its cancel end it: neither
        # applies. Then attempt 2's cancel ends it.
        await agent.publish(control, encode(ResizePart(job_id="j1", cpus=1, pace=1.0, attempt=1)))
        await agent.publish(control, encode(CancelPart(job_id="j1", attempt=1)))
        await agent.publish(control, encode(CancelPart(job_id="j1", attempt=2)))
        code = await job.run()
    assert code == EXIT_CANCELLED
    assert job.bad_messages == 0
    assert job.cpus == 2


class HeldBroker(MemoryBroker):
    """A memory broker that holds the agent's clearing of one job's control topic.

    The agent's start path waits for that publish (a broker round trip on MQTT);
    holding it here is the agent frozen or cut off at that instant.
    """

    def __init__(self, topic: str) -> None:
        super().__init__()
        self.topic = topic
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    def client(self, client_id: str, *, will: Will | None = None) -> MemoryBus:
        bus = super().client(client_id, will=will)
        publish = bus.publish

        async def held(topic: str, payload: bytes, *, qos: int = 1, retain: bool = False) -> None:
            if client_id.startswith("agent-") and topic == self.topic and not payload:
                self.held.set()
                await self.release.wait()
            await publish(topic, payload, qos=qos, retain=retain)

        bus.publish = held  # type: ignore[method-assign]
        return bus


async def test_the_fork_of_an_admitted_start_waits_on_no_broker() -> None:
    """The fault matrix's agent-freeze duplicate: a start passed the fence, then the agent
    waited for the broker (clearing the job's control topic) before forking; frozen
    there past the lease, it woke after the job was requeued elsewhere and forked
    the stale attempt. Now nothing between the fence and the fork waits on the
    broker: with the clear held at the broker, the process is forked anyway, while
    the start is still fresh; only its report waits for the clear (so a retained
    resize of an earlier run cannot reach it)."""
    clock = ManualClock()
    broker = HeldBroker(TOPICS.job_control("late"))
    spawn = command_spawn("-c", "import time; time.sleep(60)")
    settings = AgentSettings(heartbeat_interval=0.05, kill_grace=1.0, lease=30.0)
    async with running_agent(spawn=spawn, settings=settings, broker=broker, clock=clock) as run:
        job = spec("late", work=10.0, walltime=UNLIMITED)
        command = StartPart(job=job, cpus=1, pace=1.0, time_scale=1000.0, issued=clock.wall())
        await run.scheduler.send(command)
        async with asyncio.timeout(HANG):
            await broker.held.wait()
            while not spawn.started:  # forked while the broker holds the clear
                await asyncio.sleep(0.01)
        assert not run.scheduler.all(PartStarted, lambda s: s.job_id == "late")
        broker.release.set()
        said = await run.scheduler.expect(
            Message, lambda m: isinstance(m, PartStarted | PartFinished) and m.job_id == "late"
        )
    assert isinstance(said, PartStarted), said


def test_the_fence_rule() -> None:
    assert start_fenced(100.0, 103.0, 4.0, lapsed=False) is None
    assert "beyond the 4 s lease" in (start_fenced(100.0, 104.5, 4.0, lapsed=False) or "")
    assert "lapsed" in (start_fenced(100.0, 101.0, 4.0, lapsed=True) or "")
    assert start_fenced(0.0, 1e9, 4.0, lapsed=False) is None, "an undated command: lease only"
    assert start_fenced(100.0, 1e9, 0.0, lapsed=True) is None, "no lease, no fence"
