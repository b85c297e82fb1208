"""Writing SWF: records as the archive lays them out, under a header.

``write_swf`` emits the header's comment lines, then one right-aligned line
per job, integers without decimals; a ``.gz`` name is written
gzip-compressed with a zero timestamp, so equal content gives equal bytes.
"""

from __future__ import annotations

import gzip
import io
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final, TextIO

from workload.swf_header import SwfHeader
from workload.swf_record import FIELD_NAMES, FLOAT_FIELDS, SwfError, SwfRecord

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
