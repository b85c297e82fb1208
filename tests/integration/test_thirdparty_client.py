"""A client written only from the AsyncAPI document runs a job on a real cluster.

``examples/thirdparty_client.py`` imports nothing of the project (paho-mqtt
and msgpack only; checked here from its source). It runs as its own process
against a cluster with logins: a real Mosquitto with the generated password
and ACL files, a real scheduler and a real agent, each a process of its own.
It logs in as the user alice, submits a job, reads the reply and follows the
job's events to ``finished``. If it needed anything the document does not
say, the document would be wrong: the document is what to fix.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from accordion.client.live_client import run_async
from accordion.cluster.local_cluster import LocalCluster
from broker.local import mosquitto_binary
from model.machine import Machine
from tests.brokers import _no_mosquitto
from workload.cluster import ClusterSpec

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "thirdparty_client.py"


def imported_roots(source: str) -> set[str]:
    """The top-level names of every module ``source`` imports."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.partition(".")[0])
    return roots


def test_the_client_imports_only_paho_msgpack_and_the_standard_library() -> None:
    roots = imported_roots(SCRIPT.read_text(encoding="utf-8"))
    assert roots - set(sys.stdlib_module_names) == {"paho", "msgpack"}


def test_a_client_written_from_the_document_follows_its_job_to_finished(
    tmp_path: Path,
) -> None:
    if mosquitto_binary() is None:
        _no_mosquitto()
    tag = uuid.uuid4().hex[:6]
    spec = ClusterSpec(
        name=f"tp-{tag}", reference_speed=1.0, machines=(Machine(id=f"tp-{tag}", cpus=2),)
    )
    cluster = LocalCluster(
        spec,
        tmp_path,
        broker="mosquitto",
        root=f"tp-{tag}/v1",
        auth=True,
        users=("alice",),
        time_scale=10.0,
        heartbeat=0.5,
    )

    async def ready() -> None:
        async with cluster.connect(timeout=5.0) as admin:
            await cluster.ready(admin, timeout=60.0)

    with cluster:
        run_async(ready())
        login = cluster.credentials("alice")
        url = urlsplit(cluster.broker_url)
        job = f"tp-job-{tag}"
        done = subprocess.run(
            [
                sys.executable,
                str(SCRIPT),
                f"--host={url.hostname}",
                f"--port={url.port}",
                f"--root={cluster.root}",
                f"--username={login.username}",
                f"--password-file={login.password_file}",
                f"--job-id={job}",
                "--procs=2",
                "--walltime=60",
                "--work=5",
                "--timeout=90",
            ],
            capture_output=True,
            text=True,
            timeout=110,
            check=False,
        )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    lines = done.stdout.splitlines()
    assert lines[0] == f"submitted {job} as alice"
    assert "accepted" in lines
    events = [line.split() for line in lines if line[:3].strip().isdigit()]
    assert [int(e[0]) for e in events] == list(range(1, len(events) + 1))
    states = [e[1] for e in events]
    # The scheduler's default --job-events (lifecycle) publishes no "queued".
    assert states[0] == "running"
    assert states[-1] == "finished"
