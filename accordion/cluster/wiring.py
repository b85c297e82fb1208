"""How a local cluster's processes find each other: broker, logins, ports, command lines.

:class:`accordion.cluster.local_cluster.LocalCluster` supervises processes; this module
says what they are started with. One :class:`Wiring` per cluster holds

- the broker: which kind (:func:`resolve_broker`: Mosquitto when installed,
  else the embedded amqtt broker) and its ``mqtt://host:port`` address once it
  listens;
- the logins (``auth=True``, Mosquitto only): the cluster's accounts
  (``broker.auth``: the scheduler, one per agent, the ``users``, and an admin
  ``admin``) generated afresh in ``<run dir>/auth``, and each child's
  environment naming its login and the *path* of its secret file, so no secret
  is ever on a command line or in a log;
- the ports: every port of the cluster is picked before any child binds its
  own, and never handed out twice (two random picks could otherwise meet);
- the command lines of the broker, ``python -m scheduler`` and ``python -m
  nodeagent``, which carry all of the above, and the scheduler's share of
  the cluster's :class:`Sharing` (its limits and association files, checked
  before anything starts).

Nothing here starts or watches a process.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from accordion.client.live_client import Credentials
from accordion.cluster.processes import UpError
from accordion.errors import UserError
from broker.auth import (
    AuthError,
    AuthFiles,
    check_user_name,
    cluster_accounts,
    probe_login,
    write_auth_files,
)
from broker.local import free_port, mosquitto_binary, mosquitto_config
from broker.settings import ENV_PASSWORD_FILE, ENV_PROBE_USERNAME, ENV_USERNAME
from broker.topics import Topics
from model.execution import ExecutionModel
from model.machine import Machine
from scheduler.live.limits import Limits
from scheduler.planning.placement import PlacementRule
from scheduler.runtime.admin_files import read_associations, read_limits

BrokerKind = Literal["auto", "mosquitto", "embedded"]

HOST: Final = "127.0.0.1"

ADMIN: Final = "admin"
"""The admin login of a cluster with logins (``accordion up --auth``)."""
LOGINS_PER_USER: Final = 4
"""Logins per user and admin: one connection each at a time (``broker.auth``)."""

LEASE_HEARTBEATS = 4
"""The agents' lease in heartbeats: two below the scheduler's silence limit of 6."""


def resolve_broker(kind: BrokerKind) -> Literal["mosquitto", "embedded"]:
    """Which broker ``kind`` means here: ``auto`` is Mosquitto when it is installed."""
    if kind == "embedded":
        return "embedded"
    if mosquitto_binary() is not None:
        return "mosquitto"
    if kind == "mosquitto":
        raise UserError("mosquitto is not installed (apt-get install mosquitto)")
    return "embedded"


def _client_suffix(root: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", root)


@dataclass(frozen=True, slots=True)
class Sharing:
    """How a cluster is shared: the admin's limits file and association file, and
    limits set one by one (``--max-user-cpus`` ...), which override the file's.

    :meth:`check` reads both files as the scheduler will, so a mistake is one
    line before anything starts; :meth:`argv` is what the scheduler is given.
    """

    limits_file: Path | None = None
    associations_file: Path | None = None
    values: Mapping[str, int] = field(default_factory=dict)

    def check(self) -> Limits:
        """The limits in force (the scheduler's own reading of the same files)."""
        try:
            limits = read_limits(self.limits_file, **self.values)
            read_associations(self.associations_file)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        return limits

    def argv(self) -> list[str]:
        args = [f"--{key.replace('_', '-')}={value}" for key, value in self.values.items()]
        if self.limits_file is not None:
            args.append(f"--limits={self.limits_file.resolve()}")
        if self.associations_file is not None:
            args.append(f"--associations={self.associations_file.resolve()}")
        return args


@dataclass(frozen=True, slots=True)
class BrokerCommand:
    """How to start the broker: its process name, command line, and whether its
    stdin is a pipe we hold (the embedded broker ends when we are gone)."""

    name: str
    argv: list[str]
    stdin_pipe: bool


@dataclass(slots=True)
class Wiring:
    """The broker, logins and ports of one cluster (see the module docstring).

    ``broker_kind`` is ``external`` for a broker started elsewhere (then
    ``broker_url`` is given). Refuses, as a user's mistake, logins on a broker
    that cannot check them and a user named like the admin.
    """

    root: str
    broker_kind: Literal["mosquitto", "embedded", "external"]
    auth: bool = False
    users: tuple[str, ...] = ()
    #: Machine ids given agent logins though no agent of theirs is started here:
    #: agents that join from elsewhere.
    extra_agents: tuple[str, ...] = ()
    broker_url: str = ""
    #: The generated accounts' files (``auth=True``, once written).
    auth_files: AuthFiles | None = None
    _ports: set[int] = field(default_factory=set)
    _admin_turn: int = 0

    def __post_init__(self) -> None:
        if self.auth and self.broker_kind != "mosquitto":
            raise UserError(
                "logins and ACLs (--auth) need the Mosquitto broker that accordion up starts: "
                "the embedded broker admits everyone, and an external one has its own files"
            )
        if self.auth and ADMIN in self.users:
            raise UserError(f"--user {ADMIN}: that name is the cluster's admin login")
        for user in self.users:
            try:
                check_user_name(user)
            except AuthError as exc:
                raise UserError(f"--user: {exc}") from None
            if self.auth and (user == "scheduler" or user.startswith("agent-")):
                raise UserError(
                    f"--user {user}: that name is a login of the cluster (the scheduler's is "
                    "scheduler, an agent's agent-MACHINE)"
                )

    # -- logins ------------------------------------------------------------------------

    def write_logins(self, run_dir: Path, machines: Sequence[str]) -> None:
        """Generate the accounts' files in ``run_dir/auth`` (nothing without ``auth``)."""
        if not self.auth:
            return
        accounts = cluster_accounts(
            [*machines, *self.extra_agents], self.users, [ADMIN], logins=LOGINS_PER_USER
        )
        self.auth_files = write_auth_files(run_dir / "auth", accounts, Topics(self.root))

    def env(self, base: Mapping[str, str], login: str | None) -> dict[str, str]:
        """A child's environment: ``base``, plus its login where the cluster has logins."""
        if login is None or self.auth_files is None:
            return dict(base)
        # A path in the environment, never the secret itself nor anything on argv.
        env = {
            **base,
            ENV_USERNAME: login,
            ENV_PASSWORD_FILE: str(self.auth_files.secret_of(login)),
        }
        probe = probe_login(login)
        if probe in self.auth_files.secrets:  # an agent: its probe's login (same secret)
            env[ENV_PROBE_USERNAME] = probe
        return env

    def credentials(self, login: str) -> Credentials:
        """How a client logs in as ``login`` (a generated account)."""
        if self.auth_files is None:
            raise UpError("this cluster has no logins (it was not started with auth)")
        return Credentials(login, self.auth_files.secret_of(login))

    def admin_credentials(self) -> Credentials | None:
        """The admin's next login in turn (each is one connection at a time); None
        without logins."""
        if self.auth_files is None:
            return None
        self._admin_turn += 1
        n = self._admin_turn % LOGINS_PER_USER
        return self.credentials(ADMIN if n == 0 else f"{ADMIN}~{n + 1}")

    # -- ports and addresses -----------------------------------------------------------

    def pick_port(self) -> int:
        """A port for one of this cluster's processes, never one handed to another of
        them: each is picked before any of them has started and bound its own."""
        port = free_port(avoid=self._ports)
        self._ports.add(port)
        return port

    def broker_address(self) -> tuple[str, int]:
        rest = self.broker_url.removeprefix("mqtt://")
        host, _, port = rest.rpartition(":")
        return host.strip("[]"), int(port)

    # -- command lines -----------------------------------------------------------------

    def broker_command(self, port: int, run_dir: Path, python: str) -> BrokerCommand:
        """The broker's command line on ``port`` (writes Mosquitto's configuration)."""
        if self.broker_kind == "mosquitto":
            binary = mosquitto_binary()
            if binary is None:
                raise UpError("mosquitto is not installed")
            conf = run_dir / "mosquitto.conf"
            conf.write_text(
                "# Generated by accordion up.\n"
                + mosquitto_config(host=HOST, port=port, auth=self.auth_files)
            )
            return BrokerCommand("mosquitto", [binary, "-c", str(conf)], stdin_pipe=False)
        argv = [python, "-m", "broker.embedded", "--host", HOST, "--port", str(port)]
        # Its stdin is a pipe we hold: the broker also ends when we are gone.
        argv.append("--exit-on-stdin-eof")
        return BrokerCommand("amqtt", argv, stdin_pipe=True)

    def scheduler_command(
        self,
        *,
        python: str,
        policy: str,
        policy_options: Mapping[str, str],
        placement: PlacementRule,
        journal: Path,
        metrics_port: int,
        time_scale: float,
        heartbeat: float,
        execution: ExecutionModel,
        sharing: Sharing | None = None,
    ) -> list[str]:
        host, port = self.broker_address()
        return [
            python,
            "-m",
            "scheduler",
            f"--host={host}",
            f"--port={port}",
            f"--root={self.root}",
            # One scheduler per root on a broker; restarts of this cluster keep the session.
            # With logins the broker makes the login the client id: "scheduler".
            "--client-id=scheduler"
            if self.auth
            else f"--client-id=accordion-scheduler-{_client_suffix(self.root)}",
            f"--policy={policy}",
            *(f"--policy-opt={k}={v}" for k, v in policy_options.items()),
            f"--placement={placement.value}",
            f"--journal={journal}",
            f"--metrics-port={metrics_port}",
            f"--metrics-addr={HOST}",
            f"--time-scale={time_scale!r}",
            f"--heartbeat-interval={heartbeat!r}",
            f"--execution-model={execution.kind.value}",
            f"--overhead={execution.overhead!r}",
            f"--model-seed={execution.seed}",
            *(sharing.argv() if sharing is not None else ()),
        ]

    def agent_command(
        self,
        machine: Machine,
        *,
        python: str,
        metrics_port: int,
        time_scale: float,
        heartbeat: float,
        lease: float,
        walltime_grace: float,
        state_dir: Path,
        drain_on_stop: bool = False,
    ) -> list[str]:
        host, port = self.broker_address()
        argv = [
            python,
            "-m",
            "nodeagent",
            f"--host={host}",
            f"--port={port}",
            f"--name={machine.id}",
            f"--cpus={machine.cpus}",
            f"--speed={machine.speed!r}",
            f"--root={self.root}",
            # The agent refuses parts of another compression: a misconfigured
            # scheduler fails loudly instead of running jobs at the wrong speed.
            f"--time-scale={time_scale!r}",
            f"--metrics-port={metrics_port}",
            f"--metrics-addr={HOST}",
            f"--heartbeat={heartbeat!r}",
            f"--lease={lease!r}",
            # Wall seconds past a part's wall-time limit before it is killed: more than
            # the agent's 2 s default, since on a small machine a burst of job processes
            # starting together can take seconds to get going.
            f"--walltime-grace={walltime_grace!r}",
            # Its own (nodeagent.survival.state): where a restarted agent finds the parts to adopt.
            f"--state-dir={state_dir}",
        ]
        if machine.labels:
            argv.append(f"--labels={','.join(machine.labels)}")
        if drain_on_stop:
            argv.append("--drain-on-stop")  # a stop drains: its jobs run to their end
        return argv
