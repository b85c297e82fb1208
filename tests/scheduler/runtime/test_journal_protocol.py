"""A journal written by the protocol-1 scheduler loads under protocol 2 and goes on.

``PROTOCOL_1`` is such a journal, as ``sqlite3``'s ``iterdump`` printed it: the
protocol-1 code (journal schema 5) accepted three jobs, finished one, started
and shrank another, held it for adoption, and published their job events,
whose ``state`` column held what happened. Protocol 2 changed messages, not
the stored ``JobSpec``; the journal renames that column to ``event`` (schema
6) and keeps every value.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from broker.codec import decode, encode
from broker.messages import (
    CancelJob,
    CancelReply,
    HistoryReply,
    HistoryRequest,
    JobSpec,
    MpiSpec,
)
from broker.topics import PROTOCOL_VERSION
from broker.vocabulary import JobEventKind, JobState
from model.machine import Part
from scheduler.core.job_lifecycle import JobState as CoreState
from scheduler.runtime.clock import ManualClock
from scheduler.runtime.journal import SCHEMA_VERSION, Journal, JournalError
from tests.scheduler.runtime.harness import Cluster

PROTOCOL_1 = """
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    job_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT,
    before TEXT
);
INSERT INTO "events" VALUES(1,3.0,'done','started','[["n1",2]]',NULL);
INSERT INTO "events" VALUES(2,40.0,'done','finished','exit 0',NULL);
INSERT INTO "events" VALUES(3,5.0,'wide','started','[["n1",4],["n2",4]]',NULL);
INSERT INTO "events" VALUES(4,9.0,'wide','resized','[["n1",2],["n2",2]]','[["n1",4],["n2",4]]');
INSERT INTO "events" VALUES(5,20.0,'wide','held','agent n2 lost (will): held for adoption for 8.0 s',NULL);
CREATE TABLE job_events (
    job_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    state TEXT NOT NULL,
    detail TEXT,
    cpus_before INTEGER,
    cpus_after INTEGER,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
INSERT INTO "job_events" VALUES('done',1,0.0,'queued',NULL,NULL,NULL);
INSERT INTO "job_events" VALUES('done',2,3.0,'running','n1:2',NULL,NULL);
INSERT INTO "job_events" VALUES('done',3,40.0,'finished','exit 0',NULL,NULL);
INSERT INTO "job_events" VALUES('waits',1,2.0,'queued',NULL,NULL,NULL);
INSERT INTO "job_events" VALUES('wide',1,1.0,'queued',NULL,NULL,NULL);
INSERT INTO "job_events" VALUES('wide',2,5.0,'running','n1:4,n2:4',NULL,NULL);
INSERT INTO "job_events" VALUES('wide',3,9.0,'resized','shrunk 8 -> 4 CPUs, MPL 2.00',8,4);
INSERT INTO "job_events" VALUES('wide',4,20.0,'held','agent n2 lost (will): held for adoption for 8.0 s',NULL,NULL);
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
INSERT INTO "jobs" VALUES('done','{"id":"done","procs":2,"walltime":100.0,"work":50.0,"workload":"sleep","user":"ann","group":"nobody","qos":0,"deadline":null,"malleable":true,"cpu_util":1.0,"ref_speed":1.0,"mpi":null}',0.0,'finished',3.0,40.0,'[["n1",2]]',0,'exit 0',NULL,0);
INSERT INTO "jobs" VALUES('wide','{"id":"wide","procs":8,"walltime":600.0,"work":300.0,"workload":"mpi","user":"bob","group":"hpc","qos":3,"deadline":900.0,"malleable":true,"cpu_util":0.5,"ref_speed":2.0,"mpi":{"iterations":20,"compute":0.5,"message_bytes":64,"pattern":"barrier"}}',1.0,'running',5.0,NULL,'[["n1",2],["n2",2]]',0,NULL,36.0,0);
INSERT INTO "jobs" VALUES('waits','{"id":"waits","procs":1,"walltime":60.0,"work":30.0,"workload":"sleep","user":"nobody","group":"nobody","qos":0,"deadline":null,"malleable":false,"cpu_util":1.0,"ref_speed":1.0,"mpi":null}',2.0,'queued',NULL,NULL,NULL,0,NULL,NULL,0);
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO "meta" VALUES('schema','5');
INSERT INTO "meta" VALUES('epoch','1700000000.0');
INSERT INTO "meta" VALUES('time_scale','2.0');
INSERT INTO "meta" VALUES('policy','fcfs-malleable');
INSERT INTO "meta" VALUES('protocol','1');
CREATE TABLE totals (
    name TEXT NOT NULL,
    labels TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (name, labels)
) WITHOUT ROWID;
INSERT INTO "totals" VALUES('accordion_scheduler_rejections','{"reason":"too_wide"}',1);
INSERT INTO "sqlite_sequence" VALUES('events',5);
"""  # noqa: E501 (rows as the dump printed them)

WIDE = JobSpec(
    id="wide",
    procs=8,
    walltime=600.0,
    work=300.0,
    workload="mpi",
    user="bob",
    group="hpc",
    qos=3,
    deadline=900.0,
    cpu_util=0.5,
    ref_speed=2.0,
    mpi=MpiSpec(iterations=20, compute=0.5, message_bytes=64, pattern="barrier"),
)


@pytest.fixture
def old(tmp_path: Path) -> Path:
    path = tmp_path / "protocol-1.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(PROTOCOL_1)
    return path


def test_its_jobs_load_as_they_were_stored(old: Path) -> None:
    with Journal(old) as journal:
        state = journal.load()
    assert [(j.spec.id, j.state, j.submit) for j in state.jobs] == [
        ("done", CoreState.FINISHED, 0.0),
        ("wide", CoreState.RUNNING, 1.0),
        ("waits", CoreState.QUEUED, 2.0),
    ]
    done, wide, waits = state.jobs
    assert done.spec == JobSpec(id="done", procs=2, walltime=100.0, work=50.0, user="ann")
    assert wide.spec == WIDE
    assert waits.spec == JobSpec(id="waits", procs=1, walltime=60.0, work=30.0, malleable=False)
    assert (wide.parts, wide.held_until) == ((Part("n1", 2), Part("n2", 2)), 36.0)
    assert (done.start, done.end, done.detail) == (3.0, 40.0, "exit 0")
    assert state.totals == {("accordion_scheduler_rejections", (("reason", "too_wide"),)): 1}


def test_its_job_events_are_read_as_what_happened(old: Path) -> None:
    with Journal(old) as journal:
        events = journal.job_events(["wide", "done"])
        assert journal.last_event_seqs() == {"done": 3, "waits": 1, "wide": 4}
    assert [(e.job_id, e.seq, e.event, e.state) for e in events] == [
        ("wide", 1, JobEventKind.QUEUED, JobState.QUEUED),
        ("wide", 2, JobEventKind.RUNNING, JobState.RUNNING),
        ("wide", 3, JobEventKind.RESIZED, JobState.RUNNING),
        ("wide", 4, JobEventKind.HELD, JobState.RUNNING),
        ("done", 1, JobEventKind.QUEUED, JobState.QUEUED),
        ("done", 2, JobEventKind.RUNNING, JobState.RUNNING),
        ("done", 3, JobEventKind.FINISHED, JobState.FINISHED),
    ]
    assert (events[2].cpus_before, events[2].cpus_after) == (8, 4)
    # What a watcher asking for them gets, on the wire of this protocol.
    reply = HistoryReply(request_id="h", events=tuple(events), unknown=())
    assert decode(encode(reply)) == reply


def test_it_is_migrated_in_place_and_goes_on_under_this_protocol(old: Path) -> None:
    with Journal(old) as journal:
        meta = journal.ensure_meta(epoch=1.8e9, time_scale=2.0, policy="fcfs-malleable")
        assert (meta.epoch, meta.protocol) == (1.7e9, PROTOCOL_VERSION)
        journal.record_submissions([(JobSpec(id="new", procs=1, walltime=9.0, work=1.0), 50.0)])
    with closing(sqlite3.connect(old)) as db:
        meta_rows = dict(db.execute("SELECT key, value FROM meta").fetchall())
        columns = [row[1] for row in db.execute("PRAGMA table_info(job_events)")]
    assert (meta_rows["schema"], meta_rows["protocol"]) == (
        str(SCHEMA_VERSION),
        str(PROTOCOL_VERSION),
    )
    assert "event" in columns
    assert "state" not in columns
    with Journal(old) as journal:  # a second opening changes nothing
        assert [j.spec.id for j in journal.load().jobs] == ["done", "wide", "waits", "new"]
        assert journal.job_events(["waits"])[0].event is JobEventKind.QUEUED


def test_a_journal_of_an_unknown_protocol_is_refused(old: Path) -> None:
    with closing(sqlite3.connect(old)) as db, db:
        db.execute("UPDATE meta SET value='99' WHERE key='protocol'")
    with Journal(old) as journal, pytest.raises(JournalError, match="protocol v99"):
        journal.ensure_meta(epoch=0.0, time_scale=2.0, policy="fcfs")


async def test_a_scheduler_restarts_on_it(old: Path) -> None:
    cluster = Cluster(old, policy="fcfs-malleable", clock=ManualClock(50.0, time_scale=2.0))
    await cluster.client.start()
    try:
        actor = await cluster.start()
        assert [j.id for j in actor.core.queue] == ["waits"]
        assert list(actor.core.pending) == ["wide"]  # until its agents confirm it
        assert cluster.state("done") == "finished"
        await cluster.client.send(
            HistoryRequest(request_id="h1", reply_to="c1", job_ids=("wide", "ghost"))
        )
        history = await cluster.client.inbox.expect(HistoryReply, lambda r: r.request_id == "h1")
        assert [e.event for e in history.events] == ["queued", "running", "resized", "held"]
        assert history.unknown == ("ghost",)
        # A job's events are numbered on from where the old scheduler stopped.
        await cluster.client.send(CancelJob(request_id="c", reply_to="c1", job_id="waits"))
        cancelled = await cluster.client.inbox.expect(CancelReply, lambda r: r.request_id == "c")
        assert (cancelled.cancelled, cancelled.code) == (True, None)
        assert cluster.journal is not None
        assert [(e.seq, e.event) for e in cluster.journal.job_events(["waits"])] == [
            (1, JobEventKind.QUEUED),
            (2, JobEventKind.CANCELLED),
        ]
    finally:
        await cluster.stop()
