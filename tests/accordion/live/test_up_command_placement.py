"""A command job goes only to an agent that runs commands, on a real cluster.

Its own Mosquitto with logins, the scheduler and two agents as processes: the
faster agent runs no commands (started without ``--allow-commands``), the
other does. A command job submitted through the CLI as the cluster's owner
runs on the one that runs commands, and finishes. With that agent stopped, a
command job is accepted and waits, queued with the reason
``no_capable_machine``, not failed; the agent started again runs it.
"""

from __future__ import annotations

import os
import pwd
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from accordion.client.live_client import run_async
from accordion.cluster.local_cluster import STOP_GRACE, LocalCluster
from broker.local import mosquitto_binary
from broker.messages import JobStatus
from broker.vocabulary import JobState, WaitReason
from model.machine import Machine
from tests.accordion.live.cli_harness import wait_until
from tests.accordion.live.test_up_commands import as_owner, status_says
from tests.brokers import _no_mosquitto
from workload.cluster import ClusterSpec

pytestmark = pytest.mark.integration
ME = pwd.getpwuid(os.geteuid()).pw_name


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    if mosquitto_binary() is None:
        _no_mosquitto()
    tag = uuid.uuid4().hex[:6]
    spec = ClusterSpec(
        name=f"place-{tag}",
        reference_speed=1.0,
        machines=(
            # First in the placement order: the faster one, with no commands.
            Machine(id=f"off-{tag}", cpus=2, speed=2.0),
            Machine(id=f"on-{tag}", cpus=2, speed=1.0),
        ),
    )
    local = LocalCluster(
        spec,
        tmp_path / "run",
        broker="mosquitto",
        root=f"place-{tag}/v1",
        auth=True,
        users=(ME,),
        heartbeat=0.5,
        commands=True,
        commands_off=(f"off-{tag}",),
    )
    with local:

        async def ready() -> None:
            async with local.connect(timeout=5.0) as client:
                await local.ready(client)

        run_async(ready())
        yield local


def queued(cluster: LocalCluster, job_id: str) -> JobStatus | None:
    """``job_id``'s row in the queue, if it is queued (the scheduler's status, not the
    journal's, which keeps only final events here)."""

    async def ask() -> JobStatus | None:
        async with cluster.connect(timeout=5.0) as client:
            reply = await client.status(ids=(job_id,), machines=False)
        return next((j for j in reply.queue if j.id == job_id), None)

    return run_async(ask())


def waits_for_capable_machine(cluster: LocalCluster, job_id: str) -> bool:
    row = queued(cluster, job_id)
    return row is not None and row.reason is WaitReason.NO_CAPABLE_MACHINE


def submit(cluster: LocalCluster, job_id: str, work: Path) -> None:
    submitted = as_owner(
        cluster,
        "submit",
        "--id",
        job_id,
        "-D",
        str(work),
        "-t",
        "60",
        "--",
        "sh",
        "-c",
        "echo $ACCORDION_NODENAME",
    )
    assert submitted.exit_code == 0, submitted.output


def test_command_jobs_run_only_where_commands_are_on_and_wait_for_such_an_agent(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    on = cluster.spec.machines[1].id
    work = tmp_path / "work"
    work.mkdir()
    submit(cluster, "here", work)
    wait_until(lambda: status_says(cluster, "here", "finished", "exit 0"), timeout=60)
    assert (work / "accordion-here.out").read_text() == f"{on}\n"

    # The only agent that runs commands stops: a command job now waits, and says why.
    agent = next(c for c in cluster.children() if c.name == f"agent-{on}")
    agent.terminate()
    agent.finish(STOP_GRACE["agent"], keep_group=True)
    submit(cluster, "later", work)
    wait_until(lambda: waits_for_capable_machine(cluster, "later"), timeout=60)
    row = queued(cluster, "later")
    assert row is not None
    assert row.reason_detail == "needs machines that run commands; none of the 1 online does"
    assert row.state is JobState.QUEUED  # not failed, not run on the other agent
    assert not (work / "accordion-later.out").exists()

    agent.restart()
    wait_until(lambda: status_says(cluster, "later", "finished", "exit 0"), timeout=60)
    assert (work / "accordion-later.out").read_text() == f"{on}\n"
