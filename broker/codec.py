"""The one place bytes become messages: msgpack via msgspec, validated on decode.

A payload that is not msgpack, names an unknown ``kind``, has a field of the
wrong type, an unknown field or a value outside its constraints raises
:class:`WireError` with msgspec's description of what was wrong (e.g.
``Expected `int` >= 1, got `0` - at `$.jobs[0].procs```). Receivers count it,
answer it where there is someone to answer, and go on.
"""

from __future__ import annotations

import msgspec

from broker.messages import AnyMessage, Message

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[AnyMessage] = msgspec.msgpack.Decoder(AnyMessage)
_raw = msgspec.msgpack.Decoder()


class WireError(ValueError):
    """A payload that is not a valid message of this protocol."""


def encode(message: Message) -> bytes:
    return _encoder.encode(message)


def decode(payload: bytes) -> AnyMessage:
    try:
        return _decoder.decode(payload)
    except msgspec.ValidationError as exc:
        raise WireError(f"invalid message: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise WireError(f"not a msgpack message: {exc}") from exc


def peek_reply_to(payload: bytes) -> tuple[str | None, str | None]:
    """``(request_id, reply_to)`` of a payload that failed to decode, if it has them.

    Lets the scheduler answer a malformed request: the envelope may be readable
    even when the body is not.
    """
    try:
        raw = _raw.decode(payload)
    except msgspec.DecodeError:
        return None, None
    if not isinstance(raw, dict):
        return None, None
    rid, reply_to = raw.get("request_id"), raw.get("reply_to")
    return (
        rid if isinstance(rid, str) else None,
        reply_to if isinstance(reply_to, str) and reply_to else None,
    )
