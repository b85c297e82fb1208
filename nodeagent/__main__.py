"""``python -m nodeagent``: run one node agent on an MQTT broker until SIGINT or SIGTERM.

The bus is created with the agent's Last Will (``agent_will``). Job processes
are forked by the agent's warm launcher (``nodeagent.launch.forkserver``) and reach
the broker through the agent's own connection (``nodeagent.launch.relay``): they
hold no credentials and open no connection. The loop is uvloop when
installed, and SIGINT/SIGTERM stop the agent by the stop rule of
``nodeagent.agent.node_agent``: it leaves its parts running for its next
incarnation (the default), drains them (``--drain-on-stop``), or, without
adoption, ends them; no job's requeue budget is charged for it.

Before it speaks as its machine, it checks that no other live agent holds the
machine's name, through a probe connection that disturbs nobody
(``nodeagent.survival.incarnation``), and notes its incarnation in its state
directory; then it adopts the parts a predecessor for the same machine left
running there (``--state-dir``; ``nodeagent.survival.adoption``). Exit status: 0
after a stop, 1 if the broker connection failed or was lost (the broker has
then published the will), 2 on a usage error, a state directory another agent
holds, or a machine name another live agent holds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from broker.auth import PROBE_SUFFIX
from broker.bus import BusError
from broker.mqtt import MqttBus, MqttSettings
from broker.settings import ENV_PROBE_USERNAME
from broker.topics import DEFAULT_ROOT, Topics
from model.machine import Machine, MachineError
from nodeagent.agent.cpuset import checked_cpuset, parse_cpuset
from nodeagent.agent.exporter import serve_metrics
from nodeagent.agent.node_agent import (
    AgentSettings,
    NodeAgent,
    StopMode,
    agent_will,
    machine_spec,
    new_incarnation,
)
from nodeagent.job.kernel import Score, benchmark
from nodeagent.launch.exporter import LauncherCollector
from nodeagent.launch.forkserver import ForkServer
from nodeagent.launch.relay import Relay, RelaySpawn
from nodeagent.launch.runner import run
from nodeagent.survival.adoption import RejoinServer, adopted_key, survey
from nodeagent.survival.incarnation import (
    LEAST_PATIENCE,
    NameTakenError,
    Record,
    check_name,
    new_record,
    read_record,
    write_record,
)
from nodeagent.survival.lease import DEFAULT_LEASE
from nodeagent.survival.state import StateDir, StateError, default_state_dir

log = logging.getLogger("nodeagent")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m nodeagent", description=__doc__)
    p.add_argument("--host", default="127.0.0.1", help="MQTT broker host")
    p.add_argument("--port", type=int, default=1883, help="MQTT broker port")
    p.add_argument(
        "--name",
        required=True,
        help="machine id (letters, digits, _ . : @ -); '{hostname}' in it is replaced by "
        "this host's name, so replicas of one container template get distinct ids",
    )
    p.add_argument("--cpus", type=int, required=True, help="CPUs this machine offers")
    p.add_argument(
        "--speed",
        default="1.0",
        help="benchmark speed of this machine, or 'auto' to measure it at start with the "
        "ranks' CPU kernel (nodeagent.job.kernel; 1.0 is its reference machine)",
    )
    p.add_argument(
        "--cpuset",
        default=None,
        help="host CPUs this agent pins ranks to, e.g. 0-1 (default: its affinity)",
    )
    p.add_argument("--labels", default="", help="comma-separated labels")
    p.add_argument("--root", default=DEFAULT_ROOT, help="topic root")
    p.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="accept only parts with this time compression (default: the scheduler's)",
    )
    p.add_argument("--metrics-port", type=int, default=None, help="Prometheus port (0: any)")
    p.add_argument(
        "--metrics-addr",
        default="127.0.0.1",
        help="Prometheus listen address (0.0.0.0 to serve other hosts)",
    )
    p.add_argument("--heartbeat", type=float, default=2.0, help="heartbeat interval (s)")
    p.add_argument("--kill-grace", type=float, default=5.0, help="SIGTERM to SIGKILL (s)")
    p.add_argument("--walltime-grace", type=float, default=2.0, help="past the limit (s)")
    p.add_argument(
        "--lease",
        type=float,
        default=DEFAULT_LEASE,
        help="wall s parts run on without the broker acknowledging a heartbeat; keep it "
        "below the scheduler's silence limit (0: no lease; default %(default)s)",
    )
    p.add_argument(
        "--client-id",
        default="agent-{name}",
        help="MQTT client id; {name} is the machine id (default %(default)s). A broker whose "
        "ACL grants each agent its own topics by client id (the compose testbed's "
        "pattern rules on %%c) needs --client-id={name}",
    )
    p.add_argument(
        "--state-dir",
        default=None,
        help="this machine's state directory: part records, leases, the relay socket "
        "(created 0700; default $XDG_RUNTIME_DIR/accordion/<name>, else "
        "/tmp/accordion-<uid>/<name>). A restarted agent for the same machine adopts "
        "the parts it finds there",
    )
    p.add_argument(
        "--no-adopt",
        action="store_true",
        help="parts stop with their agent, and a restarted agent kills what it finds "
        "instead of adopting it (the scheduler then requeues at once)",
    )
    p.add_argument(
        "--drain-on-stop",
        action="store_true",
        help="on SIGTERM, take no new part, run the parts to their end and then say goodbye "
        "(a second SIGTERM leaves them); default: leave them running for the next "
        "incarnation to adopt within the lease",
    )
    p.add_argument("--log-level", default="INFO")
    return p


async def _check_name(
    args: argparse.Namespace,
    mqtt: MqttSettings,
    client_id: str,
    machine: Machine,
    *,
    settings: AgentSettings,
    predecessor: Record | None,
) -> None:
    """Raise ``NameTakenError`` if another live agent holds the machine's name, looking
    through a probe of its own login and client id (``nodeagent.survival.incarnation``)."""
    probe_login = os.environ.get(ENV_PROBE_USERNAME) or mqtt.username
    probe_settings = dataclasses.replace(mqtt, username=probe_login)
    patience = max(LEAST_PATIENCE, 2 * settings.heartbeat_interval)
    async with MqttBus(probe_settings, f"{client_id}{PROBE_SUFFIX}") as probe:
        await check_name(probe, Topics(args.root), machine.id, predecessor, patience=patience)


async def _main(
    args: argparse.Namespace, machine: Machine, settings: AgentSettings, state: StateDir, lock: int
) -> int:
    topics = Topics(args.root)
    incarnation = new_incarnation()
    will = agent_will(topics, machine.id, incarnation)
    failed = False
    agents: list[NodeAgent] = []

    async def reconnected() -> None:
        for agent in agents:
            await agent.reconnected()

    try:
        # Credentials, if any, come from the environment (ACCORDION_MQTT_*), never argv.
        mqtt = MqttSettings(host=args.host, port=args.port).with_env()
    except ValueError as exc:
        log.error("agent %s: %s", machine.id, exc)
        return 2
    client_id = args.client_id.replace("{name}", machine.id)
    predecessor = read_record(state)
    try:
        await _check_name(
            args, mqtt, client_id, machine, settings=settings, predecessor=predecessor
        )
    except NameTakenError as exc:
        log.error("agent %s refused: %s", machine.id, exc)
        return 2
    except BusError as exc:
        log.error("agent %s: %s", machine.id, exc)
        return 1
    record = new_record(incarnation)
    write_record(state, record)
    try:
        async with (
            contextlib.AsyncExitStack() as stack,
            MqttBus(mqtt, client_id, will=will, on_reconnect=reconnected) as bus,
            ForkServer(hold_fds=(lock,)) as launcher,
            asyncio.TaskGroup() as tg,
        ):
            relay = Relay(bus, topics, machine.id)
            pump = tg.create_task(relay.pump(), name=f"agent-{machine.id}-relay")
            # Before registering: the parts the previous incarnation left (adopted, or
            # killed and reported), so the first announcement lists what runs here.
            found = await survey(
                state, machine.id, relay, adopt=settings.adopt and settings.lease > 0
            )
            # Its predecessor's parts that died meanwhile are not charged if it was
            # stopped by its operator (its record says so).
            found.after_stop = predecessor is not None and predecessor.stopped is not None
            log.info(
                "agent %s: %d part(s) adopted, %d not (%d killed), %d bad record(s)",
                machine.id,
                len(found.adopted),
                len(found.lost),
                found.killed,
                found.bad_records,
            )
            rejoin = RejoinServer(
                state, {adopted_key(a): a.process for a in found.adopted}, relay.stats
            )
            await stack.enter_async_context(rejoin)
            agent = NodeAgent(
                bus=relay.agent_bus,
                topics=topics,
                machine=machine,
                spawn=RelaySpawn(launcher, relay, state),
                settings=settings,
                incarnation=incarnation,
                state=state,
                survey=found,
            )
            agents.append(agent)

            def stopping(mode: StopMode) -> None:
                write_record(state, dataclasses.replace(record, stopped=mode))
                if mode == "leave":
                    rejoin.close()  # its jobs rejoin the next incarnation, not this one

            agent.on_stop = stopping
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, agent.stop)
            metrics = None
            if args.metrics_port is not None:
                registry = CollectorRegistry()
                registry.register(LauncherCollector(machine.id, launcher.stats, relay.stats))
                metrics = serve_metrics(
                    agent.stats,
                    port=args.metrics_port,
                    addr=args.metrics_addr,
                    registry=registry,
                    process=True,
                    info={"speed": f"{machine.speed:g}", "labels": ",".join(machine.labels)},
                )
                log.info("metrics on http://%s:%d/metrics", args.metrics_addr, metrics.port)
            try:
                await agent.run()
            finally:
                pump.cancel()
                if agent.leaves_parts:
                    launcher.leave()  # its children run on for the next incarnation
                if metrics is not None:
                    metrics.close()
    except* BusError as group:  # a failed connect, or the connection lost while running
        log.error("agent %s: %s", machine.id, "; ".join(map(str, group.exceptions)))
        failed = True
    return 1 if failed else 0


def machine_name(template: str, hostname: str) -> str:
    """``template`` with ``{hostname}`` replaced by the short ``hostname``.

    A container's hostname is unique on its host (docker: the container id;
    swarm: whatever the service's ``hostname`` template says), so every
    replica of ``--name 'fast-{hostname}'`` is a different machine.
    """
    return template.replace("{hostname}", hostname.split(".", 1)[0])


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    labels = tuple(label for label in args.labels.split(",") if label)
    try:
        cpuset = None if args.cpuset is None else checked_cpuset(parse_cpuset(args.cpuset))
        speed, score = measured_speed(args.speed)
        machine = Machine(
            id=machine_name(args.name, socket.gethostname()),
            cpus=args.cpus,
            speed=speed,
            labels=labels,
        )
        machine_spec(machine)
        settings = AgentSettings(
            heartbeat_interval=args.heartbeat,
            kill_grace=args.kill_grace,
            walltime_grace=args.walltime_grace,
            time_scale=args.time_scale,
            lease=args.lease,
            cpuset=cpuset,
            speed_score=None if score is None else score.score,
            speed_spread=None if score is None else score.spread,
            adopt=not args.no_adopt,
            drain_on_stop=args.drain_on_stop,
        )
        state = StateDir(args.state_dir or default_state_dir(machine.id))
        state.create()
    except (MachineError, ValueError) as exc:
        parser.error(str(exc))
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if settings.speed_score is not None:
        log.info(
            "agent %s: measured speed %.3f (spread %.0f %%)",
            machine.id,
            settings.speed_score,
            100 * (settings.speed_spread or 0.0),
        )
    try:
        # Waits for an old incarnation's fork server to be gone (it holds the lock too).
        lock = state.lock(patience=max(10.0, settings.lease))
    except StateError as exc:
        log.error("agent %s: %s", machine.id, exc)
        return 2
    try:
        return run(_main(args, machine, settings, state, lock))
    finally:
        state.unlock()


def measured_speed(text: str) -> tuple[float, Score | None]:
    """The machine's speed: a declared number, or ``auto``'s benchmark and its score."""
    if text.strip().lower() == "auto":
        score = benchmark()
        return score.score, score
    try:
        return float(text), None
    except ValueError:
        raise ValueError(f"--speed must be a number or 'auto', got {text!r}") from None


if __name__ == "__main__":
    sys.exit(main())
