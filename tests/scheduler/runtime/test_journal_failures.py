"""A journal on a full disk, read-only or damaged.

The disk is a small tmpfs mounted for the test (root only: skipped otherwise),
filled to its last byte and freed again; the damaged journal is a corrupted
copy of a good one. On a full disk the scheduler refuses new submissions and
cancels with the reason, keeps the running jobs and their reports in memory,
holds back what depends on its writes, and goes on once there is room,
without a crash; a journal it cannot use is refused at start in one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.faults.disk import DiskError, fill, free, read_only, small_tmpfs
from broker.messages import (
    CancelJob,
    CancelJobs,
    CancelJobsReply,
    CancelReply,
    JobEvent,
    JobSpec,
    StatusReply,
    StatusRequest,
    SubmitJobs,
    SubmitReply,
)
from broker.vocabulary import CancelRefusal, Rejection
from scheduler.runtime.clock import ManualClock
from scheduler.runtime.journal import Journal
from tests.scheduler.runtime.harness import TOPICS, Cluster, eventually, spec

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    try:
        with small_tmpfs(tmp_path / "disk") as path:
            yield path
    except DiskError as exc:
        pytest.skip(str(exc))


def test_writes_the_disk_refuses_are_kept_and_written_once_it_has_room(disk: Path) -> None:
    with Journal(disk / "j.sqlite") as journal:
        journal.ensure_meta(epoch=0.0, time_scale=1.0, policy="fcfs")
        journal.record_submissions([(JobSpec(id="before", procs=1, walltime=9.0, work=1.0), 1.0)])
        fill(disk)
        with journal.transaction():  # no exception: the writes are held
            journal.record_submissions(
                [(JobSpec(id=f"j{i}", procs=1, walltime=9.0, work=1.0), 2.0) for i in range(50)]
            )
            journal.record_drain("m1", 2.0, "admin")
        assert journal.failure is not None
        assert "its disk is full" in journal.failure
        assert journal.held_writes >= 2
        assert [j.spec.id for j in journal.load().jobs] == ["before"]
        assert not journal.retry()  # still full
        free(disk)
        assert journal.retry()
        assert (journal.failure, journal.held_writes) == (None, 0)
        assert len(journal.load().jobs) == 51
        assert journal.drained() == {"m1": 2.0}
        assert journal.failures == 1


async def test_a_full_disk_refuses_submissions_keeps_running_jobs_and_resumes(
    disk: Path,
) -> None:
    c = Cluster(disk / "j.sqlite", clock=ManualClock(1000.0))
    await c.client.start(TOPICS.events)
    actor = await c.start()
    try:
        a1 = await c.agent("a1", 4)
        await c.client.submit(spec("running", 2), spec("waiting", 4))
        await eventually(lambda: a1.started("running"))
        filler = fill(disk)
        # The submission whose write finds the disk full is accepted in memory; its
        # acceptance waits for the journal to take it (persist before acknowledging).
        first = c.client.request_id()
        await c.client.send(
            SubmitJobs(request_id=first, reply_to=c.client.name, jobs=(spec("first", 1),))
        )
        await c.settle()
        assert c.state("first") == "queued"
        assert c.client.inbox.all(SubmitReply, lambda r: r.request_id == first) == []
        # From then on, new work is refused with the reason, at once (a refusal
        # promises nothing).
        refused = (await c.client.submit(spec("during", 1))).results[0]
        assert (refused.accepted, refused.code) == (False, Rejection.JOURNAL)
        assert refused.reason is not None
        assert "its disk is full" in refused.reason
        assert c.state("during") is None
        # The running job's report is handled in memory; its event waits for the disk.
        events_before = len(c.client.inbox.all(JobEvent))
        await a1.finish("running")
        await c.settle()
        assert c.state("running") == "finished"
        assert (
            c.client.inbox.all(JobEvent, lambda e: e.job_id == "running" and e.event == "finished")
            == []
        )
        assert len(c.client.inbox.all(JobEvent)) == events_before
        assert actor.ctx.journal.failure is not None
        # Status is answered; a cancel is refused, with the reason.
        rid = c.client.request_id()
        await c.client.send(StatusRequest(request_id=rid, reply_to=c.client.name))
        await c.client.inbox.expect(StatusReply, lambda r: r.request_id == rid)
        rid = c.client.request_id()
        await c.client.send(CancelJob(request_id=rid, reply_to=c.client.name, job_id="waiting"))
        answer = await c.client.inbox.expect(CancelReply, lambda r: r.request_id == rid)
        assert (answer.cancelled, answer.code) == (False, CancelRefusal.JOURNAL)
        # So is a bulk cancel, whole: nothing cancelled, the reason said.
        rid = c.client.request_id()
        await c.client.send(
            CancelJobs(request_id=rid, reply_to=c.client.name, job_ids=("waiting", "nothing"))
        )
        bulk = await c.client.inbox.expect(CancelJobsReply, lambda r: r.request_id == rid)
        assert (bulk.cancelled, bulk.not_found, bulk.code) == (0, 0, CancelRefusal.JOURNAL)
        assert bulk.reason is not None
        assert "its disk is full" in bulk.reason
        assert c.state("waiting") == "queued"
        # No decision meanwhile: the CPUs "running" freed stay free until the disk has room.
        assert not a1.started("waiting")
        assert actor.metrics.registry.get_sample_value("accordion_scheduler_journal_writable") == 0
        # Room again: the next tick writes what was held and sends what waited.
        os.unlink(filler)
        await c.tick()
        await c.client.inbox.expect(
            JobEvent, lambda e: e.job_id == "running" and e.event == "finished"
        )
        assert actor.ctx.journal.failure is None
        assert c.journal is not None
        row = c.journal.job("running")
        assert row is not None
        assert row.state.value == "finished"
        held = await c.client.inbox.expect(SubmitReply, lambda r: r.request_id == first)
        assert held.results[0].accepted
        assert c.journal.job("first") is not None
        await eventually(lambda: a1.started("waiting"))  # decisions resumed
        accepted = (await c.client.submit(spec("after", 1))).results[0]
        assert accepted.accepted
        assert (
            actor.metrics.registry.get_sample_value("accordion_scheduler_journal_failures_total")
            == 1
        )
    finally:
        await c.stop()


def _scheduler(journal: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``python -m scheduler`` on ``journal`` with no broker to reach (port 1)."""
    return subprocess.run(
        [sys.executable, "-m", "scheduler", f"--journal={journal}", "--port=1", *extra],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _one_line_refusal(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, done.stderr
    for word in words:
        assert word in errors[0], errors[0]


def _a_journal(path: Path) -> None:
    with Journal(path) as journal:
        journal.ensure_meta(epoch=0.0, time_scale=1.0, policy="easy")
        journal.record_submissions(
            [(JobSpec(id=f"j{i}", procs=1, walltime=9.0, work=1.0), 1.0) for i in range(2000)]
        )


def test_a_damaged_journal_is_refused_at_start_in_one_line(tmp_path: Path) -> None:
    good = tmp_path / "good.sqlite"
    _a_journal(good)
    damaged = tmp_path / "damaged.sqlite"
    data = bytearray(good.read_bytes())
    data[8192 : 8192 + 4096] = b"\xff" * 4096  # a page in the middle of the jobs
    damaged.write_bytes(bytes(data))
    _one_line_refusal(_scheduler(damaged), "is damaged", "restore it from a copy")
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(os.urandom(5000))
    _one_line_refusal(_scheduler(garbage), "not a database", "move it aside")


def test_a_read_only_journal_is_refused_at_start_in_one_line(disk: Path) -> None:
    _a_journal(disk / "j.sqlite")
    read_only(disk)
    _one_line_refusal(_scheduler(disk / "j.sqlite"), "read-only", "remount it read-write")


def test_a_scheduler_started_on_a_full_disk_waits_for_room_without_exiting(
    disk: Path,
) -> None:
    _a_journal(disk / "j.sqlite")
    fill(disk)
    log = disk.parent / "scheduler.log"
    with log.open("w") as out:
        scheduler = subprocess.Popen(
            [sys.executable, "-m", "scheduler", f"--journal={disk / 'j.sqlite'}", "--port=1"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        # One line says why it waits; it does not exit (no crash loop for a supervisor).
        deadline = 60.0
        waited = 0.0
        while "waiting for space" not in log.read_text():
            assert scheduler.poll() is None, log.read_text()
            assert waited < deadline, log.read_text()
            subprocess.run(["sleep", "0.1"], check=True)
            waited += 0.1
        assert scheduler.poll() is None
        free(disk)
        # Room again: it opens its journal and goes on (to a broker that is not there).
        assert scheduler.wait(timeout=60) == 1
        text = log.read_text()
        assert "opened: there is room again" in text
        assert text.count("waiting for space") == 1
        assert "Traceback" not in text
    finally:
        if scheduler.poll() is None:
            scheduler.kill()
            scheduler.wait()
