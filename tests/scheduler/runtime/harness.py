"""The scheduler actor on the in-process broker, with a fake client and fake agents.

A :class:`Cluster` runs one :class:`~scheduler.runtime.actor.SchedulerActor` on a
:class:`~broker.memory.MemoryBroker` with a :class:`~scheduler.runtime.clock.ManualClock`
and a journal in a temporary directory. :class:`Client` submits and reads its
replies; :class:`FakeAgent` registers (with a Last Will), answers ``StartPart``
with ``PartStarted`` (and, if told to, ``PartFinished`` at once), and lets
the test decide when parts end, when heartbeats go out and when it dies.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from prometheus_client.parser import text_string_to_metric_families

from broker.bus import Bus, Will
from broker.codec import decode, encode
from broker.memory import MemoryBroker, MemoryBus
from broker.messages import (
    AgentOffline,
    AgentOnline,
    AnyMessage,
    CancelPart,
    Heartbeat,
    JobSpec,
    MachineSpec,
    Message,
    PartFinished,
    PartStarted,
    RunningPart,
    StartPart,
    StatusReply,
    StatusRequest,
    SubmitJobs,
    SubmitReply,
)
from broker.topics import Topics
from broker.vocabulary import CommandUsers, MpiLibrary
from model.execution import DEFAULT_MODEL, ExecutionModel
from scheduler.policies.registry import build_policy
from scheduler.runtime.actor import ActorSettings, SchedulerActor
from scheduler.runtime.clock import ManualClock
from scheduler.runtime.journal import Journal
from tests.builders import spec

M = TypeVar("M", bound=Message)

TOPICS = Topics("test/v1")
# Periodic checks only when a test asks (Cluster.tick), so a ManualClock moved by hand
# never makes an agent look silent behind the test's back.
SETTINGS = ActorSettings(
    tick_interval=3600.0,
    summary_interval=0.0,
    reconcile_grace=10.0,
    startup_grace=0.0,
    job_events="all",
)


def served_totals(port: int) -> dict[tuple[str, str], float]:
    """Every accordion counter sample (``*_total``) served on ``port``'s metrics endpoint,
    by name and labels (a process collector's CPU seconds rightly restart: left out)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        (s.name, repr(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("accordion_") and s.name.endswith("_total")
    }


async def eventually(predicate: Callable[[], object], *, timeout: float = 5.0) -> None:
    """Wait until ``predicate()`` is true (the actor works in its own task)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {predicate}")
        await asyncio.sleep(0.001)


@dataclass
class Inbox:
    """Messages one client received, in order, with a way to wait for one."""

    seen: list[tuple[str, AnyMessage]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, topic: str, message: AnyMessage) -> None:
        self.seen.append((topic, message))
        self.arrived.set()

    def all(self, kind: type[M], where: Callable[[M], bool] = lambda _: True) -> list[M]:
        return [m for _, m in self.seen if isinstance(m, kind) and where(m)]

    async def expect(
        self, kind: type[M], where: Callable[[M], bool] = lambda _: True, *, timeout: float = 5.0
    ) -> M:
        async with asyncio.timeout(timeout):
            while True:
                found = self.all(kind, where)
                if found:
                    return found[0]
                self.arrived.clear()
                await self.arrived.wait()


class Client:
    """A user of the scheduler: publishes requests, reads its replies."""

    def __init__(self, broker: MemoryBroker, name: str = "c1") -> None:
        self.name = name
        self.bus = broker.client(f"client-{name}")
        self.inbox = Inbox()
        self._task: asyncio.Task[None] | None = None
        self._n = 0

    async def start(self, *extra_topics: str) -> None:
        await self.bus.__aenter__()
        await self.bus.subscribe(TOPICS.replies(self.name))
        for topic in extra_topics:
            await self.bus.subscribe(topic)
        self._task = asyncio.create_task(self._read(), name=f"test-client-{self.name}")

    async def _read(self) -> None:
        async for d in self.bus.deliveries():
            if d.payload:
                self.inbox.add(d.topic, decode(d.payload))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self.bus.__aexit__(None, None, None)

    def request_id(self) -> str:
        self._n += 1
        return f"r{self._n}"

    async def send(self, message: Message) -> None:
        await self.bus.publish(TOPICS.requests, encode(message))

    async def send_raw(self, payload: bytes, topic: str = TOPICS.requests) -> None:
        await self.bus.publish(topic, payload)

    async def submit(self, *specs: JobSpec, timeout: float = 5.0) -> SubmitReply:
        rid = self.request_id()
        await self.send(SubmitJobs(request_id=rid, reply_to=self.name, jobs=specs))
        return await self.inbox.expect(SubmitReply, lambda r: r.request_id == rid, timeout=timeout)


class FakeAgent:
    """An agent that does what the test says (see the module docstring)."""

    def __init__(
        self,
        broker: MemoryBroker,
        agent_id: str,
        cpus: int = 4,
        *,
        speed: float = 1.0,
        incarnation: str = "i1",
        auto_finish: bool = False,
        lease: float = 0.0,
        adopts: bool = False,
        ack_starts: bool = True,
        commands: CommandUsers = CommandUsers.OFF,
        mpi: tuple[MpiLibrary, ...] = (),
    ) -> None:
        self.broker = broker
        self.id = agent_id
        self.cpus = cpus
        self.speed = speed
        self.incarnation = incarnation
        self.auto_finish = auto_finish
        #: What it declares: its lease, and whether its parts outlive it (adoption).
        self.lease = lease
        self.adopts = adopts
        #: False: a start is recorded but never answered (a process killed before it).
        self.ack_starts = ack_starts
        #: Whom it says it runs users' commands as (``off``: it runs none).
        self.runs_commands = commands
        #: The MPI libraries it says it can launch.
        self.mpi = mpi
        self.commands: list[Message] = []
        self.running: dict[str, StartPart] = {}
        self.bus: MemoryBus | None = None
        self._task: asyncio.Task[None] | None = None
        self._seq = 0

    def _will(self) -> Will:
        offline = AgentOffline(agent_id=self.id, incarnation=self.incarnation, reason="lost")
        return Will(TOPICS.agent_state(self.id), encode(offline), retain=True)

    async def start(self, *, announce: Iterable[RunningPart] = ()) -> None:
        """Connect (with a will), subscribe to commands and publish AgentOnline."""
        self.bus = self.broker.client(f"agent-{self.id}", will=self._will())
        await self.bus.__aenter__()
        await self.bus.subscribe(TOPICS.agent_commands(self.id))
        self._task = asyncio.create_task(self._read(self.bus), name=f"test-agent-{self.id}")
        await self.announce(announce)

    async def announce(self, running: Iterable[RunningPart] = ()) -> None:
        online = AgentOnline(
            machine=MachineSpec(id=self.id, cpus=self.cpus, speed=self.speed),
            incarnation=self.incarnation,
            running=tuple(running),
            lease=self.lease,
            adopts=self.adopts,
            commands=self.runs_commands,
            mpi=self.mpi,
        )
        await self.publish(TOPICS.agent_state(self.id), online, retain=True)

    async def publish(self, topic: str, message: Message, *, retain: bool = False) -> None:
        assert self.bus is not None
        await self.bus.publish(topic, encode(message), retain=retain)

    async def event(self, message: Message) -> None:
        await self.publish(TOPICS.agent_events(self.id), message)

    async def _read(self, bus: MemoryBus) -> None:
        async for d in bus.deliveries():
            message = decode(d.payload)
            await self._react(message)
            # Recorded after the reaction is published, so a test that sees the
            # command knows the scheduler's inbox already holds the answer.
            self.commands.append(message)

    async def _react(self, message: AnyMessage) -> None:
        if isinstance(message, StartPart):
            job_id = message.job.id
            self.running[job_id] = message
            if not self.ack_starts:
                return
            await self.event(
                PartStarted(job_id=job_id, agent_id=self.id, pid=1, at=0.0, attempt=message.attempt)
            )
            if self.auto_finish:
                await self.finish(job_id)
        elif isinstance(message, CancelPart) and message.job_id in self.running:
            attempt = self.running[message.job_id].attempt
            if message.attempt not in (0, attempt):
                return  # another start of the job (fencing)
            del self.running[message.job_id]
            await self.event(
                PartFinished(
                    job_id=message.job_id,
                    agent_id=self.id,
                    exit_code=-15,
                    at=0.0,
                    reason="cancelled",
                    attempt=attempt,
                )
            )

    async def finish(self, job_id: str, *, exit_code: int = 0, reason: str = "done") -> None:
        start = self.running.pop(job_id, None)
        await self.event(
            PartFinished(
                job_id=job_id,
                agent_id=self.id,
                exit_code=exit_code,
                at=0.0,
                reason=reason,  # type: ignore[arg-type]
                attempt=0 if start is None else start.attempt,
            )
        )

    def part(self, job_id: str) -> RunningPart:
        """``job_id`` as this agent reports it: its start's CPUs and attempt, if it has one
        (else 1 CPU and attempt 0, "not said")."""
        start = self.running.get(job_id)
        if start is None:
            return RunningPart(job_id=job_id, cpus=1, started=0.0)
        return RunningPart(job_id=job_id, cpus=start.cpus, started=0.0, attempt=start.attempt)

    async def heartbeat(self, running: Iterable[str] | None = None) -> None:
        self._seq += 1
        ids = tuple(self.running) if running is None else tuple(running)
        listed = tuple(self.part(j) for j in ids)
        await self.event(Heartbeat(agent_id=self.id, seq=self._seq, running=listed))

    def starts(self) -> list[StartPart]:
        return [c for c in self.commands if isinstance(c, StartPart)]

    def started(self, job_id: str) -> bool:
        return any(s.job is not None and s.job.id == job_id for s in self.starts())

    def cancels(self, job_id: str) -> int:
        return sum(1 for c in self.commands if isinstance(c, CancelPart) and c.job_id == job_id)

    async def kill(self) -> None:
        """Die without a goodbye: the broker publishes the Last Will."""
        assert self.bus is not None
        if self._task is not None:
            self._task.cancel()
        will = self.bus.kill()
        if will is not None:
            await will

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self.bus is not None:
            await self.bus.__aexit__(None, None, None)


class Cluster:
    """A scheduler actor, its broker, clock and journal; fake agents and a client."""

    def __init__(
        self,
        path: Path,
        *,
        policy: str = "fcfs",
        settings: ActorSettings = SETTINGS,
        broker: MemoryBroker | None = None,
        clock: ManualClock | None = None,
        wrap_bus: Callable[[MemoryBus], Bus] | None = None,
        execution: ExecutionModel = DEFAULT_MODEL,
        archive: bool | None = None,
    ) -> None:
        self.execution = execution
        #: As ``Journal``'s: attach the journal's archive (True), or only if it exists.
        self.archive = archive
        self.path = path
        self.wrap_bus = wrap_bus
        self.policy = policy
        self.settings = settings
        self.broker = broker or MemoryBroker()
        self.clock = clock or ManualClock(1000.0)
        self.journal: Journal | None = None
        self.actor: SchedulerActor | None = None
        self.bus: MemoryBus | None = None
        self.task: asyncio.Task[None] | None = None
        self.client = Client(self.broker)
        self.agents: dict[str, FakeAgent] = {}

    async def start(self) -> SchedulerActor:
        """Start (or restart) the scheduler on the journal at ``path``."""
        self.journal = Journal(self.path, archive=self.archive)
        self.journal.ensure_meta(epoch=0.0, time_scale=self.clock.time_scale, policy=self.policy)
        self.bus = self.broker.client("scheduler")
        await self.bus.__aenter__()
        self.actor = SchedulerActor(
            self.bus if self.wrap_bus is None else self.wrap_bus(self.bus),
            TOPICS,
            policy=build_policy(self.policy),
            journal=self.journal,
            clock=self.clock,
            settings=self.settings,
            execution=self.execution,
        )
        self.task = asyncio.create_task(self.actor.run(), name="test-scheduler")
        # Subscribed once the retained agent states have been replayed into the bus.
        await eventually(lambda: len(self.bus._patterns) == 5)  # type: ignore[union-attr]
        return self.actor

    async def kill_scheduler(self) -> None:
        """Drop the actor mid-flight: no clean stop, the journal left as it is."""
        assert self.task is not None
        assert self.bus is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        self.bus.kill()
        # Not closed: a killed process closes nothing; the next start opens its own.
        self.journal = None

    async def stop(self) -> None:
        if self.actor is not None and self.task is not None and not self.task.done():
            self.actor.stop()
            await asyncio.wait_for(self.task, 5)
        for agent in self.agents.values():
            await agent.close()
        await self.client.close()
        if self.bus is not None:
            await self.bus.__aexit__(None, None, None)
        if self.journal is not None:
            self.journal.close()

    async def agent(self, agent_id: str, cpus: int = 4, **kwargs: object) -> FakeAgent:
        agent = FakeAgent(self.broker, agent_id, cpus, **kwargs)  # type: ignore[arg-type]
        self.agents[agent_id] = agent
        await agent.start()
        await eventually(lambda: self.online(agent_id))
        return agent

    async def job_on_the_faster_of_two(self, job_id: str = "j") -> tuple[FakeAgent, FakeAgent]:
        """Agents ``a1`` (4 CPUs, speed 2) and ``a2`` (4 CPUs, speed 1), and a 2-process
        job started on ``a1`` (the fastest placement). Returns ``(a1, a2)``."""
        a1 = await self.agent("a1", 4, speed=2.0)
        a2 = await self.agent("a2", 4)
        await self.client.submit(spec(job_id, 2))
        await eventually(lambda: a1.started(job_id))
        return a1, a2

    async def job_across_two(self, job_id: str = "wide") -> tuple[FakeAgent, FakeAgent]:
        """Agents ``a1`` and ``a2`` of 2 CPUs each, and a 4-process job started with a
        part on each. Returns ``(a1, a2)``."""
        a1 = await self.agent("a1", 2)
        a2 = await self.agent("a2", 2)
        await self.client.submit(spec(job_id, 4))
        await eventually(lambda: a1.started(job_id) and a2.started(job_id))
        return a1, a2

    def online(self, agent_id: str) -> bool:
        assert self.actor is not None
        return any(m.id == agent_id for m in self.actor.core.machines)

    def agent_state(self, agent_id: str) -> str:
        assert self.actor is not None
        return self.actor.ctx.agents[agent_id].life.state.value

    def state(self, job_id: str) -> str | None:
        assert self.actor is not None
        found = self.actor.core.state_of(job_id)
        return None if found is None else found.value

    async def settle(self) -> None:
        """Wait until the actor has handled everything published so far (a round trip)."""
        client = self.client
        rid = client.request_id()
        await client.send(StatusRequest(request_id=rid, reply_to=client.name))
        await client.inbox.expect(StatusReply, lambda r: r.request_id == rid)

    async def tick(self, advance: float = 0.0) -> None:
        """Let the actor catch up, move the clock, run the periodic checks, wait for them."""
        assert self.actor is not None
        await self.settle()
        self.clock.advance(advance)
        before = self.actor.batches
        self.actor.tick()
        await eventually(lambda: self.actor is not None and self.actor.batches > before)
