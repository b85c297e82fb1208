"""The fault bench's hostile rows: random payloads, forged messages, client-id takeovers.

``hostile`` runs without logins (anyone may publish, so every payload reaches
its target); ``forged`` and ``takeover`` run with logins and ACLs
(``accordion up --auth``) and count what got through as ``effects``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time

from accordion.client.live_client import connect
from accordion.client.specs import job_spec
from accordion.cluster.local_cluster import LocalCluster
from bench.faults.cluster import (
    FORGING_AGENT,
    HEARTBEAT,
    Bench,
    Result,
    as_login,
    running_at_least,
    scrape_bad,
    submit_all,
    workload,
)
from bench.faults.rows import row_baseline
from bench.faults.sampler import Sampler
from broker.bus import BusError
from broker.codec import encode
from broker.messages import (
    AgentOnline,
    CancelJob,
    JobEvent,
    MachineSpec,
    PartFinished,
    ResizePart,
    StartPart,
    StatusRequest,
)
from broker.mqtt import MqttBus, MqttSettings
from broker.topics import Topics
from broker.vocabulary import JobEventKind


def hostile_payloads(n: int, seed: int = 7) -> list[bytes]:
    """Random bytes, and valid messages with bytes flipped, cut or extended."""
    rng = random.Random(seed)
    base = [
        encode(StartPart(job=job_spec(job_id="x", procs=1, walltime=5.0), cpus=1)),
        bytes.fromhex("a1ff"),
        bytes.fromhex("81a46b696e64a1ff"),
    ]
    out: list[bytes] = []
    for i in range(n):
        if i % 2:
            out.append(rng.randbytes(rng.randint(0, 64)))
        else:
            b = bytearray(rng.choice(base))
            for _ in range(rng.randint(1, 4)):
                if b:
                    b[rng.randrange(len(b))] = rng.randrange(256)
            out.append(bytes(b[: rng.randint(0, len(b))] if rng.random() < 0.3 else b))
    return out


async def row_hostile(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 5)
    before = scrape_bad(cluster)
    topics = Topics(cluster.root)
    machine = cluster.spec.machines[0].id
    job = next(iter(accepted))
    families = [
        topics.requests,
        topics.agent_events(machine),
        topics.agent_state(f"ghost-{tag}"),
        topics.agent_commands(machine),
        topics.job_control(job),
    ]
    payloads = hostile_payloads(bench.payloads)
    host, _, port = cluster.broker_url.removeprefix("mqtt://").partition(":")
    settings = MqttSettings(host=host, port=int(port))
    async with MqttBus(settings, f"hostile-{tag}") as bus:
        for i, payload in enumerate(payloads):
            await bus.publish(families[i % len(families)], payload, qos=1)
    # The scheduler's share: every payload on its topics is counted, or was valid.
    deadline = time.monotonic() + 60
    sched_share = sum(1 for i in range(len(payloads)) if i % len(families) in (0, 1, 2))
    while time.monotonic() < deadline and scrape_bad(cluster) - before < 0.9 * sched_share:
        await asyncio.sleep(0.2)
    result.bad_counted = scrape_bad(cluster) - before
    result.note = f"{len(payloads)} payloads, {sched_share} on the scheduler's topics"
    return accepted


def forgeries(
    topics: Topics, tag: str, victim: str, m0: str, m1: str
) -> list[tuple[str, str, bytes]]:
    """One message of each kind the broker's ACL must refuse from a user (mallory) or from
    another machine's agent: ``(forger login, topic, payload)``."""
    ghost = MachineSpec(id=f"ghost-{tag}", cpus=1_048_576, speed=1.0)
    fake_start = StartPart(job=job_spec(job_id=f"forged-{tag}", procs=1, walltime=5.0), cpus=1)
    finished = PartFinished(
        job_id=victim, agent_id=m0, exit_code=0, at=0.0, reason="done", attempt=1
    )
    event = JobEvent(
        job_id=victim, event=JobEventKind.FINISHED, at=0.0, seq=0, detail=f"forged-{tag}"
    )
    online = AgentOnline(machine=ghost, incarnation=f"forged-{tag}", running=())
    return [
        ("mallory", topics.agent_commands(m0), encode(fake_start)),
        (f"agent-{m1}", topics.agent_commands(m0), encode(fake_start)),
        ("mallory", topics.agent_events(m0), encode(finished)),
        (f"agent-{m1}", topics.agent_events(m0), encode(finished)),
        ("mallory", topics.user_requests("alice"), encode(CancelJob(job_id=victim))),
        ("mallory", topics.admin_requests("mallory"), encode(CancelJob(job_id=victim))),
        ("mallory", topics.requests, encode(CancelJob(job_id=victim))),
        ("mallory", topics.agent_state(f"ghost-{tag}"), encode(online)),
        ("mallory", topics.agent_state(m0), encode(online)),
        (
            "mallory",
            topics.job_control(victim),
            encode(ResizePart(job_id=victim, cpus=1, pace=1000.0)),
        ),
        ("mallory", topics.events, encode(event)),
        ("mallory", topics.user_events("alice"), encode(event)),
    ]


async def row_forged(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    topics = Topics(cluster.root)
    async with connect(
        cluster.broker_url, cluster.root, timeout=10.0, credentials=cluster.credentials("alice")
    ) as alice:
        accepted = await submit_all(alice, workload(tag, bench.jobs))
    await running_at_least(cluster, 5)
    async with cluster.connect(timeout=10.0) as admin:
        before = await admin.status()
    victim = before.running[0].id
    m0 = cluster.spec.machines[0].id
    forged = forgeries(topics, tag, victim, m0, FORGING_AGENT)
    effects = 0
    # The admin spy reads the whole root: whatever the broker let through, it sees.
    async with MqttBus(as_login(cluster, "admin~4"), "spy") as spy:
        await spy.subscribe(f"{topics.root}/#", qos=1)
        async with MqttBus(as_login(cluster, "mallory~2"), "mallory~2") as reader:
            with contextlib.suppress(BusError):
                await reader.subscribe("#", qos=1)  # refused, or filtered by the ACL
            await reader.subscribe(topics.user_subtree("mallory"), qos=1)
            for login, topic, payload in forged:
                # A fresh connection per forgery: Mosquitto closes a client's connection
                # after denying its publish.
                async with MqttBus(as_login(cluster, login), f"forger-{login}") as forger:
                    await forger.publish(topic, payload, qos=1, retain=True)
            # Mallory's own request: its answer comes after anything the forgeries caused.
            ask = StatusRequest(request_id=f"s-{tag}", reply_to="spy")
            await reader.publish(topics.user_requests("mallory"), encode(ask), qos=1)
            sentinel = topics.user_replies("mallory", "spy")
            payloads = {p for _, _, p in forged}
            async for d in spy.deliveries():
                effects += d.payload in payloads
                if d.topic == sentinel:
                    break
            async for d in reader.deliveries():
                # Only what is hers or everyone's (the retained cluster summary).
                effects += d.topic not in (sentinel, topics.cluster)
                if d.topic == sentinel:
                    break
    async with cluster.connect(timeout=10.0) as admin:
        after = await admin.status()
    effects += len(after.machines) != len(before.machines)  # a ghost machine
    effects += any(j.id == victim for j in after.queue)  # requeued by a forgery
    effects += any(f"forged-{tag}" == job for job, _ in sampler.processes().values())
    result.effects = effects
    result.note = (
        f"{len(forged)} forged messages (mallory and agent {FORGING_AGENT}), victim {victim}"
    )
    return accepted


async def row_takeover(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 5)
    m0 = cluster.spec.machines[0].id
    victims = ("scheduler", f"agent-{m0}")
    for victim in victims:
        async with MqttBus(as_login(cluster, "mallory"), victim) as intruder:
            assert intruder.connected
            # Held across a round trip through the scheduler and a few heartbeats.
            async with cluster.connect(timeout=10.0) as admin:
                await admin.status()
            await asyncio.sleep(3 * HEARTBEAT)
    logs = [c.log.read_text() for c in cluster.children() if c.role in ("scheduler", "agent")]
    result.effects = sum(text.count("connected again") for text in logs)
    result.effects += sum(c.restarts for c in cluster.children())
    result.note = "mallory held the client ids scheduler and agent-" + m0
    return accepted
