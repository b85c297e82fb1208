"""Standard Workload Format (SWF) of the Parallel Workloads Archive: read and write.

An SWF file is a block of header comments (``; Key: value``) followed by one line
per job of 18 whitespace-separated numbers, ``-1`` meaning "missing". Comment
lines (``;``) may also appear between jobs and blank lines are allowed; neither
carries a job.

Theory of operation
-------------------
``open_swf`` returns an ``SwfReader``. Nothing is read until asked: ``.header``
reads the leading comment block only, and iterating the reader streams
``SwfRecord`` values one line at a time, so a quarter-million-line trace never
sits in memory. Gzip input is recognised by its magic bytes, whatever the name.

Lines are read as bytes and converted with ``int()``/``float()`` straight from
``bytes.split()``: no decoding, no regular expression, no per-field Python call
beyond the conversion itself. A line that does not convert takes a slow path
that works out which field is wrong and raises ``SwfError`` naming the file and
line (``trace.swf:17: expected 18 fields, got 12``).

``write_swf`` emits the archive's layout: header comment lines, then one
right-aligned line per job, integers without decimals; a ``.gz`` name is
written gzip-compressed (with a zero timestamp so equal content gives equal
bytes).
"""

from __future__ import annotations

import gzip
import io
import math
import os
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from itertools import chain
from pathlib import Path
from types import TracebackType
from typing import Final, Self, TextIO

__all__ = [
    "FIELD_NAMES",
    "FLOAT_FIELDS",
    "INT_FIELDS",
    "MISSING",
    "STATUS_CANCELLED",
    "STATUS_COMPLETED",
    "STATUS_FAILED",
    "SwfError",
    "SwfHeader",
    "SwfReader",
    "SwfRecord",
    "format_record",
    "open_swf",
    "parse_record",
    "read_header",
    "read_swf",
    "write_swf",
]

MISSING: Final = -1
"""The SWF value of a field the log does not know."""

# Field 11 (status) per the SWF definition. 2, 3 and 4 mark the partial
# executions of a checkpointed or swapped job, whose summary line also exists.
STATUS_FAILED: Final = 0
STATUS_COMPLETED: Final = 1
STATUS_CANCELLED: Final = 5

_GZIP_MAGIC: Final = b"\x1f\x8b"


class SwfError(ValueError):
    """An SWF file (or header value, or record) that cannot be read or written.

    ``source`` is the file name (or ``<stream>``) and ``line`` the 1-based line
    number when the fault is on one line; both are already in the message.
    """

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None):
        where = source if line is None or source is None else f"{source}:{line}"
        super().__init__(f"{where}: {message}" if where else message)
        self.source = source
        self.line = line


@dataclass(frozen=True, slots=True)
class SwfRecord:
    """One job line: the 18 SWF fields in file order; ``-1`` means missing.

    Times are seconds, memory is KB per processor (as in the archive). Fields
    that the format allows to be fractional are floats, the rest are ints.
    """

    job_number: int
    submit_time: float
    wait_time: float
    run_time: float
    allocated_procs: int
    avg_cpu_time: float
    used_memory: float
    requested_procs: int
    requested_time: float
    requested_memory: float
    status: int
    user_id: int
    group_id: int
    executable: int
    queue: int
    partition: int
    preceding_job: int
    think_time: float


FIELD_NAMES: Final[tuple[str, ...]] = tuple(f.name for f in fields(SwfRecord))
"""The 18 field names in file order."""
FLOAT_FIELDS: Final = frozenset(
    {
        "submit_time",
        "wait_time",
        "run_time",
        "avg_cpu_time",
        "used_memory",
        "requested_time",
        "requested_memory",
        "think_time",
    }
)
"""Fields that may be fractional; the others must be integers."""
INT_FIELDS: Final = frozenset(FIELD_NAMES) - FLOAT_FIELDS
_NFIELDS: Final = len(FIELD_NAMES)
_IS_FLOAT: Final = tuple(name in FLOAT_FIELDS for name in FIELD_NAMES)

# A frozen dataclass's __init__ goes through object.__setattr__ once per field,
# about twice the cost of setting the slots directly, and the largest single
# cost of reading a trace. The reader therefore fills the slot descriptors
# itself: the same object, just as immutable once built.
_new_record = object.__new__
_SETTERS: Final = tuple(getattr(SwfRecord, name).__set__ for name in FIELD_NAMES)


def _field_error(name: str, index: int, token: bytes | str, why: str) -> str:
    text = token.decode("ascii", "replace") if isinstance(token, bytes) else token
    return f"field {index + 1} ({name}) {why}, got {text!r}"


def _parse_slow(tokens: Sequence[bytes | str]) -> SwfRecord:
    """Convert one line's tokens field by field, naming the first bad one.

    Also the lenient path: an integer field written as ``12.0`` is accepted.
    Raises ``ValueError`` with a message that names the field.
    """
    if len(tokens) != _NFIELDS:
        raise ValueError(f"expected {_NFIELDS} fields, got {len(tokens)}")
    values: list[int | float] = []
    for index, (name, token, is_float) in enumerate(
        zip(FIELD_NAMES, tokens, _IS_FLOAT, strict=True)
    ):
        if not is_float:
            try:
                values.append(int(token))
                continue
            except ValueError:
                pass  # maybe written with decimals; judged as a float below
        try:
            number = float(token)
        except ValueError:
            raise ValueError(_field_error(name, index, token, "is not a number")) from None
        if not math.isfinite(number):
            raise ValueError(_field_error(name, index, token, "is not a finite number"))
        if is_float:
            values.append(number)
        elif number.is_integer():
            values.append(int(number))
        else:
            raise ValueError(_field_error(name, index, token, "must be an integer"))
    return SwfRecord(*values)  # type: ignore[arg-type]  # types checked just above


def parse_record(line: bytes | str) -> SwfRecord:
    """Parse one job line (no comment, not blank). Raises ``ValueError`` naming the field."""
    tokens = line.split()
    return _parse_slow(tokens)


def _records(
    lines: Iterator[bytes], source: str, position: list[int], first: bytes | None
) -> Iterator[SwfRecord]:
    """Stream records from byte lines; ``first`` is an already-read line.

    ``position[0]`` holds the number of lines read so far on entry and the
    number of the line of the record last yielded afterwards (a one-item list
    so the reader can show it without an extra generator layer per record).
    """
    lineno = position[0]
    to_int = int
    to_float = float
    isfinite = math.isfinite
    new = _new_record
    cls = SwfRecord
    (s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15, s16, s17) = _SETTERS
    if first is not None:
        lines = chain((first,), lines)
        lineno -= 1
    for line in lines:
        lineno += 1
        tokens = line.split()
        if not tokens or tokens[0][:1] == b";":
            continue
        try:
            (a, b, c, d, e, f, g, h, i, j, k, l_, m, n, o, p, q, r) = tokens
            submit = to_float(b)
            wait = to_float(c)
            run = to_float(d)
            avg_cpu = to_float(f)
            used_mem = to_float(g)
            req_time = to_float(i)
            req_mem = to_float(j)
            think = to_float(r)
            # One check for all eight: nan or inf in any of them makes the sum
            # non-finite (a finite overflow only sends the line to the slow path).
            if not isfinite(submit + wait + run + avg_cpu + used_mem + req_time + req_mem + think):
                raise ValueError
            rec = new(cls)
            s0(rec, to_int(a))
            s1(rec, submit)
            s2(rec, wait)
            s3(rec, run)
            s4(rec, to_int(e))
            s5(rec, avg_cpu)
            s6(rec, used_mem)
            s7(rec, to_int(h))
            s8(rec, req_time)
            s9(rec, req_mem)
            s10(rec, to_int(k))
            s11(rec, to_int(l_))
            s12(rec, to_int(m))
            s13(rec, to_int(n))
            s14(rec, to_int(o))
            s15(rec, to_int(p))
            s16(rec, to_int(q))
            s17(rec, think)
        except ValueError:
            try:
                rec = _parse_slow(tokens)
            except ValueError as exc:
                raise SwfError(str(exc), source=source, line=lineno) from None
        position[0] = lineno
        yield rec


# ---------------------------------------------------------------------------
# header


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


# ---------------------------------------------------------------------------
# reading


class SwfReader:
    """An open SWF file: ``.header`` and, once, an iteration of its records.

    Use as a context manager (or call ``close``). The header is read on first
    access of ``.header`` or when iteration starts; the records stream one line
    at a time and can be iterated once. ``line`` is the number of the line last
    read (for messages of callers that reject a record).
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.name = os.fspath(path)
        try:
            self._raw = open(self.path, "rb")  # noqa: SIM115  # closed by close()
        except OSError as exc:
            raise SwfError(f"cannot open: {exc.strerror or exc}", source=self.name) from exc
        self._stream: io.BufferedIOBase = self._raw
        try:
            if self._raw.peek(2)[:2] == _GZIP_MAGIC:
                # GzipFile.readline is Python code; a C buffer on top halves the cost.
                gz = gzip.GzipFile(fileobj=self._raw, mode="rb")
                self._stream = io.BufferedReader(gz, buffer_size=1 << 16)
        except OSError as exc:
            self._raw.close()
            raise SwfError(f"cannot read: {exc}", source=self.name) from exc
        self._header: SwfHeader | None = None
        self._pending: bytes | None = None
        self._started = False
        self._position = [0]  # lines read so far; see _records

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._stream is not self._raw:
            self._stream.close()
        self._raw.close()

    @property
    def header(self) -> SwfHeader:
        """The leading comment block, read on first use."""
        if self._header is None:
            self._header = self._read_header()
        return self._header

    def _read_header(self) -> SwfHeader:
        comments: list[str] = []
        with self._reading():
            while raw_line := self._stream.readline():
                self._position[0] += 1
                stripped = raw_line.strip()
                if not stripped:
                    continue
                if stripped[:1] != b";":
                    self._pending = raw_line
                    break
                comments.append(stripped.decode("utf-8", "replace"))
        return SwfHeader.parse(comments, source=self.name)

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """Turn a damaged file (truncated or corrupt gzip, I/O error) into an ``SwfError``."""
        try:
            yield
        except (OSError, EOFError, zlib.error) as exc:
            raise SwfError(f"cannot read: {exc}", source=self.name, line=self.line + 1) from exc

    @property
    def line(self) -> int:
        """Number of the line last read: the current record's while iterating."""
        return self._position[0]

    def __iter__(self) -> Iterator[SwfRecord]:
        if self._started:
            raise RuntimeError(f"{self.name}: records can be iterated once; open the file again")
        self._started = True
        return self._iterate()

    def _iterate(self) -> Iterator[SwfRecord]:
        _ = self.header  # consumes the leading comments, keeps the first job line
        pending, self._pending = self._pending, None
        with self._reading():
            yield from _records(iter(self._stream), self.name, self._position, pending)


def open_swf(path: str | os.PathLike[str]) -> SwfReader:
    """Open an SWF file (plain or gzip, told apart by content) for streaming."""
    return SwfReader(path)


def read_header(path: str | os.PathLike[str]) -> SwfHeader:
    """The header of an SWF file, reading no further than its first job line."""
    with open_swf(path) as reader:
        return reader.header


def read_swf(path: str | os.PathLike[str]) -> tuple[SwfHeader, list[SwfRecord]]:
    """Header and all records of a file, in file order (small files; large ones: stream)."""
    with open_swf(path) as reader:
        return reader.header, list(reader)


# ---------------------------------------------------------------------------
# writing

# Column widths close to the archive's own files; wider values just widen the line.
_WIDTHS: Final = (6, 9, 7, 7, 5, 8, 6, 5, 7, 6, 2, 4, 4, 4, 3, 3, 5, 5)
_LINE_FORMAT: Final = " ".join(f"{{:>{w}}}" for w in _WIDTHS) + "\n"


def _format_number(name: str, value: float, job: int | str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, float):
        raise SwfError(f"job {job}: field {name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise SwfError(f"job {job}: field {name} must be finite, got {value!r}")
    if value.is_integer():
        return str(int(value))
    if name not in FLOAT_FIELDS:
        raise SwfError(f"job {job}: field {name} must be an integer, got {value!r}")
    # repr is the shortest text that reads back as the same float.
    return repr(value)


def format_record(record: SwfRecord) -> str:
    """One record as an archive-style line (with its newline)."""
    job = record.job_number
    return _LINE_FORMAT.format(
        *(_format_number(name, getattr(record, name), job) for name in FIELD_NAMES)
    )


def write_swf(
    dest: str | os.PathLike[str] | TextIO,
    records: Iterable[SwfRecord],
    header: Mapping[str, str] | None = None,
) -> int:
    """Write ``header`` (``; Key: value`` lines) and ``records``; return the record count.

    ``dest`` is a path (a name ending in ``.gz`` is gzip-compressed) or an open
    text stream, which is written to and left open. An ``SwfHeader`` is
    written back line for line (continuations, repeated keys and bare comment
    lines included); another mapping gives one line per item, a value's further
    lines becoming indented continuation lines.
    """
    if isinstance(dest, (str, os.PathLike)):
        path = Path(dest)
        if path.name.endswith(".gz"):
            with (
                open(path, "wb") as raw,
                gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz,
                io.TextIOWrapper(gz, encoding="utf-8", newline="\n") as text,
            ):
                return _write(text, records, header)
        with open(path, "w", encoding="utf-8", newline="\n") as text:
            return _write(text, records, header)
    return _write(dest, records, header)


def _write(out: TextIO, records: Iterable[SwfRecord], header: Mapping[str, str] | None) -> int:
    if header is not None:
        lines = SwfHeader.from_mapping(header).lines
        for line in lines:
            out.write(line + "\n")
    count = 0
    for record in records:
        out.write(format_record(record))
        count += 1
    return count
