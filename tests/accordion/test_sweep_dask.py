"""``accordion sweep --dask``: the same CSV bytes on a Dask cluster, and its faults.

Real parts throughout: a ``distributed.LocalCluster`` of worker processes, or a
``dask scheduler`` and ``dask worker`` started as OS processes where the test
kills the scheduler. Each fault is injected on a signal (the sweep's own
progress callback: a row has arrived), never after a sleep.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accordion.cli import app
from accordion.experiments.dask_pool import ROW_PACKAGES, DaskError, dask_executor
from accordion.experiments.sweep import Source, Task, read_rows, run_sweep, tasks
from workload.swf import write_swf
from workload.synthetic import SyntheticSpec, generate, header

distributed = pytest.importorskip("distributed")

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 30.0  # s: reaching a scheduler on loopback; a bound, not a wait


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    spec = SyntheticSpec(jobs=120, cpus=32, seed=7, load=1.2)
    path = tmp_path / "t.swf"
    write_swf(path, generate(spec), header=header(spec))
    return path


@pytest.fixture
def cluster() -> Iterator[distributed.LocalCluster]:
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
    ) as lc:
        yield lc


def _todo(trace: Path) -> list[Task]:
    return tasks(Source(trace=trace), ["easy", "fcfs"], "overhead", [0.0, 0.1], [1, 2, 3])


def _local_bytes(todo: list[Task], out: Path) -> bytes:
    with ProcessPoolExecutor(max_workers=2) as pool:
        run_sweep(todo, out, pool)
    return out.read_bytes()


def test_cli_on_a_local_cluster_writes_the_local_pools_bytes(
    trace: Path, tmp_path: Path, cluster: distributed.LocalCluster
) -> None:
    argv = ["sweep", str(trace), "--policies", "easy,fcfs", "--param", "overhead=0,0.1"]
    argv += ["--seeds", "1-3", "--no-progress"]
    local = runner.invoke(app, [*argv, "--workers", "2", "--out", str(tmp_path / "local")])
    assert local.exit_code == 0, local.output
    on_dask = runner.invoke(
        app, [*argv, "--dask", cluster.scheduler_address, "--out", str(tmp_path / "dask")]
    )
    assert on_dask.exit_code == 0, on_dask.output
    assert "12 runs (12 run now, 0 reused)" in on_dask.output
    assert "Dask: 2 workers, 2 threads; dashboard http://127.0.0.1:" in on_dask.output
    for name in ("sweep.csv", "summary.csv"):
        assert (tmp_path / "dask" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()


def test_a_worker_killed_mid_sweep_loses_no_row(
    trace: Path, tmp_path: Path, cluster: distributed.LocalCluster
) -> None:
    todo = _todo(trace)
    expected = _local_bytes(todo, tmp_path / "local" / "sweep.csv")
    with distributed.Client(cluster, set_as_default=False) as client:
        pids: dict[str, int] = client.run(os.getpid)
    victim = min(pids.values())
    killed: list[int] = []

    def kill_once(done: int, total: int) -> None:
        if done > 0 and not killed:  # a row is in: the sweep is under way
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)

    out = tmp_path / "dask" / "sweep.csv"
    with dask_executor(cluster.scheduler_address, files=[trace], timeout=TIMEOUT) as pool:
        rows, ran = run_sweep(todo, out, pool.executor, progress=kill_once)
    assert killed == [victim]
    assert (len(rows), ran) == (len(todo), len(todo))
    assert out.read_bytes() == expected
    # The nanny started a new worker process in the killed one's place.
    with distributed.Client(cluster, set_as_default=False) as client:
        assert victim not in client.run(os.getpid).values()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _dask(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _scheduler_and_worker(port: int) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    address = f"tcp://127.0.0.1:{port}"
    scheduler = _dask(
        "distributed.cli.dask_scheduler", "--host=127.0.0.1", f"--port={port}",
        "--dashboard-address=127.0.0.1:0",
    )  # fmt: skip
    worker = _dask(
        "distributed.cli.dask_worker", address, "--nthreads=1", "--host=127.0.0.1",
        "--dashboard-address=127.0.0.1:0", "--death-timeout=60",
    )  # fmt: skip
    return scheduler, worker


def _stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_scheduler_gone_is_one_error_and_the_same_command_resumes(
    trace: Path, tmp_path: Path
) -> None:
    todo = _todo(trace)
    expected = _local_bytes(todo, tmp_path / "local" / "sweep.csv")
    out = tmp_path / "dask" / "sweep.csv"
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler, worker = _scheduler_and_worker(port)
    try:

        def kill_scheduler(done: int, total: int) -> None:
            if done > 0 and scheduler.poll() is None:
                scheduler.kill()
                scheduler.wait()

        with (
            pytest.raises(DaskError, match="lost the Dask scheduler") as lost,
            dask_executor(address, files=[trace], timeout=TIMEOUT) as pool,
        ):
            run_sweep(todo, out, pool.executor, progress=kill_scheduler)
        assert "\n" not in str(lost.value)
        # Nothing half-written: no sweep.csv, and the rows that came are kept.
        assert not out.exists()
        kept = read_rows(out.with_name("sweep.csv.partial"))
        assert 0 < len(kept) < len(todo)
    finally:
        _stop(scheduler, worker)

    # A new scheduler on the same address, and the same sweep again: it runs only
    # what is missing, and the CSV is the local pool's to the byte.
    scheduler, worker = _scheduler_and_worker(port)
    try:
        with dask_executor(address, files=[trace], timeout=TIMEOUT) as pool:
            _, ran = run_sweep(todo, out, pool.executor)
    finally:
        _stop(scheduler, worker)
    assert ran == len(todo) - len(kept)
    assert out.read_bytes() == expected


def _one_worker(preload: Path) -> distributed.LocalCluster:
    return distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        preload=[str(preload)],
    )


def test_a_worker_that_cannot_import_accordion_is_one_line(trace: Path, tmp_path: Path) -> None:
    # A preload that runs in each worker process before any task: accordion is
    # then unimportable there (a real ModuleNotFoundError), as on a host without it.
    block = tmp_path / "no_accordion.py"
    block.write_text('import sys\nsys.modules["accordion"] = None\n')
    with (
        _one_worker(block) as lc,
        pytest.raises(DaskError, match="cannot import accordion") as err,
        dask_executor(lc.scheduler_address, files=[trace], timeout=TIMEOUT),
    ):
        pass
    assert "ModuleNotFoundError" in str(err.value)


def test_a_worker_running_other_accordion_code_is_refused(trace: Path, tmp_path: Path) -> None:
    # Another commit's code on the worker: a copy of the packages with one line
    # changed, first on the worker's path (a preload runs before any task).
    other = tmp_path / "other"
    for package in ROW_PACKAGES:
        shutil.copytree(
            ROOT / package, other / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    metrics = other / "model" / "metrics.py"
    metrics.write_text(metrics.read_text() + "\n# a later commit\n")
    preload = tmp_path / "other_accordion.py"
    preload.write_text(f"import sys\nsys.path.insert(0, {str(other)!r})\n")
    with (
        _one_worker(preload) as lc,
        pytest.raises(DaskError, match="runs other accordion code than this host"),
        dask_executor(lc.scheduler_address, files=[trace], timeout=TIMEOUT),
    ):
        pass


def test_a_bad_or_unreachable_address_is_one_line_and_exit_2(trace: Path, tmp_path: Path) -> None:
    closed = f"tcp://127.0.0.1:{_free_port()}"  # nothing listens there any more
    base = ["sweep", str(trace), "--param", "tau=10", "--out", str(tmp_path / "o"), "--no-progress"]
    for address, said in (
        ("nonsense", "wants a scheduler address"),
        ("foo://127.0.0.1:1", "unknown address scheme"),
        (closed, "cannot reach the Dask scheduler"),
    ):
        result = runner.invoke(app, [*base, "--dask", address, "--dask-timeout", "0.5"])
        assert result.exit_code == 2, result.output
        assert said in result.output
        assert result.output.count("\n") == 1, result.output
        assert "Traceback" not in result.output
    both = runner.invoke(app, [*base, "--dask", closed, "--workers", "2"])
    assert both.exit_code == 2
    assert "--workers" in both.output
    assert not (tmp_path / "o").exists()
