"""The agent's pool of relay logins (one per relayed job process), on the session Mosquitto."""

from __future__ import annotations

import pytest

from broker.bus import BusError
from broker.mqtt import MqttSettings
from nodeagent.relay_logins import RelayLogins, relay_login
from tests.brokers import BrokerEndpoint


def test_a_pool_needs_the_agents_login() -> None:
    with pytest.raises(ValueError, match="login"):
        RelayLogins(MqttSettings(), 2)
    with pytest.raises(ValueError, match="size"):
        RelayLogins(MqttSettings(username="agent-n1", password="pw"), 0)


async def test_each_process_borrows_a_login_and_gives_it_back(mosquitto: BrokerEndpoint) -> None:
    settings = MqttSettings(mosquitto.host, mosquitto.port, username="agent-n1", password="pw")
    pool = RelayLogins(settings, 2)
    async with pool.connect("job-a") as a, pool.connect("job-b") as b:
        assert {a.client_id, b.client_id} == {relay_login("agent-n1", 1), "agent-n1~j2"}
        assert pool.free == 0
        with pytest.raises(BusError, match="in use"):
            async with pool.connect("job-c"):
                pass
    assert pool.free == 2
