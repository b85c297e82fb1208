"""The one place bytes become messages: msgpack via msgspec, validated on decode.

Decoding raises :class:`WireError` and nothing else, whatever the bytes: not
msgpack, invalid UTF-8 in a string, nesting deep enough to exhaust msgspec's
recursion limit, a payload past :data:`MAX_PAYLOAD`, an unknown ``kind``, a
field of the wrong type, an unknown field or a value outside its constraints.
The error carries a ``reason`` from the small set :data:`REASONS` (a bounded
metric label) and msgspec's description of what was wrong (e.g. ``Expected
`int` >= 1, got `0` - at `$.jobs[0].procs```). Receivers count it by reason,
answer it where there is someone to answer, and go on: no payload ends a
process.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

import msgspec

from broker.limits import MAX_MESSAGE_BYTES
from broker.messages import AnyMessage, Message

#: Larger payloads are refused before msgspec reads them: the wire's limit
#: (``broker.limits``), which the broker keeps too. A submission of 10,000 jobs is
#: about 1.5 MB.
MAX_PAYLOAD: Final = MAX_MESSAGE_BYTES

WireReason = Literal["not_msgpack", "unknown_kind", "invalid", "too_large"]
#: Every value :attr:`WireError.reason` takes.
REASONS: Final[tuple[WireReason, ...]] = get_args(WireReason)

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[AnyMessage] = msgspec.msgpack.Decoder(AnyMessage)


class _Envelope(msgspec.Struct):
    """The correlation fields of any request, each read separately so one bad
    field does not hide the other."""

    request_id: msgspec.Raw = msgspec.Raw(b"")
    reply_to: msgspec.Raw = msgspec.Raw(b"")


_envelope = msgspec.msgpack.Decoder(_Envelope)
_str = msgspec.msgpack.Decoder(str)


class WireError(ValueError):
    """A payload that is not a valid message of this protocol.

    ``reason`` is one of :data:`REASONS`: ``not_msgpack`` (the bytes are not
    msgpack, or hold invalid UTF-8 or absurd nesting), ``unknown_kind`` (no
    message has that ``kind``), ``invalid`` (a known kind with a bad field),
    ``too_large`` (past :data:`MAX_PAYLOAD`).
    """

    def __init__(self, reason: WireReason, detail: str) -> None:
        super().__init__(f"{_WHAT[reason]}: {detail}")
        self.reason: WireReason = reason


_WHAT: Final[dict[WireReason, str]] = {
    "not_msgpack": "not a msgpack message",
    "unknown_kind": "unknown message kind",
    "invalid": "invalid message",
    "too_large": "message too large",
}


def encode(message: Message) -> bytes:
    return _encoder.encode(message)


def encoded_size(value: object) -> int:
    """Bytes ``value`` (a message, or a struct inside one) takes on the wire: what a
    sender that must stay under a bound (a status page) adds up as it goes."""
    return len(_encoder.encode(value))


def decode(payload: bytes) -> AnyMessage:
    """The message in ``payload``; raises :class:`WireError` (only) if there is none."""
    if len(payload) > MAX_PAYLOAD:
        raise WireError("too_large", f"{len(payload)} bytes, the limit is {MAX_PAYLOAD}")
    try:
        return _decoder.decode(payload)
    except msgspec.ValidationError as exc:
        # msgspec names the path of what was wrong; an unknown tag is at ``$.kind``.
        reason: WireReason = "unknown_kind" if str(exc).endswith("at `$.kind`") else "invalid"
        raise WireError(reason, str(exc)) from exc
    except msgspec.DecodeError as exc:
        raise WireError("not_msgpack", str(exc)) from exc
    # msgspec decodes strings itself but lets these two escape on hostile bytes.
    except UnicodeDecodeError as exc:
        raise WireError("not_msgpack", f"a string is not UTF-8 ({exc.reason})") from exc
    except RecursionError as exc:
        raise WireError("not_msgpack", "nested too deeply") from exc


def peek_reply_to(payload: bytes) -> tuple[str | None, str | None]:
    """``(request_id, reply_to)`` of a payload that failed to decode, if it has them.

    Lets the scheduler answer a malformed request: the envelope may be readable
    even when the body is not, or too large to be read (msgspec skips the body
    in one pass without building it). Never raises: what cannot be read is None.
    """
    try:
        envelope = _envelope.decode(payload)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None, None
    reply_to = _peek_str(envelope.reply_to)
    return _peek_str(envelope.request_id), reply_to or None


def _peek_str(raw: msgspec.Raw) -> str | None:
    if not raw:
        return None
    try:
        return _str.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
