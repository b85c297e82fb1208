"""How large a message may be: the one place the wire's size bounds are stated.

Every number here is a promise to a broker or a peer, so each is used where it
is kept, never written again:

- :data:`MAX_MESSAGE_BYTES` is the largest payload of any message. It is
  Mosquitto's ``message_size_limit`` in every configuration we generate
  (``broker.local``, ``deploy/mosquitto.conf``), so the broker drops a larger
  publish before anyone reads it; the codec refuses a larger payload on
  decode (``broker.codec``); and every bus we ship refuses to *send* one
  (``broker.bus.check_size``, called by ``broker.mqtt`` and ``broker.memory``), so our
  clients fail at once with one line instead of waiting for an answer that
  cannot come. It is also the scheduler's default bound on a request, and the
  highest it accepts (its ``max_request_bytes`` may only be lower): the two
  agree, and a request between the scheduler's bound and this one is answered
  with an ``ErrorReply`` of code ``too_large``. (The check and its error are
  ``broker.bus``'s: this module holds numbers only, so the sans-I/O scheduler
  reads them without importing a transport.)
- :data:`MAX_PACKET_BYTES` is Mosquitto's ``max_packet_size``: the payload
  limit plus the longest topic MQTT allows and a packet's headers. A client
  that sends a larger packet is disconnected as soon as its fixed header is
  read, so a 200 MB publish costs the broker no 200 MB. (A payload between the
  two is read and dropped; Mosquitto 2.0.11 with our ``max_queued_messages 0``
  then closes its sender's connection as well.)
- :data:`MAX_REPLY_BYTES` bounds a page of the scheduler's ``StatusReply``:
  the scheduler stops adding rows before it and says where to go on (a
  cursor), so no queue, however long, makes a status too large to send.

The embedded broker (amqtt 0.12) has no payload limit of its own: it reads
and forwards a publish of any size. Beside it the limit is kept by our side
only (every bus refuses to send past it, every receiver refuses to decode
past it); a foreign client on an embedded broker can still make it allocate
what it sends, which is one reason ``accordion up`` prefers Mosquitto.
"""

from __future__ import annotations

from typing import Final

#: The largest payload of any message (16 MiB): see the module's docstring.
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
#: Mosquitto's ``max_packet_size``: the payload, a topic of MQTT's longest (65,535
#: bytes and its length) and the fixed and variable headers (at most 7 bytes).
MAX_PACKET_BYTES: Final = MAX_MESSAGE_BYTES + 2 + 0xFFFF + 7
#: The largest page of a ``StatusReply`` (1 MiB, a few thousand jobs).
MAX_REPLY_BYTES: Final = 1024 * 1024
#: The most bytes one rank of an MPI-like job exchanges per iteration: a part sends
#: them in one message with a short header, so they stay a mebibyte below the limit.
MAX_MPI_MESSAGE_BYTES: Final = MAX_MESSAGE_BYTES - 1024 * 1024
