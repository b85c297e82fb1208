"""What the live CLI tests do to a running cluster: run a command, ask its status, wait.

Shared by ``test_live_cli.py`` and ``test_live_malleable.py``; the cluster
itself comes from ``conftest.local_cluster``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from typer.testing import CliRunner, Result

from accordion.cli import app
from accordion.client import connect, run_async
from accordion.cluster import LocalCluster
from broker.messages import StatusReply

runner = CliRunner()


def cli(cluster: LocalCluster, *args: str) -> Result:
    """``accordion ARGS`` in this process, pointed at ``cluster``'s broker and root."""
    return runner.invoke(
        app, [args[0], "--broker", cluster.broker_url, "--root", cluster.root, *args[1:]]
    )


def status_of(cluster: LocalCluster) -> StatusReply:
    async def ask() -> StatusReply:
        async with connect(cluster.broker_url, cluster.root) as client:
            return await client.status()

    return run_async(ask())


def wait_until(predicate: Callable[[], object], timeout: float = 30.0) -> None:
    """Poll ``predicate`` until it holds; fail after ``timeout`` wall seconds (a bound,
    not a schedule: it returns as soon as the cluster gets there)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {predicate}")
        time.sleep(0.05)
