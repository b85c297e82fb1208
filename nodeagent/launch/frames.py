"""The pipe's wire: the frames a job process and its agent exchange.

Part of the launch contract (``nodeagent.launch.contract``): the job process
writes these frames and reads them (``nodeagent.job.pipe_bus``,
``nodeagent.job.rejoin``), its agent relays them (``nodeagent.launch.pipe``,
``nodeagent.launch.relay``) and welcomes a rejoining job with them
(``nodeagent.survival.adoption``).

Frame: ``op`` (1 byte: ``P`` publish, ``S`` subscribe, ``D`` deliver; ``H``,
``W`` and ``X`` for rejoining, see :data:`HELLO`), a
retain flag (1 byte), the topic length (2 bytes, MQTT's bound) and the
payload length (4 bytes), big-endian, then the topic (UTF-8) and the payload.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

from broker.bus import BusError
from broker.limits import MAX_MESSAGE_BYTES

_HEADER = struct.Struct("!cBHI")
PUBLISH, SUBSCRIBE, DELIVER = b"P", b"S", b"D"
#: Rejoining (``nodeagent.job.rejoin``): a job's ``HELLO`` (topic: its part's key) on its
#: agent's relay socket, the agent's ``WELCOME``; and the job's last frame, ``EXIT``
#: (payload: its exit code in ASCII), which tells an agent that did not fork it.
HELLO, WELCOME, EXIT = b"H", b"W", b"X"
OPS = (PUBLISH, SUBSCRIBE, DELIVER, HELLO, WELCOME, EXIT)
MAX_PAYLOAD = MAX_MESSAGE_BYTES
"""The wire's limit (``broker.limits``): a frame carries one message of the protocol."""


class PipeError(BusError):
    """A frame that cannot be read (truncated, unknown op, absurd length)."""


@dataclass(frozen=True, slots=True)
class Frame:
    op: bytes
    topic: str
    payload: bytes = b""
    retain: bool = False

    def pack(self) -> bytes:
        topic = self.topic.encode()
        if len(topic) > 0xFFFF or len(self.payload) > MAX_PAYLOAD:
            raise PipeError(f"frame too large for topic {self.topic!r}")
        head = _HEADER.pack(self.op, int(self.retain), len(topic), len(self.payload))
        return head + topic + self.payload


async def read_frame(reader: asyncio.StreamReader) -> Frame | None:
    """The next frame, or None at a clean end of stream."""
    try:
        head = await reader.readexactly(_HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise PipeError("stream ended inside a frame header") from exc
        return None
    op, retain, topic_len, payload_len = _HEADER.unpack(head)
    if op not in OPS or retain > 1 or payload_len > MAX_PAYLOAD:
        raise PipeError(f"bad frame header {head!r}")
    try:
        body = await reader.readexactly(topic_len + payload_len)
    except asyncio.IncompleteReadError as exc:
        raise PipeError("stream ended inside a frame") from exc
    try:
        topic = body[:topic_len].decode()
    except UnicodeDecodeError as exc:
        raise PipeError("frame topic is not UTF-8") from exc
    return Frame(op, topic, body[topic_len:], bool(retain))
