"""Benchmark: the fault matrix of the live runtime (issue 9, item 9).

Run on demand (not a test): ``.venv/bin/python bench/faults.py [--rows a,b]``.
Each row starts a fresh local cluster (Mosquitto, the scheduler and three
agents as real processes, supervised and restarted as ``accordion up`` does),
submits a workload, injects one fault while jobs run, waits until every
accepted job has ended, and prints one line of the matrix:

- **accepted**: jobs the scheduler acknowledged (durable in its journal);
- **finished / failed / cancelled**: their final states, from the journal;
- **queued**: accepted jobs still queued or running when the bound ran out;
- **lost**: accepted jobs the journal does not hold in a final state at the end
  (must be 0: queued ones count here too);
- **requeued**: how many times jobs went back to the queue (each is a restart
  from zero of that job);
- **duplicated**: jobs seen running two attempts at once. A sampler thread
  reads ``/proc`` every 20 ms for the job processes of this cluster (their
  command line names the job and its attempt); fencing says this stays 0;
- **recovery**: wall seconds from the fault until the scheduler answered again
  with every machine online (the "back within 5 s of the broker" target);
- **bad counted**: the scheduler's ``bad_messages_total`` delta, for the
  hostile-payload row;
- **effects**: for the rows with logins, what a forgery or a takeover did
  (must be 0).

Rows: ``baseline`` (no fault), ``agent-kill`` (SIGKILL an agent),
``agent-freeze`` (SIGSTOP an agent past the scheduler's silence limit, then
SIGCONT), ``scheduler-kill`` (SIGKILL the scheduler during a burst of
``--burst`` single submissions; the client resends what was not answered, as
the idempotent protocol allows), ``broker-kill`` (SIGKILL Mosquitto; the
supervisor restarts it on its port), ``job-crash`` (SIGKILL one job process:
that job fails, nothing else), ``hostile`` (``--payloads`` random and mutated
payloads on every topic family; no process of ours may exit), and two rows
with logins and ACLs on (``accordion up --auth``): ``forged`` (issue 9's
forged messages, published by the user "mallory" and by another agent, each
denied by the broker: an admin spy subscribed to the whole root sees none of
them, mallory's ``#`` reads nothing of alice's, no ghost machine joins, no
job of alice's is cancelled; **effects** counts what got through, 0 is the
target) and ``takeover`` (mallory connects with the scheduler's and an
agent's client ids and holds them while jobs run; **effects** counts the
victims' reconnections and restarts, 0 is the target).

Everything runs on 127.0.0.1. Times are wall seconds; the cluster runs at
time scale ``--time-scale`` (cluster seconds per wall second).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from accordion.client import LiveClient, connect, run_async  # noqa: E402
from accordion.cluster import LocalCluster  # noqa: E402
from accordion.errors import NoReplyError  # noqa: E402
from accordion.specs import job_spec  # noqa: E402
from broker.bus import BusError  # noqa: E402
from broker.codec import encode  # noqa: E402
from broker.messages import (  # noqa: E402
    AgentOnline,
    CancelJob,
    JobEvent,
    JobSpec,
    MachineSpec,
    PartFinished,
    ResizePart,
    StartPart,
    StatusRequest,
)
from broker.mqtt import MqttBus, MqttSettings  # noqa: E402
from broker.settings import read_secret  # noqa: E402
from broker.topics import Topics  # noqa: E402
from model.machine import Machine  # noqa: E402
from scheduler.journal import Journal  # noqa: E402
from scheduler.lifecycle import JobState  # noqa: E402
from workload.cluster import ClusterSpec  # noqa: E402

HEARTBEAT = 1.0
BOUND = 300.0
FINAL = {JobState.FINISHED, JobState.FAILED, JobState.CANCELLED}


@dataclass
class Result:
    row: str
    accepted: int = 0
    finished: int = 0
    failed: int = 0
    cancelled: int = 0
    queued: int = 0
    lost: int = 0
    requeued: int = 0
    duplicated: int = 0
    recovery: float | None = None
    bad_counted: float | None = None
    effects: int | None = None
    restarts: int = 0
    note: str = ""


# -- the job processes, watched from /proc ------------------------------------------------


class Sampler:
    """Samples this cluster's job processes: ``job -> attempts`` alive at once."""

    def __init__(self, root: str) -> None:
        self._root = f"--root={root}"
        self.doubles: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def processes(self) -> dict[int, tuple[str, int]]:
        """``pid -> (job id, attempt)`` of every live job process of the cluster."""
        found: dict[int, tuple[str, int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                raw = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state == "Z" or b"nodeagent.job" not in raw:
                continue
            # A forked job process shows its command line as one title (setproctitle,
            # space-separated), an exec'd one as NUL-separated argv: read both.
            args = [a.decode() for a in raw.replace(b"\0", b" ").split()]
            if self._root not in args:
                continue
            job = next((a.split("=", 1)[1] for a in args if a.startswith("--job-id=")), "")
            attempt = next((int(a.split("=", 1)[1]) for a in args if a.startswith("--attempt=")), 1)
            found[int(entry.name)] = (job, attempt)
        return found

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            attempts: dict[str, set[int]] = {}
            for job, attempt in self.processes().values():
                attempts.setdefault(job, set()).add(attempt)
            self.doubles |= {job for job, seen in attempts.items() if len(seen) > 1}


# -- one row ----------------------------------------------------------------------------


@dataclass
class Bench:
    time_scale: float
    jobs: int
    burst: int
    payloads: int
    keep: bool
    console: Console
    results: list[Result] = field(default_factory=list)


def cluster_spec(tag: str) -> ClusterSpec:
    return ClusterSpec(
        name=f"faults-{tag}",
        reference_speed=1.0,
        machines=tuple(Machine(id=f"m{i}-{tag}", cpus=16, speed=1.0) for i in range(3)),
    )


def workload(tag: str, n: int, seed: int = 1) -> list[JobSpec]:
    """``n`` jobs of 1 or 2 processes, 40 to 120 cluster seconds each."""
    rng = random.Random(seed)
    specs = []
    for i in range(n):
        work = rng.uniform(40.0, 120.0)
        specs.append(
            job_spec(job_id=f"{tag}-{i}", procs=rng.choice((1, 2)), walltime=3 * work, work=work)
        )
    return specs


async def submit_all(client: LiveClient, specs: list[JobSpec]) -> set[str]:
    accepted: set[str] = set()
    for i in range(0, len(specs), 100):
        reply = await client.submit(specs[i : i + 100])
        accepted |= {r.job_id for r in reply.results if r.accepted}
    return accepted


async def wait_offline(cluster: LocalCluster, machine: str) -> None:
    """Until the scheduler has noticed that ``machine`` is gone (bounded)."""
    deadline = time.monotonic() + 30.0
    async with cluster.connect(timeout=2.0) as client:
        while time.monotonic() < deadline:
            status = await client.status()
            if machine not in {m.id for m in status.machines if m.online}:
                return
            await asyncio.sleep(0.05)


async def wait_healthy(cluster: LocalCluster, since: float) -> float:
    """Wall seconds from ``since`` until the scheduler answers with every machine online."""
    wanted = {m.id for m in cluster.spec.machines}
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        try:
            async with cluster.connect(timeout=1.0) as client:
                status = await client.status(timeout=1.0)
                if wanted <= {m.id for m in status.machines if m.online}:
                    return time.monotonic() - since
        except (NoReplyError, BusError, OSError):
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("the cluster did not recover within the bound")


async def wait_drained(cluster: LocalCluster, accepted: set[str]) -> None:
    """Until the scheduler holds none of the accepted jobs queued or running."""
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        try:
            async with cluster.connect(timeout=2.0) as client:
                status = await client.status(timeout=2.0)
                live = {j.id for j in status.queue} | {j.id for j in status.running}
                if not live & accepted:
                    return
        except (NoReplyError, BusError, OSError):
            pass
        await asyncio.sleep(0.25)


def scrape_bad(cluster: LocalCluster) -> float:
    text = ""
    for attempt in range(5):
        try:
            text = urllib.request.urlopen(cluster.scheduler_metrics, timeout=5).read().decode()
            break
        except OSError:
            if attempt == 4:
                raise
            time.sleep(0.5)
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("accordion_scheduler_bad_messages_total{")
    )


def tally(result: Result, journal_path: Path, accepted: set[str]) -> None:
    with Journal(journal_path) as journal:
        rows = {row.spec.id: row for row in journal.load().jobs}
    result.accepted = len(accepted)
    for job_id in accepted:
        row = rows.get(job_id)
        if row is None or row.state not in FINAL:
            result.lost += 1
            if row is not None:
                result.queued += 1
            continue
        result.requeued += row.requeues
        if row.state is JobState.FINISHED:
            result.finished += 1
        elif row.state is JobState.FAILED:
            result.failed += 1
        else:
            result.cancelled += 1


Fault = Callable[[LocalCluster, Sampler, LiveClient], "asyncio.Future[None] | None"]


async def run_row(bench: Bench, name: str) -> Result:
    tag = uuid.uuid4().hex[:6]
    run_dir = Path(tempfile.mkdtemp(prefix=f"accordion-faults-{name}-"))
    cluster = LocalCluster(
        cluster_spec(tag),
        run_dir,
        policy="easy",
        time_scale=bench.time_scale,
        broker="mosquitto",
        root=f"faults-{tag}/v1",
        heartbeat=HEARTBEAT,
        auth=name in AUTH_ROWS,
        users=("alice", "mallory"),
        # An agent login with no agent of its own: the forging agent of row "forged"
        # (a second connection under a running agent's login would take it over).
        extra_agents=(FORGING_AGENT,),
    )
    result = Result(name)
    with cluster, Sampler(cluster.root) as sampler:
        supervisor = threading.Event()

        def supervise() -> None:
            while not supervisor.wait(0.2):
                cluster.supervise()

        thread = threading.Thread(target=supervise, daemon=True)
        async with cluster.connect(timeout=10.0) as client:
            await cluster.ready(client, timeout=60.0)
        thread.start()
        try:
            accepted = await ROWS[name](bench, cluster, sampler, result, tag)
            await wait_drained(cluster, accepted)
        finally:
            supervisor.set()
            thread.join(5)
        result.duplicated = len(sampler.doubles)
        if sampler.doubles:
            result.note = (result.note + " doubles: " + ",".join(sorted(sampler.doubles))).strip()
        result.restarts = sum(c.restarts for c in cluster.children())
    tally(result, cluster.journal, accepted)
    if not bench.keep:
        import shutil

        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        result.note = (result.note + f" run dir {run_dir}").strip()
    return result


async def running_at_least(cluster: LocalCluster, n: int) -> None:
    deadline = time.monotonic() + BOUND
    async with cluster.connect(timeout=5.0) as client:
        while time.monotonic() < deadline:
            status = await client.status()
            if len(status.running) >= n:
                return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"fewer than {n} jobs ever ran at once")


def agent_child(cluster: LocalCluster, index: int = 0) -> int:
    machine = cluster.spec.machines[index].id
    child = next(c for c in cluster.children() if c.name == f"agent-{machine}")
    return child.pid


async def row_baseline(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    async with cluster.connect(timeout=10.0) as client:
        return await submit_all(client, workload(tag, bench.jobs))


async def row_agent_kill(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 10)
    t0 = time.monotonic()
    os.kill(agent_child(cluster), signal.SIGKILL)
    await wait_offline(cluster, cluster.spec.machines[0].id)
    result.recovery = await wait_healthy(cluster, t0)
    result.note = "recovery: until the restarted agent is online again"
    return accepted


async def row_agent_freeze(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 10)
    pid = agent_child(cluster)
    os.kill(pid, signal.SIGSTOP)
    # Past the scheduler's silence limit (6 heartbeats) by half again.
    await asyncio.sleep(9 * HEARTBEAT)
    t0 = time.monotonic()
    os.kill(pid, signal.SIGCONT)
    result.recovery = await wait_healthy(cluster, t0)
    return accepted


async def row_scheduler_kill(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    # Long jobs: what matters is that no acknowledged submission is lost, not running
    # 3,000 processes; every accepted job is cancelled once the burst is over.
    specs = [
        job_spec(job_id=f"{tag}-b{i}", procs=1, walltime=7200.0, work=3600.0)
        for i in range(bench.burst)
    ]
    accepted: set[str] = set()
    killed_at: float | None = None
    answered_at: float | None = None
    pending = list(specs)
    deadline = time.monotonic() + BOUND
    while pending and time.monotonic() < deadline:
        try:
            async with cluster.connect(timeout=5.0) as client:
                while pending:
                    spec = pending[0]
                    reply = await client.submit([spec], timeout=5.0)
                    if killed_at is not None and answered_at is None:
                        answered_at = time.monotonic()
                    if reply.results[0].accepted:
                        accepted.add(spec.id)
                    pending.pop(0)
                    if killed_at is None and len(accepted) >= len(specs) // 3:
                        pid = cluster.scheduler_pid
                        assert pid is not None
                        os.kill(pid, signal.SIGKILL)
                        killed_at = time.monotonic()
        except (NoReplyError, BusError, OSError):
            await asyncio.sleep(0.2)  # the scheduler is restarting: resend what was unanswered
    if killed_at is not None and answered_at is not None:
        result.recovery = answered_at - killed_at
    async with cluster.connect(timeout=10.0) as client:
        for job_id in sorted(accepted):
            await client.cancel(job_id)
    result.note = (
        f"{bench.burst} single submissions, SIGKILL after {len(specs) // 3}, then all "
        "cancelled; recovery: until the first answer after the kill"
    )
    return accepted


async def row_broker_kill(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 10)
    broker = next(c for c in cluster.children() if c.role == "broker")
    t0 = time.monotonic()
    os.kill(broker.pid, signal.SIGKILL)
    result.recovery = await wait_healthy(cluster, t0)
    return accepted


async def row_job_crash(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 10)
    pid, (job, _) = next(iter(sampler.processes().items()))
    os.kill(pid, signal.SIGKILL)
    result.note = f"crashed {job}: expect failed 1"
    return accepted


def hostile_payloads(n: int, seed: int = 7) -> list[bytes]:
    """Random bytes, and valid messages with bytes flipped, cut or extended."""
    rng = random.Random(seed)
    base = [
        encode(StartPart(job=job_spec(job_id="x", procs=1, walltime=5.0))),
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


def as_login(cluster: LocalCluster, login: str) -> MqttSettings:
    """Bus settings of one of the cluster's generated logins."""
    host, _, port = cluster.broker_url.removeprefix("mqtt://").rpartition(":")
    secret = read_secret(cluster.credentials(login).password_file)
    return MqttSettings(host=host, port=int(port), username=login, password=secret)


def forgeries(
    topics: Topics, tag: str, victim: str, m0: str, m1: str
) -> list[tuple[str, str, bytes]]:
    """Issue 9's forged messages: ``(forger login, topic, payload)``."""
    ghost = MachineSpec(id=f"ghost-{tag}", cpus=1_048_576, speed=1.0)
    fake_start = StartPart(job=job_spec(job_id=f"forged-{tag}", procs=1, walltime=5.0))
    finished = PartFinished(job_id=victim, agent_id=m0, attempt=1)
    event = JobEvent(job_id=victim, state="finished", at=0.0, detail=f"forged-{tag}")
    return [
        ("mallory", topics.agent_commands(m0), encode(fake_start)),
        (f"agent-{m1}", topics.agent_commands(m0), encode(fake_start)),
        ("mallory", topics.agent_events(m0), encode(finished)),
        (f"agent-{m1}", topics.agent_events(m0), encode(finished)),
        ("mallory", topics.user_requests("alice"), encode(CancelJob(job_id=victim))),
        ("mallory", topics.admin_requests("mallory"), encode(CancelJob(job_id=victim))),
        ("mallory", topics.requests, encode(CancelJob(job_id=victim))),
        ("mallory", topics.agent_state(f"ghost-{tag}"), encode(AgentOnline(machine=ghost))),
        ("mallory", topics.agent_state(m0), encode(AgentOnline(machine=ghost))),
        ("mallory", topics.job_control(victim), encode(ResizePart(job_id=victim, pace=1000.0))),
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


AUTH_ROWS = ("forged", "takeover")
FORGING_AGENT = "rogue"
"""The machine id of the agent login that forges on another agent's topics."""

ROWS = {
    "baseline": row_baseline,
    "agent-kill": row_agent_kill,
    "agent-freeze": row_agent_freeze,
    "scheduler-kill": row_scheduler_kill,
    "broker-kill": row_broker_kill,
    "job-crash": row_job_crash,
    "hostile": row_hostile,
    "forged": row_forged,
    "takeover": row_takeover,
}


def table(results: list[Result]) -> Table:
    t = Table(title="fault matrix (wall seconds; 0 lost and 0 duplicated is the target)")
    for col in (
        "row",
        "accepted",
        "finished",
        "failed",
        "cancelled",
        "queued",
        "lost",
        "requeued",
        "duplicated",
        "recovery s",
        "bad counted",
        "effects",
        "restarts",
        "note",
    ):
        t.add_column(col, justify="left" if col in ("row", "note") else "right")
    for r in results:
        t.add_row(
            r.row,
            str(r.accepted),
            str(r.finished),
            str(r.failed),
            str(r.cancelled),
            str(r.queued),
            str(r.lost),
            str(r.requeued),
            str(r.duplicated),
            "-" if r.recovery is None else f"{r.recovery:.2f}",
            "-" if r.bad_counted is None else f"{r.bad_counted:.0f}",
            "-" if r.effects is None else str(r.effects),
            str(r.restarts),
            r.note,
        )
    return t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows")
    p.add_argument("--jobs", type=int, default=40, help="jobs per row")
    p.add_argument("--burst", type=int, default=3000, help="submissions of scheduler-kill")
    p.add_argument("--payloads", type=int, default=10_000, help="payloads of hostile")
    p.add_argument("--time-scale", type=float, default=20.0)
    p.add_argument("--keep", action="store_true", help="keep each row's run directory")
    args = p.parse_args()
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        p.error(f"unknown rows {unknown}; choose from {', '.join(ROWS)}")
    console = Console(width=max(160, Console().width))
    bench = Bench(args.time_scale, args.jobs, args.burst, args.payloads, args.keep, console)
    for name in rows:
        console.print(f"[bold]{name}[/] ...", highlight=False)
        started = time.monotonic()
        try:
            result = run_async(run_row(bench, name))
        except (RuntimeError, OSError) as exc:
            result = Result(name, note=f"ERROR: {exc}")
        bench.results.append(result)
        console.print(f"  done in {time.monotonic() - started:.1f} s", highlight=False)
    console.print(table(bench.results))
    bad = [
        r.row
        for r in bench.results
        if r.lost or r.duplicated or r.effects or r.note.startswith("ERROR")
    ]
    with contextlib.suppress(Exception):
        console.print(f"rows with loss, duplicates or errors: {', '.join(bad) or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
