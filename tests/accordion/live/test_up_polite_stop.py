"""``accordion up`` stopped and started again on its run directory, three times, with jobs
running: every job finishes, none failed, no requeue charged.

A real ``accordion up`` subprocess each time (Mosquitto with logins, the
scheduler, two agents, job processes), SIGTERMed as an operator would. Its
agents leave their jobs running for their lease and say they stop; the next
``up`` adopts what still runs and requeues, uncharged, what its lease ended.
The test waits on signals (a line of ``up``'s, a status, the journal), each
bounded only to turn a hang into a failure.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from accordion.client.live_client import connect, run_async
from accordion.client.specs import job_spec
from accordion.errors import NoReplyError
from scheduler.core.job_lifecycle import JobState
from scheduler.runtime.journal import Journal
from tests.accordion.live.test_up_supervise import BOUND, ROOT, Lines, _admin

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

JOBS = 6
STOPS = 3


def _up(cluster: Path, run_dir: Path, root: str) -> tuple[subprocess.Popen[str], Lines, Lines]:
    argv = [sys.executable, "-c", "from accordion.cli import main; main()", "up"]
    argv += ["--cluster", str(cluster), "--root", root, "--run-dir", str(run_dir)]
    argv += ["--time-scale", "10", "--broker-kind", "mosquitto"]
    up = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert up.stderr is not None
    assert up.stdout is not None
    return up, Lines(up.stderr), Lines(up.stdout)


def _stop(up: subprocess.Popen[str], errors: Lines, output: Lines) -> None:
    up.send_signal(signal.SIGTERM)
    assert up.wait(timeout=BOUND) == 0
    errors.wait_for("stopped: agents (their jobs run on")
    output.close()
    errors.close()


async def _running(run_dir: Path, *, at_least: int = 1) -> None:
    """Until the scheduler runs ``at_least`` jobs (a fresh ``up``: ask until it answers)."""
    cluster: dict[str, Any] = json.loads((run_dir / "cluster.json").read_text())
    async with (
        asyncio.timeout(BOUND),
        connect(
            cluster["broker"], cluster["root"], timeout=5.0, credentials=_admin(run_dir, "admin")
        ) as client,
    ):
        while True:
            try:
                status = await client.status()
            except NoReplyError:
                continue
            if len(status.running) >= at_least and not any(j.reconciling for j in status.running):
                return
            await asyncio.sleep(0.1)


async def _submit(run_dir: Path) -> None:
    cluster: dict[str, Any] = json.loads((run_dir / "cluster.json").read_text())
    specs = [
        # 300 cluster s at time scale 10: 30 s of wall time each, through every stop.
        job_spec(job_id=f"j{i}", procs=1, walltime=3000.0, work=300.0)
        for i in range(JOBS)
    ]
    async with connect(
        cluster["broker"], cluster["root"], timeout=10.0, credentials=_admin(run_dir, "admin")
    ) as client:
        reply = await client.submit(specs)
    assert all(r.accepted for r in reply.results)


def _states(journal: Path) -> dict[str, JobState]:
    with Journal(journal) as j:
        return {row.spec.id: row.state for row in j.load().jobs}


def test_up_stopped_and_started_three_times_finishes_every_job(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(f'name = "stops-{tag}"\n[[machine]]\nname = "m"\ncpus = 3\ncount = 2\n')
    run_dir, root = tmp_path / "run", f"stops-{tag}/v3"
    up, errors, output = _up(cluster, run_dir, root)
    try:
        errors.wait_for("the cluster is up")
        run_async(_submit(run_dir))
        run_async(_running(run_dir, at_least=JOBS))
    except BaseException:
        up.kill()
        raise
    _stop(up, errors, output)
    for _ in range(STOPS - 1):
        up, errors, output = _up(cluster, run_dir, root)
        try:
            errors.wait_for("the cluster is up")
            run_async(_running(run_dir))
        except BaseException:
            up.kill()
            raise
        _stop(up, errors, output)
    up, errors, output = _up(cluster, run_dir, root)
    journal = run_dir / "journal.sqlite"
    try:
        errors.wait_for("the cluster is up")
        loop_bound = 600.0
        waited = 0.0
        while not all(s is JobState.FINISHED for s in _states(journal).values()):
            assert up.poll() is None, "".join(errors.seen)
            assert not [s for s in _states(journal).values() if s is JobState.FAILED]
            assert waited < loop_bound, _states(journal)
            run_async(asyncio.sleep(0.5))
            waited += 0.5
    finally:
        _stop(up, errors, output)
    with Journal(journal) as j:
        rows = j.load().jobs
        requeues = [e for e in j.history() if e.kind == "requeued"]
        adopted = [e for e in j.job_events([r.spec.id for r in rows]) if e.event == "adopted"]
    assert {r.spec.id: r.state for r in rows} == {f"j{i}": JobState.FINISHED for i in range(JOBS)}
    # An operator's stops never charge a job's budget: each requeue says so.
    assert all(r.requeues == r.uncharged for r in rows), [(r.spec.id, r.detail) for r in rows]
    assert all((e.cause, e.charged) == ("operator_stop", False) for e in requeues), requeues
    # Every job that ran through a stop was adopted or requeued, uncharged, by it.
    assert adopted or requeues
    print(f"{len(adopted)} adoption(s), {len(requeues)} uncharged requeue(s) over {STOPS} stops")


def test_a_stopped_up_leaves_nothing_charged_when_its_jobs_outlive_no_lease(
    tmp_path: Path,
) -> None:
    # Started again long after its lease: nothing is adopted, everything is requeued
    # uncharged, and the jobs run again to their end.
    tag = uuid.uuid4().hex[:6]
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(f'name = "late-{tag}"\n[[machine]]\nname = "m"\ncpus = 2\n')
    run_dir, root = tmp_path / "run", f"late-{tag}/v3"
    up, errors, output = _up(cluster, run_dir, root)
    try:
        errors.wait_for("the cluster is up")
        run_async(_submit(run_dir))
        run_async(_running(run_dir, at_least=2))
    except BaseException:
        up.kill()
        raise
    _stop(up, errors, output)
    # Until the left jobs stopped by their lease: no process of this root is left.
    root_arg = f"--root={root}"

    def left() -> bool:
        found = subprocess.run(
            ["pgrep", "-f", "--", root_arg], check=False, capture_output=True, text=True
        )
        return bool(found.stdout.strip())

    waited = 0.0
    while left():
        assert waited < BOUND
        run_async(asyncio.sleep(0.2))
        waited += 0.2
    up, errors, output = _up(cluster, run_dir, root)
    try:
        errors.wait_for("the cluster is up")
        run_async(_running(run_dir))
    finally:
        _stop(up, errors, output)
    with Journal(run_dir / "journal.sqlite") as j:
        requeues = [e for e in j.history() if e.kind == "requeued"]
        rows = j.load().jobs
    assert requeues
    assert all((e.cause, e.charged) == ("operator_stop", False) for e in requeues), requeues
    assert all(r.state is not JobState.FAILED for r in rows)
