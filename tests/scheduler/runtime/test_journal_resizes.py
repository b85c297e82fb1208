"""The journal's resize records (schema 3), and a schema-2 journal opened by this scheduler."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from broker.messages import JobEvent, PartSpec
from broker.vocabulary import JobEventKind
from model.machine import Part
from scheduler.runtime.journal import SCHEMA_VERSION, Journal
from tests.builders import spec

SCHEMA_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE jobs (
    id TEXT PRIMARY KEY, spec TEXT NOT NULL, submit REAL NOT NULL, state TEXT NOT NULL,
    start_at REAL, end_at REAL, parts TEXT, requeues INTEGER NOT NULL DEFAULT 0, detail TEXT
);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, job_id TEXT NOT NULL,
    kind TEXT NOT NULL, detail TEXT
);
CREATE TABLE job_events (
    job_id TEXT NOT NULL, seq INTEGER NOT NULL, at REAL NOT NULL, state TEXT NOT NULL,
    detail TEXT, PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
INSERT INTO meta(key, value) VALUES ('schema', '2');
INSERT INTO events(at, job_id, kind, detail) VALUES (1.0, 'old', 'resized', '[["m",2]]');
INSERT INTO job_events(job_id, seq, at, state, detail) VALUES ('old', 1, 1.0, 'resized', '2 CPUs');
"""


def test_a_resize_is_recorded_with_its_parts_before_and_after(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        journal.record_submissions([(spec("a", 4), 0.0)])
        journal.record_start("a", 1.0, [Part("m", 3), Part("n", 1)])
        journal.record_parts("a", 2.0, [Part("m", 1), Part("n", 1)], [Part("m", 3), Part("n", 1)])
        event = JobEvent(
            job_id="a", event=JobEventKind.RESIZED, at=2.0, seq=2, cpus_before=4, cpus_after=2
        )
        journal.record_event(event)
        resized = [e for e in journal.history("a") if e.kind == "resized"]
        assert [(e.at, e.before, e.parts) for e in resized] == [
            (2.0, (Part("m", 3), Part("n", 1)), (Part("m", 1), Part("n", 1)))
        ]
        row = journal.job("a")
        assert row is not None
        assert row.parts == (Part("m", 1), Part("n", 1))  # what a restart reconciles to
        assert journal.job_events(["a"]) == [event]


def test_a_schema_2_journal_gains_the_resize_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(SCHEMA_2)
    with Journal(path) as journal:
        old = journal.history("old")
        assert [(e.kind, e.parts, e.before) for e in old] == [("resized", (Part("m", 2),), ())]
        assert journal.job_events(["old"]) == [
            JobEvent(job_id="old", event=JobEventKind.RESIZED, at=1.0, seq=1, detail="2 CPUs")
        ]
        journal.record_event(
            JobEvent(
                job_id="old",
                event=JobEventKind.RESIZED,
                seq=2,
                cpus_after=4,
                at=0.0,
                parts=(PartSpec("m", 4),),
            )
        )
        assert journal.job_events(["old"])[-1].cpus_after == 4
        assert journal.job_events(["old"])[-1].parts == (PartSpec("m", 4),)
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (
            str(SCHEMA_VERSION),
        )
    # Opening it again changes nothing (the columns are there).
    with Journal(path) as journal:
        assert len(journal.job_events(["old"])) == 2
