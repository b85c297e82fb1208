"""The header of an SWF file: its leading ``; Key: value`` comment block.

Parsed into :class:`SwfHeader` (a read-only mapping with typed properties for
the keys the archive defines) and written back line for line; see
``workload.swf`` for the format as a whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from workload.swf_record import SwfError

_LABEL = re.compile(r"([A-Za-z][A-Za-z0-9_-]*):(.*)\Z")
_LEADING_INT = re.compile(r"\s*([+-]?\d+)")
_QUEUE_LINE = re.compile(r"\s*(-?\d+)\s*(.*)\Z", re.DOTALL)


@dataclass(frozen=True, slots=True)
class SwfHeader(Mapping[str, str]):
    """The leading ``; Key: value`` comments of an SWF file.

    As a mapping it gives each key's first value as raw text (``"338 (batch
    partition; 512 total)"``); ``values(key)`` gives every value of a repeated
    key (``Queue``, ``Note``, ``Information``). A value continued on indented
    comment lines has them joined with newlines. ``lines`` keeps the comment
    lines verbatim so that a header can be written back unchanged. The typed
    properties return ``None`` when the key is absent and raise ``SwfError``
    when it is present but does not start with a number.
    """

    entries: tuple[tuple[str, str], ...] = ()
    lines: tuple[str, ...] = ()
    source: str = field(default="<header>", compare=False)
    _first: dict[str, str] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.entries and not self.lines:
            object.__setattr__(self, "lines", tuple(_header_lines(self.entries)))
        first: dict[str, str] = {}
        for key, value in self.entries:
            first.setdefault(key, value)
        object.__setattr__(self, "_first", first)

    @classmethod
    def parse(cls, lines: Iterable[str], source: str = "<header>") -> SwfHeader:
        """Build a header from comment lines (each starting with ``;``; others are ignored).

        A label line is ``;`` plus at most one space, then ``Key:``. A line
        indented further, or without a label, continues the previous value
        until an empty ``;`` line.
        """
        raw: list[str] = []
        entries: list[tuple[str, list[str]]] = []
        open_entry = False
        for given in lines:
            line = given.rstrip("\r\n")
            if not line.startswith(";"):
                continue
            raw.append(line)
            text = line[1:]
            stripped = text.strip()
            if not stripped:
                open_entry = False
                continue
            indent = len(text) - len(text.lstrip())
            match = _LABEL.match(stripped) if indent <= 1 else None
            if match is not None:
                entries.append((match.group(1), [match.group(2).strip()]))
                open_entry = True
            elif open_entry:
                entries[-1][1].append(stripped)
        joined = tuple((key, "\n".join(v for v in parts if v)) for key, parts in entries)
        return cls(entries=joined, lines=tuple(raw), source=source)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, str]) -> SwfHeader:
        """A header of ``mapping``'s items in order, ``lines`` as ``write_swf`` writes them."""
        if isinstance(mapping, SwfHeader):
            return mapping
        return cls(entries=tuple((str(k), str(v)) for k, v in mapping.items()))

    # Mapping protocol: first value per key, keys in order of first appearance.
    def __getitem__(self, key: str) -> str:
        return self._first[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._first)

    def __len__(self) -> int:
        return len(self._first)

    def values_of(self, key: str) -> tuple[str, ...]:
        """Every value of ``key``, in file order (empty if absent)."""
        return tuple(v for k, v in self.entries if k == key)

    def int_value(self, key: str) -> int | None:
        """The integer a value starts with (``"338 (batch ...)"`` -> 338), ``None`` if absent."""
        value = self._first.get(key)
        if value is None:
            return None
        match = _LEADING_INT.match(value)
        if match is None:
            raise SwfError(f"header {key}: expected a number, got {value!r}", source=self.source)
        return int(match.group(1))

    @property
    def version(self) -> str | None:
        return self._first.get("Version")

    @property
    def computer(self) -> str | None:
        return self._first.get("Computer")

    @property
    def installation(self) -> str | None:
        return self._first.get("Installation")

    @property
    def max_procs(self) -> int | None:
        """``MaxProcs``: processors of the machine (absent from some logs)."""
        return self.int_value("MaxProcs")

    @property
    def max_nodes(self) -> int | None:
        """``MaxNodes``: nodes of the machine (an SMP node may hold several processors)."""
        return self.int_value("MaxNodes")

    @property
    def max_jobs(self) -> int | None:
        return self.int_value("MaxJobs")

    @property
    def max_records(self) -> int | None:
        return self.int_value("MaxRecords")

    @property
    def max_queues(self) -> int | None:
        return self.int_value("MaxQueues")

    @property
    def max_partitions(self) -> int | None:
        return self.int_value("MaxPartitions")

    @property
    def unix_start_time(self) -> int | None:
        """``UnixStartTime``: the epoch second that submit time 0 stands for."""
        return self.int_value("UnixStartTime")

    @property
    def time_zone(self) -> int | None:
        """``TimeZone``: offset from UTC in seconds (deprecated by the format)."""
        return self.int_value("TimeZone")

    @property
    def time_zone_string(self) -> str | None:
        """``TimeZoneString``: the log's time zone name, e.g. ``US/Eastern``."""
        return self._first.get("TimeZoneString")

    @property
    def start_time(self) -> str | None:
        return self._first.get("StartTime")

    @property
    def end_time(self) -> str | None:
        return self._first.get("EndTime")

    @property
    def preemption(self) -> str | None:
        return self._first.get("Preemption")

    @property
    def queues(self) -> dict[int, str]:
        """``Queue: <n> <name>`` lines as ``{n: name}`` (lines without a number are skipped)."""
        return self._numbered("Queue")

    @property
    def partitions(self) -> dict[int, str]:
        """``Partition: <n> <name>`` lines as ``{n: name}``."""
        return self._numbered("Partition")

    def _numbered(self, key: str) -> dict[int, str]:
        out: dict[int, str] = {}
        for value in self.values_of(key):
            match = _QUEUE_LINE.match(value)
            if match is not None:
                out[int(match.group(1))] = match.group(2).strip()
        return out


def _header_lines(entries: Iterable[tuple[str, str]]) -> Iterator[str]:
    for key, value in entries:
        if _LABEL.match(f"{key}:") is None:
            raise SwfError(f"header key {key!r} is not a single word")
        first, *more = value.split("\n") if value else [""]
        yield f"; {key}: {first.strip()}".rstrip()
        # Indented past the label, so that reading it back continues this value.
        pad = " " * (len(key) + 3)
        for extra in more:
            if extra.strip():
                yield f";{pad}{extra.strip()}"
