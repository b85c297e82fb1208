"""Who may do what on the broker: accounts, Mosquitto's password file and its ACL file.

Theory of operation. Identity comes from the broker, not from payloads: every
client logs in, and the ACL file decides what each login may publish and
read, since a payload is whatever its sender wrote. Four roles:

- ``scheduler``: reads every request and every agent's state and events;
  the only one that writes agents' commands, users' replies and the cluster
  summary.
- ``agent`` (identity: its machine id): writes only its own state and events,
  reads only its own commands, and relays its job processes' topics
  (``R/jobs/<job>/...``, and ``R/agents/<agent>/jobs/...``). A job process
  reaches the broker through its agent and holds no credentials, so it can
  touch nothing but what its agent relays. Limit: the ACL cannot tell which
  jobs run on which agent, so an agent may write any job's ``R/jobs/...``
  topics; agents are machines of the cluster, trusted that far.
- ``user`` (identity: the user name): writes requests only on
  ``R/scheduler/requests/<user>``, so the scheduler knows who asks from the
  topic; reads only ``R/users/<user>/#`` (its replies and its jobs' events)
  and the cluster summary.
- ``admin``: requests on ``R/scheduler/admin/<admin>`` (the scheduler lets an
  admin cancel any job) and reads everything under the root.

Client ids. Mosquitto lets any client take over the connection of another
with the same client id (and inherit a persistent session's subscriptions),
whoever it logged in as. :func:`mosquitto_auth_config` therefore sets
``use_username_as_clientid``: the broker replaces the client id by the login,
so a login can only ever take over itself. A login is one connection at a
time: a user who wants two clients at once (``watch`` beside ``submit``) gets
two logins of the same identity (:func:`user_accounts`); the ACL is written
per login, so both speak for the same user. An agent gets a second login too,
``<login>~probe`` (:func:`agent_accounts`, the same password): before it
connects as its machine, an agent looks at the machine's topics through it
(``nodeagent.survival.incarnation``), so a second agent for a machine whose
agent is online sees so without taking that agent's connection over.

User names. A user's name is a level of topics the ACL grants (``R/users/<user>/#``),
a word of Mosquitto's line-based password and ACL files, and the stem of the
user's logins (``alice``, ``alice~2``). So :func:`check_user_name` refuses
what one of them cannot carry (:data:`UNCARRIED`: ``~``, ``/``, ``+``, ``#``,
``:``, white space, control characters), in one line saying why, before any
file is written: a name accepted and then unable to log in would fail later
as a silent "no reply".

Passwords are stored as Mosquitto's own ``$7$`` hashes (PBKDF2-SHA512, 101
iterations, a 12-byte salt; what ``mosquitto_passwd`` writes), computed here
so no password is ever on a command line. Files holding secrets are created
mode 0600. The embedded broker (amqtt) supports none of this: it admits
everyone (see ``broker.embedded``).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import pwd
import secrets
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, get_args

from broker.settings import ENV_PASSWORD_FILE, ENV_PROBE_USERNAME, ENV_USERNAME
from broker.topics import Topics, valid_level

Role = Literal["scheduler", "agent", "user", "admin"]
ROLES: Final[tuple[Role, ...]] = get_args(Role)

PBKDF2_ITERATIONS: Final = 101  # mosquitto_passwd's default in Mosquitto 2.0
_SALT_BYTES: Final = 12


class AuthError(ValueError):
    """An account that cannot be (a bad login, role or identity)."""


#: Characters no user name may hold, and why (the module's docstring).
UNCARRIED: Final = {
    "~": "it separates a user's logins (alice~2 is a second login of alice)",
    "/": "it separates topic levels, and the name is one",
    "+": "it is an MQTT wildcard, and the name is a topic level",
    "#": "it is an MQTT wildcard, and the name is a topic level",
    ":": "it separates the name from the hash in Mosquitto's password file",
}
#: The longest user name: a job's ``user`` on the wire (``broker.messages.Name``).
MAX_USER_NAME: Final = 128


def check_user_name(name: str) -> str:
    """``name`` if the login scheme can carry it as a user's name; else :class:`AuthError`
    in one line (which character, and why)."""
    if not name:
        raise AuthError("a user name cannot be empty")
    if len(name) > MAX_USER_NAME:
        raise AuthError(f"user name {name[:20]!r}... is longer than {MAX_USER_NAME} characters")
    for char, why in UNCARRIED.items():
        if char in name:
            raise AuthError(f"user name {name!r} cannot hold {char!r}: {why}")
    if any(c.isspace() or not c.isprintable() for c in name):
        raise AuthError(
            f"user name {name!r} cannot hold white space or control characters: Mosquitto's "
            "password and ACL files are lines of words"
        )
    return name


@dataclass(frozen=True, slots=True)
class Account:
    """One login of the broker: its ``role`` and the ``identity`` it speaks for.

    ``login`` is the MQTT username and, with ``use_username_as_clientid``, the
    client id too. The password is not in the repr.
    """

    login: str
    role: Role
    identity: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise AuthError(f"role {self.role!r} is not one of {', '.join(ROLES)}")
        for what, name in (("login", self.login), ("identity", self.identity)):
            try:
                valid_level(name)
            except ValueError as exc:
                raise AuthError(f"{what} {name!r}: {exc}") from None
            if ":" in name or any(c.isspace() for c in name):
                raise AuthError(f"{what} {name!r} may not hold ':' or spaces")
        if not self.password or "\n" in self.password:
            raise AuthError(f"login {self.login!r}: the password is empty or has a newline")


def identity_of(login: str) -> str:
    """The identity a login speaks for: ``alice~2`` is ``alice`` (:func:`user_accounts`)."""
    return login.partition("~")[0]


def new_password() -> str:
    """A random password (32 URL-safe characters)."""
    return secrets.token_urlsafe(24)


def scheduler_account(password: str | None = None) -> Account:
    return Account("scheduler", "scheduler", "scheduler", password or new_password())


#: Appended to an agent's login for its probe's login (same identity, same password).
PROBE_SUFFIX: Final = "~probe"


def agent_account(machine: str, password: str | None = None) -> Account:
    return Account(f"agent-{machine}", "agent", machine, password or new_password())


def probe_login(login: str) -> str:
    """The login of the probe of the agent that logs in as ``login``."""
    return f"{login}{PROBE_SUFFIX}"


def agent_accounts(machine: str, password: str | None = None) -> tuple[Account, Account]:
    """An agent's login and its probe's (the same password: the agent has one secret)."""
    main = agent_account(machine, password)
    probe = Account(probe_login(main.login), "agent", machine, main.password)
    return main, probe


def user_accounts(user: str, *, logins: int = 2, role: Role = "user") -> tuple[Account, ...]:
    """``logins`` logins speaking for ``user`` (``alice``, ``alice~2``...): one per client."""
    if logins < 1:
        raise AuthError(f"a user needs at least one login, not {logins}")
    if role not in ("user", "admin"):
        raise AuthError(f"user_accounts makes users and admins, not {role!r}")
    check_user_name(user)
    names = [user] + [f"{user}~{i}" for i in range(2, logins + 1)]
    return tuple(Account(name, role, user, new_password()) for name in names)


# -- Mosquitto's files ------------------------------------------------------------------


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """Mosquitto's ``$7$`` hash of ``password`` (PBKDF2-HMAC-SHA512)."""
    salt = secrets.token_bytes(_SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, PBKDF2_ITERATIONS)
    b64 = base64.b64encode
    return f"$7${PBKDF2_ITERATIONS}${b64(salt).decode()}${b64(digest).decode()}"


def password_file(accounts: Iterable[Account]) -> str:
    """The text of Mosquitto's ``password_file``: ``login:hash`` per line."""
    lines = []
    seen: set[str] = set()
    for account in accounts:
        if account.login in seen:
            raise AuthError(f"login {account.login!r} appears twice")
        seen.add(account.login)
        lines.append(f"{account.login}:{hash_password(account.password)}")
    return "\n".join(lines) + "\n"


def grants(account: Account, topics: Topics) -> list[tuple[str, str]]:
    """``(access, topic filter)`` pairs the ACL gives ``account`` (access: read/write)."""
    r = topics.root
    who = account.identity
    if account.role == "scheduler":
        return [
            ("read", topics.all_user_requests),
            ("read", topics.all_admin_requests),
            ("read", topics.requests),  # the identity-less topic of older clients
            ("read", topics.all_agent_states),
            ("read", topics.all_agent_events),
            ("write", f"{r}/agents/+/commands"),
            ("write", f"{r}/users/#"),
            ("write", f"{r}/clients/+/replies"),
            ("readwrite", topics.cluster),
            ("write", topics.events),
        ]
    if account.role == "agent":
        return [
            ("readwrite", topics.agent_state(who)),
            # Read too: a new agent's probe looks for a live agent of its machine.
            ("readwrite", topics.agent_events(who)),
            ("read", topics.agent_commands(who)),
            ("readwrite", f"{r}/agents/{who}/jobs/#"),
            # Its job processes' topics, relayed on the agent's own connection.
            ("readwrite", f"{r}/jobs/#"),
            ("read", topics.cluster),
        ]
    if account.role == "user":
        return [
            ("write", topics.user_requests(who)),
            ("read", topics.user_subtree(who)),
            ("read", topics.cluster),
        ]
    return [  # admin
        ("write", topics.admin_requests(who)),
        ("write", topics.user_requests(who)),
        ("read", f"{r}/#"),
    ]


def acl_file(accounts: Iterable[Account], topics: Topics) -> str:
    """The text of Mosquitto's ``acl_file``: a ``user`` section per login.

    Nothing is granted outside these sections, so a login may do only what
    :func:`grants` lists (``$SYS`` included: nobody reads it).
    """
    out = [f"# Generated by broker.auth for the topic root {topics.root}; do not edit."]
    for account in accounts:
        out.append("")
        out.append(f"# {account.role} {account.identity}")
        out.append(f"user {account.login}")
        out.extend(f"topic {access} {topic}" for access, topic in grants(account, topics))
    return "\n".join(out) + "\n"


@dataclass(frozen=True, slots=True)
class AuthFiles:
    """Where :func:`write_auth_files` put Mosquitto's files and each login's secret."""

    password_file: Path
    acl_file: Path
    secrets: dict[str, Path]
    #: ``<login>.env`` per login: its username, role and secret file's path (no secret),
    #: for ``env_file:`` in compose or ``set -a; . FILE`` in a shell.
    env_files: dict[str, Path] = field(default_factory=dict)

    def secret_of(self, login: str) -> Path:
        """The file holding ``login``'s password (for ``ACCORDION_MQTT_PASSWORD_FILE``)."""
        return self.secrets[login]


def _write_private(path: Path, text: str) -> None:
    # Created 0600 from the start, so the secret is never readable by others.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    path.chmod(0o600)


def write_auth_files(directory: Path, accounts: Iterable[Account], topics: Topics) -> AuthFiles:
    """Write ``passwd``, ``acl`` and ``secrets/<login>`` (each 0600) under ``directory``."""
    accounts = tuple(accounts)
    directory.mkdir(parents=True, exist_ok=True)
    secret_dir = directory / "secrets"
    secret_dir.mkdir(mode=0o700, exist_ok=True)
    passwd, acl = directory / "passwd", directory / "acl"
    _write_private(passwd, password_file(accounts))
    _write_private(acl, acl_file(accounts, topics))
    secret_files = {}
    env_files = {}
    logins = {a.login for a in accounts}
    for account in accounts:
        path = secret_dir / account.login
        _write_private(path, account.password + "\n")
        secret_files[account.login] = path
        env = secret_dir / f"{account.login}.env"
        probe = probe_login(account.login)
        text = login_env(account, path.resolve(), probe=probe if probe in logins else None)
        _write_private(env, text)
        env_files[account.login] = env
    return AuthFiles(passwd, acl, secret_files, env_files)


def login_env(account: Account, secret: Path, *, probe: str | None = None) -> str:
    """The ``KEY=value`` lines a process of ``account`` needs (the secret by path only);
    ``probe``: an agent's probe login."""
    lines = (
        f"{ENV_USERNAME}={account.login}\n"
        f"{ENV_PASSWORD_FILE}={secret}\n"
        f"ACCORDION_ROLE={account.role}\n"
    )
    return lines + ("" if probe is None else f"{ENV_PROBE_USERNAME}={probe}\n")


def mosquitto_auth_config(files: AuthFiles) -> str:
    """The lines of ``mosquitto.conf`` that turn authentication and the ACL on."""
    # Run as root, Mosquitto drops to the user "mosquitto", who cannot read our
    # 0600 files; naming the user who wrote them keeps it able to.
    owner = pwd.getpwuid(files.password_file.stat().st_uid).pw_name
    return (
        f"user {owner}\n"
        "allow_anonymous false\n"
        f"password_file {files.password_file}\n"
        f"acl_file {files.acl_file}\n"
        "# The client id is the login: no client can take over another login's\n"
        "# connection or inherit its session.\n"
        "use_username_as_clientid true\n"
    )


def cluster_accounts(
    agents: Iterable[str],
    users: Iterable[str],
    admins: Iterable[str] = (),
    *,
    logins: int = 2,
) -> tuple[Account, ...]:
    """Fresh accounts of a cluster: the scheduler, each agent, each user and admin."""
    accounts = [scheduler_account()]
    for a in agents:
        accounts += agent_accounts(a)
    for user in users:
        accounts += user_accounts(user, logins=logins)
    for admin in admins:
        accounts += user_accounts(admin, logins=logins, role="admin")
    seen: dict[str, Account] = {}
    for account in accounts:
        other = seen.setdefault(account.login, account)
        if other is not account:
            raise AuthError(
                f"{account.role} {account.identity!r}: its login {account.login!r} is already "
                f"the login of the {other.role} {other.identity!r}"
            )
    return tuple(accounts)


# -- the compose testbed: one agent login, ACL patterns, two listeners -------------------

#: The one login every agent of the testbed shares (scaled replicas name themselves at
#: start, so no per-agent login can be made in advance); its ACL is by client id.
AGENT_LOGIN: Final = "agent"
#: Logins of the internal listener: no user may be called so.
RESERVED: Final = frozenset({"scheduler", AGENT_LOGIN})
#: Where each process of the testbed finds its files (each a volume or a secret of its own).
COMPOSE_DIRS: Final = ("broker", "scheduler", "agent", "users")


def agent_patterns(topics: Topics) -> list[tuple[str, str]]:
    """``(access, pattern)`` of an agent by its client id (Mosquitto's ``%c``)."""
    r = topics.root
    return [
        ("write", f"{r}/agents/%c/state"),
        ("write", f"{r}/agents/%c/events"),
        ("read", f"{r}/agents/%c/commands"),
        ("readwrite", f"{r}/agents/%c/jobs/#"),
    ]


def internal_acl(topics: Topics) -> str:
    """The ACL of the testbed's internal listener: the scheduler, and agents by client id.

    An agent's client id is its machine id (``--client-id={name}``), so the
    ``pattern`` lines let it speak only on its own topics (its Last Will
    included); the scheduler refuses an agent whose messages name another machine
    than its topic (``scheduler.live.agents``). The shared login adds only what every
    agent needs: the job topics it relays and the cluster summary.
    """
    scheduler = scheduler_account("-")
    out = [f"# Generated by broker.auth for the topic root {topics.root}; do not edit."]
    out.append("")
    out.append("# scheduler")
    out.append(f"user {scheduler.login}")
    out.extend(f"topic {access} {topic}" for access, topic in grants(scheduler, topics))
    out.append("")
    out.append("# every agent (one login): what it relays for its job processes, and the summary;")
    out.append("# every agent's state and events, which a new agent's probe reads (under its")
    out.append("# own client id) to find a live agent of its machine before it connects as it")
    out.append(f"user {AGENT_LOGIN}")
    out.append(f"topic readwrite {topics.root}/jobs/#")
    out.append(f"topic read {topics.cluster}")
    out.append(f"topic read {topics.all_agent_states}")
    out.append(f"topic read {topics.all_agent_events}")
    out.append("")
    out.append("# each agent on its own topics, by client id (= its machine id)")
    out.extend(f"pattern {access} {topic}" for access, topic in agent_patterns(topics))
    return "\n".join(out) + "\n"


@dataclass(frozen=True, slots=True)
class ComposeAuthFiles:
    """What :func:`write_compose_auth` wrote, by directory (see ``COMPOSE_DIRS``)."""

    directory: Path
    accounts: tuple[Account, ...]
    created: bool  # False: the files existed already and were kept

    def secret_of(self, login: str) -> Path:
        account = next(a for a in self.accounts if a.login == login)
        folder = {"scheduler": "scheduler", "agent": "agent"}.get(account.role, "users")
        return self.directory / folder / login


def compose_accounts(
    users: Iterable[str], admins: Iterable[str], *, logins: int = 2
) -> tuple[Account, ...]:
    """The scheduler, the shared agent login, and each user's and admin's logins."""
    accounts = [scheduler_account(), Account(AGENT_LOGIN, "agent", AGENT_LOGIN, new_password())]
    for name in (*users, *admins):
        check_user_name(name)
        if name in RESERVED:
            raise AuthError(f"user {name!r}: that name is reserved (a login of the cluster)")
    for user in users:
        accounts += user_accounts(user, logins=logins)
    for admin in admins:
        accounts += user_accounts(admin, logins=logins, role="admin")
    return tuple(accounts)


def write_compose_auth(
    directory: Path,
    accounts: tuple[Account, ...],
    topics: Topics,
    *,
    broker_owner: int | None = None,
    client_owner: int | None = None,
) -> ComposeAuthFiles:
    """The compose testbed's files under ``directory``, unless they exist (then kept).

    ``broker/``: ``mosquitto-internal.{passwd,acl}`` (scheduler and agents) and
    ``mosquitto-users.{passwd,acl}`` (users and admins, who get
    ``use_username_as_clientid``); ``scheduler/scheduler``, ``agent/agent`` and
    ``users/<login>``: each login's password. Every file is 0600; given owners
    (uids, applied when run as root), the broker's files go to ``broker_owner``
    and the secrets to ``client_owner``, the users that read them in their
    containers.
    """
    marker = directory / "broker" / "mosquitto-internal.passwd"
    if marker.exists():
        return ComposeAuthFiles(directory, accounts, created=False)
    for name in COMPOSE_DIRS:
        (directory / name).mkdir(parents=True, exist_ok=True)
    internal = [a for a in accounts if a.role in ("scheduler", "agent")]
    people = [a for a in accounts if a.role in ("user", "admin")]
    broker = directory / "broker"
    written: list[tuple[Path, int | None]] = []
    for path, text in (
        (broker / "mosquitto-users.passwd", password_file(people)),
        (broker / "mosquitto-users.acl", acl_file(people, topics)),
        (broker / "mosquitto-internal.acl", internal_acl(topics)),
    ):
        _write_private(path, text)
        written.append((path, broker_owner))
    files = ComposeAuthFiles(directory, accounts, created=True)
    for account in accounts:
        path = files.secret_of(account.login)
        _write_private(path, account.password + "\n")
        written.append((path, client_owner))
    # The internal password file last: it marks the set complete (see above).
    _write_private(marker, password_file(internal))
    written.append((marker, broker_owner))
    if os.geteuid() == 0:
        for path, owner in written:
            if owner is not None:
                os.chown(path, owner, owner)
    return files


def main(argv: list[str] | None = None) -> int:
    """``python -m broker.auth``: write a cluster's password, ACL and secret files."""
    parser = argparse.ArgumentParser(
        prog="python -m broker.auth",
        description=(
            "Write Mosquitto's password and ACL files for a cluster, and one secret "
            "file per login (for ACCORDION_MQTT_PASSWORD_FILE). Passwords are random, "
            "hashed here, and never printed."
        ),
    )
    parser.add_argument("--dir", type=Path, required=True, help="where to write the files")
    parser.add_argument("--root", default=Topics().root, help="topic root (%(default)s)")
    parser.add_argument("--agent", action="append", default=[], help="an agent's machine id")
    parser.add_argument("--user", action="append", default=[], help="a user name")
    parser.add_argument("--admin", action="append", default=[], help="an admin's name")
    parser.add_argument("--logins", type=int, default=2, help="logins per user (%(default)s)")
    args = parser.parse_args(argv)
    try:
        accounts = cluster_accounts(args.agent, args.user, args.admin, logins=args.logins)
        files = write_auth_files(args.dir, accounts, Topics(args.root))
    except (AuthError, ValueError, OSError) as exc:
        parser.error(str(exc))
    print(f"password_file {files.password_file}")
    print(f"acl_file {files.acl_file}")
    for account in accounts:
        print(
            f"{account.role:9} {account.identity:16} login {account.login:20} "
            f"secret {files.secret_of(account.login)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
