"""The compose file's ``dask`` profile end to end: a sweep on its scheduler and workers.

Run by ``scripts/test-compose`` (which sets ``ACCORDION_TESTBED=1``); a plain
``pytest`` skips it. On its own compose project and host ports it builds the
accordion image (its own tag, as the testbed test does), starts only the
profile's ``dask-scheduler`` and two ``dask-worker`` containers, and runs a
small preset sweep from this checkout with ``accordion sweep --dask``: the
image's accordion must pass the sweep's worker check (the same code), and
the CSV must be the local pool's to the byte. Then one worker container is
killed mid-sweep: the other finishes it, and the CSV is again the same.
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from accordion.experiments.dask_pool import dask_executor
from accordion.experiments.sweep import Source, Task, run_sweep, tasks

ROOT = Path(__file__).resolve().parents[2]
STARTUP = 300  # seconds a build or an `up --wait` may take before it is a failure

pytestmark = [pytest.mark.timeout(900)]

if os.environ.get("ACCORDION_TESTBED") != "1":
    pytest.skip("the compose tests run from scripts/test-compose", allow_module_level=True)

pytest.importorskip("distributed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DaskProfile:
    """A compose project running the dask profile's services alone."""

    def __init__(self) -> None:
        self.port = free_port()
        self.env = {
            **os.environ,
            "COMPOSE_PROJECT_NAME": f"accordion-dask-{uuid.uuid4().hex[:6]}",
            "ACCORDION_IMAGE": "accordion:e2e-dask",
            "DASK_PORT": str(self.port),
            "DASK_DASHBOARD_PORT": str(free_port()),
            "DASK_WORKERS": "2",
        }

    def compose(self, *args: str) -> str:
        done = subprocess.run(
            ["docker", "compose", "--profile", "dask", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=STARTUP,
            check=False,
        )
        assert done.returncode == 0, f"docker compose {' '.join(args)}: {done.stderr}"
        return done.stdout

    @property
    def address(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def profile() -> Iterator[DaskProfile]:
    bed = DaskProfile()
    bed.compose("build", "scheduler")  # the image; the dask services only run it
    try:
        bed.compose("up", "-d", "--wait", "dask-scheduler", "dask-worker")
        yield bed
    finally:
        bed.compose("down", "-v", "--remove-orphans")


def _todo(seeds: list[int]) -> list[Task]:
    source = Source(preset="eg-edf-grid")
    return tasks(source, ["fcfs", "easy"], "interarrival", [8.0, 12.0], seeds)


def _local(todo: list[Task], out: Path) -> bytes:
    with ProcessPoolExecutor(max_workers=2) as pool:
        run_sweep(todo, out, pool)
    return out.read_bytes()


def test_a_sweep_on_the_profiles_workers_writes_the_local_bytes(
    profile: DaskProfile, tmp_path: Path
) -> None:
    todo = _todo([1, 2])
    expected = _local(todo, tmp_path / "local" / "sweep.csv")
    out = tmp_path / "dask" / "sweep.csv"
    with dask_executor(profile.address, files=[], timeout=60.0) as pool:
        assert pool.workers == 2
        rows, ran = run_sweep(todo, out, pool.executor)
    assert ran == len(rows) == len(todo)
    assert out.read_bytes() == expected


def test_a_worker_container_killed_mid_sweep_loses_no_row(
    profile: DaskProfile, tmp_path: Path
) -> None:
    todo = _todo([3, 4])
    expected = _local(todo, tmp_path / "local" / "sweep.csv")
    victim = profile.compose("ps", "-q", "dask-worker").split()[0]
    killed: list[str] = []

    def kill_once(done: int, total: int) -> None:
        if done > 0 and not killed:  # a row is in: the sweep is under way
            subprocess.run(["docker", "kill", victim], check=True, capture_output=True)
            killed.append(victim)

    out = tmp_path / "dask" / "sweep.csv"
    with dask_executor(profile.address, files=[], timeout=60.0) as pool:
        run_sweep(todo, out, pool.executor, progress=kill_once)
    assert killed == [victim]
    assert out.read_bytes() == expected
