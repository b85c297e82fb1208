"""Authentication and ACLs on a real Mosquitto, with the files ``broker.auth`` generates.

A Mosquitto of this module's own runs with ``allow_anonymous false``, the
generated password file (Mosquitto's ``$7$`` hashes, written by us) and ACL
file. Each role does what it must; each action a role must not take (a
forgery) is denied by the broker. A denial is checked without waiting on a clock: after the
forged publish (Mosquitto acknowledges it and drops it), a legitimate sender
publishes a sentinel to the same receiver; Mosquitto routes in the order it
received, so by the time the sentinel arrives anything forged would have too.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from uuid import uuid4

import pytest

from broker.auth import (
    Account,
    AuthFiles,
    agent_account,
    hash_password,
    password_file,
    scheduler_account,
    user_accounts,
    write_auth_files,
)
from broker.bus import BusError
from broker.local import mosquitto_config
from broker.mqtt import MqttBus
from broker.settings import ENV_PASSWORD_FILE, MqttSettings
from broker.topics import Topics
from tests.broker.scenarios import Inbox
from tests.brokers import MosquittoProcess, start_private_mosquitto

pytestmark = pytest.mark.integration

TOPICS = Topics(f"auth-{uuid4().hex[:6]}/v1")
SCHEDULER = scheduler_account()
N1, N2 = agent_account("n1"), agent_account("n2")
ALICE, ALICE2 = user_accounts("alice")
(MALLORY,) = user_accounts("mallory", logins=1)
(ROOT,) = user_accounts("root", logins=1, role="admin")
ACCOUNTS = (SCHEDULER, N1, N2, ALICE, ALICE2, MALLORY, ROOT)


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[MosquittoProcess, AuthFiles]]:
    """A Mosquitto with authentication and ACLs, for this module alone."""
    workdir = tmp_path_factory.mktemp("auth")
    files = write_auth_files(workdir / "auth", ACCOUNTS, TOPICS)
    broker = start_private_mosquitto(
        workdir, conf=lambda port: mosquitto_config(host="127.0.0.1", port=port, auth=files)
    )
    try:
        yield broker, files
    finally:
        broker.stop()


def login(broker: MosquittoProcess, account: Account, client_id: str | None = None) -> MqttBus:
    settings = MqttSettings(
        broker.host, broker.port, username=account.login, password=account.password
    )
    return MqttBus(settings, client_id or account.login)


class Parties:
    """Connected clients of every role, each with its inbox."""

    def __init__(self, broker: MosquittoProcess) -> None:
        self.broker = broker
        self.stack = AsyncExitStack()
        self.bus: dict[str, MqttBus] = {}
        self.box: dict[str, Inbox] = {}

    async def add(self, account: Account, *filters: str) -> None:
        bus = await self.stack.enter_async_context(login(self.broker, account))
        self.box[account.login] = await self.stack.enter_async_context(Inbox(bus))
        self.bus[account.login] = bus
        for f in filters:
            await bus.subscribe(f)


@pytest.fixture
async def parties(secured: tuple[MosquittoProcess, AuthFiles]) -> AsyncIterator[Parties]:
    broker, _ = secured
    p = Parties(broker)
    async with p.stack:
        await p.add(
            SCHEDULER,
            TOPICS.all_user_requests,
            TOPICS.all_admin_requests,
            TOPICS.all_agent_states,
            TOPICS.all_agent_events,
        )
        await p.add(N1, TOPICS.agent_commands("n1"), f"{TOPICS.root}/agents/n1/jobs/#")
        await p.add(N2, TOPICS.agent_commands("n2"))
        await p.add(ALICE, TOPICS.user_subtree("alice"))
        await p.add(MALLORY, TOPICS.user_subtree("mallory"))
        await p.add(ROOT, f"{TOPICS.root}/#")
        yield p


async def only(box: Inbox, sentinel: bytes) -> list[bytes]:
    """Everything received up to and including ``sentinel``."""
    got = []
    while True:
        payload = (await box.next()).payload
        got.append(payload)
        if payload == sentinel:
            return got


# -- the files --------------------------------------------------------------------------


def test_the_hash_is_mosquittos_own() -> None:
    salt = bytes(range(12))
    assert hash_password("secret", salt=salt).startswith("$7$101$AAECAwQFBgcICQoL$")
    text = password_file([ALICE])
    assert text.startswith("alice:$7$101$")
    assert ALICE.password not in text
    assert ALICE.password not in repr(ALICE)


def test_secrets_are_private(secured: tuple[MosquittoProcess, AuthFiles]) -> None:
    _, files = secured
    for path in (files.password_file, files.acl_file, *files.secrets.values()):
        assert path.stat().st_mode & 0o077 == 0, path
    assert files.secret_of("alice").read_text().strip() == ALICE.password


# -- authentication ------------------------------------------------------------------------


async def test_every_role_logs_in(secured: tuple[MosquittoProcess, AuthFiles]) -> None:
    broker, _ = secured
    for account in ACCOUNTS:
        async with login(broker, account) as bus:
            assert bus.connected


async def test_a_password_file_from_the_environment(
    secured: tuple[MosquittoProcess, AuthFiles],
) -> None:
    broker, files = secured
    settings = MqttSettings.from_url(
        f"mqtt://alice@{broker.host}:{broker.port}",
        env={ENV_PASSWORD_FILE: str(files.secret_of("alice"))},
    )
    async with MqttBus(settings, "alice") as bus:
        assert bus.connected


@pytest.mark.parametrize("who", ["anonymous", "wrong-password", "unknown"])
async def test_strangers_are_refused(secured: tuple[MosquittoProcess, AuthFiles], who: str) -> None:
    broker, _ = secured
    credentials = {
        "anonymous": {},
        "wrong-password": {"username": "alice", "password": "guess"},
        "unknown": {"username": "eve", "password": "guess"},
    }[who]
    settings = MqttSettings(broker.host, broker.port, **credentials)  # type: ignore[arg-type]
    with pytest.raises(BusError, match="cannot connect") as caught:
        async with MqttBus(settings, "stranger"):
            pass
    assert "guess" not in str(caught.value)


# -- what each role must do ------------------------------------------------------------------


async def test_the_roles_can_do_their_work(parties: Parties) -> None:
    t = TOPICS
    await parties.bus["alice"].publish(t.user_requests("alice"), b"submit")
    got = await parties.box["scheduler"].next()
    assert (got.topic, got.payload) == (t.user_requests("alice"), b"submit")
    assert t.requester_of(got.topic) == ("alice", False)

    await parties.bus["scheduler"].publish(t.user_replies("alice", "cli"), b"reply")
    assert (await parties.box["alice"].next()).payload == b"reply"

    await parties.bus["agent-n1"].publish(t.agent_state("n1"), b"online")
    await parties.bus["agent-n1"].publish(t.agent_events("n1"), b"started")
    assert [(await parties.box["scheduler"].next()).payload for _ in range(2)] == [
        b"online",
        b"started",
    ]
    await parties.bus["scheduler"].publish(t.agent_commands("n1"), b"start")
    assert (await parties.box["agent-n1"].next()).payload == b"start"
    await parties.bus["agent-n1"].publish(t.agent_job_control("n1", "j1"), b"resize")
    assert (await parties.box["agent-n1"].next()).payload == b"resize"

    await parties.bus["root"].publish(t.admin_requests("root"), b"cancel any")
    got = await parties.box["scheduler"].next()
    assert t.requester_of(got.topic) == ("root", True)
    # The admin saw all of it.
    seen = {d.topic for d in [await parties.box["root"].next() for _ in range(7)]}
    assert t.user_replies("alice", "cli") in seen


async def test_two_logins_of_one_user_are_two_clients_of_that_user(
    secured: tuple[MosquittoProcess, AuthFiles],
) -> None:
    broker, _ = secured
    async with login(broker, ALICE) as a1, login(broker, ALICE2) as a2, Inbox(a2) as box:
        await a2.subscribe(TOPICS.user_subtree("alice"))
        await a1.publish(TOPICS.user_requests("alice"), b"from the first")
        assert a1.connected
        assert a2.connected
    async with login(broker, SCHEDULER) as sched, Inbox(sched) as sbox:
        await sched.subscribe(TOPICS.all_user_requests)
        async with login(broker, ALICE2) as a2:
            await a2.publish(TOPICS.user_requests("alice"), b"from the second")
        got = await sbox.next()
        assert TOPICS.requester_of(got.topic) == ("alice", False)
    assert box.pending() == 0


# -- what is denied ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("forger", "topic", "receiver", "sender"),
    [
        # A user starts processes on an agent (forged StartPart).
        ("mallory", TOPICS.agent_commands("n1"), "agent-n1", "scheduler"),
        # Another agent reports a part of n1 finished (forged PartFinished).
        ("agent-n2", TOPICS.agent_events("n1"), "scheduler", "agent-n1"),
        # A user marks an agent offline (forged retained AgentOffline).
        ("mallory", TOPICS.agent_state("n1"), "scheduler", "agent-n1"),
        # A user registers a fake agent with a million CPUs.
        ("mallory", TOPICS.agent_state("fake"), "scheduler", "agent-n1"),
        # A user submits or cancels as alice.
        ("mallory", TOPICS.user_requests("alice"), "scheduler", "alice"),
        # A user poses as an admin.
        ("mallory", TOPICS.admin_requests("mallory"), "scheduler", "alice"),
        # A user resizes a job's process (ResizePart with pace 1000).
        ("mallory", TOPICS.agent_job_control("n1", "j1"), "agent-n1", "scheduler"),
        # A user spoofs what alice's `watch` prints, or a reply to her.
        ("mallory", TOPICS.user_events("alice"), "alice", "scheduler"),
        ("mallory", TOPICS.user_replies("alice", "cli"), "alice", "scheduler"),
        # An agent commands another agent.
        ("agent-n2", TOPICS.agent_commands("n1"), "agent-n1", "scheduler"),
    ],
)
async def test_forged_publishes_are_dropped_by_the_broker(
    parties: Parties, forger: str, topic: str, receiver: str, sender: str
) -> None:
    await parties.bus[forger].publish(topic, b"forged", retain=True)
    # The sentinel goes where the sender may write and the receiver reads.
    sentinel_topic = {
        "scheduler": {
            "agent-n1": TOPICS.agent_commands("n1"),
            "alice": TOPICS.user_events("alice"),
        },
        "agent-n1": {"scheduler": TOPICS.agent_events("n1")},
        "alice": {"scheduler": TOPICS.user_requests("alice")},
    }[sender][receiver]
    await parties.bus[sender].publish(sentinel_topic, b"sentinel")
    assert await only(parties.box[receiver], b"sentinel") == [b"sentinel"]
    # Not even the admin, who reads everything, saw the forgery.
    assert await only(parties.box["root"], b"sentinel") == [b"sentinel"]


@pytest.mark.parametrize(
    "pattern",
    ["#", f"{TOPICS.root}/#", TOPICS.user_subtree("alice"), TOPICS.all_user_requests, "$SYS/#"],
)
async def test_a_user_cannot_read_what_is_not_theirs(parties: Parties, pattern: str) -> None:
    broker = parties.broker
    async with login(broker, MALLORY, "x") as spy, Inbox(spy) as box:
        # Mosquitto refuses the SUBACK (0x80), or accepts it and delivers nothing
        # the ACL does not let this login read: either way nothing arrives.
        with contextlib.suppress(BusError):
            await spy.subscribe(pattern)
        await spy.subscribe(TOPICS.user_subtree("mallory"))
        await parties.bus["alice"].publish(TOPICS.user_requests("alice"), b"alice's secret job")
        await parties.bus["scheduler"].publish(TOPICS.user_replies("alice", "c"), b"alice's reply")
        await parties.bus["scheduler"].publish(TOPICS.user_replies("mallory", "c"), b"sentinel")
        assert await only(box, b"sentinel") == [b"sentinel"]
        assert spy.foreign == 0


@pytest.mark.parametrize("victim", ["scheduler", "agent-n1", "alice"])
async def test_a_client_id_cannot_be_taken_over_by_another_login(
    parties: Parties, victim: str
) -> None:
    """Mallory connects with the victim's client id; the broker makes it "mallory" instead."""
    victim_bus = parties.bus[victim]
    async with login(parties.broker, MALLORY, client_id=victim) as intruder:
        assert intruder.connected
        # A round trip over the victim's connection, after the intruder's CONNACK:
        # a takeover would have closed it before that CONNACK was sent.
        await victim_bus.publish(
            TOPICS.user_events("root")
            if victim == "scheduler"
            else (
                TOPICS.agent_events("n1") if victim == "agent-n1" else TOPICS.user_requests("alice")
            ),
            b"still here",
        )
        assert victim_bus.connected
        assert victim_bus.reconnects == 0
    assert victim_bus.disconnected_since is None


async def test_a_denied_forgers_dropped_connection_leaves_no_unread_error(
    secured: tuple[MosquittoProcess, AuthFiles],
) -> None:
    """Mosquitto closes the connection of a client whose publish it denied. A client
    closed right after must leave no "Future exception was never retrieved" behind
    (aiomqtt used to keep why the broker dropped it in a future nobody read)."""
    broker, _ = secured
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(str(context.get("message"))))
    try:
        for _ in range(10):
            async with login(broker, MALLORY) as forger:
                await forger.publish(TOPICS.agent_commands("n1"), b"forged")
            del forger
            gc.collect()  # the aiomqtt client's cycles: collected here, not later
    finally:
        loop.set_exception_handler(previous)
    assert reported == []
