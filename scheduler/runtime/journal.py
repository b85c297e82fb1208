"""The scheduler's journal: what must survive the scheduler process.

Theory of operation. One SQLite file in WAL mode. The scheduler actor writes
every change of a job's life to it *before* anyone hears of the change: a
submission is journalled before its ``SubmitReply`` is published, a start
before its ``StartPart``, a resize before its ``ResizePart``, a requeue or an
end before the ``CancelPart`` and ``JobEvent`` that follow. So whatever a
client or an agent was told is on disk, and a restarted scheduler rebuilds
its queue from here (:meth:`Journal.load`) and reconciles the running jobs
with what the agents report.

Durability. ``synchronous=FULL`` by default: in WAL mode every commit then
waits for the WAL to reach the disk, so an acknowledged submission survives
not only the scheduler being SIGKILLed right after its acknowledgement but
also a power loss. ``NORMAL`` is offered for throughput: in WAL mode a commit
still reaches the OS (surviving SIGKILL of the process) but may be lost with
the machine. A commit costs about 0.35 ms with FULL on the development
machine; the actor commits once per drained batch of messages, not per job,
so FULL is the default.

Tables:

- ``meta``: epoch ``t0`` (Unix time at which cluster time was 0), time scale
  ``K``, policy, protocol and schema versions;
- ``jobs``: one row per accepted job, keyed by the client's job id (so every
  write is idempotent), with its spec (JSON of ``broker.messages.JobSpec``,
  readable with the ``sqlite3`` shell), submit time, state, start, end, parts
  and how many times it was requeued. Rows are deleted only when an ended job
  moves to the archive (below); the implicit rowid is the submission order,
  which is the queue order on restore;
- ``events``: append-only history (starts, resizes, requeues, holds, ends) for
  audits and reports, read with :meth:`Journal.history`; a restart does not
  need it;
- ``job_events`` (schema 2): every ``JobEvent`` published to watchers, keyed
  by job and its per-job ``seq``, written before the event is published, so a
  watcher that missed some asks for them (``HistoryRequest``) and gets exactly
  what was published.

Resizes (schema 3). A resize is one ``events`` row of kind ``resized`` with
the job's parts after it (``detail``) and before it (``before``), and one
``job_events`` row whose ``cpus_before`` and ``cpus_after`` are the job's CPUs
over all parts; the job's row holds its current parts, which is what a
restarted scheduler reconciles its agents to. Opening a schema-2 journal adds
the three columns (NULL in the older rows).

Totals (schema 4). The scheduler's counters that no job row can tell
(rejections by reason, bad messages, agent losses, resizes ...) are one
``totals`` row per metric family and label set, written by
:meth:`Journal.record_totals` in the transaction of the batch that counted
them, and read back by :meth:`Journal.load` for the exporter to restore.

Holds (schema 5). A job whose parts are held for adoption
(``scheduler.live.agent_hold``) has the hold's end in its row (``held_until``,
written by :meth:`Journal.record_hold` with a ``held`` history event, cleared
by its next start, requeue or end), so a restarted scheduler waits it out
before declaring the parts lost, whichever job events it journals.

Placements in job events (schema 7). A ``running`` or ``resized`` job event
keeps the job's parts from then on (``job_events.parts``), so a history
request tells where a job ran as well as when (``accordion gantt``); NULL in
older rows.

Streams (schema 8). Each ``job_events`` row also has its number in the
scheduler-wide event stream (``stream``, what ``JobEvent.stream`` says on the
``events`` topic) and in its owner's (``owner``, ``owner_stream``: what the
owner's ``users/<user>/events`` says), so a watcher that missed events of any
job asks for them by number (:meth:`Journal.stream_events`). Requeues say their
``cause`` and whether they were ``charged``; a hold its ``hold_cause``; the
machines an admin drained are in ``drains``.

A disk that refuses writes (full, read-only, failing) is not an error here:
the writes are kept in memory and written again later
(``scheduler.runtime.journal_writer``; :attr:`Journal.failure`, :meth:`Journal.retry`).
A journal that cannot be opened, or is damaged, is refused at once by a
:class:`JournalError` that says what to do.

The archive (schema 10). Jobs that ended longer than a retention ago move, with
their events, to a second file beside the journal (:meth:`Journal.archive`,
``scheduler.runtime.journal_archive``), so the tables a restart reads stay
small; the readers of a job's history look there too
(``scheduler.runtime.journal_reading``). What a restart needs of the moved
jobs stays here: their counts, stream numbers and fair-share usage.

The tables and their migrations are in ``scheduler.runtime.journal_schema``; the
values a reader gets in ``scheduler.runtime.journal_records`` (re-exported here).

Batches. Every ``record_*`` method is one transaction on its own, or a part of
the enclosing :meth:`Journal.transaction` (the actor wraps a whole mailbox
drain in one, so thousands of submissions cost one commit).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from broker.messages import JobEvent, JobSpec
from broker.storage import STORED_PROTOCOLS, spec_from_json, spec_to_json
from broker.topics import PROTOCOL_VERSION
from model.machine import Part
from scheduler.core.job_lifecycle import JobState
from scheduler.runtime import journal_reading
from scheduler.runtime.journal_archive import (
    ArchiveError,
    Moved,
    archive_path,
    archived_counts,
    archived_streams,
    archived_usage,
    attach,
    move_batch,
)
from scheduler.runtime.journal_open import Synchronous, open_database
from scheduler.runtime.journal_records import (
    EVENT_KINDS,
    JOB_COLUMNS,
    JournalEvent,
    JournalJob,
    JournalState,
    Meta,
    TotalKey,
    labels_of,
    labels_text,
    parts_text,
    row_job,
)
from scheduler.runtime.journal_schema import SCHEMA_VERSION, JournalError
from scheduler.runtime.journal_writer import Writer

log = logging.getLogger(__name__)

__all__ = [
    "EVENT_KINDS",
    "SCHEMA_VERSION",
    "Journal",
    "JournalError",
    "JournalEvent",
    "JournalJob",
    "JournalState",
    "Meta",
    "Synchronous",
    "TotalKey",
]


class Journal:
    """The SQLite journal (see the module docstring). Single-threaded: the actor's."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Synchronous = "FULL",
        check: bool = False,
        archive: bool | None = None,
    ) -> None:
        """Open (or create) the journal at ``path``; ``check`` reads it all first
        (SQLite's ``quick_check``), so a damaged file is refused at start rather
        than found out later. ``archive``: attach the archive beside it
        (``journal_archive.archive_path``), made if missing (True), never
        (False), or only if it is there (None: a journal that archived before is
        still read whole). Raises :class:`JournalError`, in one line that says
        what to do, for a journal that cannot be opened or written, or is damaged."""
        self.path = Path(path)
        self._db = open_database(self.path, synchronous, check=check)
        self._writer = Writer(self._db, self.path)
        self.archive_path = archive_path(self.path)
        self.archived = bool(archive) or (archive is None and self.archive_path.exists())
        if self.archived:
            try:
                attach(self._db, self.archive_path, synchronous)
            except sqlite3.Error as exc:
                self._db.close()
                raise JournalError(
                    f"the journal's archive {self.archive_path} cannot be used ({exc}): "
                    "check it and its directory, or move it aside (its jobs are then forgotten)"
                ) from None

    # -- life -------------------------------------------------------------

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        """One commit for everything inside (nested uses join the outer one). A write
        the disk refuses is kept for :meth:`retry`, not raised (:attr:`failure`)."""
        return self._writer.transaction()

    @property
    def failure(self) -> str | None:
        """Why the journal cannot be written now (its disk full, read-only, failing),
        in words; None when it can."""
        return self._writer.failure

    @property
    def held_writes(self) -> int:
        """Writes kept in memory while the journal cannot be written."""
        return len(self._writer.backlog)

    @property
    def failures(self) -> int:
        """Times the journal went from writable to failing."""
        return self._writer.failures

    def retry(self) -> bool:
        """Write what was held; whether the journal can be written now."""
        return self._writer.retry()

    @property
    def synchronous(self) -> str:
        """The durability level in force (``FULL`` or ``NORMAL``)."""
        level = int(self._db.execute("PRAGMA synchronous").fetchone()[0])
        return {2: "FULL", 1: "NORMAL"}.get(level, str(level))

    # -- meta -------------------------------------------------------------

    def ensure_meta(self, *, epoch: float, time_scale: float, policy: str) -> Meta:
        """Record the run's meta on first use; afterwards return the stored one.

        The stored epoch wins (cluster time goes on from where it was). A
        different time scale is refused: every submit time, deadline and
        estimate in the journal is in the old scale's cluster seconds. A
        different policy is allowed (the journal holds no policy state) and
        recorded. A journal of an older protocol whose specs this code reads
        (``broker.storage.STORED_PROTOCOLS``) goes on under this one; any other
        is refused.
        """
        with self.transaction():
            stored = self.meta()
            if stored is None:
                values = {
                    "epoch": repr(float(epoch)),
                    "time_scale": repr(float(time_scale)),
                    "policy": policy,
                    "protocol": str(PROTOCOL_VERSION),
                }
                self._writer.executemany(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", values.items()
                )
                return Meta(float(epoch), float(time_scale), policy, PROTOCOL_VERSION)
            if stored.time_scale != float(time_scale):
                raise JournalError(
                    f"{self.path} was written at time scale {stored.time_scale:g}; "
                    f"restart with that scale, not {time_scale:g}"
                )
            if stored.protocol not in STORED_PROTOCOLS:
                raise JournalError(
                    f"{self.path} was written by protocol v{stored.protocol}, "
                    f"this scheduler speaks v{PROTOCOL_VERSION}"
                )
            if stored.protocol != PROTOCOL_VERSION:
                # What is written from now on is this protocol's.
                self._writer.execute(
                    "UPDATE meta SET value=? WHERE key='protocol'", (str(PROTOCOL_VERSION),)
                )
                stored = Meta(stored.epoch, stored.time_scale, stored.policy, PROTOCOL_VERSION)
            if stored.policy != policy:
                self._writer.execute("UPDATE meta SET value=? WHERE key='policy'", (policy,))
                stored = Meta(stored.epoch, stored.time_scale, policy, stored.protocol)
            return stored

    def meta(self) -> Meta | None:
        """The stored meta, None for a new journal."""
        rows = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        if "epoch" not in rows:
            return None
        return Meta(
            epoch=float(rows["epoch"]),
            time_scale=float(rows["time_scale"]),
            policy=str(rows["policy"]),
            protocol=int(rows["protocol"]),
        )

    # -- jobs -------------------------------------------------------------

    def record_submissions(self, jobs: Iterable[tuple[JobSpec, float]]) -> int:
        """Record accepted jobs ``(spec, submit time)`` in one transaction.

        Idempotent by job id: a job already recorded is left as it is. Returns
        how many rows were new.
        """
        rows = [
            (spec.id, spec_to_json(spec), submit, JobState.QUEUED.value) for spec, submit in jobs
        ]
        with self.transaction():
            new = self._writer.executemany(
                "INSERT OR IGNORE INTO jobs(id, spec, submit, state) VALUES (?, ?, ?, ?)", rows
            )
            return max(new, 0)

    def record_start(self, job_id: str, start: float, parts: Sequence[Part]) -> None:
        text = parts_text(parts)
        with self.transaction():
            self._update(
                job_id,
                "UPDATE jobs SET state=?, start_at=?, end_at=NULL, parts=?, held_until=NULL, "
                "hold_cause=NULL WHERE id=?",
                (JobState.RUNNING.value, start, text, job_id),
            )
            self._event(start, job_id, "started", text)

    def record_parts(
        self, job_id: str, at: float, parts: Sequence[Part], before: Sequence[Part] = ()
    ) -> None:
        """A running job was resized from ``before`` to ``parts``."""
        text = parts_text(parts)
        with self.transaction():
            self._update(job_id, "UPDATE jobs SET parts=? WHERE id=?", (text, job_id))
            self._writer.execute(
                "INSERT INTO events(at, job_id, kind, detail, before) VALUES (?, ?, ?, ?, ?)",
                (at, job_id, "resized", text, parts_text(before) if before else None),
            )

    def record_requeue(
        self,
        job_id: str,
        at: float,
        requeues: int,
        detail: str = "",
        *,
        uncharged: int = 0,
        cause: str | None = None,
        charged: bool | None = None,
    ) -> None:
        """The job went back to the queue (its machine was lost); ``requeues`` so far,
        ``uncharged`` of them not counted against the requeue budget; this one's
        ``cause`` and whether it was ``charged``."""
        with self.transaction():
            self._update(
                job_id,
                "UPDATE jobs SET state=?, start_at=NULL, parts=NULL, requeues=?, detail=?, "
                "held_until=NULL, hold_cause=NULL, uncharged=? WHERE id=?",
                (JobState.QUEUED.value, requeues, detail or None, uncharged, job_id),
            )
            self._writer.execute(
                "INSERT INTO events(at, job_id, kind, detail, cause, charged) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    at,
                    job_id,
                    "requeued",
                    detail or None,
                    cause,
                    None if charged is None else int(charged),
                ),
            )

    def record_hold(
        self, job_id: str, at: float, until: float, detail: str = "", *, cause: str = "lost"
    ) -> None:
        """The running job's parts are held for adoption until ``until`` (cluster s);
        ``cause``: ``stop`` when its agent's operator stopped the agent, else ``lost``."""
        with self.transaction():
            self._update(
                job_id,
                "UPDATE jobs SET held_until=?, hold_cause=? WHERE id=?",
                (until, cause, job_id),
            )
            self._event(at, job_id, "held", detail)

    def record_end(
        self,
        job_id: str,
        end: float,
        state: JobState,
        detail: str = "",
        *,
        start: float | None = None,
    ) -> None:
        """The job left for good: finished, failed or cancelled. ``start``: its run's
        start as its agents measured it, replacing the decision's (``scheduler.live.agents``)."""
        if state not in (JobState.FINISHED, JobState.FAILED, JobState.CANCELLED):
            raise ValueError(f"record_end takes a final state, not {state}")
        with self.transaction():
            self._update(
                job_id,
                "UPDATE jobs SET state=?, end_at=?, detail=?, start_at=COALESCE(?, start_at), "
                "held_until=NULL, hold_cause=NULL WHERE id=?",
                (state.value, end, detail or None, start, job_id),
            )
            self._event(end, job_id, state.value, detail)

    def record_cancels(self, job_ids: Sequence[str], at: float, detail: str) -> None:
        """Queued jobs cancelled together (a bulk cancel): one statement for all their
        rows and one for their history, in the enclosing transaction."""
        with self.transaction():
            changed = self._writer.executemany(
                "UPDATE jobs SET state=?, end_at=?, detail=?, held_until=NULL, hold_cause=NULL "
                "WHERE id=?",
                [(JobState.CANCELLED.value, at, detail or None, j) for j in job_ids],
            )
            if changed not in (len(job_ids), -1):  # -1: held, while the disk refuses writes
                # A local bug: the actor journals only jobs it accepted.
                raise KeyError(f"some of {len(job_ids)} cancelled jobs are not in the journal")
            self._writer.executemany(
                "INSERT INTO events(at, job_id, kind, detail) VALUES (?, ?, ?, ?)",
                [(at, j, JobState.CANCELLED.value, detail or None) for j in job_ids],
            )

    def record_event(
        self, event: JobEvent, *, owner: str | None = None, owner_stream: int | None = None
    ) -> None:
        """A ``JobEvent`` about to be published (idempotent by job and seq): its
        ``stream`` is its number in the scheduler-wide stream, ``owner_stream`` in
        its ``owner``'s."""
        with self.transaction():
            # Idempotent by job and seq only: a stream number used twice is a bug, loud.
            self._writer.execute(
                "INSERT INTO job_events(job_id, seq, at, event, detail, "
                "cpus_before, cpus_after, parts, stream, owner, owner_stream, exit_status, "
                "signal) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(job_id, seq) DO NOTHING",
                (
                    event.job_id,
                    event.seq,
                    event.at,
                    event.event.value,
                    event.detail or None,
                    event.cpus_before,
                    event.cpus_after,
                    parts_text([Part(p.machine, p.cpus) for p in event.parts])
                    if event.parts
                    else None,
                    event.stream,
                    owner,
                    owner_stream,
                    event.exit_status,
                    event.signal,
                ),
            )

    def job_events(self, job_ids: Iterable[str]) -> list[JobEvent]:
        """The journalled events of ``job_ids`` (archived ones too), by job (in the order
        asked) then seq, as published on the scheduler-wide stream (``stream``: their
        number there)."""
        return journal_reading.job_events(self._db, job_ids, archived=self.archived)

    def last_event_seqs(self) -> dict[str, int]:
        """Each job's highest event seq (a restarted scheduler goes on from there)."""
        rows = self._db.execute("SELECT job_id, MAX(seq) FROM job_events GROUP BY job_id")
        return {str(job_id): int(seq) for job_id, seq in rows.fetchall()}

    def last_streams(self) -> tuple[int, dict[str, int]]:
        """The last number of the scheduler-wide event stream, and of each owner's (a
        restarted scheduler goes on from there), archived events' included."""
        (last,) = self._db.execute("SELECT COALESCE(MAX(stream), 0) FROM job_events").fetchone()
        rows = self._db.execute(
            "SELECT owner, MAX(owner_stream) FROM job_events "
            "WHERE owner IS NOT NULL AND owner_stream IS NOT NULL GROUP BY owner"
        )
        owners = {str(owner): int(n) for owner, n in rows.fetchall()}
        moved, moved_owners = archived_streams(self._db)
        for owner, n in moved_owners.items():
            owners[owner] = max(owners.get(owner, 0), n)
        return max(int(last), moved), owners

    def stream_events(
        self, after: int, limit: int, *, owner: str | None = None
    ) -> tuple[list[JobEvent], bool]:
        """The events of the scheduler-wide stream (or of ``owner``'s) numbered past
        ``after``, archived ones too, at most ``limit`` of them in order, each with its
        number in that stream as its ``stream``; and whether more follow."""
        return journal_reading.stream_events(self._db, after, limit, owner, archived=self.archived)

    # -- the archive ----------------------------------------------------------

    def archive(
        self,
        cutoff: float,
        limit: int,
        *,
        usage_period: float = 86400.0,
        after_copy: Callable[[], None] | None = None,
    ) -> Moved:
        """Move at most ``limit`` jobs that ended at or before ``cutoff`` (cluster s), with
        their events, to the archive (``journal_archive.move_batch``), keeping their
        usage split by ``usage_period`` (the ledger's). Nothing while the journal
        cannot be written, has no archive attached, or is inside a transaction (the
        move commits its own two). A disk that refuses the move is logged and left
        for the next call: the move is idempotent."""
        if not self.archived or self.failure is not None or self._db.in_transaction:
            return Moved()
        try:
            return move_batch(
                self._db, cutoff, limit, usage_period=usage_period, after_copy=after_copy
            )
        except (sqlite3.Error, ArchiveError) as exc:
            log.warning("the journal's archive %s refused a move: %s", self.archive_path, exc)
            return Moved()

    # -- drains -------------------------------------------------------------

    def record_drain(self, machine: str, at: float, by: str | None = None) -> None:
        """An admin drained ``machine`` (``by``: who, when known)."""
        with self.transaction():
            self._writer.execute(
                "INSERT OR REPLACE INTO drains(machine, at, by) VALUES (?, ?, ?)",
                (machine, at, by),
            )

    def record_resume(self, machine: str) -> None:
        """An admin resumed ``machine``."""
        with self.transaction():
            self._writer.execute("DELETE FROM drains WHERE machine=?", (machine,))

    def drained(self) -> dict[str, float]:
        """The machines an admin drained, with when (cluster seconds)."""
        rows = self._db.execute("SELECT machine, at FROM drains ORDER BY machine")
        return {str(m): float(at) for m, at in rows.fetchall()}

    def _update(self, job_id: str, sql: str, args: tuple[object, ...]) -> None:
        changed = self._writer.execute(sql, args)
        if changed not in (1, -1):  # -1: held, while the disk refuses writes
            # A local bug: the actor journals only jobs it accepted.
            raise KeyError(f"job {job_id!r} is not in the journal")

    def _event(self, at: float, job_id: str, kind: str, detail: str) -> None:
        self._writer.execute(
            "INSERT INTO events(at, job_id, kind, detail) VALUES (?, ?, ?, ?)",
            (at, job_id, kind, detail or None),
        )

    def record_totals(self, totals: Mapping[TotalKey, int]) -> None:
        """Set these totals (the counts so far, not increments; idempotent)."""
        if not totals:
            return
        rows = [(name, labels_text(labels), int(n)) for (name, labels), n in totals.items()]
        with self.transaction():
            self._writer.executemany(
                "INSERT INTO totals(name, labels, value) VALUES (?, ?, ?) "
                "ON CONFLICT(name, labels) DO UPDATE SET value=excluded.value",
                rows,
            )

    # -- reading ----------------------------------------------------------

    def load(self) -> JournalState:
        """Meta and every job in submission order (what a restarted scheduler needs),
        and what the archived jobs left: their counts and usage."""
        rows = self._db.execute(f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY rowid").fetchall()
        jobs = [row_job(row) for row in rows]
        return JournalState(
            self.meta(), jobs, self.totals(), archived_counts(self._db), archived_usage(self._db)
        )

    def job(self, job_id: str) -> JournalJob | None:
        """One job's row, archived or not (an id a restart forgot is still taken)."""
        return journal_reading.job(self._db, job_id, archived=self.archived)

    def archived_spec(self, job_id: str) -> JobSpec | None:
        """The spec of an archived job (one a restarted scheduler no longer knows), so
        its id stays taken and its history stays its owner's; None if not archived."""
        if not self.archived:
            return None
        row = journal_reading.archived_spec(self._db, job_id)
        return None if row is None else spec_from_json(row)

    def history(self, job_id: str | None = None) -> list[JournalEvent]:
        """The audit history (every job's, or ``job_id``'s, archived ones too), oldest first.

        The one reader of the ``events`` table: a resized job's segments and a
        requeued job's starts are only here, not in its row.
        """
        return journal_reading.history(self._db, job_id, archived=self.archived)

    def totals(self) -> dict[TotalKey, int]:
        """Every journaled total (what :meth:`record_totals` last set for each)."""
        rows = self._db.execute("SELECT name, labels, value FROM totals ORDER BY name, labels")
        return {(str(name), labels_of(labels)): int(n) for name, labels, n in rows.fetchall()}
