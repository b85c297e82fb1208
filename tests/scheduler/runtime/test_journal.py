"""The scheduler's SQLite journal: WAL, durability, idempotency, what a restart reads."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from broker.topics import PROTOCOL_VERSION
from model.machine import Part
from scheduler.core.job_lifecycle import JobState
from scheduler.runtime.journal import Journal, JournalError
from tests.builders import spec

ROOT = Path(__file__).resolve().parents[3]


def test_wal_mode_and_full_sync(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        assert journal.synchronous == "FULL"
    with sqlite3.connect(tmp_path / "j.sqlite") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_normal_sync_is_an_option_and_nothing_else(tmp_path: Path) -> None:
    with Journal(tmp_path / "n.sqlite", synchronous="NORMAL") as journal:
        assert journal.synchronous == "NORMAL"
    with pytest.raises(JournalError, match="FULL or NORMAL"):
        Journal(tmp_path / "x.sqlite", synchronous="OFF")  # type: ignore[arg-type]


def test_meta_is_kept_and_a_new_time_scale_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        meta = journal.ensure_meta(epoch=1.7e9, time_scale=10.0, policy="easy")
        assert (meta.epoch, meta.time_scale, meta.policy, meta.protocol) == (
            1.7e9,
            10.0,
            "easy",
            PROTOCOL_VERSION,
        )
    with Journal(path) as journal:
        again = journal.ensure_meta(epoch=2e9, time_scale=10.0, policy="fcfs")
        assert (again.epoch, again.policy) == (1.7e9, "fcfs")  # the stored epoch wins
        with pytest.raises(JournalError, match="time scale 10"):
            journal.ensure_meta(epoch=2e9, time_scale=1.0, policy="fcfs")
        loaded = journal.load().meta
        assert loaded is not None
        assert loaded.policy == "fcfs"


def test_submissions_are_idempotent_by_job_id(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        # Not the builder's defaults, and a deadline: the round trip must keep them.
        dated = spec("a", work=5.0, walltime=10.0, deadline=30.0)
        assert journal.record_submissions([(dated, 1.0), (spec("b"), 2.0)]) == 2
        assert journal.record_submissions([(spec("b"), 9.0), (spec("c"), 3.0)]) == 1
        jobs = journal.load().jobs
        assert [(j.spec.id, j.submit, j.state) for j in jobs] == [
            ("a", 1.0, JobState.QUEUED),
            ("b", 2.0, JobState.QUEUED),
            ("c", 3.0, JobState.QUEUED),
        ]
        assert jobs[0].spec == dated  # the whole spec round-trips


def test_a_job_life_round_trips(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        journal.record_submissions([(spec("a", 4), 1.0), (spec("b"), 1.5)])
        journal.record_start("a", 2.0, [Part("m1", 2), Part("m2", 2)])
        journal.record_parts("a", 3.0, [Part("m1", 1), Part("m2", 1)])
        row = journal.job("a")
        assert row is not None
        assert (row.state, row.start, row.parts) == (
            JobState.RUNNING,
            2.0,
            (Part("m1", 1), Part("m2", 1)),
        )
        journal.record_requeue("a", 4.0, 1, "machine m1 lost")
        row = journal.job("a")
        assert row is not None
        assert (row.state, row.start, row.parts, row.requeues, row.detail) == (
            JobState.QUEUED,
            None,
            (),
            1,
            "machine m1 lost",
        )
        journal.record_start("a", 5.0, [Part("m3", 4)])
        journal.record_end("a", 9.0, JobState.FINISHED)
        journal.record_end("b", 9.5, JobState.CANCELLED, "by a client")
        a, b = journal.load().jobs
        assert (a.state, a.start, a.end, a.parts, a.requeues) == (
            JobState.FINISHED,
            5.0,
            9.0,
            (Part("m3", 4),),
            1,
        )
        assert (b.state, b.detail) == (JobState.CANCELLED, "by a client")
    with sqlite3.connect(tmp_path / "j.sqlite") as db:
        kinds = [k for (k,) in db.execute("SELECT kind FROM events WHERE job_id='a' ORDER BY seq")]
    assert kinds == ["started", "resized", "requeued", "started", "finished"]


def test_unknown_jobs_and_non_final_ends_are_bugs(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        with pytest.raises(KeyError, match="nope"):
            journal.record_start("nope", 1.0, [Part("m", 1)])
        journal.record_submissions([(spec("a"), 1.0)])
        with pytest.raises(ValueError, match="final state"):
            journal.record_end("a", 2.0, JobState.RUNNING)


def test_a_transaction_is_one_commit_or_nothing(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:

        def fail_halfway() -> None:
            with journal.transaction():
                journal.record_submissions([(spec("a"), 1.0)])
                with journal.transaction():  # nested: joins the outer one
                    journal.record_submissions([(spec("b"), 1.0)])
                raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            fail_halfway()
        assert journal.load().jobs == []
        with journal.transaction():
            journal.record_submissions([(spec("a"), 1.0)])
            journal.record_start("a", 2.0, [Part("m", 1)])
            # Not visible to another connection until the commit.
            with sqlite3.connect(path) as db:
                assert db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 0
        with sqlite3.connect(path) as db:
            assert db.execute("SELECT state FROM jobs").fetchall() == [("running",)]


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    Journal(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value='99' WHERE key='schema'")
    with pytest.raises(JournalError, match="schema 99"):
        Journal(path)


CHILD = textwrap.dedent(
    """
    import sys, time
    from broker.messages import JobSpec
    from scheduler.runtime.journal import Journal

    journal = Journal(sys.argv[1])
    specs = [JobSpec(id=f"k{i}", procs=1, walltime=1.0, work=1.0) for i in range(500)]
    journal.record_submissions([(s, 0.0) for s in specs])
    print("acked", flush=True)  # what the actor does after the commit: answer
    time.sleep(60)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_an_acknowledged_submission_survives_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True, env=env
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "acked"
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        assert child.returncode == -signal.SIGKILL
    with Journal(path) as journal:
        assert len(journal.load().jobs) == 500
