"""What the journal hands back: its value types and how a row becomes one.

The journal (``scheduler.runtime.journal``) writes and reads SQLite; this module holds
the frozen values its readers get (:class:`Meta`, :class:`JournalJob`,
:class:`JournalState`, :class:`JournalEvent`), the text forms of parts and of
a total's labels as they stand in the tables, and the conversions of a row
into a value. Nothing here touches the database.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from broker.messages import JobSpec
from broker.storage import spec_from_json
from model.machine import Part
from scheduler.core.job_lifecycle import JobState

#: A journaled total: the metric family's name and its label pairs, sorted by label
#: name (``()`` for a counter without labels).
TotalKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True, slots=True)
class Meta:
    """What a journal was created with (``policy`` is the one of the latest start)."""

    epoch: float
    time_scale: float
    policy: str
    protocol: int


@dataclass(frozen=True, slots=True)
class JournalJob:
    """One job as the journal knows it."""

    spec: JobSpec
    submit: float
    state: JobState
    start: float | None
    end: float | None
    parts: tuple[Part, ...]
    requeues: int
    detail: str | None
    #: When the hold of its parts for adoption ends (cluster seconds, schema 5): a
    #: restarted scheduler does not declare them lost before. None: not held.
    held_until: float | None = None
    #: Of ``requeues``, those not counted against ``max_requeues`` (schema 5): a
    #: start fenced before it ran, a stop its agent's operator asked for
    #: (``scheduler.core.recovery``).
    uncharged: int = 0
    #: Why its parts are held (schema 8): ``stop`` (its agent's operator stopped the
    #: agent: a part a restart finds gone is requeued uncharged) or ``lost``.
    hold_cause: str | None = None


@dataclass(frozen=True, slots=True)
class ArchivedCounts:
    """What the jobs moved to the archive (``scheduler.runtime.journal_archive``) leave in
    the journal for the exporter's counters, which a restart starts from."""

    accepted: int = 0
    requeues: int = 0
    #: Ended jobs by final state (``finished``, ``failed``, ``cancelled``).
    ended: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ArchivedUsage:
    """The fair-share usage of the jobs moved to the archive, kept in the journal
    (``archived_usage``) so a restart charges it (``UsageLedger.add_period``)."""

    #: The period length (cluster seconds) the sums are split by; None: none kept.
    period: float | None = None
    #: ``(kind, name, period index, CPU-seconds)``, kind ``user`` or ``group``; a row
    #: of 0 keeps a name known whose archived runs took no time.
    sums: tuple[tuple[str, str, int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class JournalState:
    """What a restarted scheduler needs: meta, every job in submission order, and
    the totals (schema 4) that the jobs cannot tell (rejections, bad messages,
    agent losses ...), by :data:`TotalKey`."""

    meta: Meta | None
    jobs: list[JournalJob]
    totals: Mapping[TotalKey, int] = field(default_factory=dict)
    #: The counts of the jobs moved to the archive (not in ``jobs``).
    archived: ArchivedCounts = field(default_factory=ArchivedCounts)
    #: Their fair-share usage, which a restart charges before ``jobs``'.
    usage: ArchivedUsage = field(default_factory=ArchivedUsage)


#: The kinds of history entries this journal writes: a start or a resize (with the
#: parts), a requeue, or an end in a final state. A reader keeps any other kind it
#: finds (a newer scheduler's) as it is, with no parts.
EVENT_KINDS: frozenset[str] = frozenset(
    ("started", "resized", "requeued", "finished", "failed", "cancelled")
)
_PLACED = frozenset(("started", "resized"))


@dataclass(frozen=True, slots=True)
class JournalEvent:
    """One entry of the journal's history, at cluster time ``at``.

    ``kind`` is one of :data:`EVENT_KINDS`; ``parts`` are the job's parts from
    then on for ``started`` and ``resized`` (empty otherwise); ``before`` the
    parts a ``resized`` job held until then (empty otherwise, and in a journal
    older than schema 3); ``detail`` is the reason of a requeue or an end. A
    requeue says its ``cause`` (``scheduler.live.coupling.Cause``) and whether it
    was ``charged`` against ``max_requeues`` (None before schema 8).
    """

    at: float
    job_id: str
    kind: str
    parts: tuple[Part, ...]
    detail: str | None
    before: tuple[Part, ...] = ()
    cause: str | None = None
    charged: bool | None = None


def parts_text(parts: Sequence[Part]) -> str:
    """Parts as the tables hold them: ``[[machine, cpus], ...]`` in JSON."""
    return json.dumps([[p.machine, p.cpus] for p in parts], separators=(",", ":"))


def parts_of(text: str | None) -> tuple[Part, ...]:
    if not text:
        return ()
    return tuple(Part(str(m), int(c)) for m, c in json.loads(text))


def labels_text(labels: tuple[tuple[str, str], ...]) -> str:
    """A total's labels as the ``totals`` table holds them: a JSON object, keys sorted."""
    return json.dumps(dict(labels), sort_keys=True, separators=(",", ":"))


def labels_of(text: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in json.loads(text).items()))


JobRow = tuple[
    str,
    float,
    str,
    float | None,
    float | None,
    str | None,
    int,
    str | None,
    float | None,
    int,
    str | None,
]
#: The columns of ``jobs`` that :func:`row_job` reads, in its order.
JOB_COLUMNS = (
    "spec, submit, state, start_at, end_at, parts, requeues, detail, held_until, uncharged, "
    "hold_cause"
)


def row_job(row: JobRow) -> JournalJob:
    spec, submit, state, start, end, parts, requeues, detail, held_until, uncharged, cause = row
    return JournalJob(
        spec=spec_from_json(spec),
        submit=float(submit),
        state=JobState(state),
        start=start,
        end=end,
        parts=parts_of(parts),
        requeues=int(requeues),
        detail=detail,
        held_until=held_until,
        uncharged=int(uncharged),
        hold_cause=cause,
    )


EventRow = tuple[float, str, str, str | None, str | None, str | None, int | None]
#: The columns of ``events`` that :func:`row_event` reads, in its order.
EVENT_COLUMNS = "at, job_id, kind, detail, before, cause, charged"


def row_event(row: EventRow) -> JournalEvent:
    at, job_id, kind, detail, before, cause, charged = row
    placed = kind in _PLACED
    return JournalEvent(
        at=float(at),
        job_id=str(job_id),
        kind=str(kind),
        parts=parts_of(detail) if placed else (),
        detail=None if placed else detail,
        before=parts_of(before),
        cause=cause,
        charged=None if charged is None else bool(charged),
    )
