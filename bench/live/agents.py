"""The live benchmark's agents: a stand-in that only answers, and many real ones hosted
in one process.

- :class:`FakeAgent` registers a machine, heartbeats, and (``finish``) ends
  every part at once, recording when each ``StartPart`` arrived: the scheduler
  and broker are then all that is measured.
- :func:`host_agents` runs one real ``NodeAgent`` per name in this process, on
  one event loop, each on its own MQTT connection: how many agents one machine
  can host. ``bench/live/__main__.py`` starts it as a child
  (``python -m bench.live.agents --names a,b --url mqtt://... --root R``),
  which ends on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from accordion.client.live_client import run_async  # noqa: E402
from broker.codec import decode, encode  # noqa: E402
from broker.messages import (  # noqa: E402
    AgentOnline,
    Heartbeat,
    MachineSpec,
    PartFinished,
    PartStarted,
    StartPart,
)
from broker.mqtt import MqttBus, MqttSettings  # noqa: E402
from broker.topics import Topics  # noqa: E402
from model.machine import Machine  # noqa: E402


@dataclass
class FakeAgent:
    """Registers a machine, heartbeats, and (``finish``) ends every part at once.

    Records when each ``StartPart`` arrived (``time.perf_counter``).
    """

    settings: MqttSettings
    topics: Topics
    machine: MachineSpec
    finish: bool
    arrived: dict[str, float] = field(default_factory=dict)
    waiters: dict[str, asyncio.Event] = field(default_factory=dict)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        state = self.topics.agent_state(self.machine.id)
        async with (
            MqttBus(self.settings, f"bench-fake-{self.machine.id}") as bus,
            asyncio.TaskGroup() as tg,
        ):
            await bus.subscribe(self.topics.agent_commands(self.machine.id))
            online = AgentOnline(machine=self.machine, incarnation=uuid.uuid4().hex, running=())
            await bus.publish(state, encode(online), retain=True)
            reader = tg.create_task(self._read(bus), name=f"bench-fake-{self.machine.id}")
            beat = tg.create_task(self._beat(bus), name=f"bench-beat-{self.machine.id}")
            try:
                yield
            finally:
                reader.cancel()
                beat.cancel()
                await bus.publish(state, b"", retain=True)

    async def _beat(self, bus: MqttBus) -> None:
        for seq in itertools.count():
            beat = Heartbeat(agent_id=self.machine.id, seq=seq, running=())
            await bus.publish(self.topics.agent_events(self.machine.id), encode(beat))
            await asyncio.sleep(2.0)

    async def _read(self, bus: MqttBus) -> None:
        events = self.topics.agent_events(self.machine.id)
        async for d in bus.deliveries():
            message = decode(d.payload)
            if not isinstance(message, StartPart):
                continue
            job_id = message.job.id
            self.arrived[job_id] = time.perf_counter()
            if job_id in self.waiters:
                self.waiters[job_id].set()
            if self.finish:
                me = self.machine.id
                started = PartStarted(job_id=job_id, agent_id=me, pid=0, at=0.0)
                done = PartFinished(job_id=job_id, agent_id=me, exit_code=0, at=0.0, reason="done")
                await bus.publish(events, encode(started))
                await bus.publish(events, encode(done))


async def host_agents(url: str, root: str, names: Sequence[str]) -> None:
    """In the child: run one NodeAgent per name, each on its own MQTT connection."""
    from nodeagent.agent.node_agent import AgentSettings, NodeAgent, agent_will, new_incarnation
    from nodeagent.launch.spawn import MqttSpawn

    settings = MqttSettings.from_url(url)
    topics = Topics(root)
    agents: list[NodeAgent] = []
    async with AsyncExitStack() as stack:
        for name in names:
            incarnation = new_incarnation()
            bus = await stack.enter_async_context(
                MqttBus(settings, f"agent-{name}", will=agent_will(topics, name, incarnation))
            )
            agents.append(
                NodeAgent(
                    bus=bus,
                    topics=topics,
                    machine=Machine(id=name, cpus=8),
                    spawn=MqttSpawn(settings.host, settings.port),
                    settings=AgentSettings(),
                    incarnation=incarnation,
                )
            )

        def stop() -> None:
            for agent in agents:
                agent.stop()

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop)
        async with asyncio.TaskGroup() as tg:
            for agent in agents:
                tg.create_task(agent.run(), name=f"agent-{agent.agent_id}")


def command(url: str, root: str, names: Sequence[str]) -> list[str]:
    """The command line of a child hosting ``names`` (see the module docstring)."""
    return [sys.executable, __file__, "--names", ",".join(names), "--url", url, "--root", root]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--names", required=True, help="agent names, comma-separated")
    parser.add_argument("--url", required=True, help="the broker, mqtt://host:port")
    parser.add_argument("--root", required=True, help="the cluster's topic root")
    args = parser.parse_args()
    run_async(host_agents(args.url, args.root, args.names.split(",")))


if __name__ == "__main__":
    main()
