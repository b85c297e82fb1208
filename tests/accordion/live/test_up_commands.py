"""``accordion up`` runs its owner's commands: submit and batch through the CLI with the
owner's login, output files, status with the exit status, and a broker restart mid-run.

A real cluster (its own Mosquitto with logins, the scheduler, one agent) as
``accordion up`` starts it: the agent runs commands as the account that started
the cluster (``users.map``). The batch job counts lines into its output while
the broker is SIGKILLed and restarted: nothing it wrote is lost, and the
scheduler hears how it ended.
"""

from __future__ import annotations

import os
import pwd
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from accordion.cli import app
from accordion.client.live_client import run_async
from accordion.cluster.local_cluster import LocalCluster
from broker.local import mosquitto_binary
from broker.settings import ENV_PASSWORD_FILE, ENV_USERNAME
from model.machine import Machine
from tests.accordion.live.cli_harness import wait_until
from tests.brokers import _no_mosquitto
from workload.cluster import ClusterSpec

pytestmark = pytest.mark.integration
runner = CliRunner()
ME = pwd.getpwuid(os.geteuid()).pw_name


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    if mosquitto_binary() is None:
        _no_mosquitto()
    tag = uuid.uuid4().hex[:6]
    spec = ClusterSpec(
        name=f"cmd-{tag}", reference_speed=1.0, machines=(Machine(id=f"c-{tag}", cpus=2),)
    )
    local = LocalCluster(
        spec,
        tmp_path / "run",
        broker="mosquitto",
        root=f"cmd-{tag}/v1",
        auth=True,
        users=(ME,),
        heartbeat=0.5,
        commands=None,  # as accordion up: on wherever there are logins
    )
    assert local.commands
    with local:

        async def ready() -> None:
            async with local.connect(timeout=5.0) as client:
                await local.ready(client)

        run_async(ready())
        yield local


def as_owner(cluster: LocalCluster, *args: str) -> Result:
    """``accordion ARGS`` logged in as the cluster's owner (its first login)."""
    login = cluster.credentials(ME)
    env = {ENV_USERNAME: login.username, ENV_PASSWORD_FILE: str(login.password_file)}
    return runner.invoke(
        app, [args[0], "--broker", cluster.broker_url, "--root", cluster.root, *args[1:]], env=env
    )


def status_says(cluster: LocalCluster, job_id: str, *words: str) -> bool:
    result = as_owner(cluster, "status", job_id)
    return result.exit_code == 0 and all(w in result.output for w in words)


def test_commands_run_as_the_owner_and_survive_a_broker_restart(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    submitted = as_owner(
        cluster,
        "submit",
        "--id",
        "cmd1",
        "-D",
        str(work),
        "-t",
        "60",
        "--",
        "sh",
        "-c",
        "echo out; echo err >&2; id -un; exit 3",
    )
    assert submitted.exit_code == 0, submitted.output
    gate = work / "go"
    script = work / "count.sh"
    script.write_text(
        "#!/bin/sh\n"
        "#ACCORDION -n 2 -t 120 -o counted-%j.txt\n"
        "i=0\n"
        f"while [ ! -e {gate} ]; do i=$((i+1)); echo $i; sleep 0.02; done\n"
        "echo last $i\n"
    )
    batched = as_owner(cluster, "batch", "--id", "cnt1", "-D", str(work), str(script))
    assert batched.exit_code == 0, batched.output
    wait_until(lambda: status_says(cluster, "cmd1", "failed", "exit 3"))
    assert (work / "accordion-cmd1.out").read_text() == f"out\nerr\n{ME}\n"
    wait_until((work / "counted-cnt1.txt").exists)
    # The broker dies under the running job, and is restarted by the supervisor.
    broker = next(c for c in cluster.children() if c.role == "broker")
    os.kill(broker.pid, signal.SIGKILL)
    wait_until(
        lambda: any(r.name == broker.name and r.delay == 0 for r in cluster.supervise()),
        timeout=60,
    )
    gate.write_text("go")
    wait_until(lambda: status_says(cluster, "cnt1", "finished", "exit 0"), timeout=60)
    lines = (work / "counted-cnt1.txt").read_text().splitlines()
    count = int(lines[-1].split()[1])
    # Every line it wrote is there, in order: nothing lost while the broker was away.
    assert lines[:-1] == [str(n) for n in range(1, count + 1)]
