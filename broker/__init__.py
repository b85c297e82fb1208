"""The wire contract of the live runtime, in one place.

``broker.topics`` names every topic under a configurable root,
``broker.messages`` defines one message type per kind with its schema,
``broker.codec`` is the only module that encodes and decodes (msgpack via
msgspec, validated on receipt), and ``broker.bus`` is the small transport
interface with two implementations: ``broker.memory`` (in-process, for fast
tests and the twin) and ``broker.mqtt`` (aiomqtt on a real broker).

The protocol works over MQTT 3.1.1 as well as 5: requests carry their own
correlation id and reply topic in the payload, so the embedded broker needs
no MQTT 5 feature. Nothing here imports the rest of the project.
"""

from broker.codec import WireError, decode, encode
from broker.topics import PROTOCOL_VERSION, Topics

__all__ = ["PROTOCOL_VERSION", "Topics", "WireError", "decode", "encode"]
