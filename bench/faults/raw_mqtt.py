"""A client that is not ours: MQTT 3.1.1 packets written by hand on a plain socket.

Our buses refuse to send a message past the wire's limit, so a bench row or a
test of what the *broker* does with one needs a client that does not:
:func:`publish_raw` connects, announces a PUBLISH of ``size`` payload bytes
and streams them until it has sent them all or the broker closed the
connection (the fault bench's ``oversized`` row; ``tests/broker`` and
``tests/integration`` use it too).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _text(s: str) -> bytes:
    data = s.encode()
    return struct.pack("!H", len(data)) + data


def _connect_packet(client_id: str, username: str | None, password: str | None) -> bytes:
    flags = 0x02  # clean session
    payload = _text(client_id)
    if username is not None:
        flags |= 0x80
        payload += _text(username)
    if password is not None:
        flags |= 0x40
        payload += _text(password)
    body = _text("MQTT") + bytes([4, flags]) + struct.pack("!H", 60) + payload
    return b"\x10" + _varint(len(body)) + body


@dataclass(frozen=True, slots=True)
class RawPublish:
    """What became of a hand-written publish."""

    #: Payload bytes the socket took before the broker closed it (all of them: not closed).
    sent: int
    #: The broker closed the connection before the payload was all sent.
    cut_off: bool


def publish_raw(
    host: str,
    port: int,
    topic: str,
    size: int,
    *,
    client_id: str = "raw-client",
    username: str | None = None,
    password: str | None = None,
    chunk: int = 1 << 20,
) -> RawPublish:
    """Publish ``size`` bytes of ``x`` on ``topic`` at QoS 0, as a careless client would."""
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(_connect_packet(client_id, username, password))
        connack = sock.recv(4)
        if connack[:2] != b"\x20\x02" or connack[3] != 0:
            raise ConnectionError(f"the broker refused the connection: {connack!r}")
        header = b"\x30" + _varint(2 + len(topic.encode()) + size) + _text(topic)
        sock.sendall(header)
        block = b"x" * min(chunk, size)
        sent = 0
        try:
            while sent < size:
                n = min(len(block), size - sent)
                sock.sendall(block[:n])
                sent += n
            # A closed connection reads as EOF (or a reset) once the broker has read it all.
            sock.sendall(b"\xc0\x00")  # PINGREQ
            answer = sock.recv(2)
        except (BrokenPipeError, ConnectionResetError):
            return RawPublish(sent, cut_off=True)
        return RawPublish(sent, cut_off=answer == b"")
