"""The compose testbed's logins on a real Mosquitto: deploy/mosquitto.conf as shipped,
with the files ``accordion auth init --compose`` writes (``broker.auth.write_compose_auth``).

Only the paths and ports differ from the container: the listeners bind free
loopback ports, and /run/secrets is this test's directory. Denials are checked
without a clock: after a forged publish, a legitimate one goes to the same
receiver, and Mosquitto routes in order, so anything forged would arrive first.
"""

from __future__ import annotations

import getpass
import re
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest

from broker.auth import AGENT_LOGIN, AuthError, compose_accounts, write_compose_auth
from broker.bus import BusError
from broker.local import free_port
from broker.mqtt import MqttBus
from broker.settings import MqttSettings
from broker.topics import Topics
from tests.broker.scenarios import Inbox
from tests.brokers import MosquittoProcess, start_private_mosquitto

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TOPICS = Topics(f"compose-{uuid4().hex[:6]}/v1")
ACCOUNTS = compose_accounts(["alice"], ["admin"], logins=2)
PASSWORDS = {a.login: a.password for a in ACCOUNTS}


class Broker:
    def __init__(self, broker: MosquittoProcess, internal: int) -> None:
        self.users = broker.port  # the port start_private_mosquitto checks
        self.internal = internal
        self.broker = broker

    def login(self, login: str | None, client_id: str, *, internal: bool) -> MqttBus:
        port = self.internal if internal else self.users
        password = None if login is None else PASSWORDS[login]
        return MqttBus(
            MqttSettings("127.0.0.1", port, username=login, password=password), client_id
        )


def shipped_conf(secrets: Path, users: int, internal: int, health: int) -> str:
    """deploy/mosquitto.conf with this test's ports and directory."""
    text = (ROOT / "deploy" / "mosquitto.conf").read_text()
    text = text.replace("/run/secrets/", f"{secrets}/")
    text = text.replace("/mosquitto/config/health.acl", str(ROOT / "deploy/mosquitto-health.acl"))
    text = re.sub(r"^listener 1883$", f"listener {internal} 127.0.0.1", text, flags=re.M)
    text = re.sub(r"^listener 1884$", f"listener {users} 127.0.0.1", text, flags=re.M)
    text = re.sub(r"^listener 1880 127.0.0.1$", f"listener {health} 127.0.0.1", text, flags=re.M)
    # Started as root, Mosquitto would drop to "mosquitto", who cannot read our 0600 files.
    return f"user {getpass.getuser()}\n" + text


@pytest.fixture(scope="module")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    workdir = tmp_path_factory.mktemp("compose-auth")
    files = write_compose_auth(workdir / "auth", ACCOUNTS, TOPICS)
    assert files.created
    internal, health = free_port(), free_port()
    broker = start_private_mosquitto(
        workdir,
        conf=lambda port: shipped_conf(workdir / "auth" / "broker", port, internal, health),
    )
    try:
        yield Broker(broker, internal)
    finally:
        broker.stop()


def test_the_files_are_written_once_and_reserved_names_refused(tmp_path: Path) -> None:
    first = write_compose_auth(tmp_path, ACCOUNTS, TOPICS)
    again = write_compose_auth(tmp_path, compose_accounts(["bob"], [], logins=1), TOPICS)
    assert first.created
    assert not again.created
    assert not (tmp_path / "users" / "bob").exists()
    assert first.secret_of("agent").read_text().strip() == PASSWORDS["agent"]
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert path.stat().st_mode & 0o077 == 0, path
    for name in ("scheduler", AGENT_LOGIN):
        with pytest.raises(AuthError, match="reserved"):
            compose_accounts([name], [], logins=1)
    # A second login's name is no user's name: '~' separates a user's logins.
    with pytest.raises(AuthError, match="cannot hold '~'"):
        compose_accounts(["bob~2"], [], logins=1)


@pytest.mark.parametrize("internal", [True, False], ids=["internal", "users"])
async def test_anonymous_clients_are_refused(testbed: Broker, internal: bool) -> None:
    with pytest.raises(BusError, match="cannot connect"):
        async with testbed.login(None, "anonymous", internal=internal):
            pass


async def test_logins_work_only_on_their_own_listener(testbed: Broker) -> None:
    async with testbed.login("agent", "n1", internal=True) as bus:
        assert bus.connected
    async with testbed.login("alice", "cli", internal=False) as bus:
        assert bus.connected
    for login, internal in (("alice", True), ("agent", False), ("scheduler", False)):
        with pytest.raises(BusError, match="cannot connect"):
            async with testbed.login(login, "x", internal=internal):
                pass


async def test_an_agent_speaks_only_under_its_own_client_id(testbed: Broker) -> None:
    t = TOPICS
    async with (
        testbed.login("scheduler", "scheduler", internal=True) as sched,
        Inbox(sched) as inbox,
        testbed.login("agent", "n1", internal=True) as n1,
        testbed.login("agent", "n2", internal=True) as n2,
        Inbox(n2) as n2_box,
    ):
        await sched.subscribe(t.all_agent_states)
        await sched.subscribe(t.all_agent_events)
        await n2.subscribe(t.agent_commands("n2"))
        # n1 (the shared agent login) on n2's topics, and commanding n2: all denied.
        for topic in (t.agent_state("n2"), t.agent_events("n2"), t.agent_commands("n2")):
            async with testbed.login("agent", "n1-forger", internal=True) as forger:
                await forger.publish(topic, b"forged")
        await n1.publish(t.agent_state("n1"), b"n1 online")
        await n2.publish(t.agent_events("n2"), b"n2 event")
        got = [(await inbox.next()).payload for _ in range(2)]
        assert got == [b"n1 online", b"n2 event"]
        await sched.publish(t.agent_commands("n2"), b"start")
        assert (await n2_box.next()).payload == b"start"  # nothing forged came first


async def test_a_user_takes_over_no_client_id(testbed: Broker) -> None:
    """With use_username_as_clientid, asking for "scheduler" or an agent's id gives the
    user her own login as client id: the victims keep their connections."""
    async with (
        testbed.login("scheduler", "scheduler", internal=True) as sched,
        testbed.login("agent", "n1", internal=True) as agent,
    ):
        for victim in ("scheduler", "n1"):
            async with testbed.login("alice", victim, internal=False) as intruder:
                await intruder.publish(TOPICS.user_requests("alice"), b"hello")
        await sched.publish(TOPICS.cluster, b"still here")
        await agent.publish(TOPICS.agent_state("n1"), b"still here")
        assert sched.reconnects == agent.reconnects == 0
        assert sched.connected
        assert agent.connected
