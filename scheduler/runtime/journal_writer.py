"""How the journal's writes reach the disk, and what happens when the disk refuses them.

Theory of operation. Every write of the journal (``scheduler.runtime.journal``)
goes through one :class:`Writer` over its SQLite connection, inside a
transaction (:meth:`Writer.transaction`, nested uses join the outer one).
The writer remembers the statements of the open transaction. When SQLite
refuses one, or the commit, because the file cannot be written (the disk is
full, an I/O error, the file or its filesystem became read-only, the file is
damaged), the writer does not raise into its caller: it rolls the
transaction back, keeps its statements, and every later one, in a *backlog*
in memory, and says why in :attr:`Writer.failure`. The caller's state is then
ahead of the disk; the actor knows it from ``failure`` and holds back
everything that promises durability (a submission's acceptance, job events,
commands) until :meth:`Writer.retry` has written the backlog, in order, in
one transaction. Any other SQLite error is a bug and raises.

So a full disk costs what the scheduler cannot promise (new submissions are
refused meanwhile, ``scheduler.live.requests``), never a crash loop: the
running jobs go on, their reports are kept in memory and journaled once the
disk takes them again. What a scheduler killed meanwhile loses is the
backlog: work done since (a job that ended is restored as running, and its
parts are found gone), never a submission it acknowledged.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

#: SQLite's primary result codes (the low byte of an extended code) that say the file
#: cannot be written now, and what each means for whoever reads the reason.
WRITE_FAILURES: Final[dict[int, str]] = {
    8: "it is read-only",  # SQLITE_READONLY
    10: "an I/O error",  # SQLITE_IOERR
    11: "it is damaged",  # SQLITE_CORRUPT
    13: "its disk is full",  # SQLITE_FULL
    14: "it cannot be opened",  # SQLITE_CANTOPEN
    26: "it is not a database",  # SQLITE_NOTADB
}


def write_failure(exc: sqlite3.Error) -> str | None:
    """What a refused write means (see :data:`WRITE_FAILURES`), None for another error."""
    code = getattr(exc, "sqlite_errorcode", None)
    if not isinstance(code, int):
        return None
    return WRITE_FAILURES.get(code & 0xFF)


@dataclass(frozen=True, slots=True)
class Statement:
    """One write: ``sql`` with its ``args`` (``many``: a sequence of argument rows)."""

    sql: str
    args: Sequence[object] | Sequence[Sequence[object]]
    many: bool = False


class Writer:
    """The journal's writes over ``db`` (see the module docstring)."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self._db = db
        self._path = path
        self._depth = 0
        #: Statements of the open transaction, for the backlog if it cannot commit.
        self._open: list[Statement] = []
        #: Statements the disk refused, in order, written again by :meth:`retry`.
        self.backlog: list[Statement] = []
        #: Why the journal cannot be written now; None when it can.
        self.failure: str | None = None
        #: Times the journal went from writable to failing.
        self.failures = 0

    @property
    def writable(self) -> bool:
        return self.failure is None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One commit for everything inside (nested uses join the outer one).

        A write the disk refuses does not raise here (the module docstring); an
        exception of the caller's rolls back and propagates.
        """
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self._depth = 1
        self._open = []
        began = self.failure is None and self._begin()
        try:
            yield
        except BaseException:
            self._depth = 0
            self._open = []
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        self._depth = 0
        if began and self.failure is None:
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._fail(exc)
        self._open = []

    def _begin(self) -> bool:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._fail(exc)
            return False
        return True

    def execute(self, sql: str, args: Sequence[object] = ()) -> int:
        """Run one write; its row count, or -1 when it went to the backlog."""
        return self._run(Statement(sql, tuple(args)))

    def executemany(self, sql: str, rows: Iterable[Sequence[object]]) -> int:
        """Run one write per row; rows changed, or -1 when it went to the backlog."""
        return self._run(Statement(sql, [tuple(r) for r in rows], many=True))

    def _run(self, statement: Statement) -> int:
        if not self._depth:
            raise RuntimeError("a journal write outside a transaction")
        if self.failure is not None:
            self.backlog.append(statement)
            return -1
        self._open.append(statement)
        try:
            before = self._db.total_changes
            if statement.many:
                self._db.executemany(statement.sql, statement.args)  # type: ignore[arg-type]
                return self._db.total_changes - before
            return self._db.execute(statement.sql, statement.args).rowcount
        except sqlite3.Error as exc:
            self._fail(exc)
            return -1

    def _fail(self, exc: sqlite3.Error) -> None:
        """The disk refused a write: roll back, keep the transaction's statements."""
        what = write_failure(exc)
        if what is None:
            raise exc  # not the disk's refusal: a bug, shown loudly
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error as again:
                log.error("journal %s: the rollback failed too: %s", self._path, again)
        self.backlog.extend(self._open)
        self._open = []
        if self.failure is None:
            self.failures += 1
            log.error(
                "journal %s cannot be written (%s: %s): new submissions are refused, "
                "running jobs go on and what they report is kept in memory until it can",
                self._path,
                what,
                exc,
            )
        self.failure = f"the scheduler's journal {self._path} cannot be written ({what}: {exc})"

    def retry(self) -> bool:
        """Write the backlog in one transaction; whether the journal is writable now."""
        if self.failure is None:
            return True
        if self._depth:
            raise RuntimeError("retry() inside a transaction")
        held = self.backlog
        try:
            self._db.execute("BEGIN IMMEDIATE")
            for statement in held:
                if statement.many:
                    self._db.executemany(statement.sql, statement.args)  # type: ignore[arg-type]
                else:
                    self._db.execute(statement.sql, statement.args)
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            what = write_failure(exc)
            if what is None:
                raise
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            self.failure = f"the scheduler's journal {self._path} cannot be written ({what}: {exc})"
            return False
        log.warning(
            "journal %s can be written again: %d held write(s) journaled", self._path, len(held)
        )
        self.backlog = []
        self.failure = None
        return True
