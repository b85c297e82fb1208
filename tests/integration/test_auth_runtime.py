"""The live runtime with logins and ACLs (``accordion up --auth``): who may do what, for real.

``LocalCluster(auth=True)`` runs its own Mosquitto with the generated
password and ACL files and a real scheduler process logged in as
``scheduler``. Its machines are played by :class:`FakeAgent` (logged in as
the agent's generated account, announcing itself and heart-beating like the
real one, but starting no processes), so jobs can be running or queued at
will. The takeover test starts a real agent too.

No check waits on a clock: a forged publish is acknowledged (QoS 1) and
dropped by the broker before the next request of ours is even sent, and the
scheduler answers requests in order, so its next ``StatusReply`` already
reflects anything a forgery could have done.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from accordion.client.live_client import LiveClient, connect
from accordion.client.specs import job_spec
from accordion.cluster.local_cluster import LocalCluster
from accordion.errors import NoReplyError
from broker.bus import BusError
from broker.codec import decode, encode
from broker.local import mosquitto_binary
from broker.messages import (
    AgentOnline,
    CancelJob,
    CancelPart,
    Heartbeat,
    JobEvent,
    MachineSpec,
    PartFinished,
    PartStarted,
    ResizePart,
    RunningPart,
    StartPart,
    StatusRequest,
)
from broker.mqtt import MqttBus, MqttSettings
from broker.settings import read_secret
from broker.topics import Topics
from broker.vocabulary import JobEventKind
from model.machine import Machine
from tests.broker.scenarios import Inbox
from tests.brokers import _no_mosquitto
from workload.cluster import ClusterSpec

pytestmark = pytest.mark.integration

TAG = uuid.uuid4().hex[:6]
MACHINE = f"fa-{TAG}"
USERS = ("alice", "bob", "mallory")


def cluster_with_logins(
    run_dir: Path, name: str, machine: str, *, start_agents: bool
) -> LocalCluster:
    """A cluster on its own Mosquitto with logins for ``USERS``, one 1-CPU ``machine``
    (its agent started here or not), root ``<name>/v1``."""
    if mosquitto_binary() is None:
        _no_mosquitto()
    spec = ClusterSpec(name=name, reference_speed=1.0, machines=(Machine(id=machine, cpus=1),))
    return LocalCluster(
        spec,
        run_dir,
        broker="mosquitto",
        root=f"{name}/v1",
        auth=True,
        users=USERS,
        start_agents=start_agents,
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster with logins whose one machine's agent is the test's own (fake_agent)."""
    run_dir = tmp_path_factory.mktemp("auth-up")
    with cluster_with_logins(run_dir, f"auth-{TAG}", MACHINE, start_agents=False) as local:
        yield local


def settings_of(cluster: LocalCluster, login: str) -> MqttSettings:
    assert cluster.auth_files is not None
    host, _, port = cluster.broker_url.removeprefix("mqtt://").rpartition(":")
    secret = read_secret(cluster.auth_files.secret_of(login))
    return MqttSettings(host, int(port), username=login, password=secret)


def as_user(
    cluster: LocalCluster, login: str, **kw: bool
) -> contextlib.AbstractAsyncContextManager[LiveClient]:
    return connect(
        cluster.broker_url, cluster.root, credentials=cluster.credentials(login), timeout=10.0, **kw
    )


@dataclass
class FakeAgent:
    """The machine's agent as the scheduler sees it: registration, heartbeats, part reports."""

    bus: MqttBus
    topics: Topics
    machine: str
    running: dict[str, RunningPart] = field(default_factory=dict)
    commands: list[object] = field(default_factory=list)
    seq: int = 0

    async def beat(self) -> None:
        self.seq += 1
        beat = Heartbeat(agent_id=self.machine, seq=self.seq, running=tuple(self.running.values()))
        await self.bus.publish(self.topics.agent_events(self.machine), encode(beat))

    async def serve(self) -> None:
        async for d in self.bus.deliveries():
            message = decode(d.payload)
            self.commands.append(message)
            if isinstance(message, StartPart) and message.job is not None:
                job = message.job.id
                self.running[job] = RunningPart(job, message.cpus, 0.0, message.attempt)
                started = PartStarted(
                    job_id=job, agent_id=self.machine, attempt=message.attempt, pid=1, at=0.0
                )
                await self.bus.publish(self.topics.agent_events(self.machine), encode(started))
            elif isinstance(message, CancelPart) and message.job_id in self.running:
                part = self.running.pop(message.job_id)
                done = PartFinished(
                    job_id=part.job_id,
                    agent_id=self.machine,
                    reason="cancelled",
                    attempt=part.attempt,
                    exit_code=0,
                    at=0.0,
                )
                await self.bus.publish(self.topics.agent_events(self.machine), encode(done))

    async def heartbeats(self) -> None:
        while True:
            await self.beat()
            await asyncio.sleep(0.3)  # the agents' period here; liveness, not synchronisation


@contextlib.asynccontextmanager
async def fake_agent(cluster: LocalCluster) -> AsyncIterator[FakeAgent]:
    topics = Topics(cluster.root)
    async with MqttBus(settings_of(cluster, f"agent-{MACHINE}"), f"agent-{MACHINE}") as bus:
        agent = FakeAgent(bus, topics, MACHINE)
        await bus.subscribe(topics.agent_commands(MACHINE))
        online = AgentOnline(
            machine=MachineSpec(id=MACHINE, cpus=1, speed=1.0),
            incarnation=uuid.uuid4().hex[:8],
            running=(),
        )
        async with asyncio.TaskGroup() as tg:
            serve = tg.create_task(agent.serve(), name="fake-agent-serve")
            await bus.publish(topics.agent_state(MACHINE), encode(online), retain=True)
            beats = tg.create_task(agent.heartbeats(), name="fake-agent-beats")
            try:
                yield agent
            finally:
                serve.cancel()
                beats.cancel()


async def online(client: LiveClient) -> None:
    """Until the scheduler lists the fake machine online (a request sent before the
    scheduler subscribed gets no answer: ask again)."""
    while True:
        with contextlib.suppress(NoReplyError):
            status = await client.status(timeout=1.0)
            if any(m.online and m.id == MACHINE for m in status.machines):
                return
        await asyncio.sleep(0.05)


async def test_owners_cancel_their_jobs_and_admins_any(cluster: LocalCluster) -> None:
    t = uuid.uuid4().hex[:6]
    async with fake_agent(cluster) as agent, as_user(cluster, "alice") as alice:
        await online(alice)
        running, queued = f"run-{t}", f"wait-{t}"
        reply = await alice.submit(
            [
                job_spec(job_id=running, procs=1, walltime=3600.0, user="bob"),
                job_spec(job_id=queued, procs=1, walltime=3600.0),
            ]
        )
        assert all(r.accepted for r in reply.results)
        status = await alice.status()
        owners = {j.id: j.user for j in (*status.running, *status.queue)}
        # The owner is the login, not the payload's "bob".
        assert owners[running] == owners[queued] == "alice"
        async with as_user(cluster, "mallory") as mallory:
            refused = await mallory.cancel(queued)
            assert not refused.cancelled
            assert refused.reason == f"no job {queued!r}"  # as if it did not exist
            assert (await mallory.history([queued])) == []
        assert queued in {j.id for j in (await alice.status()).queue}
        async with cluster.connect() as admin:
            assert admin.admin
            assert (await admin.cancel(queued)).cancelled
        assert (await alice.cancel(running)).cancelled
        assert any(isinstance(c, CancelPart) and c.job_id == running for c in agent.commands)


async def test_a_user_hears_only_their_own_replies_and_events(cluster: LocalCluster) -> None:
    t = uuid.uuid4().hex[:6]
    async with (
        fake_agent(cluster),
        as_user(cluster, "alice", watch=True) as alice,
        as_user(cluster, "mallory", watch=True) as mallory,
    ):
        await online(alice)
        mine = f"m-{t}"
        await mallory.submit([job_spec(job_id=mine, procs=1, walltime=60.0)])
        await alice.submit([job_spec(job_id=f"a-{t}", procs=1, walltime=60.0)])
        await alice.cancel(f"a-{t}")
        await mallory.cancel(mine)
        # Mallory's stream ends with her own job's cancellation; nothing of alice's is in it.
        seen = []
        while True:
            item = await mallory.next_watched(timeout=30.0)
            assert item is not None
            if isinstance(item, JobEvent):
                seen.append(item.job_id)
                if item.job_id == mine and item.event == "cancelled":
                    break
        assert set(seen) == {mine}
        assert mallory.unmatched == 0
        assert alice.unmatched == 0


async def test_forged_messages_change_nothing(cluster: LocalCluster) -> None:
    """Forgeries (a message of each kind a user must not send), by a logged-in user,
    against the running scheduler."""
    t = uuid.uuid4().hex[:6]
    topics = Topics(cluster.root)
    async with fake_agent(cluster) as agent, as_user(cluster, "alice") as alice:
        await online(alice)
        job = f"j-{t}"
        await alice.submit([job_spec(job_id=job, procs=1, walltime=3600.0)])
        before = await alice.status()
        assert job in {j.id for j in before.running}
        commands = len(agent.commands)
        big = MachineSpec(id=f"ghost-{t}", cpus=1_048_576, speed=1.0)
        forged = [
            (
                topics.agent_commands(MACHINE),
                StartPart(job=job_spec(job_id=f"x-{t}", procs=1, walltime=5.0), cpus=1),
            ),
            (
                topics.agent_events(MACHINE),
                PartFinished(
                    job_id=job, agent_id=MACHINE, attempt=1, exit_code=0, at=0.0, reason="done"
                ),
            ),
            (topics.user_requests("alice"), CancelJob(job_id=job)),
            (topics.admin_requests("mallory"), CancelJob(job_id=job)),
            (topics.requests, CancelJob(job_id=job)),
            (
                topics.agent_state(f"ghost-{t}"),
                AgentOnline(machine=big, incarnation="x", running=()),
            ),
            (topics.job_control(job), ResizePart(job_id=job, pace=1000.0, cpus=1)),
            (topics.events, JobEvent(job_id=job, event=JobEventKind.FINISHED, at=0.0, seq=1)),
            (
                topics.user_events("alice"),
                JobEvent(job_id=job, event=JobEventKind.FINISHED, at=0.0, seq=1),
            ),
        ]
        # Mosquitto 2.0 closes the connection of a client whose publish it denied, and
        # whether that comes before or after the PUBACK is a race: the bus then sends
        # the forgery again until its publish deadline. So each forgery goes on a
        # connection of its own, and the spy below is never denied (its replies
        # cannot be lost to a reconnection).
        forger = replace(settings_of(cluster, "mallory~2"), publish_timeout=2.0, ack_timeout=2.0)
        for topic, message in forged:
            async with MqttBus(forger, "mallory~2") as mallory:
                with contextlib.suppress(BusError):
                    await mallory.publish(topic, encode(message), retain=True)
        async with (
            MqttBus(settings_of(cluster, "mallory~2"), "mallory~2") as mallory,
            Inbox(mallory) as box,
        ):
            with contextlib.suppress(BusError):
                await mallory.subscribe("#")  # refused, or filtered by the ACL
            await mallory.subscribe(topics.user_subtree("mallory"))
            await alice.submit([job_spec(job_id=f"after-{t}", procs=1, walltime=60.0)])
            # Mallory's own request: its reply comes after anything of alice's could have.
            ask = StatusRequest(request_id="spy", reply_to="spy")
            await mallory.publish(topics.user_requests("mallory"), encode(ask))
            got = []
            while True:
                d = await box.next()
                got.append(d.topic)
                if d.topic == topics.user_replies("mallory", "spy"):
                    break
            # The retained cluster summary is for everyone; nothing else was read.
            assert set(got) <= {topics.cluster, topics.user_replies("mallory", "spy")}
        after = await alice.status()
        assert job in {j.id for j in after.running}
        assert after.machines == before.machines  # no ghost with a million CPUs
        await agent.beat()
        assert not [
            c
            for c in agent.commands[commands:]
            if isinstance(c, StartPart) and c.job and c.job.id == f"x-{t}"
        ]
        await alice.cancel(job)
        await alice.cancel(f"after-{t}")


async def test_secrets_are_in_no_command_line_and_no_log(cluster: LocalCluster) -> None:
    assert cluster.auth_files is not None
    secrets = [read_secret(p) for p in cluster.auth_files.secrets.values()]
    for child in cluster.children():
        cmdline = Path(f"/proc/{child.pid}/cmdline").read_bytes().decode(errors="replace")
        environ = Path(f"/proc/{child.pid}/environ").read_bytes().decode(errors="replace")
        for secret in secrets:
            assert secret not in cmdline, child.name
            assert secret not in environ, child.name  # a path there, not the secret
    for path in cluster.run_dir.rglob("*"):
        if path.is_file() and "secrets" not in path.parts:
            text = path.read_bytes().decode(errors="replace")
            for secret in secrets:
                assert secret not in text, path
    for path in cluster.auth_files.secrets.values():
        assert path.stat().st_mode & 0o077 == 0


@pytest.fixture(scope="module")
def with_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster with logins and one real agent (no job is ever submitted to it)."""
    run_dir = tmp_path_factory.mktemp("auth-real")
    with cluster_with_logins(
        run_dir, f"auth-real-{TAG}", f"real-{TAG}", start_agents=True
    ) as local:
        yield local


async def test_nobody_takes_over_the_scheduler_or_an_agent(with_agent: LocalCluster) -> None:
    """Mallory connects with their client ids; the broker makes her "mallory" instead."""
    local = with_agent
    async with local.connect() as admin:
        await local.ready(admin, timeout=60.0)
    machine = local.spec.machines[0].id
    for victim in ("scheduler", f"agent-{machine}"):
        async with MqttBus(settings_of(local, "mallory"), victim) as intruder:
            assert intruder.connected
            # A round trip through the scheduler after the intruder's CONNACK: a takeover
            # would have closed the victim's connection before that CONNACK was sent.
            async with local.connect() as admin:
                status = await admin.status()
        assert [m.online for m in status.machines] == [True]
    logs = [c.log.read_text() for c in local.children() if c.role in ("scheduler", "agent")]
    for text in logs:
        assert "lost its connection" not in text
        assert "connected again" not in text
    assert all(c.restarts == 0 for c in local.children())


async def test_a_job_runs_under_logins_and_no_process_shows_a_secret(
    with_agent: LocalCluster,
) -> None:
    """The job process holds no login (its agent relays it); no argv shows a secret."""
    local = with_agent
    assert local.auth_files is not None
    secrets = [read_secret(p) for p in local.auth_files.secrets.values()]
    job = f"run-{uuid.uuid4().hex[:6]}"
    async with as_user(local, "alice", watch=True) as alice:
        await local.ready(alice, timeout=60.0)
        await alice.submit([job_spec(job_id=job, procs=1, walltime=60.0, work=30.0)])
        while True:  # until its process runs
            item = await alice.next_watched(timeout=30.0)
            assert item is not None
            if isinstance(item, JobEvent) and item.job_id == job and item.event == "running":
                break
        # "running" is the scheduler's word at dispatch: wait for the process itself.
        ours = processes_of(local.root)
        while not any("nodeagent.job" in c for c in ours):
            await asyncio.sleep(0.05)
            ours = processes_of(local.root)
        for cmdline in ours:
            for secret in secrets:
                assert secret not in cmdline
        assert (await alice.cancel(job)).cancelled


def processes_of(root: str) -> list[str]:
    """The command lines of every process started for the topic root ``root``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
                if f"--root={root}" in cmdline:
                    found.append(cmdline)
    return found
