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

Layout. This module is the reader and the one import for callers; the rest
lives beside it: ``workload.swf_record`` (the record, its fields and
``SwfError``), ``workload.swf_header`` (the header block) and
``workload.swf_writer`` (writing).
"""

from __future__ import annotations

import gzip
import io
import math
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from workload.swf_header import SwfHeader
from workload.swf_record import (
    FIELD_NAMES,
    FLOAT_FIELDS,
    INT_FIELDS,
    MISSING,
    SETTERS,
    STATUS_CANCELLED,
    STATUS_COMPLETED,
    STATUS_FAILED,
    SwfError,
    SwfRecord,
    new_record,
    parse_record,
    parse_slow,
)
from workload.swf_writer import format_record, write_swf

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

_GZIP_MAGIC: Final = b"\x1f\x8b"


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
    new = new_record
    cls = SwfRecord
    (s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15, s16, s17) = SETTERS
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
                rec = parse_slow(tokens)
            except ValueError as exc:
                raise SwfError(str(exc), source=source, line=lineno) from None
        position[0] = lineno
        yield rec


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
