"""The JSON form of wire values that are stored rather than sent (the journal's specs).

Kept beside the codec so that msgspec is imported only by the ``broker``
package: the scheduler's journal stores a ``JobSpec`` as readable JSON (for
the ``sqlite3`` shell) and reads it back validated, through these two calls.

A stored spec outlives the code that wrote it: :data:`STORED_PROTOCOLS` are
the protocol versions whose stored specs :func:`spec_from_json` reads.
"""

from __future__ import annotations

from typing import Final

import msgspec

from broker.messages import JobSpec
from broker.topics import PROTOCOL_VERSION

#: Protocols 2 and 3 changed messages, not ``JobSpec``: a spec stored by protocol 1 or 2
#: reads as is. (Protocol 3 lowered the MPI-like ``message_bytes`` bound to the wire's
#: limit; a spec past it could never run, as a part's frame could not carry it.)
STORED_PROTOCOLS: Final = frozenset({1, 2, PROTOCOL_VERSION})

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(JobSpec)


class StoredValueError(ValueError):
    """A stored value that no longer decodes (a corrupt or hand-edited row)."""


def spec_to_json(spec: JobSpec) -> str:
    return _encoder.encode(spec).decode()


def spec_from_json(text: str) -> JobSpec:
    try:
        return _decoder.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise StoredValueError(f"stored job spec does not decode: {exc}") from exc
