"""The journal's archive: where ended jobs go, so the journal stays small.

Theory of operation. The journal's *hot* tables (``jobs``, ``events``,
``job_events`` in the journal file) are what a restarted scheduler reads
(``Journal.load``), so its start-up time follows their size. A job that ended
(finished, failed or cancelled) longer than the retention ago
(``ActorSettings.archive_after``) is moved, with every row of its ``events``
and ``job_events``, into the same tables of a second SQLite file beside the
journal (:func:`archive_path`: ``journal-archive.sqlite`` for
``journal.sqlite``), ATTACHed to the journal's connection as ``archive``.
Readers of one job (the history request, ``Journal.job``) look in both, the
journal's rows winning; a restart reads none of the archive.

Moving. :func:`move_batch` moves at most ``limit`` jobs, the longest ended
first, in two transactions: copy into the archive (``INSERT OR IGNORE``, keyed
by job id, by event ``seq`` and by ``(job_id, seq)``), commit; then delete
from the journal, commit. Not one transaction across both files: in WAL mode
SQLite commits each attached file on its own, so a transaction over both is
atomic per file, not across them. Copy-then-delete needs no such atomicity:
killed after the copy's commit, the jobs are in both files, the readers take
the journal's rows, and the next batch copies them again (ignored: their keys
are there) and deletes them. Killed before it, nothing moved. So a kill at any
point loses and duplicates nothing. ``events.seq`` is AUTOINCREMENT in the
journal, so a moved event's number is never given again.

What a restart still needs of the moved jobs is kept in the journal, in the
delete's transaction: their counts (``archived_counts``: accepted, requeues,
ended by state, which the exporter's counters start from), the last
event-stream numbers they took (``archived_streams``, so the streams go on
past them) and their fair-share usage (``archived_usage``: what
``Recovery.restore_final`` would have charged the usage ledger for them at a
restart, summed per user or group and period; the restart charges the sums
first, ``UsageLedger.add_period``). Kept with the delete, not the copy, so a
kill between the two commits charges nothing twice: the jobs still in the
journal are charged from their rows, and their sums are added when the next
batch deletes them. One row per name and period, so the table grows with
the days and the names, not the jobs. It is not pruned to the longest
fair-share window: a restart may run another policy (or window) than the
one that archived, and a journal that never archived keeps every period's
use too, so pruning would make the two differ.

Bound. One batch touches ``limit`` jobs and their events by index (the
journal's ``jobs_ended`` and ``events_job``, schema 10), so its time is
proportional to ``limit``, not to either file's size: ``bench.journal_archive``
measures it. The actor moves one batch per timer tick, and the next one at
once (after the messages waiting) while a backlog lasts.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.storage import spec_from_json
from model.machine import parts_cpus
from scheduler.core.job_lifecycle import JobState
from scheduler.core.usage import split_periods
from scheduler.runtime.journal_records import ArchivedCounts, ArchivedUsage, parts_of

#: The name the archive file is ATTACHed under.
SCHEMA = "archive"
#: The archive's own schema version (its tables follow the journal's schema 10).
ARCHIVE_VERSION = 1

_ENDED = tuple(s.value for s in (JobState.FINISHED, JobState.FAILED, JobState.CANCELLED))

#: The journal's tables whose rows move, made alike in the archive (with ``meta``).
_MOVED = ("jobs", "events", "job_events")

_INDEXES = """
CREATE INDEX IF NOT EXISTS archive.archive_events_job ON events(job_id);
CREATE INDEX IF NOT EXISTS archive.archive_job_events_stream ON job_events(stream);
CREATE INDEX IF NOT EXISTS archive.archive_job_events_owner ON job_events(owner, owner_stream);
"""

#: The moved jobs' ids, bound as one JSON array (no limit on SQL variables to mind).
_IDS = "(SELECT value FROM json_each(?))"


class ArchiveError(ValueError):
    """An archive option that cannot be read."""


def archive_path(journal: Path) -> Path:
    """The archive file beside ``journal``: ``journal-archive.sqlite`` for ``journal.sqlite``."""
    return journal.with_name(f"{journal.stem}-archive{journal.suffix or '.sqlite'}")


_AFTER = re.compile(r"(?P<n>[0-9]+(?:\.[0-9]*)?)(?P<unit>[smhd]?)")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_after(text: str) -> float | None:
    """Wall seconds from ``never`` (None), ``0``, ``90``, ``90s``, ``30m``, ``1h`` or ``7d``."""
    raw = text.strip().lower()
    if raw == "never":
        return None
    match = _AFTER.fullmatch(raw)
    if match is None:
        raise ArchiveError(
            f"--archive-after {text!r}: expected never, or a number of seconds with an "
            "optional unit s, m, h or d (0: at once)"
        )
    return float(match["n"]) * _UNITS[match["unit"]]


def attach(db: sqlite3.Connection, path: Path, synchronous: str) -> None:
    """ATTACH the archive at ``path`` (made if missing) as :data:`SCHEMA`, in WAL mode."""
    db.execute(f"ATTACH DATABASE ? AS {SCHEMA}", (str(path),))
    db.execute(f"PRAGMA {SCHEMA}.journal_mode=WAL")
    db.execute(f"PRAGMA {SCHEMA}.synchronous={synchronous}")
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in _tables(db):
            db.execute(statement)
        for statement in _INDEXES.split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute(
            f"INSERT OR IGNORE INTO {SCHEMA}.meta(key, value) VALUES ('schema', ?)",
            (str(ARCHIVE_VERSION),),
        )
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


@dataclass(frozen=True, slots=True)
class Moved:
    """What one :func:`move_batch` moved."""

    jobs: int = 0
    events: int = 0
    job_events: int = 0


def move_batch(
    db: sqlite3.Connection,
    cutoff: float,
    limit: int,
    *,
    usage_period: float,
    after_copy: Callable[[], None] | None = None,
) -> Moved:
    """Move at most ``limit`` jobs that ended at or before ``cutoff`` (cluster seconds)
    into the archive (the module docstring); what was deleted from the journal.
    ``usage_period``: the usage ledger's period length, which the moved jobs' usage
    is split by. ``after_copy``: called between the two commits (tests put a crash
    there)."""
    kept = archived_usage_period(db)
    if kept is not None and kept != usage_period:
        # The sums kept cannot be split again: refused before anything moves.
        raise ArchiveError(
            f"the journal's archived usage is split by periods of {kept} s, not "
            f"{usage_period} s: run with that usage period, or start a new journal"
        )
    ids = [
        str(row[0])
        for row in db.execute(
            "SELECT id FROM main.jobs WHERE end_at <= ? AND state IN (?, ?, ?) "
            "ORDER BY end_at LIMIT ?",
            (cutoff, *_ENDED, limit),
        )
    ]
    if not ids:
        return Moved()
    batch = json.dumps(ids)
    _in_one(db, _copy, batch)
    if after_copy is not None:
        after_copy()
    return _in_one(db, lambda db, batch: _delete(db, batch, usage_period), batch)


def _in_one(
    db: sqlite3.Connection, work: Callable[[sqlite3.Connection, str], Moved], batch: str
) -> Moved:
    db.execute("BEGIN IMMEDIATE")
    try:
        moved = work(db, batch)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return moved


def _tables(db: sqlite3.Connection) -> list[str]:
    """The archive's tables, made from the journal's own ``CREATE`` statements (as its
    schema and migrations left them), so the two cannot drift apart. ``events`` keeps
    the journal's numbers, so its ``seq`` is a plain key there, not AUTOINCREMENT."""
    statements = []
    for name in ("meta", *_MOVED):
        row = db.execute(
            "SELECT sql FROM main.sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone()
        head = f"CREATE TABLE {name} "
        if row is None or not str(row[0]).startswith(head):
            raise RuntimeError(f"the journal's table {name!r} is not as its schema makes it")
        body = str(row[0])[len(head) :].replace(" AUTOINCREMENT", "")
        statements.append(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.{name} {body}")
    return statements


def _copy(db: sqlite3.Connection, batch: str) -> Moved:
    moved = []
    for name in _MOVED:
        # The journal's columns, named: an archive made before a column was added to
        # the journal then fails here, loudly, rather than storing rows askew.
        columns = ", ".join(row[1] for row in db.execute(f"PRAGMA main.table_info({name})"))
        key = "id" if name == "jobs" else "job_id"
        moved.append(
            db.execute(
                f"INSERT OR IGNORE INTO {SCHEMA}.{name}({columns}) "
                f"SELECT {columns} FROM main.{name} WHERE {key} IN {_IDS}",
                (batch,),
            ).rowcount
        )
    jobs, events, job_events = moved
    return Moved(jobs, events, job_events)


def _delete(db: sqlite3.Connection, batch: str, usage_period: float) -> Moved:
    """Delete the copied jobs from the journal, keeping what a restart needs of them."""
    _keep_counts(db, batch)
    _keep_streams(db, batch)
    _keep_usage(db, batch, usage_period)
    job_events = db.execute(
        f"DELETE FROM main.job_events WHERE job_id IN {_IDS}", (batch,)
    ).rowcount
    events = db.execute(f"DELETE FROM main.events WHERE job_id IN {_IDS}", (batch,)).rowcount
    jobs = db.execute(f"DELETE FROM main.jobs WHERE id IN {_IDS}", (batch,)).rowcount
    return Moved(jobs, events, job_events)


def _keep_counts(db: sqlite3.Connection, batch: str) -> None:
    (accepted, requeues) = db.execute(
        f"SELECT COUNT(*), COALESCE(SUM(requeues), 0) FROM main.jobs WHERE id IN {_IDS}",
        (batch,),
    ).fetchone()
    adds = [("accepted", int(accepted)), ("requeues", int(requeues))]
    adds += [
        (f"ended:{state}", int(n))
        for state, n in db.execute(
            f"SELECT state, COUNT(*) FROM main.jobs WHERE id IN {_IDS} GROUP BY state", (batch,)
        )
    ]
    db.executemany(
        "INSERT INTO main.archived_counts(key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = value + excluded.value",
        adds,
    )


def _keep_streams(db: sqlite3.Connection, batch: str) -> None:
    rows = db.execute(
        f"SELECT '', MAX(stream) FROM main.job_events WHERE job_id IN {_IDS} "
        "UNION ALL "
        f"SELECT owner, MAX(owner_stream) FROM main.job_events WHERE job_id IN {_IDS} "
        "AND owner IS NOT NULL GROUP BY owner",
        (batch, batch),
    ).fetchall()
    db.executemany(
        "INSERT INTO main.archived_streams(owner, last) VALUES (?, ?) "
        "ON CONFLICT(owner) DO UPDATE SET last = MAX(last, excluded.last)",
        [(owner, int(last)) for owner, last in rows if last is not None],
    )


def _keep_usage(db: sqlite3.Connection, batch: str, period: float) -> None:
    """Add the jobs' usage to ``archived_usage``: per job, exactly what
    ``Recovery.restore_final`` charges for its row (its run with its last parts,
    split by periods as ``UsageLedger`` splits it), in the order a restart would
    charge them (submission order)."""
    sums: dict[tuple[str, str, int], float] = {}
    rows = db.execute(
        f"SELECT spec, start_at, end_at, parts FROM main.jobs WHERE id IN {_IDS} ORDER BY rowid",
        (batch,),
    )
    for spec_text, start, end, parts_json in rows:
        parts = parts_of(parts_json)
        if start is None or end is None or not parts:
            continue  # never ran: a restart would not charge it, nor know its names
        spec = spec_from_json(str(spec_text))
        cpus = parts_cpus(parts)
        begin, until = float(start), float(end)
        if until <= begin or cpus <= 0:
            # The ledger knows the names of such a run but charges nothing: a row of 0.
            pieces = [(math.floor(begin / period), 0.0)]
        else:
            pieces = [(index, s * cpus) for index, s in split_periods(begin, until, period)]
        for key in (("user", spec.user), ("group", spec.group)):
            for index, amount in pieces:
                at = (*key, index)
                sums[at] = sums.get(at, 0.0) + amount
    if not sums:
        return
    db.execute(
        "INSERT OR IGNORE INTO main.meta(key, value) VALUES ('usage_period', ?)", (repr(period),)
    )
    db.executemany(
        "INSERT INTO main.archived_usage(kind, name, period, cpu_seconds) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(kind, name, period) DO UPDATE SET cpu_seconds = cpu_seconds + "
        "excluded.cpu_seconds",
        [(kind, name, index, amount) for (kind, name, index), amount in sums.items()],
    )


def archived_usage_period(db: sqlite3.Connection) -> float | None:
    """The period length the archived usage is split by (None: none kept yet)."""
    row = db.execute("SELECT value FROM main.meta WHERE key='usage_period'").fetchone()
    return None if row is None else float(row[0])


def archived_usage(db: sqlite3.Connection) -> ArchivedUsage:
    """The moved jobs' usage sums, by kind, name and period (none for a journal that
    never archived a job that ran)."""
    rows = db.execute(
        "SELECT kind, name, period, cpu_seconds FROM main.archived_usage "
        "ORDER BY kind DESC, name, period"
    ).fetchall()
    sums = tuple((str(k), str(n), int(i), float(v)) for k, n, i, v in rows)
    return ArchivedUsage(archived_usage_period(db), sums)


def archived_counts(db: sqlite3.Connection) -> ArchivedCounts:
    """The moved jobs' counts (zero for a journal that never archived)."""
    values = {str(k): int(v) for k, v in db.execute("SELECT key, value FROM archived_counts")}
    ended = {k.partition(":")[2]: v for k, v in values.items() if k.startswith("ended:")}
    return ArchivedCounts(values.get("accepted", 0), values.get("requeues", 0), ended)


def archived_streams(db: sqlite3.Connection) -> tuple[int, dict[str, int]]:
    """The last stream numbers the moved events took: scheduler-wide, and by owner."""
    rows = dict(db.execute("SELECT owner, last FROM archived_streams").fetchall())
    wide = int(rows.pop("", 0))
    return wide, {str(k): int(v) for k, v in rows.items()}
