"""One SWF job line: the 18 fields, their types, and the parser of one line.

The record half of the Standard Workload Format (``workload.swf`` has the
format's description, the streaming reader and the re-exports): the
:class:`SwfRecord` value with its field names and types, :class:`SwfError`
(every SWF fault, named by file and line), and :func:`parse_record`, the
slow but precise parser that names the first bad field. The reader's fast
path fills records through the slot setters kept here (``SETTERS``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Final

MISSING: Final = -1
"""The SWF value of a field the log does not know."""

# Field 11 (status) per the SWF definition. 2, 3 and 4 mark the partial
# executions of a checkpointed or swapped job, whose summary line also exists.
STATUS_FAILED: Final = 0
STATUS_COMPLETED: Final = 1
STATUS_CANCELLED: Final = 5


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
new_record = object.__new__
SETTERS: Final = tuple(getattr(SwfRecord, name).__set__ for name in FIELD_NAMES)


def _field_error(name: str, index: int, token: bytes | str, why: str) -> str:
    text = token.decode("ascii", "replace") if isinstance(token, bytes) else token
    return f"field {index + 1} ({name}) {why}, got {text!r}"


def parse_slow(tokens: Sequence[bytes | str]) -> SwfRecord:
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
    return parse_slow(tokens)
