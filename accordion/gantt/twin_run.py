"""A Gantt chart of a twin run, from the files ``simulate --out`` and ``compare`` write.

A run's directory holds ``<policy>.summary.json`` (the machines, the time
base) and ``<policy>.jobs.csv`` (one row per job; its ``segments`` column
says where the job ran over time, see ``twin.report``). Every bar of a
finished run is a run bar; a job whose deadline passed before its end is
marked late. ``window`` keeps the jobs that overlap a span of trace time,
so a chart of a long trace can show a readable slice of it.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accordion.errors import UserError
from accordion.gantt.bars import Bar, Gantt, GanttError, MachineRow, placement_bars
from model.machine import Part

SUMMARY_SUFFIX = ".summary.json"
JOBS_SUFFIX = ".jobs.csv"


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """Trace seconds ``[start, end)``; either side open when None."""

    start: float | None = None
    end: float | None = None

    @classmethod
    def parse(cls, text: str | None) -> TimeWindow:
        """``START:END`` in seconds, either side may be empty (``:86400``)."""
        if text is None:
            return cls()
        lo, sep, hi = text.partition(":")
        if not sep:
            raise UserError(f"--window wants START:END in seconds, got {text!r}")
        try:
            start = float(lo) if lo.strip() else None
            end = float(hi) if hi.strip() else None
        except ValueError:
            raise UserError(f"--window wants START:END in seconds, got {text!r}") from None
        if start is not None and end is not None and end <= start:
            raise UserError(f"--window {text}: the end must come after the start")
        return cls(start, end)

    def overlaps(self, start: float, end: float) -> bool:
        return (self.end is None or start < self.end) and (self.start is None or end > self.start)


def runs_in(directory: Path) -> list[str]:
    """The policies (file stems) with both a summary and a per-job CSV in ``directory``."""
    if not directory.is_dir():
        raise UserError(f"{directory}: not a directory (give a twin run's --out directory)")
    stems = sorted(
        p.name.removesuffix(SUMMARY_SUFFIX) for p in directory.glob("*" + SUMMARY_SUFFIX)
    )
    return [s for s in stems if (directory / f"{s}{JOBS_SUFFIX}").is_file()]


def pick_run(directory: Path, policy: str | None) -> str:
    """The run to draw: ``policy``, or the only one in ``directory``."""
    stems = runs_in(directory)
    if policy is not None:
        stem = policy.replace(":", "+").replace("/", "_")  # as ``write_run`` names its files
        if stem not in stems:
            raise UserError(
                f"{directory}: no run of policy {policy!r} with its per-job CSV "
                f"(runs here: {', '.join(stems) or 'none'})"
            )
        return stem
    if not stems:
        raise UserError(
            f"{directory}: no <policy>{SUMMARY_SUFFIX} with its <policy>{JOBS_SUFFIX} "
            "(write them with `accordion simulate --out` or `accordion compare`)"
        )
    if len(stems) > 1:
        raise UserError(
            f"{directory} holds several runs ({', '.join(stems)}): pick one with --policy"
        )
    return stems[0]


def parse_placements(text: str, where: str) -> list[tuple[float, tuple[Part, ...]]]:
    """The ``segments`` column (``twin.report``) as ``(instant, parts)`` steps."""
    steps: list[tuple[float, tuple[Part, ...]]] = []
    try:
        for step in text.split("|"):
            at, _, parts = step.partition("@")
            steps.append(
                (
                    float(at),
                    tuple(
                        Part(machine, int(cpus))
                        for machine, _, cpus in (p.rpartition(":") for p in parts.split(";"))
                    ),
                )
            )
    except ValueError:
        raise UserError(f"{where}: cannot read segments {text!r}") from None
    return steps


def load_twin_run(
    directory: Path, policy: str | None = None, window: TimeWindow | None = None
) -> Gantt:
    """The chart of one run in ``directory`` (module docstring)."""
    stem = pick_run(directory, policy)
    window = window or TimeWindow()
    summary_path = directory / f"{stem}{SUMMARY_SUFFIX}"
    try:
        summary: dict[str, Any] = json.loads(summary_path.read_text(encoding="utf-8"))
        machines = tuple(
            MachineRow(str(m["id"]), int(m["cpus"])) for m in summary["cluster"]["machines"]
        )
        time_base = str(summary["metrics"].get("time_base", "seconds"))
        name = str(summary["workload"].get("name", stem))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{summary_path}: not a twin run's summary ({exc})") from None
    jobs_path = directory / f"{stem}{JOBS_SUFFIX}"
    bars: list[Bar] = []
    with jobs_path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or "segments" not in reader.fieldnames:
            raise UserError(
                f"{jobs_path}: no 'segments' column (written by an older version): "
                "replay the run again to draw it"
            )
        for line, row in enumerate(reader, start=2):
            where = f"{jobs_path}:{line}"
            try:
                start, end = float(row["start"]), float(row["end"])
                deadline = float(row["deadline"]) if row.get("deadline") else None
            except (KeyError, ValueError):
                raise UserError(f"{where}: a row without its start, end or deadline") from None
            if not window.overlaps(start, end):
                continue
            try:
                bars += placement_bars(
                    row["id"],
                    row["user"],
                    parse_placements(row["segments"], where),
                    end,
                    late=row["deadline_met"] == "false",
                    deadline=deadline,
                )
            except GanttError as exc:
                raise UserError(f"{where}: {exc}") from None
    try:
        return Gantt(
            title=f"{name}, policy {summary.get('policy', stem)}",
            machines=machines,
            bars=tuple(bars),
            time_base=time_base,
            view=(window.start, window.end),
        )
    except GanttError as exc:
        raise UserError(f"{jobs_path}: {exc}") from None
