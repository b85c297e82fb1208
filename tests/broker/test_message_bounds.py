"""The wire's size bound: stated once, in every Mosquitto configuration, kept by every bus.

The real-broker tests use the session Mosquitto, whose configuration is the
one ``accordion up`` generates (``broker.local.mosquitto_config``).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from bench.faults.raw_mqtt import publish_raw
from broker.bus import MessageTooLargeError
from broker.codec import WireError, decode, encode, peek_reply_to
from broker.limits import MAX_MESSAGE_BYTES, MAX_PACKET_BYTES
from broker.local import mosquitto_config
from broker.memory import MemoryBroker
from broker.messages import JobSpec, SubmitJobs
from broker.mqtt import MqttBus, MqttSettings
from tests.brokers import BrokerEndpoint

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _options(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        match = re.match(r"^(message_size_limit|max_packet_size)\s+(\d+)\s*$", line)
        if match:
            found[match[1]] = match[2]
    return found


@pytest.mark.parametrize(
    "text",
    [
        mosquitto_config(host="127.0.0.1", port=1883),
        (DEPLOY / "mosquitto.conf").read_text(),
    ],
    ids=["generated", "testbed"],
)
def test_every_mosquitto_configuration_states_the_wires_bounds(text: str) -> None:
    assert _options(text) == {
        "message_size_limit": str(MAX_MESSAGE_BYTES),
        "max_packet_size": str(MAX_PACKET_BYTES),
    }


async def test_the_memory_bus_refuses_what_no_broker_of_ours_would_take() -> None:
    broker = MemoryBroker()
    async with broker.client("sub") as sub, broker.client("pub") as pub:
        await sub.subscribe("t")
        await pub.publish("t", b"x" * MAX_MESSAGE_BYTES)
        with pytest.raises(MessageTooLargeError) as caught:
            await pub.publish("t", b"x" * (MAX_MESSAGE_BYTES + 1))
        assert f"{MAX_MESSAGE_BYTES:,}" in str(caught.value)
        assert "\n" not in str(caught.value)
        got = await anext(sub.deliveries())
        assert len(got.payload) == MAX_MESSAGE_BYTES
        assert broker.published == 1


def test_an_oversized_payload_is_refused_on_decode_but_its_sender_can_be_answered() -> None:
    jobs = tuple(
        JobSpec(id=f"{i:06}" + "x" * 100, procs=1, walltime=1.0, work=1.0) for i in range(130_000)
    )
    payload = encode(SubmitJobs(request_id="big", reply_to="cli-7", jobs=jobs))
    assert len(payload) > MAX_MESSAGE_BYTES
    with pytest.raises(WireError) as caught:
        decode(payload)
    assert caught.value.reason == "too_large"
    assert peek_reply_to(payload) == ("big", "cli-7")


@pytest.mark.integration
async def test_mqtt_bus_refuses_to_send_past_the_limit(mosquitto: BrokerEndpoint) -> None:
    settings = MqttSettings(host=mosquitto.host, port=mosquitto.port)
    async with MqttBus(settings, "bounds-sender") as bus:
        with pytest.raises(MessageTooLargeError, match="message_size_limit"):
            await bus.publish("bounds/t", b"x" * (MAX_MESSAGE_BYTES + 1))
        assert bus.connected  # refused here, not by the broker


@pytest.mark.integration
async def test_mosquitto_drops_a_payload_past_the_limit_and_cuts_off_a_huge_packet(
    mosquitto: BrokerEndpoint,
) -> None:
    settings = MqttSettings(host=mosquitto.host, port=mosquitto.port)
    async with MqttBus(settings, "bounds-listener") as listener:
        await listener.subscribe("bounds/raw/#", qos=0)
        over = await asyncio.to_thread(
            publish_raw, mosquitto.host, mosquitto.port, "bounds/raw/over", MAX_MESSAGE_BYTES + 1
        )
        # Past message_size_limit but within the packet bound: read, then dropped (and, on
        # Mosquitto 2.0.11 with max_queued_messages 0, its sender disconnected too).
        assert over.sent == MAX_MESSAGE_BYTES + 1
        huge = await asyncio.to_thread(
            publish_raw, mosquitto.host, mosquitto.port, "bounds/raw/huge", 200_000_000
        )
        # Past max_packet_size: the connection is closed once its header is read.
        assert huge.cut_off
        assert huge.sent < 200_000_000
        at_limit = await asyncio.to_thread(
            publish_raw, mosquitto.host, mosquitto.port, "bounds/raw/fits", MAX_MESSAGE_BYTES
        )
        assert not at_limit.cut_off
        got = await anext(listener.deliveries())
        # The first (and only) message through is the one within the limit.
        assert (got.topic, len(got.payload)) == ("bounds/raw/fits", MAX_MESSAGE_BYTES)
