"""Fixtures of the live client and ``accordion up`` tests.

Async tests run on asyncio and on uvloop, and the real brokers come from
``tests/conftest.py`` (one of each for the whole run).
``live_cluster`` starts a real scheduler and two heterogeneous agents (speeds
1 and 2) as subprocesses on Mosquitto, with ``accordion.cluster.local_cluster.LocalCluster``;
each cluster has its own topic root and machine names, since the broker is
shared by the whole session and agents' client ids are their machine names.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from accordion.client.live_client import connect, run_async
from accordion.cluster.local_cluster import LocalCluster
from model.machine import Machine
from tests.integration.conftest import BrokerEndpoint
from workload.cluster import ClusterSpec


def two_agents(tag: str) -> ClusterSpec:
    """A slow machine (4 CPUs, speed 1) and a fast one (2 CPUs, speed 2)."""
    return ClusterSpec(
        name=f"live-{tag}",
        reference_speed=1.0,
        machines=(
            Machine(id=f"slow-{tag}", cpus=4, speed=1.0),
            Machine(id=f"fast-{tag}", cpus=2, speed=2.0),
        ),
    )


@contextmanager
def local_cluster(
    endpoint: BrokerEndpoint, run_dir: Path, *, time_scale: float, policy: str = "easy"
) -> Iterator[LocalCluster]:
    """Scheduler and two agents on ``endpoint``, ready (every machine online)."""
    tag = uuid.uuid4().hex[:6]
    cluster = LocalCluster(
        two_agents(tag),
        run_dir,
        policy=policy,
        time_scale=time_scale,
        broker_url=endpoint.url,
        root=f"live-{tag}/v1",
        heartbeat=0.5,
    )

    async def ready() -> None:
        async with connect(cluster.broker_url, cluster.root, timeout=2.0) as client:
            await cluster.ready(client, timeout=60.0)

    with cluster:
        run_async(ready())
        yield cluster


@pytest.fixture(scope="module")
def live_cluster(
    mosquitto: BrokerEndpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """One cluster at time scale 10 for a whole test module."""
    with local_cluster(mosquitto, tmp_path_factory.mktemp("live"), time_scale=10.0) as cluster:
        yield cluster
