"""The journal's archive: ended jobs move out with their events, readers still find them,
a kill mid-move loses and duplicates nothing, and a schema-9 journal opens."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from broker.messages import JobEvent
from broker.vocabulary import JobEventKind
from model.machine import Part
from scheduler.core.job_lifecycle import JobState
from scheduler.runtime.journal import SCHEMA_VERSION, Journal
from scheduler.runtime.journal_archive import ArchiveError, archive_path, parse_after
from tests.builders import spec


def event(job_id: str, seq: int, kind: JobEventKind, at: float, stream: int) -> JobEvent:
    return JobEvent(job_id=job_id, seq=seq, at=at, event=kind, stream=stream)


def filled(path: Path) -> Journal:
    """A journal (archive attached) with ``a`` finished at 100, ``b`` failed at 200,
    ``c`` cancelled at 300, ``r`` running and ``q`` queued; every job's events are
    numbered in the stream in the order they happened, ``a``'s owned by ``ann``."""
    j = Journal(path, archive=True)
    j.ensure_meta(epoch=0.0, time_scale=1.0, policy="fcfs")
    j.record_submissions([(spec(x, 1), 1.0) for x in ("a", "b", "c", "r", "q")])
    stream = 0
    for job_id, end, state in (
        ("a", 100.0, JobState.FINISHED),
        ("b", 200.0, JobState.FAILED),
        ("r", None, None),
    ):
        j.record_start(job_id, 10.0, [Part("m1", 1)])
        stream += 1
        j.record_event(
            event(job_id, 1, JobEventKind.RUNNING, 10.0, stream),
            owner="ann" if job_id == "a" else "bob",
            owner_stream=stream,
        )
        if state is not None and end is not None:
            j.record_end(job_id, end, state)
            stream += 1
            j.record_event(
                event(job_id, 2, JobEventKind(state.value), end, stream),
                owner="ann" if job_id == "a" else "bob",
                owner_stream=stream,
            )
    j.record_cancels(["c"], 300.0, "by its owner")
    return j


def hot_ids(path: Path, table: str, column: str = "job_id") -> list[str]:
    with closing(sqlite3.connect(path)) as db:
        return sorted(str(r[0]) for r in db.execute(f"SELECT {column} FROM {table}"))


def test_archiving_moves_exactly_the_jobs_past_retention_with_their_events(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.sqlite"
    with filled(path) as j:
        moved = j.archive(200.0, 100)
        assert (moved.jobs, moved.events, moved.job_events) == (2, 4, 4)
        # A restart reads only what is left: the cancelled job ended after the cutoff.
        assert [row.spec.id for row in j.load().jobs] == ["c", "r", "q"]
        assert hot_ids(path, "jobs", "id") == ["c", "q", "r"]
        assert hot_ids(path, "events") == ["c", "r"]
        assert hot_ids(path, "job_events") == ["r"]
        archive = archive_path(path)
        assert archive.name == "journal-archive.sqlite"
        assert hot_ids(archive, "jobs", "id") == ["a", "b"]
        assert hot_ids(archive, "events") == ["a", "a", "b", "b"]
        # The readers of one job find it there.
        row = j.job("a")
        assert row is not None
        assert (row.state, row.end) == (JobState.FINISHED, 100.0)
        assert [e.kind for e in j.history("b")] == ["started", "failed"]
        assert [(e.job_id, e.seq) for e in j.job_events(["b", "r", "a"])] == [
            ("b", 1),
            ("b", 2),
            ("r", 1),
            ("a", 1),
            ("a", 2),
        ]
        a_spec = j.archived_spec("a")
        assert a_spec is not None
        assert a_spec.id == "a"
        assert j.archived_spec("r") is None
        # The counts the exporter restarts from, and the streams, go on past them.
        state = j.load()
        assert (state.archived.accepted, state.archived.requeues) == (2, 0)
        assert dict(state.archived.ended) == {"finished": 1, "failed": 1}
        assert j.last_streams() == (5, {"ann": 2, "bob": 5})


def test_a_batch_moves_at_most_its_bound_longest_ended_first(tmp_path: Path) -> None:
    with filled(tmp_path / "j.sqlite") as j:
        assert j.archive(1000.0, 1).jobs == 1
        assert j.job("a") is not None
        assert {row.spec.id for row in j.load().jobs} == {"b", "c", "r", "q"}
        assert j.archive(1000.0, 5).jobs == 2  # b and c; never r nor q
        assert j.archive(1000.0, 5).jobs == 0
        assert [row.spec.id for row in j.load().jobs] == ["r", "q"]


def test_the_stream_reads_both_files_in_its_order(tmp_path: Path) -> None:
    with filled(tmp_path / "j.sqlite") as j:
        before = j.stream_events(0, 10)
        j.archive(200.0, 100)
        after = j.stream_events(0, 10)
        assert after == before
        assert [e.stream for e in after[0]] == [1, 2, 3, 4, 5]
        # r's running event (3) is hot, between archived ones: a page stops at its limit.
        page, more = j.stream_events(1, 2)
        assert ([e.stream for e in page], more) == ([2, 3], True)
        owned, _ = j.stream_events(0, 10, owner="ann")
        assert [(e.job_id, e.stream) for e in owned] == [("a", 1), ("a", 2)]


_KILLED_MID_MOVE = """
import os, sys
from scheduler.runtime.journal import Journal
j = Journal(sys.argv[1], archive=True)
# Two batches of one job: the second is killed between its copy and its delete.
assert j.archive(1000.0, 1).jobs == 1
j.archive(1000.0, 1, after_copy=lambda: os._exit(9))
"""


def test_a_kill_between_the_copy_and_the_delete_loses_and_duplicates_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.sqlite"
    with filled(path) as j:
        expected = {x: j.history(x) for x in "abc"}
        events = j.job_events(["a", "b"])
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_MOVE, str(path)], check=False, cwd=Path.cwd()
    )
    assert done.returncode == 9
    # b was copied and not deleted: in both files, read once.
    assert hot_ids(path, "jobs", "id") == ["b", "c", "q", "r"]
    assert hot_ids(archive_path(path), "jobs", "id") == ["a", "b"]
    with Journal(path) as j:  # the archive is there: attached
        assert {x: j.history(x) for x in "abc"} == expected
        assert j.job_events(["a", "b"]) == events
        assert j.load().archived.accepted == 1  # b's counts are not kept yet
        # The next batch copies b again (nothing new: its keys are there) and deletes it.
        assert j.archive(1000.0, 5).jobs == 2
        assert {x: j.history(x) for x in "abc"} == expected
        assert j.job_events(["a", "b"]) == events
        assert j.load().archived.accepted == 3
    with closing(sqlite3.connect(archive_path(path))) as db:
        assert db.execute("SELECT COUNT(*) FROM jobs").fetchone() == (3,)
        assert db.execute("SELECT COUNT(*) FROM events").fetchone() == (5,)
        assert db.execute("SELECT COUNT(*) FROM job_events").fetchone() == (4,)


def test_no_archive_is_made_unless_asked_and_one_made_is_read(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    with filled(path) as j:
        j.archive(1000.0, 10)
    with Journal(path, archive=False) as j:
        assert j.job("a") is None  # not attached: a restart's view
        assert j.archive(1000.0, 10).jobs == 0
    with Journal(path) as j:
        assert j.job("a") is not None
    other = tmp_path / "other.sqlite"
    with Journal(other) as j:
        assert not j.archived
    assert not archive_path(other).exists()


def test_a_schema_9_journal_opens_and_archives(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    filled(path).close()
    archive_path(path).unlink()
    with closing(sqlite3.connect(path)) as db:  # what schema 9 wrote: no schema-10 parts
        db.executescript(
            "DROP TABLE archived_counts; DROP TABLE archived_streams; "
            "DROP INDEX events_job; DROP INDEX jobs_ended; "
            "UPDATE meta SET value='9' WHERE key='schema';"
        )
    with Journal(path, archive=True) as j:
        with closing(sqlite3.connect(path)) as db:
            assert db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (
                str(SCHEMA_VERSION),
            )
            plan = " ".join(
                str(r[3])
                for r in db.execute(
                    "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE end_at <= 1 "
                    "AND state IN ('finished') ORDER BY end_at"
                )
            )
            assert "jobs_ended" in plan
        assert j.load().archived.accepted == 0
        assert j.archive(1000.0, 10).jobs == 3
        assert [row.spec.id for row in j.load().jobs] == ["r", "q"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("never", None), ("0", 0.0), ("90", 90.0), ("90s", 90.0), ("30m", 1800.0), ("1h", 3600.0)],
)
def test_the_retention_is_read_with_its_unit(text: str, seconds: float | None) -> None:
    assert parse_after(text) == seconds


def test_a_retention_that_cannot_be_read_says_what_is_expected() -> None:
    with pytest.raises(ArchiveError, match="expected never, or a number of seconds"):
        parse_after("an hour")
