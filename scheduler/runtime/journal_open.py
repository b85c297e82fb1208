"""Opening the journal's SQLite file: its checks, and the one-line refusals that say what to do.

``scheduler.runtime.journal.Journal`` opens its file here (:func:`open_database`):
WAL mode, the durability asked for, and, with ``check``, SQLite's
``quick_check`` over the whole file, so a damaged journal is refused at start
rather than found out later; then its tables are made or migrated
(``scheduler.runtime.journal_schema``). Whatever goes wrong is a
:class:`~scheduler.runtime.journal_schema.JournalError` in one line: what is
wrong (a damaged file, one that is not a database, a read-only file or
filesystem, a full disk) and what to do about it. A disk that refuses writes
once the journal is open is ``scheduler.runtime.journal_writer``'s.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Literal

from scheduler.runtime.journal_schema import JournalError, prepare
from scheduler.runtime.journal_writer import write_failure

Synchronous = Literal["FULL", "NORMAL"]


def open_database(path: Path, synchronous: Synchronous, *, check: bool) -> sqlite3.Connection:
    """The journal's connection, in autocommit mode (transactions are explicit)."""
    if synchronous not in ("FULL", "NORMAL"):
        raise JournalError(f"synchronous must be FULL or NORMAL, got {synchronous!r}")
    try:
        db = sqlite3.connect(path, isolation_level=None)
    except sqlite3.Error as exc:
        raise _refused(path, exc) from None
    try:
        _prepare(db, path, synchronous, check=check)
    except sqlite3.Error as exc:
        db.close()
        raise _refused(path, exc) from None
    except JournalError:
        db.close()
        raise
    return db


def _prepare(db: sqlite3.Connection, path: Path, synchronous: Synchronous, *, check: bool) -> None:
    mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise JournalError(f"{path}: SQLite refused WAL mode (got {mode!r})")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("PRAGMA busy_timeout=5000")
    if check:
        found = [str(r[0]) for r in db.execute("PRAGMA quick_check(3)").fetchall()]
        if found != ["ok"]:
            what = " ".join("; ".join(found).split())  # one line, whatever SQLite says
            raise JournalError(f"the journal {path} is damaged ({what}): {_DAMAGED_ADVICE}")
    db.execute("BEGIN IMMEDIATE")
    try:
        prepare(db, path)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


_DAMAGED_ADVICE = (
    "restore it from a copy, or move it aside to start with an empty journal "
    "(the jobs it holds are then forgotten)"
)


def _refused(path: Path, exc: sqlite3.Error) -> JournalError:
    """Why the journal at ``path`` cannot be used, and what to do, in one line."""
    what = write_failure(exc)
    if _mounted_read_only(path):
        what = "its filesystem is mounted read-only"
    elif not _writable(path):
        what = "it is read-only"
    advice = _ADVICE.get(what or "", "check its disk, or start with another --journal")
    return JournalError(f"the journal {path} cannot be used ({what}: {exc}): {advice}")


_ADVICE = {
    "its filesystem is mounted read-only": "remount it read-write, or start with another --journal",
    "it is read-only": (
        "make the file and its directory writable by this user (SQLite writes its "
        "-wal and -shm files beside it), or start with another --journal"
    ),
    "it is damaged": _DAMAGED_ADVICE,
    "it is not a database": _DAMAGED_ADVICE,
    "its disk is full": "free space on its filesystem, then start again",
    "it cannot be opened": "check that its directory exists and this user may write there",
}


def _mounted_read_only(path: Path) -> bool:
    """Whether the journal's filesystem is mounted read-only (SQLite's own error says
    only that it cannot open the file)."""
    try:
        return bool(os.statvfs(path.resolve().parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _writable(path: Path) -> bool:
    """Whether this user may write the journal and its directory."""
    folder = path.resolve().parent
    if not folder.is_dir():
        return True  # not a matter of permissions: "cannot be opened" says it
    return os.access(folder, os.W_OK) and (not path.exists() or os.access(path, os.W_OK))
