"""The parts of job events (schema 7), and a schema-6 journal opened by this scheduler.

``SCHEMA_6`` is a journal as the scheduler of schema 6 wrote it (``sqlite3``'s
``iterdump``): a job queued, started on two machines and shrunk, with its job
events, which had no ``parts`` column. Schema 7 adds it, NULL in those rows.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from broker.messages import JobEvent, PartSpec
from broker.vocabulary import JobEventKind
from model.machine import Part
from scheduler.runtime.journal import SCHEMA_VERSION, Journal
from tests.builders import spec

SCHEMA_6 = """
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    job_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT,
    before TEXT
);
INSERT INTO "events" VALUES(1,5.0,'wide','started','[["n1",4],["n2",4]]',NULL);
INSERT INTO "events" VALUES(2,9.0,'wide','resized','[["n1",2],["n2",2]]','[["n1",4],["n2",4]]');
CREATE TABLE job_events (
    job_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    event TEXT NOT NULL,
    detail TEXT,
    cpus_before INTEGER,
    cpus_after INTEGER,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
INSERT INTO "job_events" VALUES('wide',1,1.0,'queued',NULL,NULL,NULL);
INSERT INTO "job_events" VALUES('wide',2,5.0,'running','n1:4,n2:4',NULL,NULL);
INSERT INTO "job_events" VALUES('wide',3,9.0,'resized','shrunk 8 -> 4 CPUs, MPL 2.00',8,4);
CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    submit REAL NOT NULL,
    state TEXT NOT NULL,
    start_at REAL,
    end_at REAL,
    parts TEXT,
    requeues INTEGER NOT NULL DEFAULT 0,
    detail TEXT,
    held_until REAL,
    uncharged INTEGER NOT NULL DEFAULT 0
);
INSERT INTO "jobs" VALUES('wide','{"id":"wide","procs":8,"walltime":600.0,"work":300.0,"workload":"sleep","user":"bob","group":"nobody","qos":0,"deadline":null,"malleable":true,"cpu_util":1.0,"ref_speed":1.0,"mpi":null}',1.0,'running',5.0,NULL,'[["n1",2],["n2",2]]',0,NULL,NULL,0);
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO "meta" VALUES('schema','6');
INSERT INTO "meta" VALUES('epoch','1700000000.0');
INSERT INTO "meta" VALUES('time_scale','2.0');
INSERT INTO "meta" VALUES('policy','fcfs-malleable');
INSERT INTO "meta" VALUES('protocol','2');
CREATE TABLE totals (
    name TEXT NOT NULL,
    labels TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (name, labels)
) WITHOUT ROWID;
INSERT INTO "sqlite_sequence" VALUES('events',2);
"""  # noqa: E501 (rows as the dump printed them)


def test_a_job_event_keeps_the_parts_it_was_published_with(tmp_path: Path) -> None:
    # What `accordion gantt` reads back through a history request: where the job ran.
    started = JobEvent(
        job_id="a",
        event=JobEventKind.RUNNING,
        at=1.0,
        seq=1,
        parts=(PartSpec("m", 3), PartSpec("n", 1)),
    )
    resized = JobEvent(
        job_id="a",
        event=JobEventKind.RESIZED,
        at=2.0,
        seq=2,
        cpus_before=4,
        cpus_after=2,
        parts=(PartSpec("m", 1), PartSpec("n", 1)),
    )
    finished = JobEvent(job_id="a", event=JobEventKind.FINISHED, at=3.0, seq=3)
    with Journal(tmp_path / "j.sqlite") as journal:
        journal.record_submissions([(spec("a"), 0.0)])
        for event in (started, resized, finished):
            journal.record_event(event)
        assert journal.job_events(["a"]) == [started, resized, finished]


def test_a_schema_6_journal_gains_the_parts_of_its_events(tmp_path: Path) -> None:
    path = tmp_path / "schema-6.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(SCHEMA_6)
    with Journal(path) as journal:
        old = journal.job_events(["wide"])
        # Its rows are read as they were written, with no parts (NULL).
        assert [(e.seq, e.event, e.detail, e.cpus_after, e.parts) for e in old] == [
            (1, JobEventKind.QUEUED, "", None, ()),
            (2, JobEventKind.RUNNING, "n1:4,n2:4", None, ()),
            (3, JobEventKind.RESIZED, "shrunk 8 -> 4 CPUs, MPL 2.00", 4, ()),
        ]
        row = journal.job("wide")
        assert row is not None
        assert row.parts == (Part("n1", 2), Part("n2", 2))
        expanded = JobEvent(
            job_id="wide",
            event=JobEventKind.RESIZED,
            at=12.0,
            seq=4,
            cpus_before=4,
            cpus_after=8,
            parts=(PartSpec("n1", 4), PartSpec("n2", 4)),
        )
        journal.record_event(expanded)
        assert journal.job_events(["wide"]) == [*old, expanded]
    with closing(sqlite3.connect(path)) as db:
        schema = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        columns = [row[1] for row in db.execute("PRAGMA table_info(job_events)")]
    assert schema == (str(SCHEMA_VERSION),)
    assert "parts" in columns
    assert "event" in columns
    # Opening it again changes nothing (the column is there).
    with Journal(path) as journal:
        assert [e.parts for e in journal.job_events(["wide"])][-1] == (
            PartSpec("n1", 4),
            PartSpec("n2", 4),
        )
