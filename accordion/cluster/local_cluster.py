"""A live cluster on this machine, supervised: broker, scheduler and agents as processes.

Theory of operation
-------------------
One process per actor, as in a real deployment: a broker, ``python -m
scheduler`` and one ``python -m nodeagent`` per machine of the cluster file
(the TOML file the twin reads), all on loopback. The broker is Mosquitto when
it is installed (a generated configuration: one loopback listener on a free
port, ``set_tcp_nodelay true``, ``max_queued_messages 0``, ``persistence
false``), else the embedded broker (``python -m broker.embedded``, amqtt),
which speaks only MQTT 3.1.1. That is enough: the protocol carries its
correlation ids and reply addresses in the payloads, not in MQTT 5 properties.

:class:`LocalCluster` starts them in that order and is ready once the
scheduler's ``StatusReply`` lists every machine online and every metrics
endpoint answers. Until then a child that exits ends the start with its log's
tail. Once it is up, :meth:`LocalCluster.supervise` restarts a child that died
(the scheduler, an agent, the broker) with the same command line, after a
backoff that doubles with each restart in a row (from :data:`BACKOFF_FIRST`
up to :data:`BACKOFF_CAP` seconds; a child that ran :data:`STABLE` seconds
starts again from the first). The others ride it out as they do in a real
deployment: clients reconnect to a restarted broker, a restarted scheduler
reconciles from its journal, a restarted agent adopts the parts left
running in its state directory. A child that exits with status 2 (its usage
error) is not restarted: it would only fail again. The stop is in order: the agents first
(each ends its job processes and says goodbye), then the scheduler (it
finishes its batch and closes its journal), then the broker
(:mod:`accordion.cluster.processes` has the details). The run directory holds the
journal, the broker's configuration, one log per process and
``cluster.json``, the processes and their addresses, rewritten at every
restart for tools and tests.

*With logins* (``auth=True``, Mosquitto only; ``auth=None``: on when the
broker is a Mosquitto we start, ``accordion up``'s default) every child gets
its login through its environment, and ``cluster.json`` names each login's
``.env`` file for clients. :meth:`LocalCluster.connect` is a client logged in
as the admin (what ``accordion up`` itself uses to wait for the cluster and
run the demo). The broker, the logins, the ports and the command lines are
``accordion.cluster.wiring``'s; this module starts, watches and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, Literal, Self

from accordion.client.live_client import Credentials, LiveClient, connect
from accordion.cluster.processes import Child, UpError, signals_held, spawn
from accordion.cluster.readiness import scrape, until_ready, until_stops_heard
from accordion.cluster.wiring import (
    ADMIN,
    HOST,
    LEASE_HEARTBEATS,
    LOGINS_PER_USER,
    BrokerKind,
    Sharing,
    Wiring,
    resolve_broker,
)
from broker.auth import AuthFiles
from broker.local import accepts
from broker.messages import MachineStatus
from broker.topics import DEFAULT_ROOT
from model.execution import DEFAULT_MODEL, ExecutionModel
from model.machine import Machine
from scheduler.planning.placement import PlacementRule
from scheduler.policies.registry import build_policy_with
from workload.cluster import ClusterSpec

REPO: Final = Path(__file__).resolve().parents[2]
DEFAULT_CLUSTER: Final = REPO / "examples" / "cluster.toml"

#: Wall seconds each kind of process gets between SIGTERM and SIGKILL. An agent
#: leaves its job processes (or, without adoption, ends them: their own grace is 5 s),
#: then says it stops.
STOP_GRACE: Final = {"agent": 10.0, "scheduler": 10.0, "broker": 5.0}
#: Wall seconds the stop waits for the scheduler to hear every agent's stop before it
#: stops the scheduler too (its journal then holds each job's hold as a stop's).
HEARD_GRACE: Final = 5.0

#: Wall seconds before the first restart of a child that died, doubling up to the cap.
BACKOFF_FIRST: Final = 0.5
BACKOFF_CAP: Final = 30.0
#: Wall seconds a child must have run for its next death to count as a first one.
STABLE: Final = 60.0
#: The exit status of a usage error (argparse's): restarting would not help.
USAGE_ERROR: Final = 2

# Re-exported: the cluster's users know them from here.
__all__ = [
    "ADMIN",
    "HOST",
    "LEASE_HEARTBEATS",
    "LOGINS_PER_USER",
    "BrokerKind",
    "Endpoint",
    "LocalCluster",
    "Restart",
    "UpError",
    "resolve_broker",
    "scrape",
]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One process of the cluster and where to reach it."""

    role: str
    name: str
    address: str
    pid: int
    log: Path
    restarts: int = 0


@dataclass(frozen=True, slots=True)
class Restart:
    """What the supervisor did about a dead child: scheduled or done."""

    role: str
    name: str
    #: The dead process's exit status (negative: killed by that signal).
    exit_code: int | None
    #: The restart this is (1 for the first of this child).
    count: int
    #: Wall seconds until it starts again; 0 once it has (``pid`` is then the new one).
    delay: float
    pid: int | None = None

    def describe(self) -> str:
        if self.pid is None:
            return (
                f"{self.role} {self.name} exited with code {self.exit_code}; "
                f"restart {self.count} in {self.delay:g} s"
            )
        return f"restarted {self.role} {self.name} (restart {self.count}, pid {self.pid})"


class LocalCluster:
    """Broker, scheduler and agents as local processes (see the module docstring).

    ``with LocalCluster(...) as cluster`` starts them and stops them in order
    on exit, also on an exception or Ctrl-C. ``broker_url`` uses a running
    broker instead of starting one (tests, a shared broker);
    ``start_agents=False`` leaves the machines to agents started elsewhere
    (the benchmarks host hundreds in one process).
    """

    def __init__(
        self,
        spec: ClusterSpec,
        run_dir: Path,
        *,
        policy: str = "easy",
        placement: PlacementRule = PlacementRule.FASTEST,
        time_scale: float = 1.0,
        broker: BrokerKind = "auto",
        broker_port: int = 0,
        broker_url: str | None = None,
        root: str = DEFAULT_ROOT,
        policy_options: Mapping[str, str] | None = None,
        heartbeat: float = 2.0,
        lease: float | None = None,
        walltime_grace: float = 5.0,
        start_agents: bool = True,
        python: str = sys.executable,
        on_restart: Callable[[Restart], None] | None = None,
        execution: ExecutionModel = DEFAULT_MODEL,
        clock: Callable[[], float] = time.monotonic,
        auth: bool | None = False,
        users: Sequence[str] = (),
        extra_agents: Sequence[str] = (),
        sharing: Sharing | None = None,
        drain_on_stop: bool = False,
        journal: Path | None = None,
    ) -> None:
        if not (time_scale > 0 and math.isfinite(time_scale)):
            raise ValueError(f"time scale must be > 0, got {time_scale!r}")
        if not 0 <= broker_port < 65536:
            raise ValueError(f"broker port {broker_port} is not in 0..65535")
        self.policy_options = dict(policy_options or {})
        # A bad name or option fails before anything starts (the clock: as the scheduler's).
        build_policy_with(policy, self.policy_options, placement=placement, clock=time.monotonic)
        self.spec = spec
        self.run_dir = run_dir
        self.policy = policy
        self.placement = placement
        self.time_scale = time_scale
        kind = "external" if broker_url is not None else resolve_broker(broker)
        self.wiring = Wiring(
            root,
            kind,
            # None: logins wherever we start the broker that can check them.
            auth=kind == "mosquitto" if auth is None else auth,
            users=tuple(users),
            extra_agents=tuple(extra_agents),
            broker_url=broker_url or "",
        )
        self.broker_port = broker_port
        #: The scheduler's limits and association files (``wiring.Sharing``).
        self.sharing = sharing or Sharing()
        self.heartbeat = heartbeat
        # The agents' lease must stay below the scheduler's silence limit (6
        # heartbeats): 4 heartbeats by default, so a requeued job never runs twice.
        self.lease = LEASE_HEARTBEATS * heartbeat if lease is None else lease
        self.walltime_grace = walltime_grace
        self.execution = execution
        self.start_agents = start_agents
        self.python = python
        self.journal = journal if journal is not None else run_dir / "journal.sqlite"
        #: Agents drain on a stop (run their jobs to their end) instead of leaving them.
        self.drain_on_stop = drain_on_stop
        self.scheduler_metrics = ""
        self.agent_metrics: dict[str, str] = {}
        self._broker: Child | None = None
        self._scheduler: Child | None = None
        self._agents: list[Child] = []
        self._on_restart = on_restart
        self._clock = clock
        self._kept_down: set[str] = set()
        #: Dead children waiting for their restart: name -> clock time it is due.
        self._due: dict[str, float] = {}
        self._in_a_row: dict[str, int] = {}
        self._stopping = False
        env = dict(os.environ)
        # The children import the checkout's packages whatever the working directory.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        self._env = env

    # -- what the wiring knows, under the names the cluster's users know ---------------

    @property
    def broker_kind(self) -> Literal["mosquitto", "embedded", "external"]:
        return self.wiring.broker_kind

    @property
    def broker_url(self) -> str:
        return self.wiring.broker_url

    @property
    def root(self) -> str:
        return self.wiring.root

    @property
    def auth(self) -> bool:
        return self.wiring.auth

    @property
    def users(self) -> tuple[str, ...]:
        return self.wiring.users

    @property
    def extra_agents(self) -> tuple[str, ...]:
        return self.wiring.extra_agents

    @property
    def auth_files(self) -> AuthFiles | None:
        """The generated accounts' files (``auth=True``, once started)."""
        return self.wiring.auth_files

    # -- life ------------------------------------------------------------------------

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start broker, scheduler and agents (not yet waiting for them: see :meth:`ready`);
        after :meth:`stop`, again, on the same run directory (as ``accordion up`` run again)."""
        self._stopping = False
        self._agents, self._due, self._in_a_row = [], {}, {}
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.wiring.write_logins(self.run_dir, [m.id for m in self.spec.machines])
        if self.broker_kind != "external":
            self._start_broker()
        self._start_scheduler()
        if self.start_agents:
            for machine in self.spec.machines:
                self._start_agent(machine)

    def stop(self) -> None:
        """Agents, then the scheduler, then the broker (the module docstring); idempotent."""
        if self._stopping and not any(c.alive() for c in self.children()):
            return
        self._stopping = True
        agents = list(self._agents)
        stopped = {c.name.removeprefix("agent-") for c in agents if c.alive()}
        for child in agents:
            child.terminate()
        if self.drain_on_stop:
            try:  # as long as their jobs take; Ctrl-C (or SIGTERM) again leaves them
                for child in agents:
                    child.process.wait()
            except KeyboardInterrupt:
                for child in agents:
                    child.terminate()  # a second stop: each leaves what it still runs
        with signals_held():
            for child in agents:
                child.finish(STOP_GRACE[child.role], keep_group=True)
            self._until_stops_heard(stopped)
            for last in (self._scheduler, self._broker):
                if last is not None:
                    last.terminate()
                    last.finish(STOP_GRACE[last.role])

    def _until_stops_heard(self, machines: set[str]) -> None:
        scheduler = self._scheduler
        if machines and scheduler is not None and scheduler.alive():
            until_stops_heard(self.connect, machines, HEARD_GRACE)

    @property
    def scheduler_pid(self) -> int | None:
        return None if self._scheduler is None else self._scheduler.pid

    def children(self) -> list[Child]:
        return [c for c in (self._broker, self._scheduler, *self._agents) if c is not None]

    def check(self) -> None:
        """Raise :class:`UpError` if a process of the cluster has exited."""
        for child in self.children():
            if not child.alive():
                raise child.died()

    def endpoints(self) -> list[Endpoint]:
        return [
            Endpoint(c.role, c.name, c.address, c.pid, c.log, c.restarts) for c in self.children()
        ]

    def write_endpoints(self) -> Path:
        """``cluster.json`` in the run directory: the broker URL, root and processes."""
        path = self.run_dir / "cluster.json"
        data = {
            "broker": self.broker_url,
            "root": self.root,
            # Where each login's environment is (its secret stays in its own file).
            "logins": {}
            if self.auth_files is None
            else {login: str(path) for login, path in self.auth_files.env_files.items()},
            "journal": str(self.journal),
            "processes": [
                {
                    "role": e.role,
                    "name": e.name,
                    "address": e.address,
                    "pid": e.pid,
                    "log": str(e.log),
                    "restarts": e.restarts,
                }
                for e in self.endpoints()
            ],
        }
        tmp = path.with_suffix(".json.tmp")  # readers never see half a file
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        return tmp.replace(path)

    # -- supervision -----------------------------------------------------------------

    def supervise(self) -> list[Restart]:
        """Restart the children that died (see the module docstring); call it often.

        Returns what it did, also given to ``on_restart``. Raises
        :class:`UpError` for a child that exited with a usage error.
        """
        if self._stopping:
            return []
        now = self._clock()
        done: list[Restart] = []
        for child in self.children():
            if child.alive() or child.name in self._kept_down:
                continue
            code = child.exit_code()
            due = self._due.get(child.name)
            if due is None:
                if code == USAGE_ERROR:
                    raise child.died()
                if child.role == "agent":
                    child.process.wait()  # its parts are left for its successor to adopt
                else:
                    child.finish(0)  # reap it and whatever it left in its group
                ran = now - child.started_at
                in_a_row = 0 if ran >= STABLE else self._in_a_row.get(child.name, 0)
                self._in_a_row[child.name] = in_a_row + 1
                delay = min(BACKOFF_CAP, BACKOFF_FIRST * 2**in_a_row)
                self._due[child.name] = now + delay
                done.append(Restart(child.role, child.name, code, child.restarts + 1, delay))
            elif now >= due:
                del self._due[child.name]
                child.restart()
                done.append(Restart(child.role, child.name, code, child.restarts, 0.0, child.pid))
        if any(r.pid is not None for r in done):
            self.write_endpoints()
        if self._on_restart is not None:
            for restart in done:
                self._on_restart(restart)
        return done

    def keep_down(self, name: str) -> None:
        """Never restart the child ``name`` again (a bench's fault that must last)."""
        self._kept_down.add(name)

    async def supervise_forever(self, period: float = 0.2) -> None:
        """:meth:`supervise` every ``period`` wall seconds, until cancelled."""
        while True:
            self.supervise()
            await asyncio.sleep(period)

    def _spawn(
        self,
        role: str,
        name: str,
        argv: Sequence[str],
        *,
        stdin_pipe: bool = False,
        login: str | None = None,
    ) -> Child:
        return spawn(
            role,
            name,
            argv,
            run_dir=self.run_dir,
            env=self.wiring.env(self._env, login),
            stdin_pipe=stdin_pipe,
            clock=self._clock,
        )

    def credentials(self, login: str) -> Credentials:
        """How a client logs in as ``login`` (a generated account)."""
        return self.wiring.credentials(login)

    def connect(
        self, *, timeout: float = 10.0, watch: bool = False
    ) -> contextlib.AbstractAsyncContextManager[LiveClient]:
        """A client of this cluster; with logins, as the admin (one of its logins in turn)."""
        credentials = self.wiring.admin_credentials()
        return connect(
            self.broker_url,
            self.root,
            timeout=timeout,
            watch=watch,
            credentials=credentials,
            admin=credentials is not None,
        )

    def _start_broker(self, attempts: int = 3) -> None:
        for attempt in range(attempts):
            port = self.broker_port or self.wiring.pick_port()
            command = self.wiring.broker_command(port, self.run_dir, self.python)
            child = self._spawn("broker", command.name, command.argv, stdin_pipe=command.stdin_pipe)
            child.address = f"mqtt://{HOST}:{port}"
            deadline = time.monotonic() + 15.0
            while child.alive() and not accepts(HOST, port):
                if time.monotonic() > deadline:
                    child.terminate()
                    child.finish(STOP_GRACE["broker"])
                    raise UpError(f"the {child.name} broker did not listen on port {port} in 15 s")
                time.sleep(0.02)
            if child.alive():
                self._broker = child
                self.wiring.broker_url = child.address
                return
            child.finish(0)
            if self.broker_port or attempt + 1 == attempts:
                raise child.died()  # most likely the port was taken

    def _start_scheduler(self) -> None:
        metrics = self.wiring.pick_port()
        argv = self.wiring.scheduler_command(
            python=self.python,
            policy=self.policy,
            policy_options=self.policy_options,
            placement=self.placement,
            journal=self.journal,
            metrics_port=metrics,
            time_scale=self.time_scale,
            heartbeat=self.heartbeat,
            execution=self.execution,
            sharing=self.sharing,
        )
        child = self._spawn("scheduler", "scheduler", argv, login="scheduler")
        self.scheduler_metrics = child.address = f"http://{HOST}:{metrics}/metrics"
        self._scheduler = child

    def _start_agent(self, machine: Machine) -> None:
        metrics = self.wiring.pick_port()
        argv = self.wiring.agent_command(
            machine,
            python=self.python,
            metrics_port=metrics,
            time_scale=self.time_scale,
            heartbeat=self.heartbeat,
            lease=self.lease,
            walltime_grace=self.walltime_grace,
            state_dir=self.run_dir / "agents" / machine.id,
            drain_on_stop=self.drain_on_stop,
        )
        child = self._spawn("agent", f"agent-{machine.id}", argv, login=f"agent-{machine.id}")
        self.agent_metrics[machine.id] = child.address = f"http://{HOST}:{metrics}/metrics"
        self._agents.append(child)

    # -- readiness -------------------------------------------------------------------

    async def ready(self, client: LiveClient, *, timeout: float = 60.0) -> list[MachineStatus]:
        """Wait until every machine is online and every metrics endpoint answers."""
        return await until_ready(
            client,
            machines={m.id for m in self.spec.machines},
            endpoints=[self.scheduler_metrics, *self.agent_metrics.values()],
            check=self.check,
            timeout=timeout,
            where=self.run_dir,
        )
