"""The MQTT bus over real brokers: Mosquitto and the embedded amqtt, asyncio and uvloop.

The behaviours are the memory bus's (``tests/broker/scenarios.py``), plus what
only a network brings: a Last Will when a process is SIGKILLed, a persistent
session across reconnections, takeover, connection errors, and the QoS 1
request/response round trip, recorded (shown at the end of the run), not
asserted.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from uuid import uuid4

import pytest

from broker.bus import Bus, BusError, Delivery, Will
from broker.codec import decode, encode
from broker.local import free_port
from broker.messages import StatusReply, StatusRequest, StatusTotals
from broker.mqtt import MqttBus, MqttSettings
from broker.topics import Topics
from tests.broker import scenarios
from tests.broker.scenarios import LATENCIES, Inbox
from tests.integration.conftest import BrokerEndpoint

NO_TOTALS = StatusTotals(queued=0, running=0, cpus=0)
ROOT = Path(__file__).resolve().parents[2]
integration = pytest.mark.integration


@pytest.fixture
def prefix() -> str:
    """A topic root and client-id stem of this test alone (the broker is shared)."""
    return f"t-{uuid4().hex[:12]}"


@pytest.fixture
def settings(mqtt_broker: BrokerEndpoint) -> MqttSettings:
    return MqttSettings(mqtt_broker.host, mqtt_broker.port)


@pytest.fixture
def connect(settings: MqttSettings) -> scenarios.Connect:
    def connect(client_id: str, *, will: Will | None = None) -> MqttBus:
        return MqttBus(settings, client_id, will=will)

    return connect


# -- settings (no broker) ----------------------------------------------------------


def test_settings_defaults() -> None:
    s = MqttSettings()
    assert (s.host, s.port, s.protocol) == ("127.0.0.1", 1883, "3.1.1")
    assert s.url == "mqtt://127.0.0.1:1883"


@pytest.mark.parametrize(
    ("url", "host", "port"),
    [
        ("mqtt://broker:1884", "broker", 1884),
        ("mqtt://broker", "broker", 1883),
        ("mqtt://127.0.0.1:18830/", "127.0.0.1", 18830),
        ("mqtt://[::1]:1883", "::1", 1883),
    ],
)
def test_settings_from_url(url: str, host: str, port: int) -> None:
    s = MqttSettings.from_url(url)
    assert (s.host, s.port, s.protocol) == (host, port, "3.1.1")
    assert MqttSettings.from_url(s.url) == s


@pytest.mark.parametrize(
    "url",
    [
        "tcp://broker:1883",
        "broker:1883",
        "mqtt://",
        "mqtt://broker:http",
        "mqtt://broker:70000",
        "mqtt://broker:0",
        "mqtt://broker/topic",
        "mqtt://broker?ca=/etc/ca.pem",
        "mqtts://broker?colour=red",
        "mqtt://broker?x=1",
    ],
)
def test_settings_from_a_bad_url(url: str) -> None:
    with pytest.raises(ValueError, match=r"(?i)mqtt"):
        MqttSettings.from_url(url)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"host": ""},
        {"port": 0},
        {"protocol": "3.1"},
        {"keepalive": 0},
        {"connect_timeout": 0.0},
        {"ack_timeout": -1.0},
    ],
)
def test_settings_refuse_nonsense(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="MQTT"):
        MqttSettings(**kwargs)  # type: ignore[arg-type]


def test_mqtt_bus_is_a_bus() -> None:
    bus: Bus = MqttBus(MqttSettings(), "c")
    assert bus.client_id == "c"
    with pytest.raises(ValueError, match="client id"):
        MqttBus(MqttSettings(), "")


async def test_unreachable_broker_is_a_bus_error_naming_it() -> None:
    port = free_port()
    with pytest.raises(BusError, match=rf"cannot connect to MQTT broker 127\.0\.0\.1:{port}"):
        async with MqttBus(MqttSettings(port=port), "nobody-listens"):
            pass


async def test_calls_on_a_closed_bus_are_bus_errors() -> None:
    bus = MqttBus(MqttSettings(), "never-opened")
    with pytest.raises(BusError, match="not connected"):
        await bus.publish("t", b"x")
    with pytest.raises(BusError, match="not connected"):
        await bus.subscribe("t")


# -- the shared behaviours -----------------------------------------------------------


@integration
async def test_publish_subscribe(connect: scenarios.Connect, prefix: str) -> None:
    await scenarios.publish_subscribe(connect, prefix)


@integration
async def test_a_client_receives_its_own_messages(connect: scenarios.Connect, prefix: str) -> None:
    await scenarios.self_delivery(connect, prefix)


@integration
async def test_wildcard_routing(connect: scenarios.Connect, prefix: str) -> None:
    await scenarios.wildcards(connect, prefix)


@integration
async def test_retained_replay_and_clearing(connect: scenarios.Connect, prefix: str) -> None:
    await scenarios.retained(connect, prefix)


@integration
async def test_per_client_order(connect: scenarios.Connect, prefix: str) -> None:
    await scenarios.order(connect, prefix)


@integration
async def test_concurrent_publishes_keep_call_order(
    connect: scenarios.Connect, prefix: str
) -> None:
    await scenarios.concurrent_publishes_keep_call_order(connect, prefix)


@integration
async def test_clean_close_sends_no_will(connect: scenarios.Connect, prefix: str) -> None:
    await scenarios.clean_close_sends_no_will(connect, prefix)


@integration
async def test_takeover_routes_to_the_new_connection(
    connect: scenarios.Connect, prefix: str
) -> None:
    await scenarios.takeover_routes_to_the_new_connection(connect, prefix)


# -- a process killed without DISCONNECT ---------------------------------------------

CHILD = """\
import asyncio, sys
from broker.bus import Will
from broker.mqtt import MqttBus, MqttSettings

async def main(url: str, client_id: str, topic: str, payload: str, retain: str) -> None:
    will = Will(topic, payload.encode(), retain=retain == "1")
    async with MqttBus(MqttSettings.from_url(url), client_id, will=will):
        print("connected", flush=True)
        await asyncio.Event().wait()

asyncio.run(main(*sys.argv[1:]))
"""


@asynccontextmanager
async def sigkilled_client(
    url: str, client_id: str, will: Will
) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """A client in a child process; the value SIGKILLs it (its socket closes, no DISCONNECT)."""
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    args = [url, client_id, will.topic, will.payload.decode(), "1" if will.retain else "0"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, *args, stdout=asyncio.subprocess.PIPE, env=env
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(30):
            assert await proc.stdout.readline() == b"connected\n"

        async def kill() -> None:
            proc.kill()
            await proc.wait()

        yield kill
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.communicate()


@integration
async def test_last_will_when_the_process_is_killed(
    connect: scenarios.Connect, prefix: str, mqtt_broker: BrokerEndpoint
) -> None:
    def killed(
        client_id: str, will: Will
    ) -> AbstractAsyncContextManager[Callable[[], Awaitable[None]]]:
        return sigkilled_client(mqtt_broker.url, client_id, will)

    await scenarios.will_on_unclean_death(connect, prefix, killed)


# -- sessions and takeover -------------------------------------------------------------


@integration
async def test_persistent_session_keeps_qos1_messages_while_away(
    settings: MqttSettings, prefix: str
) -> None:
    durable = f"{prefix}-durable"
    async with MqttBus(settings, durable, clean_session=False) as bus:
        await bus.subscribe(f"{prefix}/commands", qos=1)
    async with MqttBus(settings, f"{prefix}-pub") as pub:
        for i in range(20):
            await pub.publish(f"{prefix}/commands", str(i).encode(), qos=1)
    try:
        async with MqttBus(settings, durable, clean_session=False) as bus, Inbox(bus) as box:
            got = [await box.next() for _ in range(20)]
        assert [d.payload for d in got] == [str(i).encode() for i in range(20)]
        assert {d.topic for d in got} == {f"{prefix}/commands"}
    finally:
        async with MqttBus(settings, durable, clean_session=True):
            pass  # a clean connection discards the session


@integration
async def test_messages_queued_while_away_are_not_flagged_retained(
    settings: MqttSettings, prefix: str, mqtt_broker: BrokerEndpoint, request: pytest.FixtureRequest
) -> None:
    if mqtt_broker.name == "amqtt":
        request.applymarker(
            pytest.mark.xfail(
                strict=True, reason="amqtt 0.12 delivers a session's queued messages as retained"
            )
        )
    durable = f"{prefix}-durable"
    async with MqttBus(settings, durable, clean_session=False) as bus:
        await bus.subscribe(f"{prefix}/commands", qos=1)
    async with MqttBus(settings, f"{prefix}-pub") as pub:
        await pub.publish(f"{prefix}/commands", b"queued", qos=1)
    try:
        async with MqttBus(settings, durable, clean_session=False) as bus, Inbox(bus) as box:
            assert await box.next() == Delivery(f"{prefix}/commands", b"queued", False)
    finally:
        async with MqttBus(settings, durable, clean_session=True):
            pass


@integration
async def test_takeover_disconnects_the_old_connection(
    settings: MqttSettings, prefix: str, mqtt_broker: BrokerEndpoint, request: pytest.FixtureRequest
) -> None:
    if mqtt_broker.name == "amqtt":
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                reason="amqtt 0.12 leaves the old connection open on takeover (MQTT-3.1.4-2)",
            )
        )
    async with MqttBus(settings, f"{prefix}-dup") as old_bus:
        assert old_bus.connected
        async with MqttBus(settings, f"{prefix}-dup"):
            async with asyncio.timeout(3.0):
                await old_bus.wait_disconnected()
            assert old_bus.disconnected_since is not None


@integration
async def test_mosquitto_publishes_the_old_will_on_takeover(
    mosquitto: BrokerEndpoint, prefix: str
) -> None:
    """A restarted agent reusing its client id makes Mosquitto publish its previous will."""
    settings = MqttSettings(mosquitto.host, mosquitto.port)
    will = Will(f"{prefix}/state", b"lost (old incarnation)", retain=False)
    async with MqttBus(settings, f"{prefix}-watch") as watch, Inbox(watch) as box:
        await watch.subscribe(f"{prefix}/state")
        async with (
            MqttBus(settings, f"{prefix}-agent", will=will),
            MqttBus(settings, f"{prefix}-agent"),
        ):
            assert await box.next() == Delivery(will.topic, will.payload, False)


# -- lifecycle --------------------------------------------------------------------------


@integration
async def test_deliveries_end_when_the_bus_is_closed(settings: MqttSettings, prefix: str) -> None:
    bus = MqttBus(settings, f"{prefix}-c")
    box = Inbox(bus)
    async with bus:
        await bus.subscribe(f"{prefix}/x")
        await box.__aenter__()
        await bus.publish(f"{prefix}/x", b"while open")
        assert (await box.next()).payload == b"while open"  # the drain is iterating
    async with asyncio.timeout(scenarios.WAIT):
        await box.ended.wait()
    assert box.pending() == 0  # ended quietly, no BusError
    await box.__aexit__(None, None, None)


@integration
async def test_bus_is_reusable_but_not_reentrant(settings: MqttSettings, prefix: str) -> None:
    bus = MqttBus(settings, f"{prefix}-c")
    for round_ in range(2):
        async with bus, Inbox(bus) as box:
            with pytest.raises(BusError, match="already connected"):
                await bus.__aenter__()
            await bus.subscribe(f"{prefix}/x")
            await bus.publish(f"{prefix}/x", str(round_).encode())
            assert (await box.next()).payload == str(round_).encode()


@integration
async def test_mqtt5_on_mosquitto(mosquitto: BrokerEndpoint, prefix: str) -> None:
    settings = MqttSettings(mosquitto.host, mosquitto.port, protocol="5")

    def connect(client_id: str, *, will: Will | None = None) -> MqttBus:
        return MqttBus(settings, client_id, will=will)

    await scenarios.retained(connect, prefix)
    durable = f"{prefix}-durable5"
    async with MqttBus(settings, durable, clean_session=False) as bus:
        await bus.subscribe(f"{prefix}/c5")
    async with MqttBus(settings, f"{prefix}-pub") as pub:
        await pub.publish(f"{prefix}/c5", b"while away")
    async with MqttBus(settings, durable, clean_session=False) as bus, Inbox(bus) as box:
        assert (await box.next()).payload == b"while away"
    async with MqttBus(settings, durable):
        pass


# -- request/response ------------------------------------------------------------------

ROUND_TRIPS = 200


@integration
async def test_qos1_request_response(
    connect: scenarios.Connect,
    prefix: str,
    mqtt_broker: BrokerEndpoint,
    request: pytest.FixtureRequest,
    record_property: Callable[[str, object], None],
) -> None:
    """A client asks, a server answers on the client's reply topic; both QoS 1.

    The round trip is recorded, not asserted (wall-clock bounds are flaky): the
    run's summary shows it. With TCP_NODELAY it is about a millisecond here.
    """
    topics = Topics(f"{prefix}/v1")
    client_id = f"{prefix}-client"
    async with (
        connect(f"{prefix}-server") as server,
        connect(client_id) as client,
        Inbox(server) as requests,
        Inbox(client) as replies,
    ):
        await server.subscribe(topics.requests, qos=1)
        await client.subscribe(topics.replies(client_id), qos=1)

        async def serve() -> None:
            while True:
                asked = decode((await requests.next(timeout=3600)).payload)
                assert isinstance(asked, StatusRequest)
                answer = StatusReply(
                    request_id=asked.request_id,
                    now=1.0,
                    machines=(),
                    queue=(),
                    running=(),
                    totals=NO_TOTALS,
                )
                await server.publish(topics.replies(asked.reply_to), encode(answer), qos=1)

        async with asyncio.TaskGroup() as tg:
            serving = tg.create_task(serve(), name="status-server")
            rtts = []
            for i in range(ROUND_TRIPS):
                ask = StatusRequest(request_id=f"r{i}", reply_to=client_id)
                start = time.perf_counter()
                await client.publish(topics.requests, encode(ask), qos=1)
                reply = decode((await replies.next()).payload)
                rtts.append(time.perf_counter() - start)
                assert reply == StatusReply(
                    request_id=f"r{i}", now=1.0, machines=(), queue=(), running=(), totals=NO_TOTALS
                )
            serving.cancel()

    rtts.sort()
    median = statistics.median(rtts) * 1e3
    p90 = rtts[int(0.9 * len(rtts))] * 1e3
    loop = type(asyncio.get_running_loop()).__module__.partition(".")[0]
    line = f"{mqtt_broker.name} on {loop}: median {median:.2f} ms, p90 {p90:.2f} ms"
    record_property("qos1_round_trip_median_ms", round(median, 3))
    record_property("qos1_round_trip_p90_ms", round(p90, 3))
    request.config.stash.setdefault(LATENCIES, []).append(line)
    print(f"QoS 1 request/response round trip ({ROUND_TRIPS}x): {line}")
