"""Reading one job's rows, or a stream's, from the journal and from its archive.

``scheduler.runtime.journal.Journal``'s readers of history (:func:`job`,
:func:`history`, :func:`job_events`, :func:`stream_events`) look in the
journal's hot tables and, when an archive is attached
(``scheduler.runtime.journal_archive``), in the archive's: hot first, then the
archive. A job is in both only for the instant between a move's two commits
(or after a kill there); its hot rows win, so a reader never sees a row
twice. Every read here is by key or index, so its cost does not grow with
the archive. ``Journal.load`` (a restart) reads none of the archive.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from broker.messages import JobEvent, PartSpec
from broker.vocabulary import JobEventKind
from scheduler.runtime.journal_archive import SCHEMA
from scheduler.runtime.journal_records import (
    EVENT_COLUMNS,
    JOB_COLUMNS,
    JournalEvent,
    JournalJob,
    parts_of,
    row_event,
    row_job,
)

#: A ``job_events`` row as read here; the stream column is the one asked for.
_EVENT_ROW = "job_id, seq, at, event, detail, cpus_before, cpus_after, parts, {number}, " + (
    "exit_status, signal"
)


def _schemas(archived: bool) -> tuple[str, ...]:
    """Where to read, hot first."""
    return ("main", SCHEMA) if archived else ("main",)


def _job_event(row: tuple[object, ...]) -> JobEvent:
    job_id, seq, at, kind, detail, before, after, parts, number, status, signum = row
    return JobEvent(
        job_id=str(job_id),
        seq=int(str(seq)),
        at=float(str(at)),
        event=JobEventKind(str(kind)),
        detail=str(detail or ""),
        cpus_before=None if before is None else int(str(before)),
        cpus_after=None if after is None else int(str(after)),
        parts=tuple(
            PartSpec(machine=p.machine, cpus=p.cpus)
            for p in parts_of(None if parts is None else str(parts))
        ),
        stream=None if number is None else int(str(number)),
        exit_status=None if status is None else int(str(status)),
        signal=None if signum is None else int(str(signum)),
    )


def job(db: sqlite3.Connection, job_id: str, *, archived: bool) -> JournalJob | None:
    """One job's row, from the journal, else from the archive."""
    for schema in _schemas(archived):
        row = db.execute(
            f"SELECT {JOB_COLUMNS} FROM {schema}.jobs WHERE id=?", (job_id,)
        ).fetchone()
        if row is not None:
            return row_job(row)
    return None


def archived_spec(db: sqlite3.Connection, job_id: str) -> str | None:
    """The spec (JSON) of ``job_id`` in the archive only, by its key."""
    row = db.execute(f"SELECT spec FROM {SCHEMA}.jobs WHERE id=?", (job_id,)).fetchone()
    return None if row is None else str(row[0])


def history(db: sqlite3.Connection, job_id: str | None, *, archived: bool) -> list[JournalEvent]:
    """The audit history (every job's, or ``job_id``'s), oldest first, by ``seq``."""
    rows: dict[int, tuple[object, ...]] = {}
    for schema in reversed(_schemas(archived)):  # hot last: its rows win
        sql = f"SELECT seq, {EVENT_COLUMNS} FROM {schema}.events"
        args: tuple[str, ...] = ()
        if job_id is not None:
            sql += " WHERE job_id=?"
            args = (job_id,)
        for seq, *row in db.execute(sql, args):
            rows[int(seq)] = tuple(row)
    return [row_event(rows[seq]) for seq in sorted(rows)]  # type: ignore[arg-type]


def job_events(db: sqlite3.Connection, job_ids: Iterable[str], *, archived: bool) -> list[JobEvent]:
    """The journalled events of ``job_ids``, by job (in the order asked) then seq."""
    columns = _EVENT_ROW.format(number="stream")
    out: list[JobEvent] = []
    for job_id in job_ids:
        rows: dict[int, tuple[object, ...]] = {}
        for schema in reversed(_schemas(archived)):  # hot last: its rows win
            for row in db.execute(
                f"SELECT {columns} FROM {schema}.job_events WHERE job_id=?", (job_id,)
            ):
                rows[int(row[1])] = tuple(row)
        out += [_job_event(rows[seq]) for seq in sorted(rows)]
    return out


def stream_events(
    db: sqlite3.Connection, after: int, limit: int, owner: str | None, *, archived: bool
) -> tuple[list[JobEvent], bool]:
    """The events numbered past ``after`` in the scheduler-wide stream (or ``owner``'s),
    at most ``limit`` in order, each with that number as its ``stream``; and whether
    more follow. The two files' events interleave (a long job's stay hot while
    shorter ones that started later move), so both are read and merged."""
    number = "stream" if owner is None else "owner_stream"
    where = f"{number} > ?" + ("" if owner is None else " AND owner = ?")
    args: tuple[object, ...] = (after,) if owner is None else (after, owner)
    merged: dict[tuple[str, int], tuple[object, ...]] = {}
    for schema in reversed(_schemas(archived)):  # hot last: its rows win
        for row in db.execute(
            f"SELECT {_EVENT_ROW.format(number=number)} FROM {schema}.job_events "
            f"WHERE {where} ORDER BY {number} LIMIT ?",
            (*args, limit + 1),
        ):
            merged[(str(row[0]), int(row[1]))] = tuple(row)
    rows = sorted(merged.values(), key=lambda r: int(str(r[8])))[: limit + 1]
    return [_job_event(r) for r in rows[:limit]], len(rows) > limit
