"""What the live CLI tests do to a running cluster: run a command, watch, ask, wait.

Shared by ``test_live_cli.py`` and ``test_live_malleable.py``; the cluster
itself comes from ``conftest.local_cluster``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from typer.testing import CliRunner, Result

from accordion.cli import app
from accordion.client.live_client import connect, run_async
from accordion.cluster.local_cluster import LocalCluster
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


@contextmanager
def watching(
    cluster: LocalCluster, *, events: int, seconds: float
) -> Iterator[subprocess.Popen[str]]:
    """``accordion watch --events N --for S`` as a child process, already subscribed
    when this yields (its first line, the retained cluster summary, was read); killed
    on the way out if it is still running."""
    watcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from accordion.cli import main; main()",
            "watch",
            "--broker",
            cluster.broker_url,
            "--root",
            cluster.root,
            "--events",
            str(events),
            "--for",
            f"{seconds:g}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watcher.stdout is not None
        first = watcher.stdout.readline()
        assert f"cluster  {len(cluster.spec.machines)} machines" in first, first
        yield watcher
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
