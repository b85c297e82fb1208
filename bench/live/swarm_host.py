"""One process of the swarm bench: many lightweight simulated agents, each on its own
MQTT connection.

``bench/live/swarm.py`` starts several of these (``python bench/live/swarm_host.py
--url mqtt://... --root R --prefix p --first 0 --count 2500``). Each simulated agent
does what the scheduler sees of a real one and nothing else: it connects with its
own client id and its Last Will (a retained ``AgentOffline(lost)``), subscribes to
its commands topic, registers with a retained ``AgentOnline`` and publishes a
``Heartbeat`` (QoS 1, no parts) every ``--beat`` wall seconds, starting at a random
phase so that the beats of many agents spread over the period as real ones do.
No job is run: the scheduler's cost of agents that change nothing is what is
measured.

The messages come from the ``broker`` package found on ``PYTHONPATH`` (this
script does not put its own checkout first), so the bench can run the same
agents against an older scheduler's checkout, in that checkout's protocol.
The process prints ``connected N`` once all its agents have registered, and
ends on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import random
import resource
import signal
import sys
import uuid
from contextlib import AsyncExitStack


def raise_open_files() -> None:
    """Lift the soft limit on open files to the hard one (one socket per agent)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def host(url: str, root: str, names: list[str], beat: float, at_once: int) -> None:
    from broker.bus import Will
    from broker.codec import encode
    from broker.messages import AgentOffline, AgentOnline, Heartbeat, MachineSpec
    from broker.mqtt import MqttBus, MqttSettings
    from broker.topics import Topics

    settings = MqttSettings.from_url(url)
    topics = Topics(root)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    rng = random.Random(names[0] if names else 0)  # phases only, not a secret
    gate = asyncio.Semaphore(at_once)

    registered = 0
    everyone = asyncio.Event()

    async def agent(stack: AsyncExitStack, tg: asyncio.TaskGroup, name: str) -> None:
        nonlocal registered
        incarnation = uuid.uuid4().hex
        state, events = topics.agent_state(name), topics.agent_events(name)
        offline = AgentOffline(agent_id=name, incarnation=incarnation, reason="lost")
        will = Will(topic=state, payload=encode(offline), retain=True)
        async with gate:
            bus = await stack.enter_async_context(MqttBus(settings, f"swarm-{name}", will=will))
            await bus.subscribe(topics.agent_commands(name))
            online = AgentOnline(
                machine=MachineSpec(id=name, cpus=8), incarnation=incarnation, running=()
            )
            await bus.publish(state, encode(online), retain=True)
        registered += 1
        if registered == len(names):
            everyone.set()
        # Beats from its registration on, at a phase of its own, as a real agent's
        # (``nodeagent.agent.heartbeats``): each sent without waiting for its
        # acknowledgement, the next one a period after it, none doubled while one
        # is still in flight.
        await asyncio.sleep(rng.uniform(0.0, beat))
        in_flight: asyncio.Task[None] | None = None
        for seq in itertools.count():
            if in_flight is None or in_flight.done():
                payload = encode(Heartbeat(agent_id=name, seq=seq, running=()))
                # In the host's task group: a publish that fails ends the host.
                in_flight = tg.create_task(bus.publish(events, payload), name=f"beat-{name}")
            await asyncio.sleep(beat)

    async with AsyncExitStack() as stack, asyncio.TaskGroup() as tg:
        running = [tg.create_task(agent(stack, tg, n), name=f"swarm-agent-{n}") for n in names]
        await everyone.wait()
        # Thousands of connections are millions of objects: a full collection walking
        # them stalls every agent of the process at once, for a second or more (a
        # stall no real agent, alone in its process, has). Those objects live as
        # long as the process: the collector need not look at them again.
        gc.freeze()
        print(f"connected {len(names)}", flush=True)
        await stop.wait()
        for task in running:
            task.cancel()
        # Leaving the stack closes the connections (cleanly: no will is published).


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", required=True, help="the broker, mqtt://host:port")
    parser.add_argument("--root", required=True, help="the cluster's topic root")
    parser.add_argument("--prefix", required=True, help="agent names are PREFIX-<i>")
    parser.add_argument("--first", type=int, default=0, help="the first agent's index")
    parser.add_argument("--count", type=int, required=True, help="agents in this process")
    parser.add_argument("--beat", type=float, default=2.0, help="heartbeat period, wall s")
    parser.add_argument("--at-once", type=int, default=64, help="connections opened at once")
    args = parser.parse_args()
    raise_open_files()
    names = [f"{args.prefix}-{i}" for i in range(args.first, args.first + args.count)]
    try:
        import uvloop
    except ImportError:
        asyncio.run(host(args.url, args.root, names, args.beat, args.at_once))
    else:
        uvloop.run(host(args.url, args.root, names, args.beat, args.at_once))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
