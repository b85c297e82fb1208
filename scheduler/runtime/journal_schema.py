"""The journal's tables and how an older journal file is brought up to date.

Schema versions, each migrated in place when a newer scheduler opens the file
(:func:`prepare`); a file of a newer schema than this code's is refused:

1. ``meta``, ``jobs`` and ``events``;
2. ``job_events``: every ``JobEvent`` published to watchers;
3. resizes: ``events.before`` (the parts a resized job held until then) and
   ``job_events.cpus_before``/``cpus_after``, NULL in older rows;
4. ``totals``: the scheduler's counters that no job row can tell (rejections by
   reason, bad messages, agent losses, resizes ...), one row per metric family
   and label set, written with the batch that counted them. Migrating seeds
   the resize totals from the schema-3 ``resized`` events; the other totals of
   an older journal were never kept and start at zero;
5. ``jobs.held_until``: when the hold of a job's parts for adoption ends
   (``scheduler.live.agent_hold``), so a restarted scheduler waits it out whatever
   events it was set to journal. Migrating reads it from a schema-4 journal's
   last ``held`` job event of each running job (schema 4 wrote the hold only
   into that event's text). ``jobs.uncharged``: how many of the job's
   requeues do not count against ``max_requeues``; 0 in older rows, which
   never told them apart;
6. ``job_events.event`` (protocol 2): the column that was ``state`` holds what
   happened (``broker.vocabulary.JobEventKind``), as it always did; the
   migration renames it, and the values (``queued``, ``resized`` ...) stay;
7. ``job_events.parts``: a ``running`` or ``resized`` event's parts from then
   on (JSON, as ``jobs.parts``), NULL in older rows;
8. polite stops, drains and event streams (protocol 3): ``events.cause`` and
   ``events.charged`` (why a job was requeued, ``scheduler.live.coupling.Cause``,
   and whether it counted against ``max_requeues``); ``jobs.hold_cause``
   (``stop``: its parts were held because its agent's operator stopped the
   agent, so what a restart finds gone is not charged; ``lost``: its agent
   died); ``job_events.stream``, ``owner`` and ``owner_stream`` (the event's
   number in the scheduler-wide stream and in its owner's, which watchers ask
   for by number); ``drains``, the machines an admin drained. Older rows have
   NULL there (no cause, no number): the streams of a migrated journal start
   after its last event;
9. ``job_events.exit_status`` and ``.signal``: how a command job's command
   ended, on its final event; NULL in older rows and for other jobs;
10. the archive (``scheduler.runtime.journal_archive``): indexes that find an
    ended job's rows without a scan (``events_job``, ``jobs_ended``), and what
    the rows moved out leave behind for a restart, which reads only these
    tables: ``archived_counts`` (the moved jobs' counts, which the exporter's
    counters start from) and ``archived_streams`` (the last event-stream
    numbers moved, scheduler-wide under the owner ``''``, so the streams go on
    past them), and ``archived_usage``: the moved jobs' fair-share usage,
    CPU-seconds per ``(kind, name, period)``, split by the period length in
    ``meta`` (``usage_period``), which a restart charges to the usage ledger.
    Migrating builds the indexes over the rows there (once, the cost of a
    scan); an older journal has archived nothing.

All of it runs in the caller's transaction, so a migration that fails leaves
the file as it was.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from scheduler.runtime.journal_records import labels_text, parts_of

SCHEMA_VERSION = 10

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
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
    uncharged INTEGER NOT NULL DEFAULT 0,
    hold_cause TEXT
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    job_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT,
    before TEXT,
    cause TEXT,
    charged INTEGER
);
CREATE TABLE IF NOT EXISTS job_events (
    job_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    event TEXT NOT NULL,
    detail TEXT,
    cpus_before INTEGER,
    cpus_after INTEGER,
    parts TEXT,
    stream INTEGER,
    owner TEXT,
    owner_stream INTEGER,
    exit_status INTEGER,
    signal INTEGER,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS totals (
    name TEXT NOT NULL,
    labels TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (name, labels)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS drains (
    machine TEXT PRIMARY KEY,
    at REAL NOT NULL,
    by TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS archived_counts (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS archived_streams (
    owner TEXT PRIMARY KEY,
    last INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS archived_usage (
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    period INTEGER NOT NULL,
    cpu_seconds REAL NOT NULL,
    PRIMARY KEY (kind, name, period)
) WITHOUT ROWID;
"""

#: Made after the migrations, which add the columns they index to older files.
_INDEXES = """
CREATE UNIQUE INDEX IF NOT EXISTS job_events_stream ON job_events(stream);
CREATE INDEX IF NOT EXISTS job_events_owner ON job_events(owner, owner_stream);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
CREATE INDEX IF NOT EXISTS jobs_ended ON jobs(end_at) WHERE end_at IS NOT NULL;
"""

#: The metric family that counts resizes (``scheduler.runtime.exporter``'s name for it),
#: seeded from the history when a schema-3 journal is migrated.
RESIZES_FAMILY = "accordion_job_resizes"

#: How schema 4 wrote a hold's length (wall seconds) into its ``held`` event.
_SCHEMA4_HOLD = re.compile(r"held for adoption for (?P<wall>[0-9.eE+-]+) s")


class JournalError(RuntimeError):
    """The journal cannot be used as asked (wrong time scale, no WAL, newer schema)."""


def prepare(db: sqlite3.Connection, path: Path) -> None:
    """Create what is missing and migrate an older schema (inside a transaction)."""
    # Not executescript: it would commit the transaction we are in.
    for statement in _TABLES.split(";"):
        if statement.strip():
            db.execute(statement)
    row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    if row is None:
        db.execute("INSERT INTO meta(key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        _index(db)
        return
    found = int(row[0])
    if found > SCHEMA_VERSION:
        raise JournalError(
            f"{path}: schema {found} is newer than this scheduler's {SCHEMA_VERSION}: "
            "run a scheduler of that version on it, or start this one with another --journal"
        )
    if found == SCHEMA_VERSION:
        return
    # Schema 2 only added the job_events table, created above; schema 3 the resize
    # columns, schema 7 the events' parts, schema 8 the causes and stream
    # numbers and schema 9 a command's end, added to the tables an older scheduler made;
    # schema 10's tables are made above and its indexes by ``_index``.
    _add_columns(db, "events", [("before", "TEXT")])
    _add_columns(
        db,
        "job_events",
        [("cpus_before", "INTEGER"), ("cpus_after", "INTEGER"), ("parts", "TEXT")],
    )
    _add_columns(
        db,
        "jobs",
        [
            ("held_until", "REAL"),
            ("uncharged", "INTEGER NOT NULL DEFAULT 0"),
            ("hold_cause", "TEXT"),
        ],
    )
    _add_columns(db, "events", [("cause", "TEXT"), ("charged", "INTEGER")])
    _add_columns(
        db,
        "job_events",
        [("stream", "INTEGER"), ("owner", "TEXT"), ("owner_stream", "INTEGER")],
    )
    _add_columns(db, "job_events", [("exit_status", "INTEGER"), ("signal", "INTEGER")])
    if "state" in _columns(db, "job_events"):
        # Schema 6 (a schema-1 file had no job_events: it was just made with ``event``).
        db.execute("ALTER TABLE job_events RENAME COLUMN state TO event")
    if found < 4:
        _seed_resize_totals(db)
    if found < 5:
        _seed_holds(db)
    _index(db)
    db.execute("UPDATE meta SET value=? WHERE key='schema'", (str(SCHEMA_VERSION),))


def _index(db: sqlite3.Connection) -> None:
    for statement in _INDEXES.split(";"):
        if statement.strip():
            db.execute(statement)


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _add_columns(db: sqlite3.Connection, table: str, columns: list[tuple[str, str]]) -> None:
    have = _columns(db, table)
    for name, kind in columns:
        if name not in have:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")


def _seed_resize_totals(db: sqlite3.Connection) -> None:
    """Count the history's resizes by direction, as the scheduler counted them.

    A schema-2 journal's resizes have no ``before`` (NULL): their direction is
    unknown, so they are not counted rather than guessed.
    """
    counts = {"shrink": 0, "expand": 0}
    rows = db.execute(
        "SELECT detail, before FROM events WHERE kind='resized' AND before IS NOT NULL"
    )
    for after, before in rows:
        was = sum(p.cpus for p in parts_of(before))
        now = sum(p.cpus for p in parts_of(after))
        counts["shrink" if now < was else "expand"] += 1
    db.executemany(
        "INSERT OR REPLACE INTO totals(name, labels, value) VALUES (?, ?, ?)",
        [
            (RESIZES_FAMILY, labels_text((("direction", direction),)), n)
            for direction, n in counts.items()
            if n
        ],
    )


def _seed_holds(db: sqlite3.Connection) -> None:
    """``held_until`` of each running job whose last job event is a schema-4 hold.

    Schema 4 journaled the hold only as the text of that event (and not at all
    with job events off), so this is the one place that reads the text; the
    hold's end is its event time plus its wall length in cluster seconds.
    """
    row = db.execute("SELECT value FROM meta WHERE key='time_scale'").fetchone()
    if row is None:
        return  # no scheduler ever ran on this file: nothing was held
    scale = float(row[0])
    rows = db.execute(
        "SELECT e.job_id, e.at, e.detail FROM job_events e JOIN jobs j ON j.id = e.job_id "
        "WHERE j.state='running' AND e.event='held' AND e.seq = "
        "(SELECT MAX(seq) FROM job_events WHERE job_id = e.job_id)"
    ).fetchall()
    for job_id, at, detail in rows:
        match = _SCHEMA4_HOLD.search(detail or "")
        if match is not None:
            db.execute(
                "UPDATE jobs SET held_until=? WHERE id=?",
                (float(at) + float(match["wall"]) * scale, job_id),
            )
