"""Holds for adoption in the journal (schema 5), and a schema-4 journal's holds migrated."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from model.machine import Part
from scheduler.core.job_lifecycle import JobState
from scheduler.runtime.journal import SCHEMA_VERSION, Journal
from tests.builders import spec

SCHEMA_4 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE jobs (
    id TEXT PRIMARY KEY, spec TEXT NOT NULL, submit REAL NOT NULL, state TEXT NOT NULL,
    start_at REAL, end_at REAL, parts TEXT, requeues INTEGER NOT NULL DEFAULT 0, detail TEXT
);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, job_id TEXT NOT NULL,
    kind TEXT NOT NULL, detail TEXT, before TEXT
);
CREATE TABLE job_events (
    job_id TEXT NOT NULL, seq INTEGER NOT NULL, at REAL NOT NULL, state TEXT NOT NULL,
    detail TEXT, cpus_before INTEGER, cpus_after INTEGER, PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
CREATE TABLE totals (
    name TEXT NOT NULL, labels TEXT NOT NULL, value INTEGER NOT NULL,
    PRIMARY KEY (name, labels)
) WITHOUT ROWID;
INSERT INTO meta(key, value) VALUES ('schema', '4'), ('time_scale', '2.0');
INSERT INTO jobs(id, spec, submit, state, start_at, parts) VALUES
    ('held', '{"id":"held","procs":1,"walltime":9,"work":5}', 0, 'running', 1, '[["a1",1]]'),
    ('adopted', '{"id":"adopted","procs":1,"walltime":9,"work":5}', 0, 'running', 1, '[["a1",1]]'),
    ('ended', '{"id":"ended","procs":1,"walltime":9,"work":5}', 0, 'finished', 1, '[["a1",1]]');
INSERT INTO job_events(job_id, seq, at, state, detail) VALUES
    ('held', 1, 1.0, 'started', ''),
    ('held', 2, 10.0, 'held', 'agent a1 lost (will): held for adoption for 8.0 s'),
    ('adopted', 1, 1.0, 'started', ''),
    ('adopted', 2, 10.0, 'held', 'agent a1 lost (will): held for adoption for 8.0 s'),
    ('adopted', 3, 12.0, 'adopted', 'its part on a1 adopted by a new incarnation'),
    ('ended', 1, 10.0, 'held', 'agent a1 lost (will): held for adoption for 8.0 s');
"""


def held(journal: Journal, job_id: str) -> float | None:
    row = journal.job(job_id)
    assert row is not None
    return row.held_until


def test_a_hold_is_in_the_row_until_the_next_start_requeue_or_end(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        journal.record_submissions([(spec("a"), 0.0), (spec("b"), 0.0)])
        for job_id in ("a", "b"):
            journal.record_start(job_id, 1.0, [Part("m", 1)])
            journal.record_hold(job_id, 5.0, 13.0, "held for adoption for 8.0 s")
        assert held(journal, "a") == 13.0
        assert [e.kind for e in journal.history("a")] == ["started", "held"]
        assert {r.spec.id: r.held_until for r in journal.load().jobs} == {"a": 13.0, "b": 13.0}
        journal.record_requeue("a", 13.0, 1)
        journal.record_end("b", 6.0, JobState.FINISHED)
        assert held(journal, "a") is None
        assert held(journal, "b") is None
        journal.record_hold("a", 5.0, 13.0)  # a later attempt held, then started anew
        journal.record_start("a", 14.0, [Part("m", 1)])
        assert held(journal, "a") is None


def test_a_schema_4_journal_keeps_its_running_holds(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(SCHEMA_4)
    with Journal(path) as journal:
        # The hold's end: its event time plus 8 wall seconds at time scale 2.
        assert held(journal, "held") == 26.0
        assert held(journal, "adopted") is None  # its last event is not the hold
        assert held(journal, "ended") is None  # not running
        assert {r.uncharged for r in journal.load().jobs} == {0}  # never told apart
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (
            str(SCHEMA_VERSION),
        )
