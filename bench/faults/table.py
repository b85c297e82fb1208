"""The fault bench's printed matrix: one line per row, the columns ``bench.faults`` defines."""

from __future__ import annotations

from rich.table import Table

from bench.faults.cluster import Result


def table(results: list[Result]) -> Table:
    t = Table(
        title="fault matrix (wall seconds; 0 lost and 0 duplicated beyond the fencing bound "
        "is the target)"
    )
    for col in (
        "row",
        "accepted",
        "finished",
        "failed",
        "cancelled",
        "queued",
        "lost",
        "requeued",
        "charged",
        "adopted",
        "duplicated",
        "overlapped",
        "recovery s",
        "bad counted",
        "effects",
        "restarts",
        "note",
    ):
        t.add_column(col, justify="left" if col in ("row", "note") else "right")
    for r in results:
        t.add_row(
            r.row,
            str(r.accepted),
            str(r.finished),
            str(r.failed),
            str(r.cancelled),
            str(r.queued),
            str(r.lost),
            str(r.requeued),
            str(r.charged),
            str(r.adopted),
            str(r.duplicated),
            str(r.overlapped),
            "-" if r.recovery is None else f"{r.recovery:.2f}",
            "-" if r.bad_counted is None else f"{r.bad_counted:.0f}",
            "-" if r.effects is None else str(r.effects),
            str(r.restarts),
            r.note,
        )
    return t
