"""Job events numbered in the stream they are published on, and a watcher asking for them.

Every event has its number in the scheduler-wide stream (``events``) and in
its owner's (``users/<owner>/events``), from 1 without gaps, journaled with
it; ``EventsRequest`` answers from the journal by number, the requester's
stream only (a user's own jobs). A restarted scheduler numbers on. A journal
of schema 6 or 7 (protocol 2, before streams) is migrated in place: its
events keep no number (and a schema-7 one its parts), and the streams start
after them.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from broker.codec import encode
from broker.messages import EventsReply, EventsRequest, JobEvent, PartSpec
from broker.vocabulary import JobEventKind
from scheduler.live.settings import ActorSettings
from scheduler.runtime.journal import SCHEMA_VERSION, Journal
from tests.scheduler.runtime.harness import TOPICS, Cluster, eventually, spec

#: A schema-6 journal (protocol 2) as ``sqlite3``'s ``iterdump`` printed it: one job,
#: queued and running, with its two job events.
SCHEMA_6 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO "meta" VALUES('schema','6');
INSERT INTO "meta" VALUES('epoch','1700000000.0');
INSERT INTO "meta" VALUES('time_scale','1.0');
INSERT INTO "meta" VALUES('policy','fcfs');
INSERT INTO "meta" VALUES('protocol','2');
CREATE TABLE jobs (
    id TEXT PRIMARY KEY, spec TEXT NOT NULL, submit REAL NOT NULL, state TEXT NOT NULL,
    start_at REAL, end_at REAL, parts TEXT, requeues INTEGER NOT NULL DEFAULT 0,
    detail TEXT, held_until REAL, uncharged INTEGER NOT NULL DEFAULT 0
);
INSERT INTO "jobs" VALUES('old','{"id":"old","procs":1,"walltime":100.0,"work":50.0,"workload":"sleep","user":"ann","group":"nobody","qos":0,"deadline":null,"malleable":true,"cpu_util":1.0,"ref_speed":1.0,"mpi":null}',0.0,'queued',NULL,NULL,NULL,1,'machine a lost',NULL,0);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, job_id TEXT NOT NULL,
    kind TEXT NOT NULL, detail TEXT, before TEXT
);
INSERT INTO "events" VALUES(1,3.0,'old','requeued','machine a lost',NULL);
CREATE TABLE job_events (
    job_id TEXT NOT NULL, seq INTEGER NOT NULL, at REAL NOT NULL, event TEXT NOT NULL,
    detail TEXT, cpus_before INTEGER, cpus_after INTEGER, PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
INSERT INTO "job_events" VALUES('old',1,0.0,'queued',NULL,NULL,NULL);
INSERT INTO "job_events" VALUES('old',2,3.0,'requeued','machine a lost',NULL,NULL);
CREATE TABLE totals (
    name TEXT NOT NULL, labels TEXT NOT NULL, value INTEGER NOT NULL,
    PRIMARY KEY (name, labels)
) WITHOUT ROWID;
"""  # noqa: E501 (rows as the dump printed them)


#: A schema-7 journal (protocol 2 with the parts of job events), as ``iterdump``
#: printed it: one job running on two machines, its start's parts journaled.
SCHEMA_7 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO "meta" VALUES('schema','7');
INSERT INTO "meta" VALUES('epoch','1700000000.0');
INSERT INTO "meta" VALUES('time_scale','1.0');
INSERT INTO "meta" VALUES('policy','fcfs');
INSERT INTO "meta" VALUES('protocol','2');
CREATE TABLE jobs (
    id TEXT PRIMARY KEY, spec TEXT NOT NULL, submit REAL NOT NULL, state TEXT NOT NULL,
    start_at REAL, end_at REAL, parts TEXT, requeues INTEGER NOT NULL DEFAULT 0,
    detail TEXT, held_until REAL, uncharged INTEGER NOT NULL DEFAULT 0
);
INSERT INTO "jobs" VALUES('wide','{"id":"wide","procs":4,"walltime":100.0,"work":50.0,"workload":"sleep","user":"ann","group":"nobody","qos":0,"deadline":null,"malleable":true,"cpu_util":1.0,"ref_speed":1.0,"mpi":null}',0.0,'running',2.0,NULL,'[["n1",2],["n2",2]]',0,NULL,NULL,0);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, job_id TEXT NOT NULL,
    kind TEXT NOT NULL, detail TEXT, before TEXT
);
INSERT INTO "events" VALUES(1,2.0,'wide','started','[["n1",2],["n2",2]]',NULL);
CREATE TABLE job_events (
    job_id TEXT NOT NULL, seq INTEGER NOT NULL, at REAL NOT NULL, event TEXT NOT NULL,
    detail TEXT, cpus_before INTEGER, cpus_after INTEGER, parts TEXT,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
INSERT INTO "job_events" VALUES('wide',1,0.0,'queued',NULL,NULL,NULL,NULL);
INSERT INTO "job_events" VALUES('wide',2,2.0,'running','n1:2,n2:2',NULL,NULL,'[["n1",2],["n2",2]]');
CREATE TABLE totals (
    name TEXT NOT NULL, labels TEXT NOT NULL, value INTEGER NOT NULL,
    PRIMARY KEY (name, labels)
) WITHOUT ROWID;
"""  # noqa: E501 (rows as the dump printed them)


def _columns(path: Path, table: str) -> set[str]:
    with closing(sqlite3.connect(path)) as db:
        return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def test_a_schema_6_journal_is_migrated_and_its_streams_start_after_it(tmp_path: Path) -> None:
    path = tmp_path / "schema-6.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(SCHEMA_6)
    with Journal(path) as journal:
        assert journal.last_streams() == (0, {})
        assert journal.drained() == {}
        (row,) = journal.load().jobs
        assert (row.spec.id, row.requeues, row.hold_cause) == ("old", 1, None)
        (requeue,) = journal.history("old")
        assert (requeue.cause, requeue.charged) == (None, None)  # older rows say nothing
        assert [e.stream for e in journal.job_events(["old"])] == [None, None]
        event = JobEvent(job_id="old", event=JobEventKind.RUNNING, at=5.0, seq=3, stream=1)
        journal.record_event(event, owner="ann", owner_stream=1)
        assert journal.last_streams() == (1, {"ann": 1})
        assert journal.stream_events(0, 10) == ([event], False)
    assert {"stream", "owner", "owner_stream"} <= _columns(path, "job_events")
    assert {"cause", "charged"} <= _columns(path, "events")
    assert "hold_cause" in _columns(path, "jobs")
    with closing(sqlite3.connect(path)) as db:
        (schema,) = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    assert schema == str(SCHEMA_VERSION)


def test_a_schema_7_journal_keeps_its_parts_and_its_streams_start_after_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "schema-7.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(SCHEMA_7)
    with Journal(path) as journal:
        assert journal.last_streams() == (0, {})
        old = journal.job_events(["wide"])
        assert [(e.seq, e.event, e.parts, e.stream) for e in old] == [
            (1, JobEventKind.QUEUED, (), None),
            (2, JobEventKind.RUNNING, (PartSpec("n1", 2), PartSpec("n2", 2)), None),
        ]
        (row,) = journal.load().jobs
        assert (row.spec.id, row.hold_cause, row.uncharged) == ("wide", None, 0)
        finished = JobEvent(job_id="wide", event=JobEventKind.FINISHED, at=9.0, seq=3, stream=1)
        journal.record_event(finished, owner="ann", owner_stream=1)
        assert journal.stream_events(0, 10) == ([finished], False)
        assert journal.stream_events(0, 10, owner="ann") == ([finished], False)
    assert {"parts", "stream", "owner", "owner_stream"} <= _columns(path, "job_events")
    assert "hold_cause" in _columns(path, "jobs")
    with closing(sqlite3.connect(path)) as db:
        (schema,) = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    assert schema == str(SCHEMA_VERSION)


def test_stream_events_page_by_number_and_by_owner(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        owners = {"a": "ann", "b": "bob"}
        counts = {"ann": 0, "bob": 0}
        for n in range(1, 8):
            job = "a" if n % 2 else "b"
            counts[owners[job]] += 1
            journal.record_event(
                JobEvent(job_id=job, event=JobEventKind.RESIZED, at=n, seq=n, stream=n),
                owner=owners[job],
                owner_stream=counts[owners[job]],
            )
        page, more = journal.stream_events(2, 3)
        assert ([e.stream for e in page], more) == ([3, 4, 5], True)
        page, more = journal.stream_events(5, 3)
        assert ([e.stream for e in page], more) == ([6, 7], False)
        anns, more = journal.stream_events(1, 10, owner="ann")
        # Numbered in ann's own stream, her jobs only.
        assert [(e.job_id, e.stream) for e in anns] == [("a", 2), ("a", 3), ("a", 4)]
        assert not more


async def test_events_carry_their_numbers_and_a_watcher_gets_what_it_missed(
    tmp_path: Path,
) -> None:
    c = Cluster(tmp_path / "j.sqlite")
    await c.client.start(TOPICS.events, TOPICS.user_events("ann"))
    await c.start()
    try:
        a1 = await c.agent("a1", 4, auto_finish=True)
        await c.client.submit(spec("j1", 1, user="ann"), spec("j2", 1, user="bob"))
        await eventually(lambda: a1.started("j1") and a1.started("j2"))
        await eventually(
            lambda: len(c.client.inbox.all(JobEvent, lambda e: e.event == "finished")) == 2
        )
        published = [
            m for t, m in c.client.inbox.seen if t == TOPICS.events and isinstance(m, JobEvent)
        ]
        assert [e.stream for e in published] == list(range(1, len(published) + 1))
        # A watcher that saw up to 2 asks for the rest, in pages.
        rid = c.client.request_id()
        await c.client.send(EventsRequest(request_id=rid, reply_to=c.client.name, after=2, limit=3))
        reply = await c.client.inbox.expect(EventsReply, lambda r: r.request_id == rid)
        assert [e.stream for e in reply.events] == [3, 4, 5]
        assert (reply.last, reply.more) == (len(published), len(published) > 5)
        assert reply.events == tuple(published[2:5])
        # A restarted scheduler numbers on from the journal's last number.
        await c.kill_scheduler()
        await c.start()
        await c.client.submit(spec("j3", 1, user="ann"))
        after = await c.client.inbox.expect(
            JobEvent, lambda e: e.job_id == "j3" and e.event == "queued"
        )
        assert after.stream == len(published) + 1
    finally:
        await c.stop()


async def test_a_users_stream_is_their_own_jobs_numbered_for_them(tmp_path: Path) -> None:
    c = Cluster(
        tmp_path / "j.sqlite",
        settings=ActorSettings(
            tick_interval=3600.0,
            summary_interval=0.0,
            startup_grace=0.0,
            job_events="all",
            owner_events=True,
        ),
    )
    await c.client.start(TOPICS.user_events("ann"), TOPICS.user_replies("ann", "c1"))
    await c.start()
    try:
        await c.agent("m", 1)  # one CPU: the jobs are accepted, and wait
        await c.client.submit(spec("b1", 1, user="bob"), spec("a1", 1, user="ann"))
        await c.client.submit(spec("b2", 1, user="bob"), spec("a2", 1, user="ann"))
        anns = await c.client.inbox.expect(JobEvent, lambda e: e.job_id == "a2")
        assert anns.stream == 2  # ann's second event, whatever bob's in between
        # Ann asks for her stream from the start: hers only, her numbers.
        ask = EventsRequest(request_id="e1", reply_to="c1", after=0, limit=100)
        await c.client.send_raw(encode(ask), topic=TOPICS.user_requests("ann"))
        reply = await c.client.inbox.expect(EventsReply, lambda r: r.request_id == "e1")
        assert [(e.job_id, e.stream) for e in reply.events] == [("a1", 1), ("a2", 2)]
        assert (reply.last, reply.more) == (2, False)
        assert all(e.job_id.startswith("a") for e in c.client.inbox.all(JobEvent))
    finally:
        await c.stop()


async def test_an_events_reply_stops_at_the_reply_bound_and_says_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bound lowered to a few events' bytes: what a watcher asks of 10,000 events
    # whose rows are large would otherwise pass it.
    one = len(encode(JobEvent(job_id="q00", seq=1, at=0.0, event=JobEventKind.QUEUED, stream=1)))
    monkeypatch.setattr("scheduler.live.requests.MAX_REPLY_BYTES", 3 * one)
    c = Cluster(
        tmp_path / "j.sqlite",
        settings=ActorSettings(
            tick_interval=3600.0, summary_interval=0.0, startup_grace=0.0, job_events="all"
        ),
    )
    await c.client.start(TOPICS.events)
    await c.start()
    try:
        await c.agent("m", 1)
        await c.client.submit(*(spec(f"q{i:02}", 1) for i in range(10)))  # one runs, 9 wait
        rid = c.client.request_id()
        await c.client.send(
            EventsRequest(request_id=rid, reply_to=c.client.name, after=0, limit=100)
        )
        reply = await c.client.inbox.expect(EventsReply, lambda r: r.request_id == rid)
        assert 1 <= len(reply.events) <= 3
        assert sum(len(encode(e)) for e in reply.events) <= 3 * one + len(reply.events)
        assert reply.last >= 10
        assert reply.more
        assert [e.stream for e in reply.events] == list(range(1, len(reply.events) + 1))
    finally:
        await c.stop()
