"""The agent's lease (``nodeagent.lease``): the file, and a job process that stops by
itself when its agent can no longer renew it (fencing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.codec import encode
from broker.memory import MemoryBroker
from broker.messages import CancelPart, ResizePart
from nodeagent.job import EXIT_CANCELLED, EXIT_LOST, SleepJob
from nodeagent.lease import LeaseFile, lease_expired
from nodeagent.spawn import Launch, LaunchError
from tests.nodeagent.harness import TOPICS


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
